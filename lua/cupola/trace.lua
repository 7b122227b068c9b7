--- cupola.trace: allocation traces (RMM logging-adaptor CSV, plain or gzip).
-- Parsing and replay run in C; this adds the comparison helper.
local core = require "cupola.core"
local util = require "cupola.util"
local at_caller, raise, typed = util.at_caller, util.raise, util.typed

local trace = {}

--- trace.load(path) -> Trace (fields: events, allocs, frees, streams,
-- peak_live, ...; t:event(i); #t) or raises with "path:line: reason".
-- `path` may also name a trace that ships with cupola ("gpt2_train",
-- "torch/varlen.default.cpsnap.gz"): a relative path that is not a file
-- here is looked up with trace.find.  trace.load(trace.find "typo") raises find's own message
-- (the nil, message pair it returned), not one about a nil path.
function trace.load(path, ...)
  if path == nil and type((...)) == "string" then raise((...)) end
  if type(path) ~= "string" then
    raise(("bad argument #1 to 'load' (string expected, got %s: a path, or the name of a trace cupola ships)"):format(typed(path)))
  end
  if path:find("\0", 1, true) then
    raise("bad argument #1 to 'load' (path contains a NUL byte, got " .. util.shown(path) .. ")")
  end
  -- A relative path that is not a file here may name a shipped trace, also
  -- one in a folder of the traces ("torch/varlen.default.cpsnap.gz").
  if not path:find "^/" then
    local f = io.open(path, "rb")
    if f then
      f:close()
    else
      local found, why = trace.find(path)
      if found then
        path = found
      elseif not path:find "[/\\]" then
        raise(("cannot open %s (no such file), and %s"):format(util.shown(path), why))
      end
    end
  end
  return at_caller(core.trace.load, path, ...)
end

--- trace.replay(t, pool, {single_stream=, repeat=, synchronize=, record=, progress=, clock=}) ->
-- {events, ns_per_event, peak_live, peak_reserved, reserved_over_live, failed,
-- reserved_byte_seconds, live_byte_seconds, ...}
-- clock = "trace" gives the pool the trace's timestamps as its clock for the
-- replay ("pool", the default: it keeps its own).
-- With record = true the result carries `recording` (the pool's reserved
-- bytes over the events, and where it put each block) for cupola.timeline,
-- which finds the trace again through timeline.sources.
-- The C function itself (it registers recorded results in
-- core.trace.sources), so its errors point at the caller's line.
trace.replay = core.trace.replay

-- Where this file lives: the traces ship beside it when installed
-- (LUADIR/cupola/traces) and in examples/traces of a source tree.
local here = (debug.getinfo(1, "S").source:match "^@(.*)[/\\][^/\\]*$") or "."

-- path with "." and "dir/.." taken out ("lua/cupola/../../examples/x" is
-- "examples/x"): trace.find's paths are printed.
local function tidy(path)
  local abs = path:sub(1, 1) == "/"
  local out = {}
  for part in path:gmatch "[^/]+" do
    if part == ".." and #out > 0 and out[#out] ~= ".." then
      out[#out] = nil
    elseif part ~= "." and not (part == ".." and abs and #out == 0) then
      out[#out + 1] = part
    end
  end
  local s = table.concat(out, "/")
  if abs then return "/" .. s end
  return s ~= "" and s or "."
end

--- trace.find(name) -> path of a trace that ships with cupola
-- ("gpt2_train", "gpt2_train.csv.gz", "torch_snapshot_mlp.pickle", or a CuPy
-- log: "cupy/NAME", its .jsonl.gz or .jsonl), looked
-- up in $CUPOLA_TRACES, then beside the installed module, then in the source
-- tree's examples/traces; nil, message if absent.
function trace.find(name)
  -- a number used to fail inside (attempt to index a number value)
  if type(name) ~= "string" then raise("bad argument #1 to 'find' (string expected, got " .. typed(name) .. ")") end
  local names = { name }
  if not name:find "%." then
    names = { name .. ".csv.gz", name .. ".csv", name .. ".pickle", name .. ".jsonl.gz", name .. ".jsonl" }
  end
  local dirs = {}
  if os.getenv "CUPOLA_TRACES" then dirs[#dirs + 1] = os.getenv "CUPOLA_TRACES" end
  dirs[#dirs + 1] = here .. "/traces"
  dirs[#dirs + 1] = here .. "/../../examples/traces"
  dirs[#dirs + 1] = "examples/traces"
  for _, d in ipairs(dirs) do
    for _, n in ipairs(names) do
      local path = d .. "/" .. n
      local f = io.open(path, "rb")
      if f then
        f:close()
        -- the tidy path, unless a symbolic link makes it another (dir/.. is
        -- then not dir's parent)
        local tp = tidy(path)
        local g = tp ~= path and io.open(tp, "rb")
        if g then
          g:close()
          return tp
        end
        return path
      end
    end
  end
  -- the folders as people read them ("lua/cupola/../../examples/traces"
  -- is "examples/traces"), each once
  local shown, seen = {}, {}
  for _, d in ipairs(dirs) do
    local td = tidy(d)
    if not seen[td] then seen[td] = true; shown[#shown + 1] = td end
  end
  return nil, "no trace named " .. name .. " ships with cupola; looked in " .. table.concat(shown, ", ") ..
    " (set CUPOLA_TRACES to add a folder)"
end


--- trace.scale(recordings, at) -> Trace: the program the recordings are of, at
-- size `at` (the batch, the sequence length, the image side: what grows from
-- one recording to the next).  `recordings` maps a size to a Trace or a path
-- ({[4] = "b4.pickle.gz", [8] = "b8.pickle.gz"}); two or more.  The result
-- replays, advises and draws like any trace and carries t.scaled = {from,
-- at, base, matched, by_rule, by_rule_bytes, left_out, fits, steeper,
-- steeper_bytes, note}.  The rules: src/core/trace/scale.h, docs/API.md.
local SIZE_MAX = 2147483647 -- scale.h: CP_SCALE_SIZE_MAX
function trace.scale(recordings, at)
  if type(recordings) ~= "table" then
    raise("bad argument #1 to 'scale' (a table mapping sizes to traces or paths expected, got " .. typed(recordings) .. ")")
  end
  if math.type(at) ~= "integer" or at < 1 then
    raise("bad argument #2 to 'scale' (the size to predict must be a positive integer, got " .. typed(at) .. ")")
  end
  if at > SIZE_MAX then
    raise(("bad argument #2 to 'scale' (the size to predict must be an integer in 1..%d, got %d)"):format(SIZE_MAX, at))
  end
  local sizes = {}
  for size, rec in pairs(recordings) do
    if math.type(size) ~= "integer" or size < 1 or size > SIZE_MAX then
      raise(("bad argument #1 to 'scale' (each key is a recording's size, an integer in 1..%d, got %s)"):format(
        SIZE_MAX, typed(size)))
    end
    if type(rec) ~= "string" and not (type(rec) == "userdata" and tostring(rec):find "^cupola%.Trace") then
      raise(("bad argument #1 to 'scale' (the recording at size %d must be a Trace or a path, got %s)"):format(size, typed(rec)))
    end
    sizes[#sizes + 1] = size
  end
  table.sort(sizes)
  local traces = {}
  for i, size in ipairs(sizes) do
    local rec = recordings[size]
    traces[i] = type(rec) == "string" and trace.load(rec) or rec
  end
  return at_caller(core.trace.scale, traces, sizes, at)
end

--- trace.compare(t, configs, opts) -> rows: replays t once per pool
-- configuration (tables for cupola.pool{...}, each replayed on a fresh pool)
-- and returns one row per configuration with its figures.
function trace.compare(t, configs, opts)
  -- wrong types used to fail inside (attempt to index a number value)
  if type(configs) ~= "table" then
    raise("bad argument #2 to 'compare' (a list of pool configurations expected, got " .. typed(configs) .. ")")
  end
  for i, cfg in ipairs(configs) do
    if type(cfg) ~= "table" then
      raise(("bad argument #2 to 'compare' (configuration %d is a %s, not a table%s)"):format(i, type(cfg), util.got(cfg)))
    end
  end
  local rows = {}
  for i, cfg in ipairs(configs) do
    local pool <close> = at_caller(core.pool, util.pool_config(cfg))
    local r = at_caller(core.trace.replay, t, pool, opts)
    r.kind, r.upstream, r.name = pool.kind, pool.upstream, cfg.name or pool.kind
    rows[i] = r
  end
  return rows
end

return trace
