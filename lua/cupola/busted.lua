--- cupola.busted: cupola's conformance battery as luassert assertions.
--
--   require "cupola.busted"
--   it("conforms", function()
--     assert.is_conforming_pool(function(o)
--       return cupola.pool { kind = "plugin", path = "libmine.so", symbol = "mine",
--                            reuse = o.reuse, initial = o.initial, max = o.max }
--     end, { ops = 300, seed = 1 })
--   end)
--
-- make_pool and opts are those of cupola.conformance (lua/cupola/conformance.lua
-- says what each check does).  On failure the message names the first
-- violation, its check, and the operations that reproduce it, shrunk to a
-- short sequence, as Lua to paste; the others follow.  assert.is_not_conforming_pool
-- holds when at least one check finds a violation.
local luassert = require "luassert"
local say = require "say"
local conformance = require "cupola.conformance"
local util = require "cupola.util"
local raise = util.raise

local function conforming_pool(_, arguments)
  local make_pool, opts = arguments[1], arguments[2]
  if type(make_pool) ~= "function" then
    raise("bad argument #1 to 'is_conforming_pool' (a function that makes a pool expected, got "
      .. util.typed(make_pool) .. ")")
  end
  local report = conformance.run(make_pool, opts)
  -- The message shows the report, not the arguments.
  arguments[1] = conformance.describe(report)
  arguments.n = 1
  arguments.nofmt = { true }
  return report.ok
end

say:set("assertion.conforming_pool.positive", "Expected the pool to pass cupola's conformance battery:\n%s")
say:set("assertion.conforming_pool.negative", "Expected the pool to violate cupola's conformance battery, but: %s")
luassert:register("assertion", "conforming_pool", conforming_pool, "assertion.conforming_pool.positive",
  "assertion.conforming_pool.negative")

return conformance
