--- cupola.advise: a recording of a program's allocations in, the allocator
-- setting to use out.  One engine (this file: options, the replays on
-- threads through cupola.core.trace.advise_run, scoring, the least-memory
-- search, text / JSON / HTML, the command line) and one small module per
-- framework (lua/cupola/advise/NAME.lua) that names the framework's
-- settings, its rows and its paste line.  The engine knows no framework's
-- words: everything it prints about one comes from its module.
--
--   cupola.advise(trace_or_path [, {limit =, conf =, recorded =, pools =,
--                 search =, threads =, progress =, device =}]) -> result
--   bin/cupola advise SNAPSHOT [--limit 24GiB] [--conf CONF]... [--recorded CONF]
--                     [--json] [--html PAGE]                (advise.main)
--
-- ---- the framework module interface -------------------------------------
-- A framework module is a table returned by require("cupola.advise." .. name),
-- for each name in advise.frameworks.  Fields (optional ones marked "opt"):
--
--   name            the framework's name ("torch"): result.framework
--   formats         the trace formats it reads (t:info().format), e.g.
--                   {"torch_snapshot"}; the engine offers a trace to the
--                   first module whose detect (or formats) claims it
--   detect(info)    opt: true when the module reads this trace (info =
--                   t:info()); without it, info.format in formats
--   title(info)     what the trace is, for the report's head ("PyTorch snapshot")
--   check(o)        opt: raises (util.raise) for settings in the options it
--                   does not read (o.conf, o.recorded are its settings)
--   setup(ctx)      reads what it needs of the trace once; may set result
--                   fields (recorded_setting, ...), warnings and notes
--   rows(ctx)       -> the first row specs, replayed together
--   more(ctx, rows) opt -> further row specs after the first rows' figures
--                   are in (combinations of the best), replayed together
--   baseline(ctx)   opt -> bytes, text: what "vs recorded" compares with
--                   (default: the recorded row's peak reserved)
--   fill(row, x, ctx) opt: the module's own fields of a replayed row (x is
--                   the row's advise_run result)
--   describe(row)   -> the row's name in the table
--   paste(row, ctx) -> the line that runs the user's program with the row's setting
--   summary(res)    opt -> lines for the report's head (what was recorded)
--   notes(res, ctx) opt: adds sentences to res.warnings and res.notes
--   frame(res, fails_at) opt -> how a location in the user's program reads
--   terms           opt: {calls =, least =}: the definitions of those columns
-- o.pools_given is true where the user asked for pools (not the default
-- rows): a module that has none refuses them in check.
--
-- A row spec is a table the engine fills with the row's figures:
--   setting       the setting as the user writes it (its identity)
--   job           the advise_run job (kind/conf/spec/...; the engine adds
--                 limit and search)
--   pool          cupola.pool options (or a CUPOLA pool spec string) that
--                 replay it for the HTML page (the engine adds upstream, max)
--   family        a name for its kind of setting ("default", "recorded", ...)
--   keys          how many settings it changes: the simpler wins a tie
--   recorded      true for the setting the trace was recorded under
--   aside         true: shown after the others and never recommended
--   caveat        a row set aside that costs something its figures do not show (a
--                 pool measured slower inside the framework): said beside its line,
--                 and a row without one that fits is offered first
--   same_as       another row whose replay serves for this one
--   reserved_text (set by fill) the peak reserved cell where the replay's
--                 figure is not the setting's (JAX's default on a device of
--                 unknown size: "75 % of GPU")
--   via           the environment variable (or the like) that carries it
-- ctx, which every function gets: t (the cupola.Trace), info (t:info()),
-- o (the checked options), result, limited (a limit was given), and the
-- engine's metric(row) and better(a, b) (the scoring below).
local core = require "cupola.core"
local util = require "cupola.util"
local report = require "cupola.report"
local raise, shown, typed, at_caller = util.raise, util.shown, util.typed, util.at_caller

local advise = {}

local TIE = 0.005                  -- within 0.5 %: a simpler setting is preferred
local SAME_GAIN = 0.01             -- less than 1 % better than the recorded setting: no gain

advise.default_pools = { "tlsf", "vmm", "caching" }
-- the framework modules, asked in this order (one that is not installed is skipped)
advise.frameworks = { "torch", "jax", "cupy" }

local bytes = report.bytes

-- ---- the framework modules ----------------------------------------------

local modules = {}

--- advise.module(name) -> the framework module, or nil where none is installed.
function advise.module(name)
  if modules[name] == nil then
    local ok, m = pcall(require, "cupola.advise." .. name)
    if ok then
      modules[name] = m
    elseif tostring(m):find("module 'cupola.advise." .. name .. "' not found", 1, true) then
      modules[name] = false
    else
      error(m, 0)
    end
  end
  return modules[name] or nil
end

--- advise.module_for(info) -> the module that reads a trace of this info.
function advise.module_for(info)
  local names = {}
  for _, name in ipairs(advise.frameworks) do
    local m = advise.module(name)
    if m then
      local claims
      if m.detect then
        claims = m.detect(info)
      else
        for _, f in ipairs(m.formats or {}) do if f == info.format then claims = true end end
      end
      if claims then return m end
      names[#names + 1] = name
    end
  end
  raise(("cupola.advise: no advice for traces of format %s (the framework modules: %s)"):format(
    shown(info.format), table.concat(names, ", ")))
end

-- ---- arguments --------------------------------------------------------

local function is_trace(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__name == "cupola.Trace"
end

-- Units of sizes as people write them on a command line, as dd(1) reads
-- them: K, M, G, T and KiB ... TiB are powers of 1024; KB, MB, GB, TB
-- powers of 1000 (what disk and GPU makers print); any case.
local units = {
  [""] = { 1 }, b = { 1 },
  k = { 2 ^ 10, "2^10" }, ki = { 2 ^ 10, "2^10" }, kib = { 2 ^ 10, "2^10" }, kb = { 1e3, "10^3" },
  m = { 2 ^ 20, "2^20" }, mi = { 2 ^ 20, "2^20" }, mib = { 2 ^ 20, "2^20" }, mb = { 1e6, "10^6" },
  g = { 2 ^ 30, "2^30" }, gi = { 2 ^ 30, "2^30" }, gib = { 2 ^ 30, "2^30" }, gb = { 1e9, "10^9" },
  t = { 2 ^ 40, "2^40" }, ti = { 2 ^ 40, "2^40" }, tib = { 2 ^ 40, "2^40" }, tb = { 1e12, "10^12" },
}

--- advise.parse_size(v) -> bytes, how it was read (a sentence), or nil:
-- a whole number of bytes, or a string "6GiB", "6G", "6gib", "6 GB",
-- "1.5T" (GB is 10^9 bytes, G and GiB 2^30; a fraction of a byte is
-- dropped).
function advise.parse_size(v)
  if math.type(v) == "integer" then return v, ("%d bytes"):format(v) end
  if math.type(v) == "float" then
    local n = math.tointeger(v)
    if n then return n, ("%d bytes"):format(n) end
    return nil
  end
  if type(v) ~= "string" then return nil end
  local num, unit = v:match "^%s*(%d+%.?%d*)%s*(%a*)%s*$"
  if not num then num, unit = v:match "^%s*(%.%d+)%s*(%a*)%s*$" end
  local u = unit and units[unit:lower()]
  if not u then return nil end
  local x = tonumber(num) * u[1]
  if x >= 2 ^ 63 then return nil end
  local n = math.tointeger(math.floor(x))
  if not n then return nil end
  if not u[2] then return n, ("%d bytes"):format(n) end
  local si = u[2]:sub(1, 2) == "10"
  return n, ("%s read as %s x %s = %d bytes%s"):format(shown(v), num, u[2], n,
    si and ("; %s is 10^%s bytes, %siB or %s 2^%d"):format(unit:upper(), u[2]:match "%^(%d+)",
      unit:sub(1, 1):upper(), unit:sub(1, 1):upper(), ({ k = 10, m = 20, g = 30, t = 40 })[unit:sub(1, 1):lower()])
      or "")
end

local option_names = { "limit", "conf", "recorded", "pools", "search", "threads", "progress", "device",
  "device_memory" }

local function check_options(opts)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then
    raise("bad argument #2 to 'advise' (options table expected, got " .. typed(opts) .. ")")
  end
  local known = {}
  for _, k in ipairs(option_names) do known[k] = true end
  for k in pairs(opts) do
    if not known[k] then
      raise("cupola.advise: unknown option " .. shown(k) .. " (" .. table.concat(option_names, ", ") .. ")")
    end
  end
  local o = {}
  if opts.limit ~= nil then
    local n, how = advise.parse_size(opts.limit)
    if not n or n <= 0 then
      raise("cupola.advise: option 'limit' must be a size above 0 (bytes, or a string such as \"24GiB\", " ..
        "\"24G\", \"24GB\"), not " .. typed(opts.limit))
    end
    o.limit, o.limit_read = n, how
  end
  local confs = opts.conf
  if type(confs) == "string" then confs = { confs } end
  if confs ~= nil and type(confs) ~= "table" then
    raise("cupola.advise: option 'conf' must be a conf string or a list of them, not " .. typed(confs))
  end
  o.conf = {}
  for i, c in ipairs(confs or {}) do
    if type(c) ~= "string" then
      raise(("cupola.advise: option 'conf': item %d must be a string, not %s"):format(i, typed(c)))
    end
    o.conf[i] = c
  end
  if opts.recorded ~= nil then
    if type(opts.recorded) ~= "string" then
      raise("cupola.advise: option 'recorded' must be a conf string, not " .. typed(opts.recorded))
    end
    o.recorded = opts.recorded
  end
  local pools = opts.pools
  -- pools asked for, not the default rows (a module without pools refuses them)
  o.pools_given = type(pools) == "table" and #pools > 0 or nil
  if pools == nil then pools = advise.default_pools end
  if pools == false then pools = {} end
  if type(pools) ~= "table" then
    raise("cupola.advise: option 'pools' must be a list of pool specs (\"vmm\", \"tlsf,reuse=stream\") or false, not "
      .. typed(pools))
  end
  o.pools = {}
  for i, s in ipairs(pools) do
    if type(s) ~= "string" then
      raise(("cupola.advise: option 'pools': item %d must be a pool spec string, not %s"):format(i, typed(s)))
    end
    o.pools[i] = s
  end
  for _, k in ipairs { "search", "progress" } do
    if opts[k] ~= nil and type(opts[k]) ~= "boolean" then
      raise(("cupola.advise: option '%s' must be a boolean, not %s"):format(k, typed(opts[k])))
    end
  end
  o.search, o.search_given = opts.search, opts.search
  if o.search == nil then o.search = o.limit ~= nil end
  o.progress = opts.progress ~= false
  if opts.threads ~= nil and (math.type(opts.threads) ~= "integer" or opts.threads < 0 or opts.threads > 256) then
    raise("cupola.advise: option 'threads' must be an integer in 0..256 (0: one per core), not " .. typed(opts.threads))
  end
  o.threads = opts.threads or 0
  if opts.device ~= nil and (math.type(opts.device) ~= "integer" or opts.device < 0 or opts.device > 65535) then
    raise("cupola.advise: option 'device' must be a device index (an integer from 0), not " .. typed(opts.device))
  end
  o.device = opts.device
  if opts.device_memory ~= nil then
    -- the device's memory (JAX's fractions are of it)
    local n = advise.parse_size(opts.device_memory)
    if not n or n <= 0 then
      raise("cupola.advise: option 'device_memory' must be a size above 0 (bytes, or a string such as " ..
        "\"80GiB\"), not " .. typed(opts.device_memory))
    end
    o.device_memory = n
  end
  return o
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
      end
      r.fails_at = f
    end
  end
  if o.search then
    r.min_memory = x.min_limit
    r.search_steps = x.search_steps
  end
end

-- ---- the limit a recorded run had -------------------------------------

--- advise.limit_interval(side, a, peak) -> {low =, high =, replays =} or
-- nil: the limits under which a replay does what the recording shows, where
-- side(L) says -1 (L too low: the model was refused, or gave memory back,
-- where the run did not), 0 (the recorded run) or 1 (too high: the model got
-- what the run was refused, or kept what it gave back); nil: no telling.
-- A limit only decides comparisons of what is held plus a request against
-- it, so the limits that give the recorded run make one interval; it is
-- found by bisection above a (too low, or below anything held), up to
-- twice the peak of the replay without a limit and 1 GiB, where every
-- comparison comes out as without one (PyTorch checks an expandable
-- segment's whole request, not only the pages it maps).  Each end is kept
-- only where it replays to the recording (the decisions need not be
-- monotone everywhere).
function advise.limit_interval(side, a, peak)
  local replays = 0
  local function at(L)
    replays = replays + 1
    return side(L)
  end
  local b = peak <= (math.maxinteger - (1 << 30)) // 2 and 2 * peak + (1 << 30) or math.maxinteger
  if at(b) ~= 1 then return nil end
  -- the least L not too low, in (a, b]
  local lo, hi = a, b
  while hi - lo > 1 do
    local mid = lo + (hi - lo) // 2
    local v = at(mid)
    if v == nil then return nil end
    if v >= 0 then hi = mid else lo = mid end
  end
  local low = hi
  if at(low) ~= 0 then return nil end
  -- the greatest L not too high, in [low, b)
  lo, hi = low, b
  while hi - lo > 1 do
    local mid = lo + (hi - lo) // 2
    local v = at(mid)
    if v == nil then return nil end
    if v <= 0 then lo = mid else hi = mid end
  end
  local high = lo
  if high > low and at(high) ~= 0 then high = low end
  return { low = low, high = high, replays = replays }
end

-- ---- the advice for one trace -------------------------------------------

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
  -- run had ({low =, high =}, advise.limit_interval) has the advice made
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
  local rec = order[1]
  if rec and not rec.error then
    local m = metric(rec, limited)
    for _, r in ipairs(order) do
      local rm = metric(r, limited)
      if rm and m and rm <= m * (1 + TIE) and (r.keys or 0) < (rec.keys or 0) and
          (not limited or r.fits == rec.fits) then
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
    result.paste = mod.paste(rec, ctx)
    result.conf = rec.setting
  end
  for _, r in ipairs(out) do if r.aside and r.fits then r.paste = mod.paste(r, ctx) end end

  -- what the figures mean, and what to watch
  if mod.notes then mod.notes(result, ctx) end
  local W = result.warnings
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

--- advise.formats() -> what each framework module reads, as phrases.
function advise.formats()
  local out = {}
  for _, name in ipairs(advise.frameworks) do
    local m = advise.module(name)
    for _, f in ipairs(m and m.reads or {}) do out[#out + 1] = f end
  end
  return out
end

-- cupola.trace.load, its refusal of a file of no format it reads saying
-- which formats were tried (the last reader's complaint, an RMM log's
-- header, means nothing to someone who has a PyTorch snapshot), and of an
-- empty file saying that.  Its errors already point at the user's line
-- (cupola.trace.load raises there): they go on as they are, and the ones
-- made here are raised there too.
local function load_trace(path, device)
  local load = require("cupola.trace").load
  local ok, t = pcall(load, path)
  -- a CuPy log of several devices loads one device at a time (a pool each)
  if not ok and device and tostring(t):find("each device has a pool of its own", 1, true) then
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
      table.concat(advise.formats(), "; ")))
  end
  error(t, 0)
end

-- A result prints as the report (advise.text, defined below).
local result_mt = { __tostring = function(res) return advise.text(res) end }

--- advise.run(trace_or_path, opts) -> result (cupola.advise).
function advise.run(src, opts)
  local o = check_options(opts)
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
    if o.device and t:info().format == "cupy_hook" then
      -- a CuPy log names its devices by device_id: the loader takes the one
      -- asked for, and says which the log has where it has none of it
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
      local mod = advise.module_for(x.t:info())
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
  -- print(cupola.advise(path)) and the REPL show the report, not "table: 0x..."
  return setmetatable(top, result_mt)
end

-- ---- text ------------------------------------------------------------------

local SAME = 1                     -- a change under 1 % is none

-- A change against the recorded run, as a cell: "same" under 1 %.
local function pct(x)
  if not x then return "" end
  if math.abs(x) < SAME then return "same" end
  return ("%+.1f %%"):format(x)
end

--- advise.width() -> the width advise's text fits: $COLUMNS where it is a
-- number (at least 40), else 100.
function advise.width()
  local c = math.tointeger(tonumber(os.getenv "COLUMNS" or ""))
  if c and c >= 40 then return c end
  if c and c > 0 then return 40 end
  return 100
end

local function len(s) return utf8.len(s) or #s end

-- s in lines of at most width characters, the first after lead, the others
-- after as many spaces; a word longer than a line is cut.
local function wrap(lead, s, width, indent)
  local lines, line = {}, lead
  indent = indent or string.rep(" ", len(lead))
  local room = math.max(width - len(indent), 10)
  local words = {}
  -- a size stays on one line with its unit ("678.00 MiB")
  s = s:gsub("(%d) ([KMGT]?i?B%f[^%w])", "%1\1%2")
  for word in s:gmatch "%S+" do
    word = word:gsub("\1", " ")
    while len(word) > room do
      words[#words + 1] = word:sub(1, room)
      word = word:sub(room + 1)
    end
    words[#words + 1] = word
  end
  local fresh = true
  for _, word in ipairs(words) do
    if not fresh and len(line) + 1 + len(word) > width then
      lines[#lines + 1] = line
      line = indent .. word
    elseif fresh then
      line = line .. word
    else
      line = line .. " " .. word
    end
    fresh = false
  end
  lines[#lines + 1] = line
  return table.concat(lines, "\n")
end
advise.wrap = wrap

-- A command line in lines of at most width characters, continued with
-- " \\" as a shell reads it; where it cannot fit after lead, at column 0;
-- a word longer than a line is cut after a comma with a backslash at the
-- end of the line and goes on at column 0, which a POSIX shell reads as
-- one word (the line must still run when pasted).
local command_lines
function command_lines(lead, s, width)
  -- a comment after the command goes above it: a backslash in a comment
  -- continues nothing, so its second line would run as a command
  local cmd, comment = s:match "^(.-)%s+#%s+(.*)$"
  if cmd then
    return wrap(lead .. "# ", comment, width, lead .. "# ") .. "\n" .. command_lines(lead, cmd, width)
  end
  local words = {}
  for word in s:gmatch "%S+" do words[#words + 1] = word end
  for _, w in ipairs(words) do
    if len(lead) + len(w) + 2 > width then lead = "" end
  end
  local lines, line = {}, lead
  local fresh = true
  for _, word in ipairs(words) do
    if not fresh and len(line) + 1 + len(word) + 2 > width then
      lines[#lines + 1] = line .. " \\"
      line = lead .. "  " .. word
    else
      line = fresh and line .. word or line .. " " .. word
    end
    fresh = false
    while len(line) + 2 > width do
      local cut = line:sub(1, width - 2):match "^.*,()"
      if not cut or cut <= len(lead) + 1 then break end
      lines[#lines + 1] = line:sub(1, cut - 1) .. "\\"
      line = line:sub(cut)
    end
  end
  lines[#lines + 1] = line
  return table.concat(lines, "\n")
end

-- A setting's name in lines of at most w characters: cut after its commas
-- where it can be, else anywhere.
local function name_lines(name, w)
  if len(name) <= w then return { name } end
  local out, line = {}, ""
  for part in name:gmatch "[^,]+,?" do
    if line ~= "" and len(line) + len(part) > w then
      out[#out + 1] = line
      line = ""
    end
    line = line .. part
    while len(line) > w do
      out[#out + 1] = line:sub(1, w)
      line = line:sub(w + 1)
    end
  end
  if line ~= "" then out[#out + 1] = line end
  return out
end

-- The columns: key, header lines, right-aligned, and the cell of a row.
local function column_set(res)
  local limited = res.limit ~= nil
  local searched = false
  for _, r in ipairs(res.rows) do if r.min_memory or r.search_steps then searched = true end end
  -- "vs recorded" where there is a recorded run to compare with (a JAX
  -- profile, a CuPy log without total_bytes have none: a column of blanks)
  local compared = false
  for _, r in ipairs(res.rows) do if r.change_pct then compared = true end end
  -- under a limit, the figures of a run that stopped say nothing
  local function stopped(r) return r.error or (limited and not r.fits) end
  local cols = {}
  local function col(key, head, f) cols[#cols + 1] = { key = key, head = head, right = true, cell = f } end
  if limited then
    if searched then
      col("least", { "least", "memory" }, function(r) return r.min_memory and bytes(r.min_memory) or "-" end)
    end
    col("fits", { "fits" }, function(r) return r.error and "error" or r.fits and "yes" or "no" end)
    local any = false
    for _, r in ipairs(res.rows) do if r.fits then any = true end end
    -- where nothing fits, no run has figures to show
    if any then
      col("retries", { "retries" }, function(r) return stopped(r) and "-" or tostring(r.retries) end)
      col("reserved", { "peak", "reserved" }, function(r)
        return stopped(r) and "-" or r.reserved_text or bytes(r.peak_reserved)
      end)
      if compared then
        col("change", { "vs", "recorded" }, function(r) return stopped(r) and "-" or pct(r.change_pct) end)
      end
    end
  else
    col("reserved", { "peak", "reserved" }, function(r)
      return r.error and "error" or r.reserved_text or bytes(r.peak_reserved) .. (r.complete and "" or "*")
    end)
    col("overhead", { "overhead" }, function(r)
      return r.error and "-" or r.reserved_text and "" or bytes(r.overhead)
    end)
    col("calls", { "device", "calls" }, function(r) return r.error and "-" or tostring(r.device_allocs) end)
    if compared then
      col("change", { "vs", "recorded" }, function(r) return r.error and "-" or pct(r.change_pct) end)
    end
    if searched then
      col("least", { "least", "memory" }, function(r) return r.min_memory and bytes(r.min_memory) or "-" end)
    end
  end
  return cols
end

--- advise.columns(result) -> headers, rows of strings, right-aligned columns:
-- the table as the HTML page shows it (one line a header and a row).
function advise.columns(res)
  local cols = column_set(res)
  local head, right = { "setting" }, { false }
  for _, c in ipairs(cols) do head[#head + 1] = table.concat(c.head, " "); right[#right + 1] = true end
  local rows = {}
  for _, r in ipairs(res.rows) do
    local row = { (r.recommended and "-> " or "   ") .. r.description .. (r.recorded and " (recorded)" or "") }
    for _, c in ipairs(cols) do row[#row + 1] = c.cell(r) end
    rows[#rows + 1] = row
  end
  return head, rows, right
end

-- The table as text, lines of at most width characters.
local function table_lines(res, width, mod)
  local cols = column_set(res)
  local cells = {}
  local w = {}
  for i, c in ipairs(cols) do
    w[i] = 0
    for _, h in ipairs(c.head) do w[i] = math.max(w[i], len(h)) end
  end
  for k, r in ipairs(res.rows) do
    cells[k] = {}
    for i, c in ipairs(cols) do
      cells[k][i] = c.cell(r)
      w[i] = math.max(w[i], len(cells[k][i]))
    end
  end
  local figures = 0
  for i = 1, #cols do figures = figures + 2 + w[i] end
  -- a terminal too narrow for every column: the last ones are left out
  local dropped = {}
  while #cols > 2 and 5 + 16 + figures > width do
    figures = figures - 2 - w[#cols]
    table.insert(dropped, 1, table.concat(cols[#cols].head, " "))
    cols[#cols], w[#cols] = nil, nil
  end
  local names = {}
  local longest = len "setting"
  for k, r in ipairs(res.rows) do
    names[k] = r.description .. (r.recorded and " (recorded)" or "")
    longest = math.max(longest, len(names[k]))
  end
  -- "  " indent, "-> " marker, the name, the figures
  local nw = math.max(math.min(longest, width - 5 - figures), 12)
  local out = {}
  local function line(name, mark, row)
    local parts = { "  " .. mark .. name .. string.rep(" ", nw - len(name)) }
    for i = 1, #cols do
      local s = row and row[i] or ""
      parts[#parts + 1] = string.rep(" ", w[i] - len(s) + 2) .. s
    end
    out[#out + 1] = (table.concat(parts):gsub("%s+$", ""))
  end
  local hl = 0
  for _, c in ipairs(cols) do hl = math.max(hl, #c.head) end
  for j = 1, hl do
    local row = {}
    for i, c in ipairs(cols) do
      -- headers of fewer lines sit on the last
      row[i] = c.head[j - (hl - #c.head)] or ""
    end
    line(j == hl and "setting" or "", "   ", row)
  end
  local dash = {}
  for i = 1, #cols do dash[i] = string.rep("-", w[i]) end
  line(string.rep("-", math.min(nw, 7)), "   ", dash)
  local aside_done = false
  for k, r in ipairs(res.rows) do
    if r.aside and not aside_done then
      aside_done = true
      if mod and mod.aside_title then out[#out + 1] = wrap("  ", mod.aside_title, width) end
    end
    local nl = name_lines(names[k], nw)
    local cut = false
    for _, l in ipairs(nl) do if not l:find(",$") and l ~= nl[#nl] then cut = true end end
    if cut then
      -- a name that would be cut mid-word: on lines of its own, the figures below
      local whole = name_lines(names[k], width - 5)
      for j, l in ipairs(whole) do
        out[#out + 1] = "  " .. (j == 1 and (r.recommended and "-> " or "   ") or "     ") .. l
      end
      line("", "   ", cells[k])
    else
      line(nl[1], r.recommended and "-> " or "   ", cells[k])
      for j = 2, #nl do line("  " .. nl[j], "   ") end
    end
  end
  if #dropped > 0 then
    out[#out + 1] = wrap("  ", ("(left out to fit %d columns: %s)"):format(width, table.concat(dropped, ", ")), width)
  end
  return out, cols
end

-- The definitions of the columns shown, as sentences.
local function column_notes(res, cols, mod)
  local terms = mod and mod.terms or {}
  local def = {
    least = terms.least or "least memory: the smallest limit (to 2 MiB) under which the setting serves every " ..
      "recorded request, found by replaying under limits",
    fits = ("fits: whether it serves every recorded request within the limit, %s"):format(
      res.recorded_limit and ("the least the recorded run's can have been, %s"):format(bytes(res.limit))
      or res.limit and bytes(res.limit) or ""),
    retries = "retries: how often the allocator ran out under the limit, freed what it had cached and " ..
      "tried again (each costs time)",
    reserved = "peak reserved: the most device memory the allocator held at once: what the GPU must have " ..
      "for it" .. (res.limit and "" or " (* the replay stopped early)"),
    overhead = ("overhead: peak reserved less the most the program had in use at once (%s): memory held " ..
      "but not in use then, from rounding, split blocks and the cache"):format(
      res.peak_live and bytes(res.peak_live) or "?"),
    calls = terms.calls or "device calls: how many times the allocator asked the device for memory",
    change = ("vs recorded: peak reserved against %s (%s); \"same\": less than 1 %% apart"):format(
      res.baseline_from or "the recorded run", res.baseline and bytes(res.baseline) or "unknown"),
  }
  local out = {}
  for _, c in ipairs(cols) do out[#out + 1] = def[c.key] end
  -- what a "-" means, where the table shows one
  local dash = {}
  for _, c in ipairs(cols) do
    for _, r in ipairs(res.rows) do if c.cell(r) == "-" then dash[c.key] = true end end
  end
  if dash.least then
    out[#out + 1] = "a \"-\" under least memory: no limit the search tried served every recorded request"
  end
  if dash.retries or dash.reserved or dash.change or dash.overhead or dash.calls then
    out[#out + 1] = res.limit and "a \"-\": the run stopped when it ran out, so its figures are not the setting's"
      or "a \"-\": the replay failed (see the warnings)"
  end
  return out
end

-- Where a location in the program reads: its frame, and the innermost
-- Python frame where that is another.
local function frame_text(f)
  if not f or not f.label then return nil end
  if f.python_frame then return f.label .. " (in " .. f.python_frame .. ")" end
  return f.label
end

-- Where a row ran out, in a few words.
local function ran_out(f)
  local where = f.allocation and ("allocation %d (%s)"):format(f.allocation, bytes(f.size or 0))
    or ("a request of %s"):format(bytes(f.size or 0))
  if f.trace_event then where = where .. (", event %d"):format(f.trace_event) end
  if f.line then where = where .. (", line %d of the log"):format(f.line) end
  return where
end

-- "Least memory: X with the best row[; Y with the recommended one]" (nil
-- where the recommended row was not searched), and the best row.
local function least_memory(d, rec)
  local best
  for _, r in ipairs(d.rows) do
    if r.min_memory and (not best or r.min_memory < best.min_memory) then best = r end
  end
  if not rec.min_memory then return nil, best end
  if best and best ~= rec and best.min_memory < rec.min_memory then
    return ("Least memory: %s with %s; %s with %s"):format(bytes(best.min_memory), best.description,
      bytes(rec.min_memory), rec.description), best
  end
  return ("Least memory: %s with %s"):format(bytes(rec.min_memory), rec.description), best
end

-- "With X or more, run:" and the recommended command.
local function run_with(d, rec, put, para, width)
  put("")
  para("  ", ("With %s or more, run:"):format(bytes(rec.min_memory)))
  put(command_lines("    ", d.paste, width))
end

-- The answer: what to run, or that nothing fits and what it needs.
local function verdict(d, put, para, width)
  local rec = d.recommended
  if not rec or rec.error then
    para("  ", "no setting could be replayed: see the warnings below")
    return
  end
  local limit = d.limit
  -- the limit as the sentences name it: read from the recording, the run's
  -- own (the advice is made at the least value it can have been)
  local lname = limit and (d.recorded_limit and d.recorded_limit.high > d.recorded_limit.low and
    ("%s (the least the recorded run's limit can have been)"):format(bytes(limit)) or bytes(limit))
  if limit and not rec.fits then
    -- a row set aside (never recommended) may fit where no setting does
    -- (one without a caveat first, then the least memory)
    local aside
    for _, r in ipairs(d.rows) do
      if r.aside and r.fits then
        if not aside or (aside.caveat and not r.caveat)
          or (not aside.caveat == not r.caveat and (r.min_memory or 0) < (aside.min_memory or 0)) then
          aside = r
        end
      end
    end
    if aside then
      para("  ", ("No setting runs the recorded requests in %s; %s does%s:"):format(lname,
        aside.description, aside.min_memory and (" (it needs %s)"):format(bytes(aside.min_memory)) or ""))
      put(command_lines("    ", aside.paste, width))
      if aside.caveat then para("    ", "but: " .. aside.caveat) end
      put("")
    else
      para("  ", ("Nothing fits: no setting runs the recorded requests in %s."):format(lname))
    end
    if d.peak_live and limit < d.peak_live then
      para("  ", ("The program had %s in use at once as it ran: no allocator runs it in less, whatever its "
        .. "setting."):format(bytes(d.peak_live)))
    end
    -- the least memory: the best of all rows, and the recommended one
    local s, best = least_memory(d, rec)
    if s then
      -- and the setting it ran under (or the defaults, where that is unknown)
      local ref
      for _, r in ipairs(d.rows) do if r.recorded then ref = r end end
      if not ref then for _, r in ipairs(d.rows) do if r.family == "default" then ref = r end end end
      if ref and ref ~= rec and ref ~= best and ref.min_memory then
        s = s .. (" (%s%s: %s)"):format(ref.description, ref.recorded and ", as recorded" or "",
          bytes(ref.min_memory))
      end
      para("  ", s .. ".")
    end
    local f = rec.fails_at
    if f then
      local where = frame_text(f)
      para("  ", ("In %s, %s runs out at %s%s."):format(lname, rec.description, ran_out(f),
        where and (": " .. where) or ""))
      if f.message then para("    ", f.message) end
    end
    if rec.min_memory then run_with(d, rec, put, para, width) end
    return
  end
  if not limit and not rec.complete then
    -- every replay stopped (a device too small for the program): nothing to recommend
    para("  ", "Nothing runs: no setting served every recorded request (each replay was refused memory and " ..
      "stopped: see the warnings below).")
    return
  end
  para("  ", "recommended: " .. rec.description)
  local facts = {}
  if rec.change_pct and d.baseline then
    if math.abs(rec.change_pct) < SAME then
      facts[#facts + 1] = ("peak reserved %s, the same as the recorded run (%s): no setting reserves 1 %% less")
        :format(bytes(rec.peak_reserved), bytes(d.baseline))
    else
      facts[#facts + 1] = ("peak reserved %s, %.1f %% %s than the recorded run (%s)"):format(
        bytes(rec.peak_reserved), math.abs(rec.change_pct), rec.change_pct < 0 and "less" or "more",
        bytes(d.baseline))
    end
  else
    facts[#facts + 1] = ("peak reserved %s"):format(bytes(rec.peak_reserved))
  end
  if limit then facts[#facts + 1] = ("fits in %s"):format(lname) end
  if rec.min_memory then facts[#facts + 1] = ("runs in %s or more"):format(bytes(rec.min_memory)) end
  para("    ", table.concat(facts, "; "))
  put(command_lines("    ", d.paste, width))
  -- under a limit, the settings that do not fit, and where they run out, once
  if limit then
    local groups, order, n = {}, {}, 0
    for _, r in ipairs(d.rows) do
      local f = r.fails_at
      if f then
        n = n + 1
        local key = f.allocation or f.size or 0
        if not groups[key] then groups[key] = { f = f, rows = {} }; order[#order + 1] = key end
        table.insert(groups[key].rows, r.description)
      end
    end
    if n > 0 then
      put("")
      para("  ", ("%d of %d settings %s not fit in %s; where %s out:"):format(n, #d.rows,
        n == 1 and "does" or "do", lname, n == 1 and "it runs" or "they run"))
      for i, key in ipairs(order) do
        if i > 3 then
          para("    ", ("(and %d more places)"):format(#order - 3))
          break
        end
        local g = groups[key]
        local where = frame_text(g.f)
        para("    - ", ("%s%s: %s"):format(ran_out(g.f), where and (", " .. where) or "",
          #g.rows <= 2 and table.concat(g.rows, ", ") or ("%s and %d more"):format(g.rows[1], #g.rows - 1)))
      end
    end
  end
end

-- A path as people read it: "dir/../" taken out, and relative to the
-- working directory where it lies under it.
local function display_path(p)
  if type(p) ~= "string" then return tostring(p) end
  local n
  repeat p, n = p:gsub("/[^/]+/%.%./", "/", 1) until n == 0 or p:find("/../", 1, true) == nil
  p = p:gsub("/%./", "/")
  local cwd = os.getenv "PWD"
  if cwd and cwd ~= "" and p:sub(1, #cwd + 1) == cwd .. "/" then p = p:sub(#cwd + 2) end
  return p
end
advise.display_path = display_path

--- advise.text(result [, width]) -> the report as text (what bin/cupola
-- advise prints), every line at most width characters (advise.width()).
function advise.text(res, width)
  width = width or advise.width()
  local out = {}
  local function put(s) out[#out + 1] = s end
  local function para(lead, s) put(wrap(lead, s, width)) end
  local results = res.per_device or { res }
  for di, d in ipairs(results) do
    if di > 1 then put("") end
    local mod = advise.module(d.framework)
    para("", ("cupola advise: %s%s"):format(display_path(d.trace), #results > 1 and (" (device %d)"):format(d.device) or ""))
    para("  ", ("%s: %d events (%d allocations), %d stream%s%s"):format(
      d.title, d.events, d.allocations, d.streams,
      d.streams == 1 and "" or "s", d.devices and d.devices > 1 and (", %d devices"):format(d.devices) or ""))
    if mod and mod.summary then
      for _, l in ipairs(mod.summary(d)) do put(wrap("  ", l, width, "    ")) end
    end
    if d.limit then put(wrap("  ", "limit: " .. (d.limit_read or bytes(d.limit)), width, "    ")) end
    put("")
    verdict(d, put, para, width)
    put("")
    local lines, cols = table_lines(d, width, mod)
    for _, l in ipairs(lines) do put(l) end
    put("")
    put("  columns:")
    for _, n in ipairs(column_notes(d, cols, mod)) do para("    - ", n) end
    if #d.warnings > 0 then
      put("")
      put("  warnings:")
      for _, w in ipairs(d.warnings) do para("    - ", w) end
    end
    if #d.notes > 0 then
      put("")
      put("  how to read it:")
      for _, n in ipairs(d.notes) do para("    - ", n) end
    end
  end
  return table.concat(out, "\n") .. "\n"
end

-- ---- JSON --------------------------------------------------------------------

local json_order = { "rows", "recommended", "paste", "setting", "kind", "via", "description",
  "peak_reserved", "overhead", "unused_at_peak", "live_at_peak", "peak_allocated", "device_allocs", "device_frees",
  "retries", "change", "change_pct", "fits", "min_memory", "fails_at", "complete", "warning" }

local function plain_row(r)
  local o = {}
  for _, k in ipairs { "setting", "kind", "via", "description", "family", "recorded", "recommended",
    "peak_reserved", "peak_allocated", "live_at_peak", "unused_at_peak", "overhead", "device_allocs", "device_frees",
    "retries", "change", "change_pct", "complete", "warning", "prediction", "divergence", "fits",
    "fails_at", "min_memory", "search_steps", "error", "pool", "seconds", "paste" } do
    o[k] = r[k]
  end
  return o
end

local function plain_result(res)
  local o = {}
  for _, k in ipairs { "trace", "format", "events", "allocations", "streams", "devices", "device", "limit",
    "limit_read", "recorded_limit",
    "framework", "title", "recorded_setting", "recorded_from", "baseline", "baseline_from",
    "paste", "conf", "warnings", "notes" } do
    o[k] = res[k]
  end
  -- the framework's own fields
  local mod = advise.module(res.framework)
  for _, k in ipairs(mod and mod.json_fields or {}) do o[k] = res[k] end
  o.rows = {}
  for i, r in ipairs(res.rows) do o.rows[i] = plain_row(r) end
  o.recommended = res.recommended and plain_row(res.recommended) or nil
  return o
end

--- advise.json(result) -> JSON text: {"rows": [...], "recommended": {...}, ...}
-- (with "per_device" for a snapshot of several devices).
function advise.json(res)
  local o = plain_result(res)
  if res.per_device then
    o.per_device = {}
    for i, d in ipairs(res.per_device) do o.per_device[i] = plain_result(d) end
  end
  local ok, dkjson = pcall(require, "dkjson")
  if not ok then return report.json(o) end
  -- the rows first, each row's setting first: the order people read in
  return dkjson.encode(o, { indent = true, keyorder = json_order }) .. "\n"
end

-- ---- HTML ----------------------------------------------------------------------

--- advise.html(result, trace_or_path, path) -> path: one page with the table and
-- the timelines of the recorded and the recommended settings (cupola.timeline).
function advise.html(res, src, path)
  local timeline = require "cupola.timeline"
  local t = is_trace(src) and src or at_caller(core.trace.load, res.trace or src,
    (res.devices or 1) > 1 and { device = res.device } or nil)
  local own = t ~= src
  local ok, a, b = pcall(function()
    local panels, names = {}, {}
    local function replay(r, name)
      local c = r.pool
      -- a cupola pool as the library serves it (src/core/pool/spec.c)
      if type(c) == "string" then c = core.trace.serving(util.pool_spec(c)) else c = util.pool_config(c) end
      c.upstream, c.max = "virtual", res.limit
      -- cupola's pools on the recording's clock, from their creation (as advise_run)
      local framework = r.kind == "torch" or r.kind == "bfc" or r.kind == "cupy"
      if not framework then c.clock = "manual" end
      local p <close> = core.pool(c)
      local x = t:replay(p, { record = true, progress = false, clock = framework and "pool" or "trace",
        idle_streams = true, -- as advise_run replays the rows
        addresses = r.job and r.job.recorded and r.replay and r.replay.recorded and "recorded" or nil })
      panels[#panels + 1] = x
      names[#names + 1] = name
    end
    local rec_row
    for _, r in ipairs(res.rows) do if r.recorded then rec_row = r end end
    if rec_row then replay(rec_row, "recorded: " .. rec_row.description) end
    if res.recommended and res.recommended ~= rec_row then
      replay(res.recommended, "recommended: " .. res.recommended.description)
    end
    if #panels == 0 then replay(res.rows[1], res.rows[1].description) end
    local head, rows = advise.columns(res)
    local notes = {}
    if res.paste then notes[#notes + 1] = "Recommended: " .. res.paste end
    for _, w in ipairs(res.warnings) do notes[#notes + 1] = "Warning: " .. w end
    for _, n in ipairs(res.notes) do notes[#notes + 1] = n end
    return timeline.write(panels, path, {
      title = "cupola advise: " .. (res.trace:match "[^/\\]*$"), names = names, trace = t,
      table = { headers = head, rows = rows }, notes = notes })
  end)
  if own then t:close() end
  if not ok then error(a, 0) end
  return a, b
end

-- ---- the command line ----------------------------------------------------------

-- The command line's help: the engine's options; what each framework
-- module reads, and its words for --conf, --recorded and --pool (its
-- usage table: reads, conf, recorded, pool, example).
local usage_head = [[
usage: cupola advise SNAPSHOT [--limit SIZE] [--conf CONF]... [--recorded CONF]
                     [--pool SPEC]... [--no-pools] [--search] [--device N]
                     [--threads N] [--json] [--html PAGE]

Replays a recording of a program's allocations offline (no GPU) through
cupola's model of its framework's allocator under a grid of settings, and
cupola's own pools, and says which setting to use and how much memory it
needs.  It reads:
]]

local usage_options = [[


  --limit SIZE      the memory the run may use: each setting's fit, retries,
                    where it runs out, and the least memory it needs (a search
                    on the limit).  24GiB, 24gib or 24G: 24 x 2^30 bytes;
                    24GB: 24 x 10^9 bytes; also KiB/K/KB, MiB/M/MB, TiB/T/TB,
                    or a number of bytes (default: none, or the limit a run
                    that was refused memory had, read from its recording)
  --conf CONF       a setting of yours to add to the grid (repeatable)%s
  --recorded CONF   the setting the recording was made under, where it does
                    not say%s
  --pool SPEC       a cupola pool to add (repeatable; the default rows are
                    tlsf, vmm, caching)%s
  --no-pools        no rows for cupola's pools
  --search          the least-memory search without a limit
  --device N        only device N of a recording of several (default: each of
                    a snapshot's; a CuPy log's, by device_id, one at a time)
  --device-memory SIZE  the device's memory, for JAX's XLA_CLIENT_MEM_FRACTION
                    (default: what the profile says of it, where it does)
  --threads N       replay threads (default: one per core)
  --json            the result as JSON on stdout instead of the table
  --html PAGE       also write PAGE: the table and the timelines of the
                    recorded and the recommended settings
  -h, --help        this text

Lines fit $COLUMNS (default 100).  Then run your program with the line it
prints, e.g.
]]

--- advise.usage_text() -> the command line's help.
function advise.usage_text()
  local reads, conf, recorded, pool, example = {}, {}, {}, {}, {}
  for _, name in ipairs(advise.frameworks) do
    local m = advise.module(name)
    local u = m and m.usage
    if u then
      for _, r in ipairs(u.reads or {}) do reads[#reads + 1] = wrap("  - ", r, 78) end
      if u.conf then conf[#conf + 1] = u.conf end
      if u.recorded then recorded[#recorded + 1] = u.recorded end
      if u.pool then pool[#pool + 1] = u.pool end
      if u.example then example[#example + 1] = "  " .. u.example end
    end
  end
  local function more(list)
    if #list == 0 then return "" end
    return "\n" .. wrap("                    ", "(" .. table.concat(list, "; ") .. ")", 78)
  end
  return usage_head .. table.concat(reads, "\n") ..
    usage_options:format(more(conf), more(recorded), more(pool)) .. table.concat(example, "\n") .. "\n"
end

local function fail(msg)
  error({ advise_usage = msg }, 0)
end

--- advise.parse_args(argv) -> source, opts, output (the command line read;
-- raises {advise_usage = message} for a bad one).
function advise.parse_args(argv)
  local src, opts, out = nil, { conf = {} }, {}
  local pools
  local i = 1
  local function value(name)
    local v = argv[i + 1]
    if v == nil then fail(name .. " needs a value") end
    i = i + 1
    return v
  end
  while i <= #argv do
    local a = argv[i]
    local k, inline = a:match "^(%-%-[%w%-]+)=(.*)$"
    if k then
      a = k
      table.insert(argv, i + 1, inline)
    end
    if a == "-h" or a == "--help" then
      out.help = true
    elseif a == "--limit" then
      opts.limit = value(a)
      if opts.limit:match "^%d+$" then opts.limit = math.tointeger(tonumber(opts.limit)) or opts.limit end
    elseif a == "--conf" then
      opts.conf[#opts.conf + 1] = value(a)
    elseif a == "--recorded" then
      opts.recorded = value(a)
    elseif a == "--pool" then
      pools = pools or {}
      pools[#pools + 1] = value(a)
    elseif a == "--no-pools" then
      opts.pools = false
    elseif a == "--search" then
      opts.search = true
    elseif a == "--device-memory" then
      opts.device_memory = value(a)
      if opts.device_memory:match "^%d+$" then
        opts.device_memory = math.tointeger(tonumber(opts.device_memory)) or opts.device_memory
      end
    elseif a == "--device" or a == "--threads" then
      local v = value(a)
      local n = v:match "^%d+$" and math.tointeger(tonumber(v))
      if not n then fail(a .. " needs a whole number, not " .. shown(v)) end
      opts[a:sub(3)] = n
    elseif a == "--json" then
      out.json = true
    elseif a == "--html" then
      out.html = value(a)
    elseif a:sub(1, 1) == "-" and a ~= "-" then
      fail("unknown option " .. shown(a))
    elseif src then
      fail("one snapshot at a time (got " .. shown(src) .. " and " .. shown(a) .. ")")
    else
      src = a
    end
    i = i + 1
  end
  if pools then
    if opts.pools == false then fail("--pool and --no-pools together") end
    opts.pools = pools
  end
  if not src and not out.help then fail("which snapshot? (cupola advise SNAPSHOT)") end
  return src, opts, out
end

-- A message without the positions Lua puts before errors ("file.lua:12: ",
-- "(command line):1: ": on the command line there is no line of the user's
-- to point at), however many there are.
local function clean(e)
  e = tostring(e)
  while true do
    local n1, n2
    e, n1 = e:gsub("^[^\n]-%.lua:%d+: ", "", 1)
    e, n2 = e:gsub("^%(command line%):%d+: ", "", 1)
    if n1 + n2 == 0 then break end
  end
  return (e:gsub("^bad argument #1 to 'advise' ", "the snapshot: "))
end

--- advise.main(argv) -> exit status: bin/cupola advise.  Errors are one line
-- on stderr and status 2 (1 for a bad command line), never a traceback.
function advise.main(argv)
  local args = {}
  for i = 1, #(argv or {}) do args[i] = argv[i] end
  local width = advise.width()
  -- one message, in the command line's words, in lines that fit
  local function complain(msg)
    -- the options by their flags (device_memory: --device-memory, pools: --pool),
    -- the value as it was typed ("not '0'", not "not number 0")
    local flags = { pools = "pool" }
    msg = msg:gsub("^cupola%.advise: ", ""):gsub("option '([%w_]+)'", function(k)
      return "--" .. (flags[k] or k):gsub("_", "-")
    end):gsub(", not number (%S+)$", ", not '%1'"):gsub(", not string '", ", not '")
    io.stderr:write(wrap("cupola advise: ", msg, width, "  "), "\n")
  end
  local ok, src, opts, out = pcall(advise.parse_args, args)
  if not ok then
    local e = src
    complain(type(e) == "table" and e.advise_usage or clean(e))
    io.stderr:write("(cupola advise --help for the options)\n")
    return 1
  end
  if out.help then
    io.stdout:write(advise.usage_text())
    return 0
  end
  opts.progress = not out.json or nil
  local okr, res = pcall(advise.run, src, opts)
  if not okr then
    complain(clean(res))
    return 2
  end
  if out.html then
    local okh, err = pcall(advise.html, res, src, out.html)
    if not okh then
      -- "--html x.html: cannot write: No such file or directory", the path once
      local msg = clean(err):gsub("^cupola%.[%w.]+: ", "")
      local head = "cannot write " .. out.html .. ": "
      if msg:sub(1, #head) == head then msg = "cannot write: " .. msg:sub(#head + 1) end
      complain("--html " .. out.html .. ": " .. msg)
      return 2
    end
  end
  if out.json then
    io.stdout:write(advise.json(res))
  else
    io.stdout:write(advise.text(res, width))
    if out.html then io.stdout:write(wrap("\n  page: ", out.html, width), "\n") end
  end
  return 0
end

return advise
