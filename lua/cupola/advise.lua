--- cupola.advise: a PyTorch memory snapshot in, the allocator setting to use
-- out.  Replays the snapshot through cupola's model of PyTorch's caching
-- allocator (pool kind "torch") under a grid of PYTORCH_CUDA_ALLOC_CONF
-- settings, and through cupola's own pools as PyTorch's pluggable
-- allocator would serve them, all in C on threads of their own
-- (cupola.core.trace.advise_run), and returns one row per setting and the
-- one to use.
--
--   cupola.advise(trace_or_path, {limit =, conf =, recorded =, pools =,
--                 search =, threads =, progress =, device =}) -> result
--   bin/cupola advise SNAPSHOT [--limit 24GiB] [--conf CONF]... [--recorded CONF]
--                     [--json] [--html PAGE]                (advise.main)
--
-- The grid (advise.grid says how each family is chosen): the recorded
-- setting, PyTorch's defaults, expandable_segments:True, max_split_size_mb
-- at the snapshot's own large request sizes, roundup_power2_divisions 1 to
-- 16, garbage_collection_threshold under a limit, the combinations of the
-- best of each family that did better than the defaults, every conf given,
-- and cupola's pools (tlsf, vmm, caching).
local core = require "cupola.core"
local util = require "cupola.util"
local report = require "cupola.report"
local raise, shown, typed, at_caller = util.raise, util.shown, util.typed, util.at_caller

local advise = {}

local MiB = 1024 * 1024
local SMALL = MiB                  -- PyTorch's small pool: requests up to 1 MiB
local SPLIT_MIN = 20 * MiB         -- max_split_size_mb's least value (20)
local TIE = 0.005                  -- within 0.5 %: a simpler setting is preferred

advise.default_pools = { "tlsf", "vmm", "caching" }
advise.roundup = { 1, 2, 4, 8, 16 }
advise.gc = { 0.6, 0.8 }

local bytes = report.bytes

-- ---- arguments --------------------------------------------------------

local function is_trace(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__name == "cupola.Trace"
end

-- A conf string checked as cupola.pool checks it (kind torch), raising
-- with what names it; returns its canonical form (the settings that differ
-- from PyTorch's defaults, in cupola's order).
local function canonical(conf, what)
  local ok, p = pcall(core.pool, { kind = "torch", upstream = "virtual", conf = conf })
  if not ok then
    local why = tostring(p):gsub("^.-cupola%.pool: option 'conf': ", "")
    raise(("cupola.advise: %s %s: %s"):format(what, shown(conf), why))
  end
  local c = p:settings().conf
  p:close()
  return c
end

local option_names = { "limit", "conf", "recorded", "pools", "search", "threads", "progress", "device" }

local function check_options(opts)
  if opts == nil then return {} end
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
    local ok, n = pcall(core.bytes, opts.limit)
    if not ok or n <= 0 then
      raise("cupola.advise: option 'limit' must be a size above 0 (bytes, or a string such as \"24GiB\"), not "
        .. typed(opts.limit))
    end
    o.limit = n
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
    canonical(c, "option 'conf': item " .. i)
    o.conf[i] = c
  end
  if opts.recorded ~= nil then
    if type(opts.recorded) ~= "string" then
      raise("cupola.advise: option 'recorded' must be a conf string, not " .. typed(opts.recorded))
    end
    canonical(opts.recorded, "option 'recorded'")
    o.recorded = opts.recorded
  end
  local pools = opts.pools
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
  o.search = opts.search
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
  return o
end

-- ---- the grid ---------------------------------------------------------

local function nkeys(conf)
  local n = 0
  for _ in conf:gmatch "[^,%[%]]+:" do n = n + 1 end
  return n
end

-- max_split_size_mb values from the snapshot's own requests: blocks of the
-- value's size and more are never split, so the value decides which
-- requests get blocks of their own.  Taken at the 50th, 75th, 90th and
-- 99th percentile of the requests of 20 MiB or more (the least value
-- PyTorch takes), by count, rounded up to MiB: the largest half, quarter,
-- tenth and hundredth of those requests become such blocks.
local function split_values(facts)
  local s = facts.sizes
  local out, seen = {}, {}
  if s.count == 0 then return out end
  for _, q in ipairs { "q50", "q75", "q90", "q99" } do
    local mb = math.max(20, (s[q] + MiB - 1) // MiB)
    if not seen[mb] and mb * MiB <= s.max then
      seen[mb] = true
      out[#out + 1] = { mb = mb, q = q }
    end
  end
  return out
end

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

-- ---- running the grid ---------------------------------------------------

local function run_rows(t, rows, o, progress_state)
  local jobs = {}
  for i, r in ipairs(rows) do
    if r.kind == "torch" then
      jobs[i] = { kind = "torch", conf = r.setting, limit = o.limit, recorded = o.recorded_addresses,
        search = o.search }
    else
      jobs[i] = { spec = r.pool, limit = o.limit, search = o.search }
    end
  end
  local t0 = core.clock()
  local progress
  if o.progress then
    progress = function(done, total)
      report.progress("cupola advise", progress_state.done + done, progress_state.total, t0)
    end
  end
  local res = at_caller(core.trace.advise_run, t, jobs, { threads = o.threads, progress = progress })
  progress_state.done = progress_state.done + #rows
  for i, r in ipairs(rows) do r.replay = res[i] end
end

-- The figures of a replayed row, from its replay result.
local function fill(r, x, o, baseline, t)
  if x.error then
    r.error = x.error
    r.complete = false
    return
  end
  r.peak_reserved = x.peak_reserved
  r.peak_allocated = x.peak_allocated
  r.live_at_peak = x.live_at_peak
  r.unused_at_peak = x.peak_reserved - x.live_at_peak
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
  if r.kind == "torch" then
    if x.recorded then
      r.divergence = x.divergence and x.divergence.event or false
      if r.recorded and not x.divergence then
        r.prediction = "exact"
      elseif x.divergence then
        r.prediction = ("recorded addresses to operation %d, then the driver model"):format(x.divergence.event)
      else
        r.prediction = "recorded addresses"
      end
    else
      r.prediction = "driver model"
    end
  else
    r.prediction = "cupola's pool, replayed"
  end
  if o.limit then
    r.fits = x.complete
    if not x.complete then
      local s = x.stopped or {}
      local f = { event = s.event, size = s.size, allocation = s.allocation, message = x.oom_message }
      if s.allocation then
        local ev, label = core.trace.alloc_event(t, s.allocation)
        f.label = label
        f.trace_event = ev
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

local function describe(r)
  if r.kind ~= "torch" then return "cupola " .. r.pool .. " (pluggable allocator)" end
  if r.setting == "" then return "PyTorch's defaults" end
  return r.setting
end

local function paste_line(r)
  if r.kind ~= "torch" then
    return "CUPOLA_TORCH_POOL=" .. r.pool .. " python train.py   # after make torch-allocator, with "
      .. "torch.cuda.memory.CUDAPluggableAllocator (docs/API.md)"
  end
  local v = r.setting
  -- PyTorch's defaults: the variable unset (an empty one is read as no
  -- keys, but a run that set it elsewhere must drop it)
  if v == "" then return "env -u PYTORCH_CUDA_ALLOC_CONF python train.py   # PyTorch's defaults" end
  if v:find "[^%w_:,.%-]" then v = "'" .. v:gsub("'", "'\\''") .. "'" end
  return "PYTORCH_CUDA_ALLOC_CONF=" .. v .. " python train.py"
end

local function advise_trace(t, o, state)
  local info = t:info()
  local result = {
    trace = info.path, format = info.format, events = info.events, allocations = info.allocs,
    streams = info.streams, devices = info.devices, device = o.device or 0, limit = o.limit,
    warnings = {}, notes = {},
  }
  local W, N = result.warnings, result.notes
  local facts = core.trace.advise_facts(t, SPLIT_MIN)
  local snapshot = info.format == "torch_snapshot"
  -- the setting the snapshot was recorded under
  local recorded, recorded_from = nil, nil
  if info.torch_conf then
    recorded, recorded_from = info.torch_conf, "the snapshot's allocator_settings"
    if o.recorded and canonical(o.recorded, "option 'recorded'") ~= canonical(recorded, "the snapshot's setting") then
      W[#W + 1] = ("--recorded %s is not what the snapshot says it was recorded under (%s): the snapshot's is used")
        :format(shown(o.recorded), shown(recorded))
    end
  elseif o.recorded then
    recorded, recorded_from = o.recorded, "--recorded"
  end
  result.recorded_setting = recorded
  result.recorded_from = recorded_from
  if not recorded then
    W[#W + 1] = "the setting the snapshot was recorded under is unknown (it has no allocator_settings: " ..
      "PyTorch before 2.4, or not a snapshot); give it with --recorded CONF (option 'recorded') for a " ..
      "row replaying it exactly"
  end
  -- recorded addresses where the snapshot has PyTorch's device calls
  o.recorded_addresses = facts.torch_calls > 0
  result.torch_peak_reserved = info.torch_peak_reserved
  result.peak_live = info.peak_live

  -- phase 1: the single settings
  local rows, seen = {}, {}
  local function add(setting, family, extra)
    local c = canonical(setting, "setting")
    if seen[c] then
      local r = seen[c]
      if extra and extra.recorded then r.recorded = true end
      if extra and extra.yours then r.yours = true end
      return r
    end
    local r = { setting = setting, kind = "torch", family = family, keys = nkeys(c), canonical = c }
    for k, v in pairs(extra or {}) do r[k] = v end
    seen[c] = r
    rows[#rows + 1] = r
    return r
  end
  if recorded then add(recorded, "recorded", { recorded = true }) end
  local default = add("", "default")
  add("expandable_segments:True", "expandable")
  local splits = split_values(facts)
  for _, v in ipairs(splits) do add("max_split_size_mb:" .. v.mb, "split", { quantile = v.q }) end
  for _, d in ipairs(advise.roundup) do
    -- 1 division rounds nothing (PyTorch rounds only with 2 or more): the
    -- defaults' replay serves for it
    add("roundup_power2_divisions:" .. d, "roundup", d == 1 and { same_as = default } or nil)
  end
  if o.limit then
    for _, g in ipairs(advise.gc) do add("garbage_collection_threshold:" .. g, "gc") end
  end
  for _, c in ipairs(o.conf) do add(c, "yours", { yours = true }) end
  local pools = {}
  for _, spec in ipairs(o.pools) do
    pools[#pools + 1] = { setting = "CUPOLA_TORCH_POOL=" .. spec, kind = spec:match "^%s*([^,%s]+)" or spec,
      pool = spec, family = "pool" }
  end
  local first = {}
  for _, r in ipairs(rows) do if not r.same_as then first[#first + 1] = r end end
  for _, r in ipairs(pools) do first[#first + 1] = r end
  state.total = state.total + #first
  run_rows(t, first, o, state)
  -- the baseline: PyTorch's own peak where the snapshot has it
  local baseline, baseline_from = info.torch_peak_reserved, "PyTorch's own peak reserved in the recording"
  if not baseline or baseline == 0 then
    local b = seen[canonical(recorded or "", "setting")] or default
    baseline = not b.replay.error and b.replay.peak_reserved or nil
    baseline_from = recorded and "the recorded setting's replay" or "PyTorch's defaults, replayed"
  end
  result.baseline, result.baseline_from = baseline, baseline_from
  for _, r in ipairs(first) do fill(r, r.replay, o, baseline, t) end
  for _, r in ipairs(rows) do
    if r.same_as then
      r.replay = r.same_as.replay
      fill(r, r.replay, o, baseline, t)
    end
  end

  -- phase 2: the best of each family that beat the defaults, combined
  local limited = o.limit ~= nil
  local best = {}
  local dm = metric(default, limited)
  for _, r in ipairs(rows) do
    local f = r.family
    if (f == "expandable" or f == "split" or f == "roundup" or f == "gc") and not r.error then
      local m = metric(r, limited)
      if m and dm and m < dm * (1 - 0.001) and (not best[f] or better(r, best[f], limited)) then best[f] = r end
    end
  end
  local fams = {}
  for _, f in ipairs { "expandable", "split", "roundup", "gc" } do
    if best[f] then fams[#fams + 1] = best[f] end
  end
  local combos = {}
  for mask = 1, (1 << #fams) - 1 do
    local parts, n = {}, 0
    for i, r in ipairs(fams) do
      if mask & (1 << (i - 1)) ~= 0 then parts[#parts + 1] = r.setting; n = n + 1 end
    end
    if n >= 2 then
      local before = #rows
      local r = add(table.concat(parts, ","), "combination")
      if #rows > before then combos[#combos + 1] = r end
    end
  end
  if #combos > 0 then
    state.total = state.total + #combos
    run_rows(t, combos, o, state)
    for _, r in ipairs(combos) do fill(r, r.replay, o, baseline, t) end
  end

  -- the recommendation: the best torch row; a simpler one within TIE of it wins
  local order = {}
  for _, r in ipairs(rows) do order[#order + 1] = r end
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
  end
  -- the table: the recorded row first, then the torch rows best first, then the pools
  local out = {}
  for _, r in ipairs(order) do if r.recorded then out[#out + 1] = r end end
  for _, r in ipairs(order) do if not r.recorded then out[#out + 1] = r end end
  table.sort(pools, function(a, b) return better(a, b, limited) end)
  for _, r in ipairs(pools) do out[#out + 1] = r end
  for _, r in ipairs(out) do
    r.description = describe(r)
    r.via = r.kind == "torch" and "PYTORCH_CUDA_ALLOC_CONF" or "CUPOLA_TORCH_POOL"
    r.recommended = r == rec or nil
  end
  result.rows = out
  result.recommended = rec
  if rec then
    result.paste = paste_line(rec)
    result.conf = rec.setting
  end

  -- what the figures mean, and what to watch
  local rrow = recorded and seen[canonical(recorded, "setting")]
  if rrow and not rrow.error and o.recorded_addresses then
    if rrow.divergence then
      W[#W + 1] = ("the model's device calls differ from PyTorch's in the recorded run from operation %d on: "
        .. "even the recorded setting's figures are a prediction%s"):format(rrow.divergence,
        (info.torch_peak_reserved and rrow.peak_reserved ~= info.torch_peak_reserved and not o.limit)
          and " (was the run under a memory limit, torch.cuda.set_per_process_memory_fraction? give it with --limit)" or "")
    else
      N[#N + 1] = ("the recorded setting replays exactly: every cudaMalloc / map PyTorch made, at the same addresses "
        .. "(peak reserved %s, PyTorch's own %s)"):format(bytes(rrow.peak_reserved),
        info.torch_peak_reserved and bytes(info.torch_peak_reserved) or "not in the snapshot")
    end
  end
  if o.recorded_addresses then
    N[#N + 1] = "figures: cupola's model of PyTorch 2.11's caching allocator, replayed offline; each setting with the " ..
      "addresses CUDA gave PyTorch in the recording while its device calls match PyTorch's, then the driver's " ..
      "placement (the most accurate prediction the model offers: exact for the recorded setting on every " ..
      "recording cupola ships, and from their default runs within 0.11 % of PyTorch's own runs of the other " ..
      "settings, 1.6 % where the program freed its tensors in another order under a limit)"
  else
    N[#N + 1] = "figures: cupola's model of PyTorch 2.11's caching allocator, replayed offline with the driver's " ..
      "placement of segments (the trace has no segment entries of PyTorch's: within 3 % of PyTorch's own runs " ..
      "on cupola's recordings)"
  end
  if #splits > 0 then
    local parts = {}
    for _, v in ipairs(splits) do parts[#parts + 1] = ("%d (%s)"):format(v.mb, v.q) end
    N[#N + 1] = ("max_split_size_mb values from this snapshot's requests of 20 MiB or more (%d of them, the "
      .. "largest %s): %s: the 50th, 75th, 90th and 99th percentile of their sizes (q50 ... q99), rounded up to "
      .. "MiB, where one is below the largest; blocks of the value's size and more are never split, so the "
      .. "largest half, quarter, tenth or hundredth of those requests get blocks of their own"):format(
      facts.sizes.count, bytes(facts.sizes.max), table.concat(parts, ", "))
  else
    N[#N + 1] = "no max_split_size_mb rows: no request of 20 MiB or more (the least value PyTorch takes), so it " ..
      "would only keep 20 MiB segments from the smaller requests they serve"
  end
  if #pools > 0 then
    N[#N + 1] = "cupola rows: cupola's pools serving PyTorch through its pluggable allocator (make torch-allocator, " ..
      "CUPOLA_TORCH_POOL=SPEC); device calls are their upstream calls (vmm: pages mapped); vmm's default " ..
      "policy decides by time on the replay's clock, so its row can move a little from run to run"
  end
  if o.search then
    N[#N + 1] = "least memory: the smallest limit (to 2 MiB) under which the recorded requests all run, found by " ..
      "bisection on the limit; it holds for the requests as recorded: libraries such as cuDNN try a smaller " ..
      "workspace when an allocation fails, so a real run under pressure can ask for less (on an H100, " ..
      "resnet50 still ran 0.5 % below the minimum its recording implies), and the CUDA context and other " ..
      "libraries need device memory beside what PyTorch's allocator reserves"
  end
  local tentative, fatal = {}, {}
  for _, e in ipairs(facts.ooms) do
    if e.survived then tentative[#tentative + 1] = e else fatal[#fatal + 1] = e end
  end
  result.tentative = tentative
  if #tentative > 0 then
    local parts = {}
    for i, e in ipairs(tentative) do
      if i > 5 then parts[#parts + 1] = "..." break end
      parts[#parts + 1] = ("%s before event %d"):format(bytes(e.size), e.event)
    end
    W[#W + 1] = ("the snapshot shows %d request%s PyTorch refused that the program survived (%s): tentative "
      .. "allocations, such as a library trying a large workspace first; each setting attempts them, and one "
      .. "it refuses does not count against it"):format(#tentative, #tentative > 1 and "s" or "",
      table.concat(parts, ", "))
  end
  if #fatal > 0 then
    W[#W + 1] = ("the recording ends in an out-of-memory error: PyTorch refused %s before event %d and the program "
      .. "made no allocation after it; the figures cover the run up to there, and a setting fits only if it "
      .. "serves that request too"):format(bytes(fatal[1].size), fatal[1].event)
  end
  if info.unmatched and info.unmatched > 0 then
    W[#W + 1] = ("%d frees of blocks allocated before the snapshot's trace began were skipped (PyTorch keeps the "
      .. "last max_entries entries: record with a larger max_entries): the figures cover only what the trace "
      .. "shows"):format(info.unmatched)
  end
  for _, r in ipairs(out) do
    if r.error then
      W[#W + 1] = ("%s: the replay failed: %s"):format(r.description, r.error)
    elseif not r.complete and not o.limit then
      W[#W + 1] = ("%s: %s"):format(r.description, r.warning or "incomplete replay")
    end
  end
  if o.limit and rec and not rec.fits then
    W[#W + 1] = ("no setting runs the recorded requests within %s; the one that needs the least memory is shown")
      :format(bytes(o.limit))
  end
  return result
end

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
    local t = at_caller(require("cupola.trace").load, src)
    local n = t.devices or 1
    src = t.path -- a name of a trace cupola ships, found
    if o.device then
      if o.device >= n then
        t:close()
        raise(("cupola.advise: option 'device': the snapshot has %d device%s (0..%d), not %d"):format(n,
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
      local oo = {}
      for k, v in pairs(o) do oo[k] = v end
      oo.device = x.device
      results[i] = advise_trace(x.t, oo, state)
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

-- ---- text ------------------------------------------------------------------

local function pct(x)
  if not x then return "" end
  return ("%+.1f %%"):format(x)
end

-- Rows of strings, right-aligned where right[c] is set.
local function align(rows, right)
  local w = {}
  for _, row in ipairs(rows) do
    for c, s in ipairs(row) do w[c] = math.max(w[c] or 0, utf8.len(s) or #s) end
  end
  local out = {}
  for _, row in ipairs(rows) do
    local parts = {}
    for c, s in ipairs(row) do
      local pad = string.rep(" ", w[c] - (utf8.len(s) or #s))
      parts[c] = right[c] and pad .. s or s .. pad
    end
    out[#out + 1] = (table.concat(parts, "  "):gsub("%s+$", ""))
  end
  return out
end

--- advise.columns(result) -> headers, rows of strings, right-aligned columns:
-- the table as text and HTML show it.
function advise.columns(res)
  local limited = res.limit ~= nil
  local searched = false
  for _, r in ipairs(res.rows) do if r.min_memory or r.search_steps then searched = true end end
  local head = { "setting", "peak reserved", "unused at peak", "device calls", "vs recorded" }
  local right = { false, true, true, true, true }
  if limited then
    head[#head + 1] = "fits"; right[#right + 1] = false
    head[#head + 1] = "retries"; right[#right + 1] = true
  end
  if searched then head[#head + 1] = "least memory"; right[#right + 1] = true end
  local rows = {}
  for _, r in ipairs(res.rows) do
    local name = r.description
    if r.recorded then name = name .. " (recorded)" end
    if r.recommended then name = "-> " .. name else name = "   " .. name end
    local row
    if r.error then
      row = { name, "error", "", "", "" }
      if limited then row[#row + 1] = ""; row[#row + 1] = "" end
      if searched then row[#row + 1] = "" end
    else
      row = { name, bytes(r.peak_reserved) .. (r.complete and "" or "*"), bytes(r.unused_at_peak),
        tostring(r.device_allocs), pct(r.change_pct) }
      if limited then
        row[#row + 1] = r.fits and "yes" or "no"
        row[#row + 1] = tostring(r.retries)
      end
      if searched then row[#row + 1] = r.min_memory and bytes(r.min_memory) or "-" end
    end
    rows[#rows + 1] = row
  end
  return head, rows, right
end

-- s in lines of at most width characters, the first after lead, the others
-- after as many spaces.
local function wrap(lead, s, width)
  local lines, line = {}, lead
  local indent = string.rep(" ", #lead)
  for word in s:gmatch "%S+" do
    if #line > #indent and #line + 1 + #word > width then
      lines[#lines + 1] = line
      line = indent .. word
    elseif #line == #lead and line == lead then
      line = line .. word
    else
      line = line .. (line:sub(-1) == " " and "" or " ") .. word
    end
  end
  lines[#lines + 1] = line
  return table.concat(lines, "\n")
end

--- advise.text(result) -> the report as text (what bin/cupola advise prints).
function advise.text(res)
  local out = {}
  local function put(s) out[#out + 1] = s end
  local function para(lead, s) put(wrap(lead, s, 100)) end
  local results = res.per_device or { res }
  for di, d in ipairs(results) do
    if di > 1 then put("") end
    put(("cupola advise: %s%s"):format(d.trace, #results > 1 and (" (device %d)"):format(d.device) or ""))
    put(("  %s: %d events (%d allocations), %d stream%s%s"):format(
      d.format == "torch_snapshot" and "PyTorch snapshot" or "RMM log", d.events, d.allocations, d.streams,
      d.streams == 1 and "" or "s", d.devices and d.devices > 1 and (", %d devices"):format(d.devices) or ""))
    if d.recorded_setting then
      put(("  recorded under: %s (from %s)"):format(d.recorded_setting == "" and "PyTorch's defaults" or d.recorded_setting,
        d.recorded_from))
    else
      put("  recorded under: unknown")
    end
    if d.torch_peak_reserved then
      put(("  PyTorch's own peak reserved: %s; most in use at once: %s (as requested)"):format(
        bytes(d.torch_peak_reserved), bytes(d.peak_live)))
    else
      put(("  most in use at once: %s (as requested)"):format(bytes(d.peak_live)))
    end
    if d.limit then put(("  limit: %s"):format(bytes(d.limit))) end
    put("")
    local head, rows, right = advise.columns(d)
    local all = { head }
    local dash = {}
    for c, h in ipairs(head) do dash[c] = string.rep("-", #h) end
    all[2] = dash
    for _, r in ipairs(rows) do all[#all + 1] = r end
    for _, l in ipairs(align(all, right)) do put("  " .. l) end
    put(("  (vs recorded: against %s, %s; * incomplete replay)"):format(d.baseline_from or "-",
      d.baseline and bytes(d.baseline) or "-"))
    local rec = d.recommended
    put("")
    if rec and not rec.error then
      put("  recommended: " .. rec.description)
      put(("    peak reserved %s%s, %d device calls%s"):format(bytes(rec.peak_reserved),
        rec.change_pct and (" (%s against the recorded run)"):format(pct(rec.change_pct)) or "",
        rec.device_allocs, rec.min_memory and (", runs in %s"):format(bytes(rec.min_memory)) or ""))
      put("    " .. d.paste)
    end
    local fails = {}
    for _, r in ipairs(d.rows) do if r.fails_at then fails[#fails + 1] = r end end
    if #fails > 0 then
      put("")
      put(("  where the settings that do not fit run out under %s:"):format(bytes(d.limit)))
      for _, r in ipairs(fails) do
        local f = r.fails_at
        para("    ", ("%s: %s%s%s: %s"):format(r.description,
          f.allocation and ("allocation %d (%s)"):format(f.allocation, bytes(f.size or 0))
            or ("the refused request of %s"):format(bytes(f.size or 0)),
          f.trace_event and (" at event %d"):format(f.trace_event) or "",
          f.label and (", " .. f.label) or "", f.message or "out of memory"))
      end
    end
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
  "peak_reserved", "unused_at_peak", "live_at_peak", "peak_allocated", "device_allocs", "device_frees",
  "retries", "change", "change_pct", "fits", "min_memory", "fails_at", "complete", "warning" }

local function plain_row(r)
  local o = {}
  for _, k in ipairs { "setting", "kind", "via", "description", "family", "recorded", "recommended",
    "peak_reserved", "peak_allocated", "live_at_peak", "unused_at_peak", "device_allocs", "device_frees",
    "retries", "change", "change_pct", "complete", "warning", "prediction", "divergence", "fits",
    "fails_at", "min_memory", "search_steps", "error", "pool", "seconds" } do
    o[k] = r[k]
  end
  return o
end

local function plain_result(res)
  local o = {}
  for _, k in ipairs { "trace", "format", "events", "allocations", "streams", "devices", "device", "limit",
    "recorded_setting", "recorded_from", "torch_peak_reserved", "peak_live", "baseline", "baseline_from",
    "paste", "conf", "warnings", "notes", "tentative" } do
    o[k] = res[k]
  end
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
      local p <close> = core.pool(r.kind == "torch"
        and { kind = "torch", upstream = "virtual", conf = r.setting, max = res.limit }
        or (function()
          local c = { upstream = "virtual" }
          local first = true
          for item in r.pool:gmatch "[^,]+" do
            item = item:match "^%s*(.-)%s*$"
            if first then c.kind, first = item, false
            else
              local k, v = item:match "^([%w_]+)%s*=%s*(.-)$"
              if v == "true" or v == "false" then c[k] = v == "true"
              elseif tonumber(v) and (k == "bin_growth" or k == "min_bin" or k == "max_bin") then c[k] = tonumber(v)
              elseif k ~= "upstream" then c[k] = v end
            end
          end
          c.max = res.limit
          return core.trace.serving(c) -- as the library serves it (src/core/pool/spec.c)
        end)())
      local x = t:replay(p, { record = true, progress = false,
        addresses = r.kind == "torch" and r.replay and r.replay.recorded and "recorded" or nil })
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

advise.usage = [[
usage: cupola advise SNAPSHOT [--limit SIZE] [--conf CONF]... [--recorded CONF]
                     [--pool SPEC]... [--no-pools] [--search] [--device N]
                     [--threads N] [--json] [--html PAGE]

Replays a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot, plain or
gzip; or an RMM log) through cupola's model of PyTorch's caching allocator
under a grid of PYTORCH_CUDA_ALLOC_CONF settings and cupola's own pools, and
says which setting to use and how much memory it needs.  Offline: no GPU.

  --limit SIZE      the memory the run may use (24GiB, 81920MiB, bytes): each
                    setting's fit, retries, where it runs out, and the least
                    memory it needs (a search on the limit)
  --conf CONF       a setting of yours to add to the grid (repeatable)
  --recorded CONF   the setting the snapshot was recorded under, where the
                    snapshot does not say (PyTorch before 2.4)
  --pool SPEC       a cupola pool to add, as CUPOLA_TORCH_POOL names it
                    (repeatable; the default rows are tlsf, vmm, caching)
  --no-pools        no rows for cupola's pools
  --search          the least-memory search without a limit
  --device N        only device N of a snapshot of several (default: each)
  --threads N       replay threads (default: one per core)
  --json            the result as JSON on stdout instead of the table
  --html PAGE       also write PAGE: the table and the timelines of the
                    recorded and the recommended settings
  -h, --help        this text

Then run your program with the line it prints, e.g.
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py
]]

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

-- A message without the position Lua puts before errors ("file:12: ").
local function clean(e)
  e = tostring(e)
  e = e:gsub("^[^\n]-%.lua:%d+: ", "", 1)
  return (e:gsub("^bad argument #1 to 'advise' ", "the snapshot: "))
end

--- advise.main(argv) -> exit status: bin/cupola advise.  Errors are one line
-- on stderr and status 2 (1 for a bad command line), never a traceback.
function advise.main(argv)
  local args = {}
  for i = 1, #(argv or {}) do args[i] = argv[i] end
  local ok, src, opts, out = pcall(advise.parse_args, args)
  if not ok then
    local e = src
    io.stderr:write("cupola advise: ", type(e) == "table" and e.advise_usage or clean(e), "\n")
    io.stderr:write("(cupola advise --help for the options)\n")
    return 1
  end
  if out.help then
    io.stdout:write(advise.usage)
    return 0
  end
  opts.progress = not out.json or nil
  local okr, res = pcall(advise.run, src, opts)
  if not okr then
    io.stderr:write("cupola advise: ", clean(res), "\n")
    return 2
  end
  if out.html then
    local okh, err = pcall(advise.html, res, src, out.html)
    if not okh then
      io.stderr:write("cupola advise: --html ", out.html, ": ", clean(err), "\n")
      return 2
    end
  end
  if out.json then
    io.stdout:write(advise.json(res))
  else
    io.stdout:write(advise.text(res))
    if out.html then io.stdout:write("\n  page: ", out.html, "\n") end
  end
  return 0
end

return advise
