--- cupola.advise.engine: the advice itself, knowing no framework: the
-- options checked (advise/options.lua), the trace loaded (one device at a
-- time where it has several), its framework module found
-- (advise/modules.lua, whose head states the interface this file calls),
-- the module's rows replayed on threads through
-- cupola.core.trace.advise_run (src/core/trace/advise.c: each replay, and
-- each row's least-memory search, in C), the rows scored and the best
-- recommended.  What it returns is plain data; the views (advise/text.lua,
-- json.lua, html.lua) and the command line (advise/cli.lua) show it.
local core = require "cupola.core"
local util = require "cupola.util"
local report = require "cupola.report"
local modules = require "cupola.advise.modules"
local options = require "cupola.advise.options"
local raise, typed, at_caller = util.raise, util.typed, util.at_caller

local engine = {}

local TIE = 0.005                  -- within 0.5 %: a simpler setting is preferred
local SAME_GAIN = 0.01             -- less than 1 % better than the recorded setting: no gain

local bytes = report.bytes

local function is_trace(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__name == "cupola.Trace"
end

-- ---- scoring ----------------------------------------------------------

-- The score of a row: lower is better, compared key by key.
local function score(r, limited)
  if r.error then return { 3 } end
  if limited then
    return { r.fits and 0 or 1, r.min_memory or math.maxinteger, r.retries or 0, r.peak_reserved,
      r.device_allocs, r.keys or 0 }
  end
  return { r.complete and 0 or 1, r.peak_reserved, r.device_allocs, r.keys or 0 }
end

local function better(a, b, limited)
  local x, y = score(a, limited), score(b, limited)
  for i = 1, math.max(#x, #y) do
    local p, q = x[i] or 0, y[i] or 0
    if p ~= q then return p < q end
  end
  return false
end

-- The figure a row is judged by: the least memory under a limit, else its
-- peak reserved.
local function metric(r, limited)
  if limited then return r.min_memory or (r.fits and r.peak_reserved) end
  return r.complete and r.peak_reserved or nil
end

-- ---- running the rows ---------------------------------------------------

local function run_rows(t, rows, o, progress_state)
  local jobs = {}
  for i, r in ipairs(rows) do
    local j = {}
    for k, v in pairs(r.job) do j[k] = v end
    j.limit, j.search = o.limit, o.search
    jobs[i] = j
  end
  local t0 = core.clock()
  local progress
  if o.progress then
    progress = function(done)
      report.progress("cupola advise", progress_state.done + done, progress_state.total, t0)
    end
  end
  local res = at_caller(core.trace.advise_run, t, jobs, { threads = o.threads, progress = progress })
  progress_state.done = progress_state.done + #rows
  for i, r in ipairs(rows) do r.replay = res[i] end
end

-- The figures of a replayed row, from its replay result.
local function fill(r, x, ctx)
  local o, t, baseline, mod = ctx.o, ctx.t, ctx.baseline, ctx.module
  if x.error then
    r.error = x.error
    r.complete = false
    return
  end
  r.peak_reserved = x.peak_reserved
  r.peak_allocated = x.peak_allocated
  r.live_at_peak = x.live_at_peak
  r.unused_at_peak = x.peak_reserved - x.live_at_peak
  if ctx.info.peak_live then r.overhead = math.max(x.peak_reserved - ctx.info.peak_live, 0) end
  r.device_allocs = x.device_allocs
  r.device_frees = x.device_frees
  r.retries = x.retries
  r.complete = x.complete
  r.warning = x.warning
  r.seconds = x.seconds_total
  if baseline and baseline > 0 then
    r.change = x.peak_reserved - baseline
    r.change_pct = 100 * r.change / baseline
  end
  if mod.fill then mod.fill(r, x, ctx) end
  if o.limit then
    r.fits = x.complete
    if not x.complete then
      local s = x.stopped or {}
      local f = { event = s.event, size = s.size, allocation = s.allocation, line = s.line,
        message = x.oom_message }
      if s.allocation then
        local ev, label, frames = core.trace.alloc_event(t, s.allocation)
        f.label = label
        f.trace_event = ev
        if frames then f.python_frame, f.stack = frames.python_frame, frames.stack end
      elseif s.oom_entry then
        -- a request the recorded run was refused too: its own frames
        local label, frames = core.trace.oom_frames(t, s.oom_entry)
        f.label = label
        if frames then f.python_frame, f.stack = frames.python_frame, frames.stack end
      end
      r.fails_at = f
    end
  end
  if o.search then
    r.min_memory = x.min_limit
    r.search_steps = x.search_steps
  end
end

-- ---- the advice for one trace -------------------------------------------

-- A scaled trace's advice (trace.scale, src/core/trace/scale.h): what it
-- was predicted from, the recorded setting's row marked as the prediction,
-- the comparisons said to be with it.
local function predicted(result, s, rows)
  result.predicted = { from = s.from, at = s.at, base = s.base, matched = s.matched, by_rule = s.by_rule,
    by_rule_bytes = s.by_rule_bytes, left_out = s.left_out }
  for _, r in ipairs(rows) do
    if r.recorded then r.prediction = "scaled" end
  end
  if result.baseline_from == "the recorded setting's replay" then
    result.baseline_from = "the recorded setting's prediction"
  end
  local from = {}
  for i, v in ipairs(s.from) do from[i] = tostring(v) end
  table.insert(result.notes, 1, ("a prediction at size %d from the recordings at sizes %s: the events of the one " ..
    "at %d, each allocation's size fitted to the recordings it was found in (%d of %d), %d kept as recorded " ..
    "by rule (%s in use at the peak); cupola.trace.scale states the rules"):format(s.at,
    table.concat(from, ", "), s.base, s.matched, result.allocations, s.by_rule, bytes(s.by_rule_bytes)))
end

local function advise_trace(t, o, state, mod)
  local info = t:info()
  local result = {
    trace = info.path, format = info.format, framework = mod.name, title = mod.title(info),
    events = info.events, allocations = info.allocs, streams = info.streams, devices = info.devices,
    device = o.device or 0, limit = o.limit, warnings = {}, notes = {},
    limit_read = o.limit and ("%s (%s)"):format(bytes(o.limit), o.limit_read) or nil,
  }
  local limited = o.limit ~= nil
  local ctx = { t = t, info = info, o = o, result = result, limited = limited, module = mod,
    metric = function(r) return metric(r, limited) end,
    better = function(a, b) return better(a, b, limited) end }
  -- ctx.set_limit(lim, source): a module that read the limit the recorded
  -- run had ({low =, high =}, advise/search.lua) has the advice made
  -- under it, as if given: at its least value, which every limit of the
  -- interval exceeds or equals
  function ctx.set_limit(lim, source)
    o.limit = lim.low
    if o.search_given == nil then o.search = true end -- as with a limit given
    limited, ctx.limited = true, true
    result.limit = lim.low
    result.recorded_limit = { low = lim.low, high = lim.high, source = source }
    result.limit_read = ("between %s and %s (read from the %s: the limits under which the replay does " ..
      "what the %s shows; the advice is made at the least, and --limit gives yours)")
      :format(bytes(lim.low), bytes(lim.high), source, source)
  end
  mod.setup(ctx)

  -- the first rows
  local rows = {}
  local function replay(list)
    local run = {}
    for _, r in ipairs(list) do
      rows[#rows + 1] = r
      if not r.same_as then run[#run + 1] = r end
    end
    state.total = state.total + #run
    if #run > 0 then run_rows(t, run, o, state) end
    return run
  end
  local first = mod.rows(ctx)
  replay(first)
  local baseline, baseline_from
  if mod.baseline then
    baseline, baseline_from = mod.baseline(ctx)
  else
    for _, r in ipairs(first) do
      if r.recorded and not r.replay.error then baseline = r.replay.peak_reserved end
    end
    baseline_from = baseline and "the recorded setting's replay" or nil
  end
  result.baseline, result.baseline_from = baseline, baseline_from
  ctx.baseline = baseline
  local function fill_all(list)
    for _, r in ipairs(list) do if not r.same_as then fill(r, r.replay, ctx) end end
    for _, r in ipairs(list) do
      if r.same_as then
        r.replay = r.same_as.replay
        fill(r, r.replay, ctx)
      end
    end
  end
  fill_all(first)

  -- the further rows (combinations of the best)
  if mod.more then
    local extra = mod.more(ctx, rows)
    if extra and #extra > 0 then
      replay(extra)
      fill_all(extra)
    end
  end

  -- the recommendation: the best row not set aside; a simpler one within TIE of it wins
  local order, aside = {}, {}
  for _, r in ipairs(rows) do
    if r.aside then aside[#aside + 1] = r else order[#order + 1] = r end
  end
  table.sort(order, function(a, b) return better(a, b, limited) end)
  -- under a limit the recorded setting fits in, a row whose run there is the
  -- recorded one's (the same peak reserved, device calls and retries)
  -- changes nothing the run would see, whatever it would do under less: it
  -- is not recommended over the recorded setting
  local recorded_row
  for _, r in ipairs(order) do if r.recorded and not r.error then recorded_row = r end end
  local function unchanged(r)
    local o = recorded_row
    return limited and o and r ~= o and o.fits and r.fits and r.peak_reserved == o.peak_reserved and
      r.device_allocs == o.device_allocs and r.retries == o.retries
  end
  local rec
  for _, r in ipairs(order) do
    if not rec and not unchanged(r) then rec = r end
  end
  if rec and not rec.error then
    local m = metric(rec, limited)
    for _, r in ipairs(order) do
      local rm = metric(r, limited)
      if rm and m and rm <= m * (1 + TIE) and (r.keys or 0) < (rec.keys or 0) and
          (not limited or r.fits == rec.fits) and not unchanged(r) then
        rec = r
      end
    end
    -- a gain under 1 % is none: the recorded setting stays
    for _, r in ipairs(order) do
      local rm = metric(r, limited)
      if r.recorded and r ~= rec and rm and m and m >= rm * (1 - SAME_GAIN) and
          (not limited or r.fits == rec.fits) then
        rec = r
      end
    end
  end
  -- the table: the recorded row first, then the others best first, then those set aside
  local out = {}
  for _, r in ipairs(order) do if r.recorded then out[#out + 1] = r end end
  for _, r in ipairs(order) do if not r.recorded then out[#out + 1] = r end end
  table.sort(aside, function(a, b) return better(a, b, limited) end)
  for _, r in ipairs(aside) do out[#out + 1] = r end
  for _, r in ipairs(out) do
    r.description = mod.describe(r)
    r.recommended = r == rec or nil
  end
  result.rows = out
  result.recommended = rec
  if rec then
    result.paste, result.paste_note = mod.paste(rec, ctx)
    result.conf = rec.setting
  end
  for _, r in ipairs(out) do
    if r.aside and r.fits then r.paste, r.paste_note = mod.paste(r, ctx) end
  end

  -- a prediction at another size (cupola.trace.scale): the recorded
  -- setting's row is the prediction for that setting
  if info.scaled then predicted(result, info.scaled, out) end

  -- what the figures mean, and what to watch
  if mod.notes then mod.notes(result, ctx) end
  local W = result.warnings
  if info.scaled and info.scaled.note then W[#W + 1] = info.scaled.note end
  local rl = result.recorded_limit
  if rl and rl.high > rl.low then
    -- judged at the least limit the run can have had: the rows that need
    -- more than that but no more than the most may fit in the run's own
    local maybe = {}
    for _, r in ipairs(out) do
      if r.min_memory and r.min_memory > rl.low and r.min_memory <= rl.high then
        maybe[#maybe + 1] = ("%s (%s)"):format(r.description, bytes(r.min_memory))
      end
    end
    if #maybe > 0 then
      W[#W + 1] = ("the recorded run's limit is known to lie between %s and %s, and the rows are judged at " ..
        "the least; these need more than that and may fit in the run's own: %s; give it with --limit (option " ..
        "'limit') to judge them"):format(bytes(rl.low), bytes(rl.high), table.concat(maybe, ", "))
    end
  end
  if info.cut then
    -- a log or recording its program stopped writing: the figures are of what was written
    W[#W + 1] = ("the recording ends early, so these figures cover only its start: %s"):format(info.warning)
  end
  for _, r in ipairs(out) do
    if r.error then
      W[#W + 1] = ("%s: the replay failed: %s"):format(r.description, r.error)
    elseif not r.complete and not o.limit then
      W[#W + 1] = ("%s: %s"):format(r.description, r.warning or "incomplete replay")
    end
  end
  return result
end

-- cupola.trace.load, its refusal of a file of no format it reads saying
-- which formats were tried (the loader's complaint is its last reader's,
-- the CSV header's, which means nothing to someone whose file is of another
-- format: the framework modules' `reads` say what each wanted), and of an
-- empty file saying that.  Its errors already point at the user's line
-- (cupola.trace.load raises there): they go on as they are, and the ones
-- made here are raised there too.
local function load_trace(path, device)
  local load = require("cupola.trace").load
  local ok, t = pcall(load, path)
  -- a format that loads one device at a time, by the module's word
  if not ok and device and modules.needs_device(tostring(t)) then
    ok, t = pcall(load, path, { device = device })
  end
  if ok then return t end
  local e = tostring(t)
  local function shown_path(pattern)
    local p = e:match(pattern)
    return p and p:gsub("^.*%.lua:%d+: ", ""):gsub("^%(command line%):%d+: ", "") or path
  end
  if e:find(":1: empty file (expected the header", 1, true) then
    raise(("%s: the file is empty: no recording in it"):format(shown_path "^(.-):1: empty file"))
  end
  if e:find(":1: header must be", 1, true) then
    raise(("%s: not a recording cupola advise reads; it tried %s"):format(shown_path "^(.-):1: header must be",
      table.concat(modules.formats(), "; ")))
  end
  error(t, 0)
end

--- engine.run(trace_or_path, opts) -> result (cupola.advise, less the
-- metatable that prints it).
function engine.run(src, opts)
  local o = options.check(opts)
  local traces = {}
  if is_trace(src) then
    if src.path == nil then raise("bad argument #1 to 'advise' (attempt to use a closed cupola.Trace)") end
    if o.device and o.device ~= 0 then
      raise("cupola.advise: option 'device' needs a path (the snapshot is loaded once per device)")
    end
    traces[1] = { t = src, device = #src > 0 and src:event(1).device or 0 }
  elseif type(src) == "string" then
    local t = load_trace(src, o.device)
    local n = t.devices or 1
    src = t.path -- a name of a trace cupola ships, found
    local named = o.device and modules.find(t:info())
    if named and named.device_ids then
      -- a format that names its devices by ids of its own: the loader takes
      -- the one asked for, and says which the file has where it has none of it
      t:close()
      t = at_caller(core.trace.load, src, { device = o.device })
      traces[1] = { t = t, device = o.device, own = true }
    elseif o.device then
      if o.device >= n then
        t:close()
        raise(("cupola.advise: option 'device': the recording has %d device%s (0..%d), not %d"):format(n,
          n > 1 and "s" or "", n - 1, o.device))
      end
      if n > 1 then
        t:close()
        t = at_caller(core.trace.load, src, { device = o.device })
      end
      traces[1] = { t = t, device = o.device, own = true }
    elseif n > 1 then
      t:close()
      for d = 0, n - 1 do
        traces[#traces + 1] = { t = at_caller(core.trace.load, src, { device = d }), device = d, own = true }
      end
    else
      traces[1] = { t = t, device = 0, own = true }
    end
  else
    raise("bad argument #1 to 'advise' (a cupola.Trace or the path of a snapshot expected, got " .. typed(src) .. ")")
  end
  local state = { done = 0, total = 0 }
  local results = {}
  local ok, err = pcall(function()
    for i, x in ipairs(traces) do
      local info = x.t:info()
      local mod = modules.module_for(info)
      -- an option only other modules declare means nothing to this one:
      -- refused, as a module's check refuses what it does not take
      for _, d in ipairs(modules.options()) do
        local mine = false
        for _, name in ipairs(d.modules) do mine = mine or name == mod.name end
        if o[d.key] ~= nil and not mine then
          raise(("cupola.advise: option '%s' is not for a %s (an option of the '%s' module%s): remove it")
            :format(d.key, mod.title(info), table.concat(d.modules, "' and '"), #d.modules > 1 and "s" or ""))
        end
      end
      if mod.check then mod.check(o) end
      local oo = {}
      for k, v in pairs(o) do oo[k] = v end
      oo.device = x.device
      results[i] = advise_trace(x.t, oo, state, mod)
      results[i].device = x.device
    end
  end)
  for _, x in ipairs(traces) do if x.own then x.t:close() end end
  if not ok then error(err, 0) end
  if o.progress then report.progress("cupola advise", 1, 1, 0) end
  local top = results[1]
  if #results > 1 then top.per_device = results end
  return top
end

return engine
