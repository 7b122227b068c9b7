--- cupola.trace: allocation traces (RMM logging-adaptor CSV, plain or gzip).
-- Parsing and replay run in C; this adds the comparison helper.
local core = require "cupola.core"

local trace = {}

--- trace.load(path) -> Trace (fields: events, allocs, frees, streams,
-- peak_live, ...; t:event(i); #t) or raises with "path:line: reason".
trace.load = core.trace.load

--- trace.replay(t, pool, {single_stream=, repeat=, synchronize=}) ->
-- {events, ns_per_event, peak_live, peak_reserved, reserved_over_live, failed}
trace.replay = core.trace.replay

--- trace.find(name) -> path of a shared trace ("gpt2_train" or
-- "gpt2_train.csv.gz"), looked up in $CUPOLA_TRACES, ../shared/traces and
-- .traces (the copy carried to the GPU machine); nil, message if absent.
function trace.find(name)
  if not name:match "%.csv" then name = name .. ".csv.gz" end
  local dirs = {}
  if os.getenv "CUPOLA_TRACES" then dirs[#dirs + 1] = os.getenv "CUPOLA_TRACES" end
  dirs[#dirs + 1] = "../shared/traces"
  dirs[#dirs + 1] = ".traces"
  for _, d in ipairs(dirs) do
    local path = d .. "/" .. name
    local f = io.open(path, "rb")
    if f then
      f:close()
      return path
    end
  end
  return nil, "trace " .. name .. " not found in " .. table.concat(dirs, ", ") .. " (set CUPOLA_TRACES)"
end

--- trace.compare(t, configs, opts) -> rows: replays t once per pool
-- configuration (tables for cupola.pool{...}, each replayed on a fresh pool)
-- and returns one row per configuration with its figures.
function trace.compare(t, configs, opts)
  local rows = {}
  for i, cfg in ipairs(configs) do
    local pool <close> = core.pool(cfg)
    local r = core.trace.replay(t, pool, opts)
    r.kind, r.upstream, r.name = pool.kind, pool.upstream, cfg.name or pool.kind
    rows[i] = r
  end
  return rows
end

return trace
