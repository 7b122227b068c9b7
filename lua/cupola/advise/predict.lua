--- cupola.advise.predict: advice for a run not yet made, from recordings at
-- other sizes (bin/cupola advise A@4 B@8 --at 32; cupola.trace.scale makes
-- the trace, src/core/trace/scale.h states its rules):
--   predict.input(arg)            "A@4" -> path, size ("A" where A is a file)
--   predict.run(recs, at, opts)   the advice at size `at`: the engine's on
--                                 the scaled trace (result.predicted)
--   predict.largest(recs, opts)   under opts.limit, each row's `largest`:
--                                 the largest size from 1 up whose prediction
--                                 fits, and result.largest_setting
-- recs maps each recorded size to its path or Trace.  Calls the engine and
-- cupola.trace; nothing here knows a framework.
local core = require "cupola.core"
local util = require "cupola.util"
local engine = require "cupola.advise.engine"
local raise, shown = util.raise, util.shown

local predict = {}

local SIZE_MAX = 2147483647 -- scale.h: CP_SCALE_SIZE_MAX

--- predict.input(arg) -> path, size: an input of the command line split at
-- its last "@" (a path that exists as given is a path, with no size).
function predict.input(arg)
  local f = io.open(arg, "rb")
  if f then
    f:close()
    return arg, nil
  end
  local path, size = arg:match "^(.*)@([^@]*)$"
  if not path then return arg, nil end
  local n = size:match "^%d+$" and math.tointeger(tonumber(size))
  if not n or n < 1 or n > SIZE_MAX then
    raise(("%s: the size after @ must be a whole number in 1..%d, not %s"):format(arg, SIZE_MAX, shown(size)))
  end
  return path, n
end

--- predict.recordings(list) -> {[size] = path}: the inputs given as
-- {path, size} pairs, each size once.
function predict.recordings(list)
  local recs, seen = {}, {}
  for _, x in ipairs(list) do
    if not x.size then
      raise(("%s has no size: give each recording as PATH@SIZE (the batch, the sequence length: what grows " ..
        "from one recording to the next)"):format(x.path))
    end
    if seen[x.size] then
      raise(("%s@%d and %s@%d are of one size: a prediction needs recordings at two different sizes"):format(
        seen[x.size], x.size, x.path, x.size))
    end
    seen[x.size] = x.path
    recs[x.size] = x.path
  end
  return recs
end

local function check_at(at)
  if math.type(at) ~= "integer" or at < 1 or at > SIZE_MAX then
    raise(("the size to predict must be a whole number in 1..%d, not %s"):format(SIZE_MAX, shown(at)))
  end
end

-- The recordings loaded once (paths to Traces), and the ones loaded here to close.
local function loaded(recs)
  local out, own = {}, {}
  for size, p in pairs(recs) do
    if type(p) == "string" then
      out[size] = require("cupola.trace").load(p)
      own[#own + 1] = out[size]
    else
      out[size] = p
    end
  end
  return out, own
end

local function close_all(list)
  for _, t in ipairs(list) do t:close() end
end

--- predict.run(recs, at, opts) -> the advice at size `at` (engine.run's
-- result, with `predicted`).
function predict.run(recs, at, opts)
  check_at(at)
  local traces, own = loaded(recs)
  local ok, t = pcall(require("cupola.trace").scale, traces, at)
  close_all(own)
  if not ok then error(t, 0) end
  local okr, res = pcall(engine.run, t, opts)
  t:close()
  if not okr then error(res, 0) end
  return res
end

-- A row's identity from one advice to another: its description.
local function key(r) return r.description end

-- The largest size whose prediction fits, for each row of `rows` at once:
-- doubling from the smallest recorded size until a size does not fit, then
-- bisection between the last that fits and the first that does not, every
-- row's probes of one size replayed together on threads.  probe(size,
-- rows) -> {[row] = fits}.  Sets r.largest (nil: not even size 1 fits).
local function search(rows, start, probe)
  local lo, hi = {}, {}
  for _, r in ipairs(rows) do lo[r] = 0 end
  local size, active = start, rows
  while #active > 0 do
    local fits = probe(size, active)
    local next_active = {}
    for _, r in ipairs(active) do
      if fits[r] then lo[r] = size else hi[r] = size end
      if fits[r] and size < SIZE_MAX then next_active[#next_active + 1] = r end
    end
    active = next_active
    size = math.min(size * 2, SIZE_MAX)
  end
  while true do
    local by = {}
    for _, r in ipairs(rows) do
      if hi[r] and hi[r] - lo[r] > 1 then
        local mid = (lo[r] + hi[r]) // 2
        by[mid] = by[mid] or {}
        table.insert(by[mid], r)
      end
    end
    if next(by) == nil then break end
    for mid, list in pairs(by) do
      local fits = probe(mid, list)
      for _, r in ipairs(list) do
        if fits[r] then lo[r] = mid else hi[r] = mid end
      end
    end
  end
  for _, r in ipairs(rows) do r.largest = lo[r] > 0 and lo[r] or nil end
end

--- predict.largest(recs, opts) -> the advice at the largest size that fits
-- under opts.limit (of the row that reaches the largest), every row with
-- its own `largest`, and result.largest_setting; where no size fits, the
-- advice at the smallest recorded size.
function predict.largest(recs, opts)
  if not opts or opts.limit == nil then raise("the largest size that fits needs a limit (--limit SIZE)") end
  local traces, own = loaded(recs)
  local sizes = {}
  for s in pairs(traces) do sizes[#sizes + 1] = s end
  table.sort(sizes)
  local made = {} -- one scaled trace per base: the others made from it
  local function at_size(s)
    local nearest = sizes[1]
    for _, v in ipairs(sizes) do
      if math.abs(v - s) < math.abs(nearest - s) or (math.abs(v - s) == math.abs(nearest - s) and v > nearest) then
        nearest = v
      end
    end
    if not made[nearest] then made[nearest] = require("cupola.trace").scale(traces, s) end
    if made[nearest].scaled.at == s then return made[nearest], false end
    return core.trace.rescale(made[nearest], s), true
  end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.progress = nil
  local limit
  local cache = {}
  local function probe(s, rows)
    local fits, todo = {}, {}
    for _, r in ipairs(rows) do
      local c = cache[key(r) .. "@" .. s]
      if c ~= nil then fits[r] = c else todo[#todo + 1] = r end
    end
    if #todo == 0 then return fits end
    local okt, t, temp = pcall(at_size, s)
    if not okt then
      -- a size so large that a request passes 2^63-1 bytes fits nowhere
      if not tostring(t):find("2^63-1", 1, true) then error(t, 0) end
      for _, r in ipairs(todo) do fits[r], cache[key(r) .. "@" .. s] = false, false end
      return fits
    end
    if t.peak_live > limit then
      -- more in use at once than the limit: no setting holds it
      for _, r in ipairs(todo) do fits[r] = false end
    else
      local jobs = {}
      for i, r in ipairs(todo) do
        local j = {}
        for k, v in pairs(r.job) do j[k] = v end
        j.limit, j.search = limit, false
        jobs[i] = j
      end
      local res = core.trace.advise_run(t, jobs, { threads = o.threads })
      for i, r in ipairs(todo) do fits[r] = not res[i].error and res[i].complete == true end
    end
    if temp then t:close() end
    for _, r in ipairs(todo) do cache[key(r) .. "@" .. s] = fits[r] end
    return fits
  end
  local ok, res = pcall(function()
    local function advise_at(s)
      local t, temp = at_size(s)
      local okr, r = pcall(engine.run, t, o)
      if temp then t:close() end
      if not okr then error(r, 0) end
      return r
    end
    local first = advise_at(sizes[#sizes])
    limit = first.limit
    search(first.rows, sizes[1], probe)
    local best
    -- the framework's own settings (cupola's pools inside it are set aside)
    for _, r in ipairs(first.rows) do
      if r.largest and not r.aside and (not best or r.largest > best.largest) then best = r end
    end
    -- where nothing fits, the advice at the smallest recorded size (the nearest to fitting)
    local final = best and advise_at(best.largest) or (sizes[1] == sizes[#sizes] and first or advise_at(sizes[1]))
    local known = {}
    for _, r in ipairs(first.rows) do known[key(r)] = r end
    local rest = {}
    for _, r in ipairs(final.rows) do
      if known[key(r)] then r.largest = known[key(r)].largest else rest[#rest + 1] = r end
    end
    if #rest > 0 then search(rest, sizes[1], probe) end
    -- of the settings that reach the largest, the one recommended there
    local rec = final.recommended
    if best and rec and rec.largest == best.largest and not rec.aside then best = rec end
    final.largest_search = true
    final.largest_setting = best and best.setting or nil
    final.largest_row = best and best.description or nil
    final.largest_size = best and best.largest or nil
    return final
  end)
  for _, t in pairs(made) do t:close() end
  close_all(own)
  if not ok then error(res, 0) end
  return res
end

return predict
