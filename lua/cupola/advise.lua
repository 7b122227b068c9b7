--- cupola.advise: a recording of a program's allocations in, the allocator
-- setting to use out.  This file is the public entry; the parts are in
-- lua/cupola/advise/:
--
--   engine.lua    the advice, knowing no framework: the trace loaded, the
--                 rows replayed on threads (cupola.core.trace.advise_run,
--                 src/core/trace/advise.c), scored, the best recommended
--   options.lua   the options checked (the engine's and the modules'),
--                 sizes as people write them
--   modules.lua   the framework modules, and the interface each implements
--                 (stated there once)
--   search.lua    the limit a recorded run had, by bisection (for modules)
--   text.lua, json.lua, html.lua   the views of a result
--   predict.lua   a run not yet made: the advice at another size
--                 (cupola.trace.scale), the largest size under a limit
--   cli.lua       bin/cupola advise: arguments, --help, errors
--   torch.lua, jax.lua, cupy.lua   the framework modules (torch.lua reads
--                 RMM logs too)
--
--   cupola.advise(trace_or_path [, {limit =, conf =, recorded =, pools =,
--                 search =, threads =, progress =, device =, device_memory =}]) -> result
--   bin/cupola advise SNAPSHOT [--limit 24GiB] [--conf CONF]... [--recorded CONF]
--                     [--json] [--html PAGE]                (advise.main)
local engine = require "cupola.advise.engine"
local options = require "cupola.advise.options"
local modules = require "cupola.advise.modules"
local search = require "cupola.advise.search"
local text = require "cupola.advise.text"
local json = require "cupola.advise.json"
local html = require "cupola.advise.html"
local cli = require "cupola.advise.cli"
local predict = require "cupola.advise.predict"

local advise = {}

-- A result prints as the report: print(cupola.advise(path)) and the REPL
-- show it, not "table: 0x...".
local result_mt = { __tostring = function(res) return text.text(res) end }

--- advise.run(trace_or_path, opts) -> result (cupola.advise).
function advise.run(src, opts)
  return setmetatable(engine.run(src, opts), result_mt)
end

advise.parse_size = options.parse_size
advise.default_pools = options.default_pools
advise.limit_interval = search.limit_interval
advise.module = modules.module
advise.module_for = modules.module_for
advise.formats = modules.formats
advise.text = text.text
advise.width = text.width
advise.wrap = text.wrap
advise.columns = text.columns
advise.display_path = text.display_path
advise.json = json.json
advise.html = html.html
advise.main = cli.main
advise.predict = predict.run
advise.largest = predict.largest
advise.parse_args = cli.parse_args
advise.usage_text = cli.usage_text

-- advise.frameworks, the names of the framework modules asked in order, is
-- the registry's own list: reading or setting it here reaches that one.
return setmetatable(advise, {
  __index = function(_, k) if k == "frameworks" then return modules.frameworks end end,
  __newindex = function(t, k, v)
    if k == "frameworks" then modules.frameworks = v else rawset(t, k, v) end
  end,
})
