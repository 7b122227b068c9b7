-- bench/multistream.lua: seed 001, "compare your custom allocator with
-- cudaMallocAsync in a multi-stream scenario".
--
-- K streams (default 1, 2, 4, 8) each run N iterations of
-- {allocate, kernels.pattern over the block, free}, issued round-robin from
-- this thread, with sizes drawn from a seeded log-uniform distribution
-- (64 KiB .. 8 MiB, the same sequence for every allocator).  Allocators:
--   cudaMalloc        cupola.malloc / free (cudaFree synchronizes the device)
--   cudaMallocAsync   cupola.malloc_async on the device's default pool, as it is
--   native pool       cupola.mempool{release_threshold = "1TiB"} (a custom
--                     cudaMemPool, cudaMallocFromPoolAsync)
--   cupola pools      every kind (tlsf, freelist, caching, arena) under every
--                     reuse policy (stream, event, wait), device upstream
--   raw               tlsf and caching (reuse event) and tlsf (reuse stream)
--                     through p:alloc_raw / p:free_raw: an integer address, no
--                     Buffer; its kernels are the same pattern and check written
--                     as a kernel of cupola.module (launched with the address),
--                     and "cupola tlsf/event, k:launch" runs those kernels on
--                     Buffers, so raw against Buffer is read between those two
--                     rows and kernels.pattern against k:launch between that one
--                     and "cupola tlsf/event"
-- Reported per allocator and K: wall time of the timed pass (median of REPS,
-- after a warm-up pass, ending when every stream has drained), bytes reserved
-- from the device at the end and at the peak, and a data check: a separate
-- pass where, in each round, half of the streams verify their block's pattern
-- before freeing it while the others free theirs with the kernel still in
-- flight, so a block handed to another stream too early shows as bad bytes.
--
--   lua5.4 bench/multistream.lua [N] [K,K,...] [seed]     (N: CUPOLA_ITERS too)
-- Defaults: N = 400 on CUDA, 20 on the host backend (its kernels run on CPU
-- threads); K = 1,2,4,8; seed 1.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local cupola = cupola or require "cupola"
local K = cupola.kernels
local report = cupola.report

local backend = cupola.backend()
local N = tonumber(arg and arg[1]) or tonumber(os.getenv "CUPOLA_ITERS") or (backend == "cuda" and 400 or 20)
local KS = {}
for k in ((arg and arg[2]) or "1,2,4,8"):gmatch "%d+" do KS[#KS + 1] = tonumber(k) end
local SEED = tonumber(arg and arg[3]) or 1
local REPS = tonumber(os.getenv "CUPOLA_REPS") or 3
local MIN, MAX = 64 * 1024, 8 * 1024 * 1024

-- splitmix64: the same sizes whatever the Lua build's math.random.
local function rng(seed)
  local x = seed
  return function()
    x = x + 0x9E3779B97F4A7C15
    local z = x
    z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ~ (z >> 27)) * 0x94D049BB133111EB
    z = z ~ (z >> 31)
    return (z >> 11) / (1 << 53) -- [0, 1)
  end
end

-- sizes[k][i]: log-uniform in [MIN, MAX), multiples of 256 bytes.
local function make_sizes(nstreams)
  local r, sizes = rng(SEED), {}
  local lmin, lmax = math.log(MIN), math.log(MAX)
  for k = 1, nstreams do
    sizes[k] = {}
    for i = 1, N do
      sizes[k][i] = math.floor(math.exp(lmin + (lmax - lmin) * r()) / 256) * 256
    end
  end
  return sizes
end

-- Each allocator: open() -> state; alloc(state, size, s) -> buffer or nil;
-- reserved(state) -> now, peak; close(state).
local allocators = {}

allocators[#allocators + 1] = {
  name = "cudaMalloc",
  open = function() return { live = 0, peak = 0 } end,
  alloc = function(st, size)
    local b = cupola.malloc(size)
    st.live = st.live + size
    if st.live > st.peak then st.peak = st.live end
    return b
  end,
  free = function(st, b)
    st.live = st.live - b.size
    b:free()
  end,
  reserved = function(st) return st.live, st.peak end,
  close = function() end,
}

allocators[#allocators + 1] = {
  name = "cudaMallocAsync",
  open = function()
    local m = cupola.mempool.default()
    cupola.synchronize()
    m:trim(0)
    m:reset_high()
    return { m = m }
  end,
  alloc = function(_, size, s) return cupola.malloc_async(size, s) end,
  reserved = function(st) return st.m.reserved_current, st.m.reserved_high end,
  close = function(st)
    cupola.synchronize()
    st.m:trim(0)
  end,
}

allocators[#allocators + 1] = {
  name = "native pool",
  open = function() return { m = cupola.mempool { release_threshold = "1TiB" } } end,
  alloc = function(st, size, s) return st.m:alloc(size, s) end,
  reserved = function(st) return st.m.reserved_current, st.m.reserved_high end,
  close = function(st)
    cupola.synchronize()
    st.m:close()
  end,
}

for _, kind in ipairs { "tlsf", "freelist", "caching", "arena" } do
  for _, reuse in ipairs { "stream", "event", "wait" } do
    allocators[#allocators + 1] = {
      name = string.format("cupola %s/%s", kind, reuse),
      cupola_pool = true,
      open = function() return { p = cupola.pool { kind = kind, upstream = "device", reuse = reuse } } end,
      alloc = function(st, size, s) return st.p:alloc(size, s) end,
      reserved = function(st)
        local x = st.p:stats()
        return x.reserved, x.reserved_peak
      end,
      close = function(st)
        cupola.synchronize()
        st.p:close()
      end,
    }
  end
end

-- The pattern and its check as kernels of one's own (for raw addresses),
-- compiled on first use: bytes that depend on the seed and the offset, and
-- the count of bytes that differ.
local KSRC = [[
#include <cupola/device.h>
__device__ unsigned char pbyte(unsigned long long seed, unsigned long long i)
{
    unsigned long long z = (seed ^ (i >> 3)) * 0x9E3779B97F4A7C15ull;
    z ^= z >> 29;
    return (unsigned char)(z >> ((i & 7) * 8));
}
extern "C" __global__ void raw_pattern(unsigned char *p, unsigned long long n, unsigned long long seed)
{
    for (unsigned long long i = cupola_global_index(); i < n; i += cupola_grid_size())
        p[i] = pbyte(seed, i);
}
extern "C" __global__ void raw_verify(const unsigned char *p, unsigned long long n, unsigned long long seed,
                                      unsigned long long *bad)
{
    unsigned long long c = 0;
    for (unsigned long long i = cupola_global_index(); i < n; i += cupola_grid_size())
        c += p[i] != pbyte(seed, i);
    if (c)
        atomicAdd(bad, c);
}
]]
local own
local function own_kernels()
  if not own then
    local m = cupola.module { source = KSRC, name = "multistream_raw.cu" }
    own = { m = m, pattern = m:kernel("raw_pattern", { "ptr", "u64", "u64" }),
      verify = m:kernel("raw_verify", { "ptr", "u64", "u64", "ptr" }), bad = {} }
  end
  return own
end
-- grid from the size, as the built-in kernels choose it (grid-stride beyond)
local function shape(size, s) return { grid = math.min((size + 255) // 256, 1024), block = 256, stream = s } end
local function own_pattern(_, x, size, seed, s)
  local o = own_kernels()
  o.pattern:launch(shape(size, s), x, size, seed)
end
local function own_verify(_, x, size, seed, s)
  local o = own_kernels()
  local bad = o.bad[s]
  if not bad then
    bad = cupola.malloc(8)
    o.bad[s] = bad
  end
  bad:memset(0, s)
  o.verify:launch(shape(size, s), x, size, seed, bad)
  return (string.unpack("<I8", bad:read(0, 8, s)))
end

allocators[#allocators + 1] = {
  name = "cupola tlsf/event, k:launch",
  cupola_pool = true,
  open = function() return { p = cupola.pool { kind = "tlsf", upstream = "device", reuse = "event" } } end,
  alloc = function(st, size, s) return st.p:alloc(size, s) end,
  pattern = function(st, b, size, seed, s) own_pattern(st, b, size, seed, s) end,
  verify = own_verify,
  reserved = function(st)
    local x = st.p:stats()
    return x.reserved, x.reserved_peak
  end,
  close = function(st)
    cupola.synchronize()
    st.p:close()
  end,
}
for _, c in ipairs { { "tlsf", "event" }, { "caching", "event" }, { "tlsf", "stream" } } do
  local kind, reuse = c[1], c[2]
  allocators[#allocators + 1] = {
    name = string.format("cupola %s/%s raw", kind, reuse),
    cupola_pool = true,
    open = function() return { p = cupola.pool { kind = kind, upstream = "device", reuse = reuse } } end,
    alloc = function(st, size, s) return st.p:alloc_raw(size, s) end,
    free = function(st, a) st.p:free_raw(a) end,
    pattern = own_pattern,
    verify = own_verify,
    reserved = function(st)
      local x = st.p:stats()
      return x.reserved, x.reserved_peak
    end,
    close = function(st)
      cupola.synchronize()
      assert(st.p:close() == 0, "raw blocks left live")
    end,
  }
end

local function free(a, st, b)
  if a.free then a.free(st, b) else b:free() end
end

-- One pass over every stream; check: verify half the streams' blocks.
-- Returns failed allocations and bad bytes.
local function pass(a, st, streams, sizes, check, round_seed)
  local failed, bad = 0, 0
  for i = 1, N do
    for k = 1, #streams do
      local s = streams[k]
      local size = sizes[k][i]
      local b = a.alloc(st, size, s)
      if b then
        local seed = round_seed + i * 16 + k
        if a.pattern then a.pattern(st, b, size, seed, s) else K.pattern(b, seed, { stream = s }) end
        if check and (i + k) % 2 == 0 then
          bad = bad + (a.verify and a.verify(st, b, size, seed, s) or K.verify(b, seed, { stream = s }))
        end
        free(a, st, b)
      else
        failed = failed + 1
      end
    end
  end
  cupola.synchronize()
  return failed, bad
end

local function median(t)
  local c = {}
  for i, v in ipairs(t) do c[i] = v end
  table.sort(c)
  return c[(#c + 1) // 2]
end

local function run_one(a, nstreams, sizes)
  local streams = {}
  for k = 1, nstreams do streams[k] = cupola.stream() end
  local st = a.open()
  local failed = pass(a, st, streams, sizes, false, 0) -- warm-up
  local times = {}
  for r = 1, REPS do
    local t0 = cupola.clock()
    failed = failed + pass(a, st, streams, sizes, false, r * 1000)
    times[r] = (cupola.clock() - t0) * 1e3
  end
  local f2, bad = pass(a, st, streams, sizes, true, 99999)
  local now, peak = a.reserved(st)
  a.close(st)
  for _, s in ipairs(streams) do s:close() end
  return { name = a.name, cupola_pool = a.cupola_pool, ms = median(times), reserved = now, peak = peak,
    failed = failed + f2, bad = bad }
end

local results = {}
print(string.format("## seed 001: K streams x %d x {alloc, pattern, free}, sizes log-uniform %s..%s (seed %d), "
  .. "backend %s (%s); wall time median of %d after a warm-up", N, report.bytes(MIN), report.bytes(MAX), SEED,
  backend, cupola.device().name, REPS))
for _, nstreams in ipairs(KS) do
  local sizes = make_sizes(nstreams)
  local rows, byname = {}, {}
  for _, a in ipairs(allocators) do
    local r = run_one(a, nstreams, sizes)
    byname[r.name] = r
    rows[#rows + 1] = { r.name, string.format("%.2f", r.ms), report.bytes(r.reserved), report.bytes(r.peak),
      r.failed == 0 and "0" or tostring(r.failed), r.bad == 0 and "ok" or (r.bad .. " bad bytes") }
    results[#results + 1] = { k = nstreams, name = r.name, ms = r.ms, reserved = r.reserved, peak = r.peak,
      failed = r.failed, bad = r.bad }
  end
  print("")
  print(string.format("### K = %d streams", nstreams))
  print("")
  print(report.table({ "allocator", "ms", "reserved end", "reserved peak", "failed", "data" }, rows))
  -- The best cupola pool against cudaMallocAsync: the fastest of those
  -- strictly ahead in both time and peak bytes; else the fastest overall.
  local async, best, fastest = byname.cudaMallocAsync, nil, nil
  for _, a in ipairs(allocators) do
    local r = byname[a.name]
    if r.cupola_pool and r.failed == 0 and r.bad == 0 then
      if not fastest or r.ms < fastest.ms then fastest = r end
      if r.ms < async.ms and r.peak < async.peak and (not best or r.ms < best.ms) then best = r end
    end
  end
  local b = best or fastest
  if b then
    print(string.format("best cupola pool at K=%d: %s, %.2f ms / %s peak vs cudaMallocAsync %.2f ms / %s peak: %s",
      nstreams, b.name, b.ms, report.bytes(b.peak), async.ms, report.bytes(async.peak),
      best and "ahead in time and bytes" or "NOT ahead in both"))
  end
end
return results
