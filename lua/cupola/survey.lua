--- cupola.survey: the benchmarks of "Are dynamic memory managers on GPUs
-- slow? A survey and benchmarks" (Winter et al., PPoPP 2021) on any device
-- pool and on CUDA's in-kernel malloc, in one run, on either backend.
--
--   local survey = require "cupola.survey"
--   local res = survey.run { allocators = { "heap", "slab", "malloc",
--       { kind = "plugin", path = "mine.cu" } }, capacity = "1GiB" }
--   survey.csv(res, "s.csv"); survey.json(res, "s.json"); survey.html(res, "s.html")
--   print(survey.markdown(res))
--
-- Every allocation, write, check and reduction runs in the kernels of
-- cupola/survey.cuh (one module per allocator, compiled like any user
-- module); Lua launches them and times them with events.  On the host
-- backend the kernels run on the CPU and the times are the CPU's.
local cupola = require "cupola"
local report = require "cupola.report"

local survey = {}

local ALL_TESTS = { "init", "registers", "pairs", "thread", "warp", "mixed", "scaling", "frag", "oom",
  "synth", "synth_write" }
survey.tests = ALL_TESTS

local function pow2s(lo, hi)
  local t, v = {}, lo
  while v <= hi do t[#t + 1] = v; v = v * 2 end
  return t
end

-- Defaults scaled to the backend: the survey's own figures on a GPU
-- (1e5 allocations per test, 2^0..2^20 threads), less on the CPU.
local function defaults(gpu)
  return {
    capacity = gpu and 8 * 2^30 or 256 * 2^20,
    frag_capacity = gpu and 2 * 2^30 or 64 * 2^20,
    oom_capacity = gpu and 256 * 2^20 or 16 * 2^20,
    sizes = pow2s(4, 8192),
    threads = gpu and 100000 or 4000,
    warps = gpu and 10000 or 1000,
    iterations = gpu and 5 or 3,
    -- a measurement is repeated up to `iterations` times while its launches
    -- took less than budget_ms in all (CUDA's malloc takes seconds per
    -- launch at large sizes: one launch then stands for it)
    budget_ms = gpu and 1500 or 1000,
    -- seconds the run may take (cupola.clock): past it, the measurements
    -- left are skipped and the results say so (nil: no limit)
    time_limit = false,
    mixed_ranges = { 64, 512, 4096, 8192 },
    scaling_sizes = { 16, 1024 },
    scaling_threads = pow2s(1, gpu and 2^20 or 2^12),
    pair_sizes = { 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 65536 },
    pair_threads = gpu and 1000000 or 20000,
    -- (tests.pairs says what these do; off by default)
    pair_probe = false,
    pair_budget_ms = false,
    pair_warm = false,
    pair_capacity = false,
    -- a function(test, size, threads) called as each measurement starts
    starting = false,
    frag_sizes = pow2s(16, 8192),
    oom_sizes = pow2s(16, gpu and 16 * 2^20 or 2^20),
    oom_threads = gpu and 100000 or 4000,
    synth_ranges = { 64, 4096 },
    synth_threads = pow2s(1, gpu and 2^20 or 2^12),
    synth_writes = gpu and 100 or 3,
  }
end

-- ---- allocators ---------------------------------------------------------------

local KINDS = { bump = 0, warp_bump = 1, slab = 2, malloc = 3, heap = 4 }

-- An allocator spec: a kind name, or {kind=, name=, capacity=, ...} (a
-- plugin takes source/path/options/init_threads/include/compiler as
-- cupola.device_pool does: a peer's adapter, bench/peers/, with the peer's
-- checkout on include and compiler = "nvcc").
local function spec_of(a, i)
  if type(a) == "string" then a = { kind = a } end
  if type(a) ~= "table" or type(a.kind) ~= "string" then
    error(("cupola.survey: allocators[%d] must be a kind name or a table with 'kind'"):format(i), 3)
  end
  if a.kind ~= "plugin" and not KINDS[a.kind] then
    error(("cupola.survey: allocators[%d]: unknown kind '%s'"):format(i, a.kind), 3)
  end
  local s = {}
  for k, v in pairs(a) do s[k] = v end
  s.name = s.name or (a.kind == "malloc" and "CUDA malloc" or a.kind == "plugin" and "plugin" or a.kind)
  if s.limits ~= nil and type(s.limits) ~= "table" then
    error(("cupola.survey: allocators[%d]: 'limits' must be a table"):format(i), 3)
  end
  return s
end

-- Why an allocator does not run a measurement (its entry's `limits`:
-- {max_size = bytes, reason = text, tests = {test = text}}), or nil.
local function limited(spec, test, size)
  local l = spec.limits
  if not l then return nil end
  if l.tests and l.tests[test] then return l.tests[test] end
  if l.max_size and size and size > l.max_size then
    return l.reason or ("above its largest size, " .. l.max_size .. " B")
  end
  return nil
end

-- A pool for spec (its own capacity, or cap).  For "malloc" the pool only
-- sizes CUDA's heap; the kernels call malloc themselves.
local function make_pool(spec, cap)
  local o = { kind = spec.kind, capacity = spec.capacity or cap }
  if spec.kind == "plugin" then
    o.source, o.path, o.name, o.options, o.init_threads = spec.source, spec.path, spec.plugin_name,
      spec.options, spec.init_threads
    o.include, o.compiler = spec.include, spec.compiler
  end
  return cupola.device_pool(o)
end

local header_cache = {}

-- The survey's module for an allocator (its pool gives a plugin's source).
local function module_for(spec, dp)
  if spec.kind == "plugin" then
    local src = "#include <cupola/plugin.h>\n#line 1 \"" .. dp.name .. "\"\n" .. dp.source ..
      "\n#include <cupola/survey.cuh>\n"
    local opts = { "-DCUPOLA_POOL_KIND=5" }
    for _, o in ipairs(dp.options or {}) do opts[#opts + 1] = o end
    return cupola.module { name = "survey_" .. dp.name, source = src, options = opts, compiler = dp.compiler }
  end
  -- (spec.options: more compile options for the allocator's module, e.g.
  -- -lineinfo for a profiler, or -D settings an allocator's header reads)
  local opts = { spec.kind == "malloc" and "-DCUPOLA_SURVEY_MALLOC" or ("-DCUPOLA_POOL_KIND=" .. KINDS[spec.kind]) }
  for _, o in ipairs(spec.options or {}) do opts[#opts + 1] = o end
  local key = table.concat(opts, " ")
  if not header_cache[key] then
    header_cache[key] = cupola.module { name = "survey_" .. spec.kind .. ".cu",
      source = "#include <cupola/survey.cuh>\n", options = opts }
  end
  return header_cache[key]
end

local function kernels_of(m, events)
  local K = {
    alloc = m:kernel("sv_alloc", { "device_pool", "ptr", "u64", "u64", "ptr", "i32" }),
    free = m:kernel("sv_free", { "device_pool", "ptr", "u64", "i32" }),
    write = m:kernel("sv_write", { "ptr", "u64", "u64", "ptr" }),
    check = m:kernel("sv_check", { "ptr", "u64", "u64", "ptr", "ptr" }),
    pair = m:kernel("sv_pair", { "device_pool", "u64", "u64", "ptr" }),
    sizes = m:kernel("sv_sizes", { "ptr", "u64", "u64", "u64", "u64" }),
    assign = m:kernel("sv_assign", { "ptr", "u64", "ptr", "ptr" }),
    write_words = m:kernel("sv_write_words", { "ptr", "ptr", "ptr", "u64" }),
    baseline = m:kernel("sv_baseline", { "ptr", "u64", "u64", "ptr" }),
  }
  -- (a heap compiled with -DCPD_HEAP_COUNTERS counts its events)
  if events then K.events = m:kernel("sv_events", { "device_pool", "ptr" }) end
  return K
end

local EVENT_NAMES = { "calls", "take_tries", "reserve_miss", "busy", "probes", "refills", "refill_cached",
  "map_tries", "map_words", "bulk", "borrow", "stream", "stream_wait", "installs", "prepared", "frees" }
survey.event_names = EVENT_NAMES

local scan_kernel
local function scan()
  if not scan_kernel then
    local m = cupola.module { name = "survey_scan.cu", source = "#include <cupola/survey.cuh>\n",
      options = { "-DCUPOLA_SURVEY_SCAN" } }
    scan_kernel = m:kernel("sv_scan", { "ptr", "u64", "ptr" })
  end
  return scan_kernel
end

-- ---- measuring ----------------------------------------------------------------

local function median(t)
  local c = {}
  for i, v in ipairs(t) do c[i] = v end
  table.sort(c)
  if #c == 0 then return nil end
  if #c % 2 == 1 then return c[(#c + 1) // 2] end
  return (c[#c // 2] + c[#c // 2 + 1]) / 2
end

local function stats(t)
  local sum, lo, hi = 0, math.huge, -math.huge
  for _, v in ipairs(t) do sum = sum + v; lo = math.min(lo, v); hi = math.max(hi, v) end
  return median(t), sum / math.max(#t, 1), lo, hi
end

local Ctx = {}
Ctx.__index = Ctx

-- Whether the run's time is up (the measurements left are skipped).
function Ctx:over()
  if self.until_ and cupola.clock() > self.until_ then
    self.res.meta.cut_short = "the run's time limit was reached: the measurements after it were skipped"
    return true
  end
  return false
end

-- Tells the run's `starting` function that a measurement starts.
function Ctx:start(test, size, threads)
  if self.starting then self.starting(test, size, threads) end
end

-- The heap's event counts in pool dp (default the allocator's) since the
-- last read (allocators compiled with its counters), per `per` allocations:
-- a table by name, or nil.
function Ctx:events(A, per, dp)
  if not A.K.events then return nil end
  self:launch(A.K.events, 1, dp or A.dp, self.out)
  local raw = self.out:read(0, 8 * 16, self.s)
  local t = {}
  for e, name in ipairs(EVENT_NAMES) do
    t[name] = string.unpack("<I8", raw, 8 * (e - 1) + 1) / math.max(per, 1)
  end
  return t
end

-- Seconds left of the run's time (math.huge without a limit).
function Ctx:left()
  return self.until_ and self.until_ - cupola.clock() or math.huge
end

-- ms of the work fn() enqueues on the context's stream.
function Ctx:timed(fn)
  self.e0:record(self.s)
  fn()
  self.e1:record(self.s)
  self.e1:synchronize()
  return self.e0:elapsed(self.e1)
end

function Ctx:launch(k, threads, ...)
  k:launch({ threads = math.max(1, threads), block = 256, stream = self.s }, ...)
end

-- The counters of sv_check for n blocks at ptrs.
function Ctx:check(K, ptrs, n, size, sizes)
  local out = self.out
  out:write(string.pack("<I8I8I8i8I8I8I8", 0, 0, 0, -1, 0, 0, 0), 0, self.s)
  self:launch(K.write, n, ptrs, n, size, sizes or 0)
  self:launch(K.check, n, ptrs, n, size, sizes or 0, out)
  local nulls, bad, mis, lo, hi, asked, live = string.unpack("<I8I8I8I8I8I8I8", out:read(0, 56, self.s))
  return { nulls = nulls, bad = bad, misaligned = mis, lo = lo, hi = hi, asked = asked, live = live }
end

-- Buffers of at least n entries of width bytes (kept and grown across tests).
local function grown(self, field, n, width)
  if not self[field] or self[field].size < width * n then
    if self[field] then self[field]:free() end
    self[field] = assert(cupola.malloc(width * math.max(n, 1)))
  end
  return self[field]
end

function Ctx:ptrs(n) return grown(self, "pbuf", n, 8) end
function Ctx:sizes_buf(n) return grown(self, "sbuf", n, 4) end

local function add(res, row)
  res.rows[#res.rows + 1] = row
  if res.progress then res.progress(row) end
  return row
end

-- Allocation per thread (or per warp) of one size, or of drawn sizes:
-- alloc and free timed apart, as the survey does, the blocks written and
-- checked between them.
local function alloc_free_rounds(ctx, K, dp, n, size, sizes, warp, o, A)
  local ptrs = ctx:ptrs(n)
  if A then ctx:events(A, 1) end
  local ta, tf, worst = {}, {}, { nulls = 0, bad = 0, misaligned = 0 }
  local threads = warp and 32 * n or n
  local spent = 0
  for it = 1, o.iterations do
    if it > 1 and spent > o.budget_ms then break end
    if sizes then ctx:launch(K.sizes, n, sizes, n, 4, size, 1000 + it) end
    ta[#ta + 1] = ctx:timed(function() ctx:launch(K.alloc, threads, dp, ptrs, n, size, sizes or 0, warp and 1 or 0) end)
    local c = ctx:check(K, ptrs, n, size, sizes)
    for _, k in ipairs { "nulls", "bad", "misaligned" } do worst[k] = math.max(worst[k], c[k]) end
    tf[#tf + 1] = ctx:timed(function() ctx:launch(K.free, threads, dp, ptrs, n, warp and 1 or 0) end)
    spent = spent + ta[#ta] + tf[#tf]
  end
  local am, amean, amin, amax = stats(ta)
  local fm, fmean, fmin, fmax = stats(tf)
  return { alloc_ms = am, alloc_ms_mean = amean, alloc_ms_min = amin, alloc_ms_max = amax,
    free_ms = fm, free_ms_mean = fmean, free_ms_min = fmin, free_ms_max = fmax,
    failed = worst.nulls, corrupt = worst.bad, misaligned = worst.misaligned, iterations = #ta,
    events = A and ctx:events(A, n * #ta) or nil }
end

-- The row of a measurement an allocator does not run, if its limits say so.
local function skipped(ctx, A, test, size, threads, extra)
  local why = limited(A.spec, test, size)
  if not why then return false end
  local row = { test = test, allocator = A.name, size = size, threads = threads, skipped = why }
  for k, v in pairs(extra or {}) do row[k] = v end
  add(ctx.res, row)
  return true
end

local function merge(a, b)
  for k, v in pairs(b) do a[k] = v end
  return a
end

local tests = {}

function tests.thread(ctx, A, o)
  for _, size in ipairs(o.sizes) do
    if ctx:over() then return end
    if not skipped(ctx, A, "thread", size, o.threads) then
      ctx:start("thread", size, o.threads)
      add(ctx.res, merge({ test = "thread", allocator = A.name, size = size, threads = o.threads },
        alloc_free_rounds(ctx, A.K, A.dp, o.threads, size, nil, false, o, A)))
    end
  end
end

function tests.warp(ctx, A, o)
  for _, size in ipairs(o.sizes) do
    if ctx:over() then return end
    if not skipped(ctx, A, "warp", size, o.warps) then
      ctx:start("warp", size, o.warps)
      add(ctx.res, merge({ test = "warp", allocator = A.name, size = size, threads = o.warps },
        alloc_free_rounds(ctx, A.K, A.dp, o.warps, size, nil, true, o, A)))
    end
  end
end

function tests.mixed(ctx, A, o)
  local sizes = ctx:sizes_buf(o.threads)
  for _, hi in ipairs(o.mixed_ranges) do
    if ctx:over() then return end
    if not skipped(ctx, A, "mixed", hi, o.threads, { size_min = 4 }) then
      ctx:start("mixed", hi, o.threads)
      -- sv_sizes draws in [4, hi] (the size argument is the range's top)
      add(ctx.res, merge({ test = "mixed", allocator = A.name, size = hi, size_min = 4, threads = o.threads },
        alloc_free_rounds(ctx, A.K, A.dp, o.threads, hi, sizes, false, o, A)))
    end
  end
end

function tests.scaling(ctx, A, o)
  for _, size in ipairs(o.scaling_sizes) do
    for _, n in ipairs(o.scaling_threads) do
      if ctx:over() then return end
      if not skipped(ctx, A, "scaling", size, n) then
        ctx:start("scaling", size, n)
        add(ctx.res, merge({ test = "scaling", allocator = A.name, size = size, threads = n },
          alloc_free_rounds(ctx, A.K, A.dp, n, size, nil, false, o, A)))
      end
    end
  end
end

-- One launch of the pairs kernel with n threads: ms, NULLs, blocks that did
-- not keep their data.
local function pair_launch(ctx, A, n, size, dp)
  ctx.launched = (ctx.launched or 0) + n
  ctx.out:write(string.pack("<I8I8", 0, 0), 0, ctx.s)
  local ms = ctx:timed(function() ctx:launch(A.K.pair, n, dp, n, size, ctx.out) end)
  local nulls, bad = string.unpack("<I8I8", ctx.out:read(0, 16, ctx.s))
  return ms, nulls, bad
end

-- The blocks the pairs' warm-up allocates (pair_warm): a count, or with
-- true as many as the device can hold threads at once (2048 a multiprocessor
-- on a GPU; 4096 on the host).
local function warm_count(o, n)
  local w = o.pair_warm
  if not w then return 0 end
  if w == true then
    local d = cupola.device()
    w = cupola.backend() == "cuda" and (d.sms or 1) * 2048 or 4096
  end
  return math.min(n, math.floor(w))
end

-- With pair_probe (ascending thread counts below pair_threads), each size
-- starts at the smallest count, and a larger count (pair_threads last) runs
-- only if the rate measured so far says its launch fits the allowance:
-- pair_budget_ms, or the time left divided among the sizes left.  A row
-- that stopped short is the largest count measured (`probe`, with
-- `estimate_ms` for pair_threads): an allocator that takes seconds per
-- launch (CUDA's malloc at large sizes) cannot overrun the run's time.
function tests.pairs(ctx, A, o)
  -- (pair_capacity: a pool of its own for the pairs, made at the first
  -- size the allocator runs)
  local own <close> = setmetatable({}, { __close = function(h) if h.pool then h.pool:close() end end })
  local dp = A.dp
  for k, size in ipairs(o.pair_sizes) do
    if ctx:over() then return end
    local n, t, worst, spent = o.pair_threads, {}, { 0, 0 }, 0
    local short, probes
    if skipped(ctx, A, "pairs", size, n) then goto next end
    ctx:start("pairs", size, n)
    if o.pair_capacity and A.spec.kind ~= "malloc" and not own.pool then
      own.pool = assert(make_pool(A.spec, o.pair_capacity))
      dp = own.pool
    end
    do
      -- the warm-up: blocks allocated in one kernel and freed in another,
      -- untimed (an allocator that builds its structures on first use does
      -- so before the pairs)
      local m = warm_count(o, n)
      if m > 0 then
        local ptrs = ctx:ptrs(m)
        ctx:launch(A.K.alloc, m, dp, ptrs, m, size, 0, 0)
        ctx:launch(A.K.free, m, dp, ptrs, m, 0)
        ctx.s:synchronize()
      end
    end
    if A.K.events then ctx:events(A, 1, dp) end
    ctx.launched = 0
    if o.pair_probe then
      probes = {}
      local allowance = math.min(o.pair_budget_ms or math.huge, 1e3 * ctx:left() / (#o.pair_sizes - k + 1))
      local counts = {}
      for _, c in ipairs(o.pair_probe) do
        if c < n then counts[#counts + 1] = c end
      end
      counts[#counts + 1] = n
      local last_n, last_ms
      for _, c in ipairs(counts) do
        if last_ms and last_ms * c / last_n > allowance then break end
        local ms, nulls, bad = pair_launch(ctx, A, c, size, dp)
        last_n, last_ms = c, ms
        worst[1], worst[2] = nulls, bad
        probes[#probes + 1] = { threads = c, ms = ms, failed = nulls, corrupt = bad }
      end
      if last_n < n then
        short = { threads = last_n, ms = last_ms, estimate_ms = last_ms * n / last_n }
      else
        t[1] = last_ms
        spent = last_ms
      end
    end
    if short then
      add(ctx.res, { test = "pairs", allocator = A.name, size = size, threads = short.threads, ms = short.ms,
        per_second = short.ms > 0 and short.threads / (short.ms / 1e3) or 0, failed = worst[1], corrupt = worst[2],
        iterations = 1, probe = true, estimate_ms = short.estimate_ms, of_threads = n, probes = probes,
        warm = warm_count(o, n) > 0 or nil })
    else
      for it = #t + 1, o.iterations do
        if it > 1 and spent > o.budget_ms then break end
        local ms, nulls, bad = pair_launch(ctx, A, n, size, dp)
        t[#t + 1] = ms
        worst[1], worst[2] = math.max(worst[1], nulls), math.max(worst[2], bad)
        spent = spent + ms
      end
      local ms = median(t)
      local _, _, lo, hi = stats(t)
      add(ctx.res, { test = "pairs", allocator = A.name, size = size, threads = n, ms = ms, ms_min = lo, ms_max = hi,
        per_second = ms > 0 and n / (ms / 1e3) or 0, failed = worst[1], corrupt = worst[2], iterations = #t,
        probes = probes, warm = warm_count(o, n) > 0 or nil, capacity = o.pair_capacity or nil,
        events = A.K.events and ctx:events(A, ctx.launched, dp) or nil })
    end
    ::next::
  end
end

-- Fragmentation: n blocks of a size, written, checked and freed, again and
-- again in a fresh pool; the address range they span (lowest start to
-- highest end) against the bytes live, and its maximum over the rounds.
function tests.frag(ctx, A, o)
  for _, size in ipairs(o.frag_sizes) do
    if ctx:over() then return end
    if skipped(ctx, A, "frag", size, o.threads) then goto next end
    ctx:start("frag", size, o.threads)
    local dp <close> = assert(make_pool(A.spec, o.frag_capacity))
    local n, ptrs = o.threads, ctx:ptrs(o.threads)
    local lo, hi, worst, live, ranges = -1, 0, 0, 0, {}
    local t0 = cupola.clock()
    for it = 1, o.iterations do
      if it > 1 and (cupola.clock() - t0) * 1e3 > o.budget_ms then break end
      ctx:launch(A.K.alloc, n, dp, ptrs, n, size, 0, 0)
      local c = ctx:check(A.K, ptrs, n, size)
      worst = math.max(worst, c.nulls + c.bad + c.misaligned)
      if c.nulls < n then
        ranges[#ranges + 1] = c.hi - c.lo
        if math.ult(c.lo, lo) then lo = c.lo end
        if math.ult(hi, c.hi) then hi = c.hi end
        live = c.live
      end
      ctx:launch(A.K.free, n, dp, ptrs, n, 0)
    end
    local range = median(ranges) or 0
    local range_max = math.ult(lo, hi) and hi - lo or 0
    add(ctx.res, { test = "frag", allocator = A.name, size = size, threads = n, range = range,
      range_max = range_max, live = live, ratio = live > 0 and range_max / live or 0, failed = worst })
    ::next::
  end
end

-- Out of memory: rounds of n allocations of one size into a fresh pool of
-- oom_capacity, never freed, until a round gets a NULL; the bytes served
-- (as asked) against the capacity.
function tests.oom(ctx, A, o)
  local cap = o.oom_capacity
  for _, size in ipairs(o.oom_sizes) do
    if size > cap or ctx:over() then break end
    if skipped(ctx, A, "oom", size, o.oom_threads, { capacity = cap }) then goto next end
    ctx:start("oom", size, o.oom_threads)
    local dp <close> = assert(make_pool(A.spec, cap))
    local n = math.max(1, math.min(o.oom_threads, cap // size // 4))
    local served, rounds, bad = 0, 0, 0
    local keep = {}
    repeat
      local ptrs = assert(cupola.malloc(8 * n))
      keep[#keep + 1] = ptrs
      ctx:launch(A.K.alloc, n, dp, ptrs, n, size, 0, 0)
      local c = ctx:check(A.K, ptrs, n, size)
      bad = bad + c.bad + c.misaligned
      served = served + (n - c.nulls)
      rounds = rounds + 1
    until c.nulls > 0 or rounds * n * size > 4 * cap
    if A.spec.kind == "malloc" then
      for _, ptrs in ipairs(keep) do ctx:launch(A.K.free, n, dp, ptrs, n, 0) end
    end
    ctx.s:synchronize()
    for _, p in ipairs(keep) do p:free() end
    add(ctx.res, { test = "oom", allocator = A.name, size = size, threads = n, rounds = rounds,
      served = served * size, capacity = cap, fraction = served * size / cap, corrupt = bad })
    ::next::
  end
end

-- The synthetic workload: n threads each allocate a size drawn in [4, hi]
-- (alloc timed), or, with writes, every word of the n blocks is written
-- by its own thread in the order of a contiguous layout (timed, `writes`
-- launches).  The baseline carves the blocks out of one area at the prefix
-- sum of the sizes.
local function synth(ctx, A, o, with_writes)
  local test = with_writes and "synth_write" or "synth"
  for _, hi in ipairs(o.synth_ranges) do
    for _, n in ipairs(o.synth_threads) do
      if ctx:over() then return end
      if not A.baseline and skipped(ctx, A, test, hi, n, { size_min = 4 }) then goto next end
      ctx:start(test, hi, n)
      local K = A.K or ctx.anyK
      local sizes, ptrs = ctx:sizes_buf(n), ctx:ptrs(n)
      local offs <close> = assert(cupola.malloc(8 * (n + 1)))
      local t, t0 = {}, cupola.clock()
      for it = 1, o.iterations do
        if it > 1 and (cupola.clock() - t0) * 1e3 > o.budget_ms then break end
        ctx:launch(K.sizes, n, sizes, n, 4, hi, 2000 + it)
        local area
        if A.baseline then
          local ms = ctx:timed(function()
            scan():launch({ grid = 1, block = 1024, stream = ctx.s }, sizes, n, offs)
          end)
          local words = string.unpack("<I8", offs:read(8 * n, 8, ctx.s))
          area = assert(cupola.malloc(4 * math.max(words, 1)))
          ms = ms + ctx:timed(function() ctx:launch(K.baseline, n, offs, n, area.address, ptrs) end)
          if not with_writes then t[#t + 1] = ms end
        else
          local ms = ctx:timed(function() ctx:launch(K.alloc, n, A.dp, ptrs, n, 0, sizes, 0) end)
          if not with_writes then t[#t + 1] = ms end
          scan():launch({ grid = 1, block = 1024, stream = ctx.s }, sizes, n, offs)
        end
        if with_writes then
          local words = string.unpack("<I8", offs:read(8 * n, 8, ctx.s))
          local assign <close> = assert(cupola.malloc(4 * math.max(words, 1)))
          local pos <close> = assert(cupola.malloc(4 * math.max(words, 1)))
          ctx:launch(K.assign, n, offs, n, assign, pos)
          local ms = ctx:timed(function()
            for _ = 1, o.synth_writes do ctx:launch(K.write_words, words, assign, pos, ptrs, words) end
          end)
          t[#t + 1] = ms / o.synth_writes
        end
        if area then area:free() else ctx:launch(K.free, n, A.dp, ptrs, n, 0) end
      end
      local m, mean, mn, mx = stats(t)
      add(ctx.res, { test = test, allocator = A.name, size = hi,
        size_min = 4, threads = n, ms = m, ms_mean = mean, ms_min = mn, ms_max = mx, iterations = #t })
      ::next::
    end
  end
end

function tests.synth(ctx, A, o) synth(ctx, A, o, false) end
function tests.synth_write(ctx, A, o) synth(ctx, A, o, true) end

-- ---- the run -------------------------------------------------------------------

local function check_opts(opts)
  if opts ~= nil and type(opts) ~= "table" then
    error("bad argument #1 to 'cupola.survey.run' (options table expected, got " .. type(opts) .. ")", 3)
  end
  opts = opts or {}
  local gpu = cupola.backend() == "cuda"
  local o = defaults(gpu)
  for k, v in pairs(opts) do
    if k ~= "allocators" and k ~= "tests" and k ~= "progress" and o[k] == nil then
      error(("cupola.survey.run: unknown option '%s'"):format(tostring(k)), 3)
    end
    o[k] = v
  end
  o.capacity = cupola.bytes(o.capacity)
  o.frag_capacity = cupola.bytes(o.frag_capacity)
  o.oom_capacity = cupola.bytes(o.oom_capacity)
  if o.pair_capacity then o.pair_capacity = cupola.bytes(o.pair_capacity) end
  if o.starting and type(o.starting) ~= "function" then
    error("cupola.survey.run: 'starting' must be a function", 3)
  end
  if o.pair_warm and o.pair_warm ~= true and type(o.pair_warm) ~= "number" then
    error("cupola.survey.run: 'pair_warm' must be true or a count", 3)
  end
  o.allocators = opts.allocators or { "heap", "slab", "malloc" }
  o.tests = opts.tests or ALL_TESTS
  for _, t in ipairs(o.tests) do
    if not tests[t] and t ~= "init" and t ~= "registers" then
      error(("cupola.survey.run: unknown test '%s'"):format(tostring(t)), 3)
    end
  end
  return o, gpu
end

--- survey.run(opts) -> {meta = {...}, rows = {...}}: every test of
-- opts.tests for every allocator of opts.allocators.
function survey.run(opts)
  local o, gpu = check_opts(opts)
  local d = cupola.device()
  local res = {
    meta = { device = d.name, backend = cupola.backend(), sms = d.sms, cc = d.cc, driver = d.driver,
      runtime = d.runtime, date = os.date "!%Y-%m-%d %H:%M UTC", commit = os.getenv "CUPOLA_COMMIT",
      capacity = o.capacity, oom_capacity = o.oom_capacity, iterations = o.iterations, budget_ms = o.budget_ms,
      timing = gpu and "CUDA events around each launch" or
        "the host backend: kernels run on the CPU, times are the CPU's" },
    rows = {},
    progress = opts and opts.progress,
  }
  local ctx = setmetatable({ res = res, s = cupola.stream(), e0 = cupola.event(), e1 = cupola.event(),
    until_ = o.time_limit and cupola.clock() + o.time_limit or nil, starting = o.starting or nil }, Ctx)
  ctx.out = assert(cupola.malloc(128))
  local want = {}
  for _, t in ipairs(o.tests) do want[t] = true end

  local specs = {}
  for i, a in ipairs(o.allocators) do specs[#specs + 1] = spec_of(a, i) end
  -- CUDA's heap keeps the size it has when the first kernel that calls
  -- malloc runs: its pool is made first, with the largest capacity asked.
  for _, spec in ipairs(specs) do
    if spec.kind == "malloc" then
      local cap = spec.capacity or o.capacity
      if want.oom and #o.tests == 1 then cap = o.oom_capacity end
      -- a device that cannot reserve so large a heap gets the largest it can
      local dp, msg = make_pool(spec, cap)
      while not dp and cap > 64 * 2^20 do
        cap = cap // 2
        dp, msg = make_pool(spec, cap)
      end
      spec.capacity = cap
      spec.heap_pool = assert(dp, msg)
      res.meta.malloc_heap = cap
    end
  end

  for _, spec in ipairs(specs) do
    if ctx:over() then break end
    local A = { spec = spec, name = spec.name }
    if want.init then
      ctx:start("init", nil, nil)
      -- made twice: the second (the compile of a plugin cached) is timed
      local first = assert(make_pool(spec, o.capacity))
      first:close()
      local t0 = cupola.clock()
      local dp = assert(make_pool(spec, o.capacity))
      cupola.synchronize()
      local ms = (cupola.clock() - t0) * 1e3
      add(res, { test = "init", allocator = spec.name, capacity = spec.capacity or o.capacity, ms = ms })
      dp:close()
    end
    A.dp = spec.heap_pool or assert(make_pool(spec, o.capacity))
    local m = module_for(spec, A.dp)
    A.K = kernels_of(m, spec.events)
    ctx.anyK = ctx.anyK or A.K
    if want.registers then
      add(res, { test = "registers", allocator = spec.name, alloc_registers = A.K.alloc:registers(),
        free_registers = A.K.free:registers() })
    end
    for _, t in ipairs(o.tests) do
      if tests[t] and not (t == "oom" and spec.kind == "malloc" and #o.tests > 1) then
        tests[t](ctx, A, o)
        if spec.kind ~= "malloc" and t ~= "frag" and t ~= "oom" then A.dp:reset(ctx.s) end
      end
    end
    if not spec.heap_pool then A.dp:close() end
  end
  if want.synth or want.synth_write then
    local A = { name = "baseline (prefix sum)", baseline = true }
    if want.synth then tests.synth(ctx, A, o) end
    if want.synth_write then tests.synth_write(ctx, A, o) end
  end
  ctx.s:synchronize()
  if ctx.pbuf then ctx.pbuf:free() end
  if ctx.sbuf then ctx.sbuf:free() end
  ctx.out:free()
  res.progress = nil
  return res
end

-- ---- output --------------------------------------------------------------------

--- survey.csv(res [, path]) -> text: one line per row (cupola.report.csv).
function survey.csv(res, path)
  local cols, seen = { "test", "allocator", "size", "threads" }, {}
  for _, c in ipairs(cols) do seen[c] = true end
  for _, c in ipairs(report.columns(res.rows)) do
    if not seen[c] then cols[#cols + 1] = c end
  end
  return report.csv(res.rows, path, { columns = cols })
end

--- survey.json(res [, path]) -> text: {meta = ..., rows = [...]}.
function survey.json(res, path)
  local ok, dkjson = pcall(require, "dkjson")
  if not ok then error("cupola.survey.json needs dkjson (Debian: apt-get install lua-dkjson)", 2) end
  local text = dkjson.encode({ meta = res.meta, rows = res.rows }, { indent = true }) .. "\n"
  if path then
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
  end
  return text
end

local function rows_of(res, test)
  local t = {}
  for _, r in ipairs(res.rows) do if r.test == test then t[#t + 1] = r end end
  return t
end

local function allocators_of(rows)
  local seen, list = {}, {}
  for _, r in ipairs(rows) do
    if not seen[r.allocator] then seen[r.allocator] = true; list[#list + 1] = r.allocator end
  end
  return list
end

local function fmt(v, spec)
  if v == nil then return "n/a" end
  if type(v) ~= "number" then return tostring(v) end
  return string.format(spec or "%.4g", v)
end

-- One markdown table: rows keyed by x, one column per allocator.  A row an
-- allocator did not run (`skipped`: its limits) or that faulted (`fault`:
-- set by whoever ran it) is "n/a [k]" or "fault [k]", its reason in note k
-- under the table.
local function pivot(rows, xkey, value, title)
  local allocs = allocators_of(rows)
  local xs, seen, cell = {}, {}, {}
  local notes, note_of = {}, {}
  for _, r in ipairs(rows) do
    if not seen[r[xkey]] then seen[r[xkey]] = true; xs[#xs + 1] = r[xkey] end
    cell[tostring(r[xkey]) .. "\0" .. r.allocator] = r
  end
  local out = { title, "", "| " .. xkey .. " | " .. table.concat(allocs, " | ") .. " |",
    "| ---: |" .. string.rep(" ---: |", #allocs) }
  for _, x in ipairs(xs) do
    local line = { tostring(x) }
    for _, a in ipairs(allocs) do
      local r = cell[tostring(x) .. "\0" .. a]
      if r and (r.skipped or r.fault) then
        local text = a .. ": " .. (r.fault and ("fault: " .. r.fault) or ("not run: " .. r.skipped))
        if not note_of[text] then notes[#notes + 1] = text; note_of[text] = #notes end
        line[#line + 1] = string.format("%s [%d]", r.fault and "fault" or "n/a", note_of[text])
      else
        line[#line + 1] = r and value(r) or ""
      end
    end
    out[#out + 1] = "| " .. table.concat(line, " | ") .. " |"
  end
  out[#out + 1] = ""
  for k, text in ipairs(notes) do out[#out + 1] = string.format("[%d] %s  ", k, text) end
  if #notes > 0 then out[#out + 1] = "" end
  return table.concat(out, "\n")
end

local function flag(r)
  local bad = (r.failed or 0) + (r.corrupt or 0) + (r.misaligned or 0)
  return bad > 0 and string.format(" (%d failed, %d corrupt)", r.failed or 0, (r.corrupt or 0) + (r.misaligned or 0)) or ""
end

-- The first value of a field among rows (0 if none has it).
local function first_of(rows, field)
  for _, x in ipairs(rows) do
    if x[field] then return x[field] end
  end
  return 0
end

-- The thread count the pairs rows were asked for.
local function o_threads(r)
  local n = 0
  for _, x in ipairs(r) do n = math.max(n, x.of_threads or x.threads) end
  return n
end

--- survey.markdown(res) -> text: every test as tables, allocators side by side.
function survey.markdown(res)
  local out = {}
  local m = res.meta
  out[#out + 1] = string.format("- device: %s (%s backend%s); %s; commit %s", m.device, m.backend,
    m.backend == "cuda" and string.format(", %s SMs, cc %s", m.sms, m.cc) or "", m.date, m.commit or "unknown")
  if m.cut_short then out[#out + 1] = "- **cut short:** " .. m.cut_short end
  out[#out + 1] = "- timing: " .. m.timing .. string.format("; median of up to %d iterations (fewer where " ..
    "they passed %d ms: the rows' `iterations`)", m.iterations, m.budget_ms or 0)
  out[#out + 1] = ""
  local r = rows_of(res, "init")
  if #r > 0 then
    out[#out + 1] = pivot(r, "capacity", function(x) return fmt(x.ms, "%.3f") end,
      "### Initialisation (ms to create a pool, the plugin's compile cached)")
  end
  r = rows_of(res, "registers")
  if #r > 0 then
    local t = { "### Registers of the allocating and the freeing kernel", "", "| allocator | alloc | free |",
      "| --- | ---: | ---: |" }
    for _, x in ipairs(r) do
      t[#t + 1] = string.format("| %s | %s | %s |", x.allocator, fmt(x.alloc_registers, "%d"), fmt(x.free_registers, "%d"))
    end
    out[#out + 1] = table.concat(t, "\n") .. "\n"
  end
  for _, test in ipairs { "thread", "warp", "mixed" } do
    r = rows_of(res, test)
    if #r > 0 then
      local what = test == "thread" and "per thread" or test == "warp" and "per warp (lane 0 of each warp)" or
        "mixed sizes in [4, size]"
      out[#out + 1] = pivot(r, "size", function(x) return fmt(x.alloc_ms, "%.4f") .. " / " .. fmt(x.free_ms, "%.4f") .. flag(x) end,
        string.format("### Allocation %s, %d allocations: alloc / free ms", what, first_of(r, "threads")))
    end
  end
  r = rows_of(res, "scaling")
  if #r > 0 then
    local by = {}
    for _, x in ipairs(r) do by[x.size] = by[x.size] or {}; table.insert(by[x.size], x) end
    local sizes = {}
    for s in pairs(by) do sizes[#sizes + 1] = s end
    table.sort(sizes)
    for _, s in ipairs(sizes) do
      out[#out + 1] = pivot(by[s], "threads", function(x) return fmt(x.alloc_ms, "%.4f") .. " / " .. fmt(x.free_ms, "%.4f") .. flag(x) end,
        string.format("### Scaling, %d B: alloc / free ms", s))
    end
  end
  r = rows_of(res, "pairs")
  if #r > 0 then
    local base = {}
    for _, x in ipairs(r) do if x.allocator == "CUDA malloc" then base[x.size] = x.per_second end end
    out[#out + 1] = pivot(r, "size", function(x)
      local s = fmt(x.per_second / 1e6, "%.2f")
      if base[x.size] and x.allocator ~= "CUDA malloc" and base[x.size] > 0 then
        local k = x.per_second / base[x.size]
        s = s .. string.format(k >= 10 and " (%.0fx)" or " (%.2fx)", k)
      end
      if x.probe then
        s = s .. string.format(" [at %d threads: %d would take ~%.1f s]", x.threads, x.of_threads, x.estimate_ms / 1e3)
      end
      return s .. flag(x)
    end, string.format("### Alloc+free pairs in one kernel, %d threads: M pairs/s (x CUDA's malloc)", o_threads(r)))
  end
  r = rows_of(res, "frag")
  if #r > 0 then
    out[#out + 1] = pivot(r, "size", function(x) return fmt(x.ratio, "%.2f") .. flag(x) end,
      string.format("### Fragmentation, %d allocations: address range over the rounds / bytes live (16 B granules)",
        first_of(r, "threads")))
  end
  r = rows_of(res, "oom")
  if #r > 0 then
    out[#out + 1] = pivot(r, "size", function(x) return fmt(100 * x.fraction, "%.1f%%") .. flag(x) end,
      string.format("### Out of memory: bytes served before the first NULL / capacity (%s)",
        report.bytes(first_of(r, "capacity"))))
  end
  for _, test in ipairs { "synth", "synth_write" } do
    r = rows_of(res, test)
    if #r > 0 then
      local by = {}
      for _, x in ipairs(r) do by[x.size] = by[x.size] or {}; table.insert(by[x.size], x) end
      local sizes = {}
      for s in pairs(by) do sizes[#sizes + 1] = s end
      table.sort(sizes)
      for _, s in ipairs(sizes) do
        out[#out + 1] = pivot(by[s], "threads", function(x) return fmt(x.ms, "%.4f") end,
          string.format("### Synthetic workload, sizes in [4, %d], %s: ms", s,
            test == "synth" and "allocation" or "writing every word (per launch)"))
      end
    end
  end
  return table.concat(out, "\n")
end

--- survey.html(res, path) -> text: one self-contained page (inline script,
-- no network) with a plot per test, allocators as series
-- (cupola/survey_page.lua holds the page).
function survey.html(res, path)
  local page = require("cupola.survey_page")((survey.json(res):gsub("</", "<\\/")))
  if path then
    local f = assert(io.open(path, "w"))
    f:write(page)
    f:close()
  end
  return page
end

return survey
