-- Bugs found by the argument fuzz (spec/fuzz_spec.lua,
-- spec/support/argfuzz_round2.lua), each with its case.
local cupola = require "cupola"

describe("hostile arguments found by the argument fuzz", function()
  -- bug: opts.ops = math.huge (or 1e18) ran the random sequence forever;
  -- non-integer counts failed deep inside with a raw Lua error
  it("cupola.conformance refuses counts that are not integers in range, naming the option", function()
    local make = function() return cupola.pool { kind = "arena" } end
    for _, bad in ipairs { math.huge, 1e18, 10 ^ 18 // 1, -1, 1.5, 0 / 0, "x" } do
      local ok, err = pcall(cupola.conformance, make, { ops = bad })
      assert.is_false(ok)
      assert.matches("cupola.conformance: option 'ops' must be", err, 1, true)
    end
    local ok, err = pcall(cupola.conformance, make, { max_live = -5 })
    assert.is_false(ok)
    assert.matches("option 'max_live'", err, 1, true)
    ok, err = pcall(cupola.conformance, make, 5)
    assert.is_false(ok)
    assert.matches("options table expected", err, 1, true)
    ok, err = pcall(cupola.conformance, make, { checks = "random" })
    assert.is_false(ok)
    assert.matches("option 'checks' must be a list", err, 1, true)
    -- a valid small run still works
    local r = cupola.conformance(make, { ops = 20, checks = { "random" } })
    assert.is_true(r.ok)
  end)

  -- bug: raw "attempt to index a number value" / "attempt to compare" errors
  it("cupola.report functions name the bad argument", function()
    local R = cupola.report
    local cases = {
      { function() return R.bytes("x") end, "bad argument #1 to 'cupola.report.bytes' (number expected, got string 'x')" },
      { function() return R.table(5, {}) end, "bad argument #1 to 'cupola.report.table'" },
      { function() return R.table({ "a" }, { 5 }) end, "row 1 is a number" },
      { function() return R.csv({ { a = 1 } }, nil, 5) end, "bad argument #3 to 'csv'" },
      { function() return R.csv({ { a = 1 } }, 5) end, "bad argument #2 to 'csv'" },
      { function() return R.records({ { a = 1 } }, 5) end, "bad argument #2 to 'records'" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(c[1])
      assert.is_false(ok)
      assert.matches(c[2], err, 1, true)
    end
    assert.equals("1 B", R.bytes(1))
    assert.equals("1.5 B", R.bytes(1.5))
    assert.equals("4.00 MiB", R.bytes(4 * 1024 * 1024))
  end)
end)
