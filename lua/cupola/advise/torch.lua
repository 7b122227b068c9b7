--- cupola.advise.torch: what cupola.advise knows of PyTorch (the framework
-- module of PyTorch snapshots, and of RMM logs, which have no module of
-- their own: their requests get PyTorch's rows; the interface is at the top
-- of lua/cupola/advise/modules.lua).  Its rows: PyTorch's caching allocator (pool kind
-- "torch") under a grid of PYTORCH_CUDA_ALLOC_CONF settings, and cupola's
-- own pools as PyTorch's pluggable allocator would serve them
-- (CUPOLA_TORCH_POOL).
--
-- The grid: the recorded setting, PyTorch's defaults,
-- expandable_segments:True, max_split_size_mb at the snapshot's own large
-- request sizes, roundup_power2_divisions 1 to 16,
-- garbage_collection_threshold under a limit, every conf given, and (after
-- the first replays, in more()) the combinations of the best of each family
-- that did better than the defaults.
local core = require "cupola.core"
local util = require "cupola.util"
local report = require "cupola.report"
local raise, shown = util.raise, util.shown

local torch = {
  name = "torch",
  formats = { "torch_snapshot", "rmm_csv" },
  via = "PYTORCH_CUDA_ALLOC_CONF",
  -- the result's fields of this module that advise.json writes
  json_fields = { "torch_peak_reserved", "peak_live", "tentative", "device_memory" },
  -- the device's memory, of which set_per_process_memory_fraction is a fraction
  options = {
    { key = "device_memory", flag = "--device-memory", arg = "SIZE", type = "size", example = "80GiB",
      help = "the device's memory",
      use = "PyTorch: torch.cuda.set_per_process_memory_fraction, which garbage_collection_threshold needs, " ..
        "is a fraction of it" },
  },
  -- what it reads, for the refusal of a file of no known format
  reads = {
    "a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot: a pickle, plain or gzip): the file is " ..
      "no pickle",
    "an RMM log (CSV with the header Thread,Time,Action,Pointer,Size,Stream): its first line is not that header",
  },
  -- its words in bin/cupola advise --help
  usage = {
    reads = { "a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot: a pickle, plain or gzip): " ..
      "PyTorch's caching allocator under PYTORCH_CUDA_ALLOC_CONF settings, and cupola's pools inside " ..
      "PyTorch (CUPOLA_TORCH_POOL)", "an RMM log (CSV): the same rows" },
    conf = "PyTorch: a PYTORCH_CUDA_ALLOC_CONF string, e.g. max_split_size_mb:128",
    recorded = "PyTorch: snapshots of PyTorch 2.4 and later say",
    pool = "PyTorch: as CUPOLA_TORCH_POOL names it, e.g. tlsf,reuse=stream",
    example = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py",
  },
  -- the line above the rows of cupola's pools in the table
  aside_title = "cupola's pools inside PyTorch (pluggable allocator, CUPOLA_TORCH_POOL):",
  terms = {
    calls = "device calls: how many times the allocator asked CUDA for memory (cudaMalloc; with " ..
      "expandable segments and cupola vmm, pages mapped): each is slow",
    least = "least memory: the smallest limit (to 2 MiB) under which the setting serves every recorded " ..
      "request, found by bisection on the limit; it holds for the requests as recorded: libraries such as " ..
      "cuDNN try a smaller workspace when an allocation fails, so a real run under pressure can ask for less " ..
      "(on an H100, resnet50 still ran 0.5 % below the minimum its recording implies), and the CUDA context " ..
      "and other libraries need device memory beside what PyTorch's allocator reserves",
  },
}

local MiB = 1024 * 1024
local SPLIT_MIN = 20 * MiB         -- max_split_size_mb's least value (20)

torch.roundup = { 1, 2, 4, 8, 16 }
torch.gc = { 0.6, 0.8 }

local bytes = report.bytes

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
torch.canonical = canonical

--- torch.check(o): the settings given in the options (conf, recorded) are
-- PYTORCH_CUDA_ALLOC_CONF strings cupola's model reads.
function torch.check(o)
  for i, c in ipairs(o.conf) do canonical(c, "option 'conf': item " .. i) end
  if o.recorded then canonical(o.recorded, "option 'recorded'") end
end

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

function torch.title(info)
  return info.format == "torch_snapshot" and "PyTorch snapshot" or "RMM log"
end

function torch.describe(r)
  if r.kind ~= "torch" then return "cupola " .. r.pool .. " inside PyTorch" end
  if r.setting == "" then return "PyTorch's defaults" end
  return r.setting
end

-- a device call that takes memory
local function takes(call) return call == "segment_alloc" or call == "segment_map" end

--- torch.recorded_limit(t, conf [, facts]) -> {low =, high =, replays =} or
-- nil: the limit a snapshot's run had
-- (torch.cuda.set_per_process_memory_fraction, or the device's free memory),
-- where PyTorch refused requests (advise/search.lua's limit_interval).  The
-- model replays the recorded setting with the snapshot's addresses, and the
-- first device call that differs from PyTorch's says which way the limit is
-- off: below it the model takes less memory than PyTorch did, or gives back
-- (releasing its cache to retry) where PyTorch did not; above it the model
-- takes memory PyTorch was refused, or keeps what PyTorch gave back.  nil
-- where the snapshot has no device calls or no refusal, or no limit replays
-- it.
-- (facts: core.trace.advise_facts's, where the caller has them)
function torch.recorded_limit(t, conf, facts)
  local info = t:info()
  if (info.ooms or 0) == 0 then return nil end
  if info.format ~= "torch_snapshot" or (facts or core.trace.advise_facts(t, SPLIT_MIN)).torch_calls == 0 then
    return nil -- no device calls of PyTorch's to compare with
  end
  local function side(L)
    local p <close> = core.pool { kind = "torch", upstream = "virtual", conf = conf, max = L }
    local r = t:replay(p, { addresses = "recorded", progress = false, idle_streams = true })
    local d = r.divergence
    if not d then return 0, r end
    local m, pt = d.model.call, d.torch.call
    if takes(m) and takes(pt) then
      if m == pt and d.model.size ~= d.torch.size then return d.model.size < d.torch.size and -1 or 1, r end
      return nil, r
    end
    if takes(m) then return 1, r end
    if takes(pt) then return -1, r end
    if m ~= "none" and pt == "none" then return -1, r end -- the model released where PyTorch did not
    if pt ~= "none" and m == "none" then return 1, r end
    return nil, r
  end
  local v, r0 = side(nil)
  if v ~= 1 then return nil end
  return require("cupola.advise.search").limit_interval(side, 0, r0.peak_reserved)
end

--- torch.setup(ctx): the trace's facts, and the setting it was recorded under.
function torch.setup(ctx)
  local t, info, o, result = ctx.t, ctx.info, ctx.o, ctx.result
  local W = result.warnings
  ctx.facts = core.trace.advise_facts(t, SPLIT_MIN)
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
  ctx.recorded = recorded
  result.recorded_setting = recorded
  result.recorded_from = recorded_from
  if not recorded then
    W[#W + 1] = (info.format == "torch_snapshot"
      and "the setting the snapshot was recorded under is unknown (it has no allocator_settings: PyTorch before 2.4)"
      or "the setting the log was recorded under is unknown (an RMM log does not say it)") ..
      "; give it with --recorded CONF (option 'recorded') for a row replaying it exactly"
  end
  -- recorded addresses where the snapshot has PyTorch's device calls
  ctx.recorded_addresses = ctx.facts.torch_calls > 0
  -- a run PyTorch refused memory in, advised without a limit: the limit it had
  -- (a prediction at another size has no run whose limit it could read)
  if not o.limit and recorded and ctx.recorded_addresses and (info.ooms or 0) > 0 and not info.scaled then
    local lim = torch.recorded_limit(t, recorded, ctx.facts)
    if lim then ctx.set_limit(lim, "snapshot") end
  end
  result.torch_peak_reserved = info.torch_peak_reserved
  result.peak_live = info.peak_live
  result.device_memory = o.device_memory
  ctx.seen = {}
end

-- A row of the grid, or the row already there for the same setting.
local function add(ctx, list, setting, family, extra)
  local c = canonical(setting, "setting")
  local seen = ctx.seen
  if seen[c] then
    local r = seen[c]
    if extra and extra.recorded then r.recorded = true end
    if extra and extra.yours then r.yours = true end
    return r, false
  end
  local r = { setting = setting, kind = "torch", family = family, keys = nkeys(c), canonical = c,
    via = torch.via, job = { kind = "torch", conf = setting, recorded = ctx.recorded_addresses or nil },
    pool = { kind = "torch", conf = setting } }
  for k, v in pairs(extra or {}) do r[k] = v end
  seen[c] = r
  list[#list + 1] = r
  return r, true
end

--- torch.rows(ctx) -> the first rows: the single settings and the pools.
function torch.rows(ctx)
  local o = ctx.o
  local rows = {}
  if ctx.recorded then add(ctx, rows, ctx.recorded, "recorded", { recorded = true }) end
  local default = add(ctx, rows, "", "default")
  ctx.default = default
  add(ctx, rows, "expandable_segments:True", "expandable")
  ctx.splits = split_values(ctx.facts)
  for _, v in ipairs(ctx.splits) do add(ctx, rows, "max_split_size_mb:" .. v.mb, "split", { quantile = v.q }) end
  for _, d in ipairs(torch.roundup) do
    -- 1 division rounds nothing (PyTorch rounds only with 2 or more): the
    -- defaults' replay serves for it
    add(ctx, rows, "roundup_power2_divisions:" .. d, "roundup", d == 1 and { same_as = default } or nil)
  end
  if o.limit then
    for _, g in ipairs(torch.gc) do add(ctx, rows, "garbage_collection_threshold:" .. g, "gc") end
  end
  for _, c in ipairs(o.conf) do add(ctx, rows, c, "yours", { yours = true }) end
  ctx.npools = 0
  for _, spec in ipairs(o.pools) do
    local kind = spec:match "^%s*([^,%s]+)" or spec
    rows[#rows + 1] = { setting = "CUPOLA_TORCH_POOL=" .. spec, kind = kind, caveat = torch.step_cost[kind],
      pool = spec, family = "pool", aside = true, via = "CUPOLA_TORCH_POOL", job = { spec = spec } }
    ctx.npools = ctx.npools + 1
  end
  return rows
end

--- What a pool costs in step time inside PyTorch, where it was measured to
-- cost more than 2 % (bench/torch_step.py on an H100, 2026-11-28: tlsf and
-- caching, which keep what they take once warm, ran at PyTorch's speed or
-- faster on all three workloads; vmm maps and unmaps pages as shapes change).
-- A pool named here is offered only where none without a cost fits.
torch.step_cost = {
  vmm = "inside PyTorch its steps ran 5 % slower than PyTorch's own allocator on a GPT-2 step and 18 % "
    .. "on a workload of varying shapes (H100; tlsf and caching ran at PyTorch's speed)",
}

--- torch.baseline(ctx) -> bytes, from: PyTorch's own peak where the
-- snapshot has it, else the recorded setting's (or the defaults') replay.
function torch.baseline(ctx)
  local info = ctx.info
  if info.torch_peak_reserved and info.torch_peak_reserved > 0 then
    return info.torch_peak_reserved, "PyTorch's own peak reserved in the recording"
  end
  local b = ctx.seen[canonical(ctx.recorded or "", "setting")] or ctx.default
  return not b.replay.error and b.replay.peak_reserved or nil,
    ctx.recorded and "the recorded setting's replay" or "PyTorch's defaults, replayed"
end

--- torch.fill(r, x, ctx): how each row's figures were predicted.
function torch.fill(r, x)
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
end

--- torch.more(ctx, rows) -> the combinations of the best of each family
-- that beat PyTorch's defaults.
function torch.more(ctx, rows)
  local limited = ctx.limited
  local best = {}
  local dm = ctx.metric(ctx.default)
  for _, r in ipairs(rows) do
    local f = r.family
    if (f == "expandable" or f == "split" or f == "roundup" or f == "gc") and not r.error then
      local m = ctx.metric(r)
      if m and dm and m < dm * (1 - 0.001) and (not best[f] or ctx.better(r, best[f])) then best[f] = r end
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
    if n >= 2 then add(ctx, combos, table.concat(parts, ","), "combination") end
  end
  return combos
end

-- PyTorch's limit under set_per_process_memory_fraction(f): floor(f x the
-- device's memory) bytes (CUDACachingAllocator's setMemoryFraction).
local function allowed(f, dm) return math.floor(f * dm) end

--- torch.fraction_for(lo, hi, dm) -> the fraction of the device's memory dm
-- to give set_per_process_memory_fraction for a limit of lo to hi bytes, and
-- its text: where hi is nil, the least of three significant digits whose
-- limit is lo or more; else the most of the fewest digits (three or more)
-- whose limit lies in [lo, hi].  nil where none is below 1.
function torch.fraction_for(lo, hi, dm)
  if lo >= dm then return nil end
  for k = 3, 15 do
    local f, text
    if hi then
      f, text = util.fraction(math.min(hi, dm - 1) / dm, k, false)
    else
      f, text = util.fraction(lo / dm, k, true)
    end
    if f and f < 1 and allowed(f, dm) >= lo and (not hi or allowed(f, dm) <= hi) then return f, text end
  end
  return nil
end

-- The note of a setting that acts only under a memory fraction
-- (garbage_collection_threshold: PyTorch runs it only where
-- set_per_process_memory_fraction was called): the call, with the fraction
-- of the limit its figures are for (the limit where it fits in it, else
-- the least memory it runs in).
local function fraction_note(r, ctx)
  local o = ctx and ctx.o or {}
  local lo, hi = r.min_memory, nil
  if o.limit and r.fits then lo, hi = r.min_memory or o.limit, o.limit end
  local head = "garbage_collection_threshold acts only under a memory fraction: call " ..
    "torch.cuda.set_per_process_memory_fraction(%s) in train.py before its first allocation"
  if not lo then
    return head:format("F") .. ", F = the limit / the device's memory (the advice had no limit: the setting " ..
      "changed nothing in it)"
  end
  local dm = o.device_memory
  local f, text
  if dm then f, text = torch.fraction_for(lo, hi, dm) end
  if f then
    return head:format(text) .. (" (%s of the device's %s)"):format(bytes(allowed(f, dm)), bytes(dm))
  end
  if dm then
    return head:format("F") .. (", F = %s / the device's memory: no fraction below 1 of %s gives it"):format(
      bytes(hi or lo), bytes(dm))
  end
  return head:format("F") .. (", F = %s / the device's memory (give --device-memory SIZE for F)"):format(
    bytes(hi or lo))
end

--- torch.paste(r [, ctx]) -> the line to run the program with row r's
-- setting, and a note on it.
function torch.paste(r, ctx)
  if r.kind ~= "torch" then
    return "CUPOLA_TORCH_POOL=" .. r.pool .. " python train.py",
      "after make torch-allocator, with torch.cuda.memory.CUDAPluggableAllocator (docs/API.md)"
  end
  local v = r.setting
  -- PyTorch's defaults: the variable unset (an empty one is read as no
  -- keys, but a run that set it elsewhere must drop it)
  if v == "" then return "env -u PYTORCH_CUDA_ALLOC_CONF python train.py", "PyTorch's defaults" end
  if v:find "[^%w_:,.%-]" then v = "'" .. v:gsub("'", "'\\''") .. "'" end
  local note = (r.canonical or v):find("garbage_collection_threshold", 1, true) and fraction_note(r, ctx) or nil
  return "PYTORCH_CUDA_ALLOC_CONF=" .. v .. " python train.py", note
end

--- torch.summary(res) -> lines for the head of the text report.
function torch.summary(d)
  local lines = {}
  if d.recorded_setting then
    lines[#lines + 1] = ("recorded under: %s (from %s)"):format(
      d.recorded_setting == "" and "PyTorch's defaults" or d.recorded_setting, d.recorded_from)
  else
    lines[#lines + 1] = "recorded under: unknown"
  end
  if d.torch_peak_reserved then
    lines[#lines + 1] = ("PyTorch's own peak reserved: %s; most in use at once: %s (as requested)"):format(
      bytes(d.torch_peak_reserved), bytes(d.peak_live))
  else
    lines[#lines + 1] = ("most in use at once: %s (as requested)"):format(bytes(d.peak_live))
  end
  return lines
end

--- torch.notes(res, ctx): what the figures mean, and what to watch.
function torch.notes(result, ctx)
  local W, N = result.warnings, result.notes
  local o, info, facts = ctx.o, ctx.info, ctx.facts
  local recorded = ctx.recorded
  local rrow = recorded and ctx.seen[canonical(recorded, "setting")]
  if info.scaled then
    N[#N + 1] = ("figures: cupola's model of PyTorch 2.11's caching allocator, replayed offline; each setting " ..
      "with the addresses CUDA gave PyTorch in the recording at %d while the model's device calls are that " ..
      "run's (the program's first calls, the same at every size), then the driver's placement"):format(
      info.scaled.base)
  elseif rrow and not rrow.error and ctx.recorded_addresses then
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
  if info.scaled then
    -- said above
  elseif ctx.recorded_addresses then
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
  local splits = ctx.splits
  if #splits > 0 then
    local parts = {}
    for _, v in ipairs(splits) do parts[#parts + 1] = ("%d (%s)"):format(v.mb, v.q) end
    N[#N + 1] = ("max_split_size_mb values from this " .. (ctx.info.format == "torch_snapshot" and "snapshot" or "log")
      .. "'s requests of 20 MiB or more (%d of them, the "
      .. "largest %s): %s: the 50th, 75th, 90th and 99th percentile of their sizes (q50 ... q99), rounded up to "
      .. "MiB, where one is below the largest; blocks of the value's size and more are never split, so the "
      .. "largest half, quarter, tenth or hundredth of those requests get blocks of their own"):format(
      facts.sizes.count, bytes(facts.sizes.max), table.concat(parts, ", "))
  else
    N[#N + 1] = "no max_split_size_mb rows: no request of 20 MiB or more (the least value PyTorch takes), so it " ..
      "would only keep 20 MiB segments from the smaller requests they serve"
  end
  if ctx.npools > 0 then
    N[#N + 1] = "cupola rows: cupola's pools serving PyTorch through its pluggable allocator (make torch-allocator, " ..
      "CUPOLA_TORCH_POOL=SPEC), each as libcupola_torch.so makes it: tlsf, freelist and caching keep every " ..
      "idle chunk (release_threshold = 2^63 - 1, the serving policy), where cupola.pool's default returns them " ..
      "as the pool grows, so a replay of cupola.pool{kind = ...} with its defaults (examples/timeline.lua) " ..
      "reserves otherwise; device calls are their upstream calls (vmm: pages mapped); vmm's default " ..
      "policy decides by time, and runs on the snapshot's clock (the program's own times); step time: " ..
      "tlsf and caching keep what they take once warm and ran at PyTorch's speed on an H100, vmm 5-18 % slower " ..
      "(it is offered only where neither fits)"
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
end

return torch
