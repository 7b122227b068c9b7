-- cupola.nvtx: NVTX ranges from Lua.  No tool is attached here,
-- so these check the calls and their bookkeeping; tests/nvtx/check_nvtx.lua
-- (make test-nvtx) proves with an injection library that the ranges reach a
-- tool.
local cupola = require "cupola"

describe("nvtx", function()
  it("pushes and pops balance, and tell the depth", function()
    local d0 = cupola.nvtx.depth()
    assert.equals(d0 + 1, cupola.nvtx.push "a")
    assert.equals(d0 + 2, cupola.nvtx.push "b")
    assert.equals(d0 + 1, cupola.nvtx.pop())
    assert.equals(d0, cupola.nvtx.pop())
    assert.equals(d0, cupola.nvtx.depth())
  end)

  it("refuses a pop without a push", function()
    while cupola.nvtx.depth() > 0 do cupola.nvtx.pop() end
    assert.has_error(function() cupola.nvtx.pop() end,
      "cupola.nvtx.pop: no range is open (more pops than pushes)")
  end)

  it("range returns the function's results and closes on errors too", function()
    local a, b = cupola.nvtx.range("r", function(x, y) return x + y, "z" end, 1, 2)
    assert.equals(3, a)
    assert.equals("z", b)
    local d = cupola.nvtx.depth()
    local ok, err = pcall(cupola.nvtx.range, "r", function()
      cupola.nvtx.push "left open"
      error("boom", 0)
    end)
    assert.is_false(ok)
    assert.equals("boom", err)
    assert.equals(d, cupola.nvtx.depth())
  end)

  it("marks, and says whether it is built with NVTX and enabled", function()
    cupola.nvtx.mark "here"
    assert.is_boolean(cupola.nvtx.available)
    assert.is_boolean(cupola.nvtx.enabled)
  end)

  it("raises on misuse", function()
    assert.has_error(function() cupola.nvtx.push() end)
    assert.has_error(function() cupola.nvtx.range("x", 42) end)
  end)
end)
