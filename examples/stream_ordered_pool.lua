-- Several streams sharing one pool.  A block freed on
-- one stream behind unfinished work may only be reused by another stream
-- once that work is done: with reuse = "stream" (never across streams),
-- "event" (after the free's event has completed) or "wait" (at once, the
-- new stream waiting on it).  The data shows it: stream A's late write must
-- never land on what stream B wrote.  Over the "device" upstream a pool that
-- must grow calls cudaMalloc, which synchronizes the device, so B ends up
-- waiting for A anyway; over "async" (cudaMallocAsync) it does not.  Then a
-- many-stream loop against cudaMallocFromPoolAsync for comparison.
--   bin/cupola examples/stream_ordered_pool.lua
local cupola = cupola or require "cupola"
local K, R = cupola.kernels, cupola.report
local MiB = 1024 * 1024

print(string.format("streams sharing one pool on backend %s (%s)", cupola.backend(), cupola.device().name))

local function race(reuse, upstream)
  local p <close> = cupola.pool { kind = "tlsf", upstream = upstream, initial = "16MiB", reuse = reuse }
  local a <close> = cupola.stream()
  local b <close> = cupola.stream()
  local x = p:alloc(MiB, a)
  local addr = x.address
  K.spin(30000, { stream = a }) -- A is busy...
  K.fill(x, 1, { type = "u8" }) -- ...and writes x late
  x:free(a)
  local t0 = cupola.clock()
  local y = p:alloc(MiB, b)
  K.fill(y, 2, { type = "u8" })
  b:synchronize() -- B waited for A only if the pool made it wait
  local b_ms = (cupola.clock() - t0) * 1e3
  local reused = y.address == addr
  cupola.synchronize()
  local ok = K.checksum(y, { type = "u8" }) == 2 * MiB
  y:free()
  return { reuse, upstream, reused and "yes" or "no", ok and "intact" or "CORRUPTED", string.format("%.1f", b_ms) }
end

local rows = {}
for _, upstream in ipairs { "device", "async" } do
  for _, reuse in ipairs { "stream", "event", "wait" } do rows[#rows + 1] = race(reuse, upstream) end
end
print(R.table({ "reuse", "upstream", "same block on B", "B's data", "ms until B done (A busy 30 ms)" }, rows))

-- Many streams, many blocks: one shared pool vs cudaMallocAsync.
local streams = {}
for i = 1, 4 do streams[i] = cupola.stream() end
local function workload(alloc)
  for round = 1, 50 do
    for i, s in ipairs(streams) do
      local b = alloc((64 + 16 * ((round + i) % 8)) * 1024, s)
      K.fill(b, i, { type = "u8" })
      b:free()
    end
  end
end
local pool <close> = cupola.pool { kind = "tlsf", upstream = "device", initial = "64MiB", reuse = "event" }
local mp <close> = cupola.mempool { release_threshold = "1GiB" }
local ns_pool = cupola.bench.host_ns(function() workload(function(n, s) return pool:alloc(n, s) end) end, 1)
local ns_async = cupola.bench.host_ns(function() workload(function(n, s) return mp:alloc(n, s) end) end, 1)
cupola.synchronize()
print(string.format("4 streams x 50 rounds of alloc/fill/free: cupola tlsf pool %.2f ms, cudaMallocFromPoolAsync %.2f ms (host time)",
  ns_pool / 1e6, ns_async / 1e6))
for _, s in ipairs(streams) do s:close() end
return rows
