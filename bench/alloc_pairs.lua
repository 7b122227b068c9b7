-- bench/alloc_pairs.lua: host wall time of one alloc+free pair, per path and
-- size (median of 5 repetitions after a warm-up), the figure GPU.md lists
-- for CUDA's own paths.  Every pair goes through Lua, so the Lua call cost
-- is in every row alike; trace replay (bench/replay.lua) gives the C cost.
--   bin/cupola bench/alloc_pairs.lua [pairs-per-repetition]
local cupola = cupola or require "cupola"
local bench = cupola.bench

local n = tonumber(arg and arg[1]) or 2000
local s <close> = cupola.stream()
local sizes = { 256, 65536, 4 * 1024 * 1024 }
local rows = {}

local function measure(name, size, fn, count)
  local ns = bench.host_ns(fn, count or n)
  rows[#rows + 1] = { name, cupola.report.bytes(size), math.floor(ns + 0.5) }
  s:synchronize()
end

local default = cupola.mempool.default()
local saved = default.release_threshold
for _, size in ipairs(sizes) do
  measure("malloc + free (cudaMalloc)", size, function() cupola.malloc(size):free() end, 200)
  default.release_threshold = 0
  measure("malloc_async + free, threshold 0", size, function() cupola.malloc_async(size, s):free() end)
  default.release_threshold = cupola.bytes "1TiB"
  measure("malloc_async + free, threshold max", size, function() cupola.malloc_async(size, s):free() end)
  local mp <close> = cupola.mempool { release_threshold = "1TiB" }
  measure("mempool:alloc + free (FromPoolAsync)", size, function() mp:alloc(size, s):free() end)
  for _, kind in ipairs { "tlsf", "caching", "freelist" } do
    local p <close> = cupola.pool { kind = kind, upstream = "device", initial = "64MiB" }
    measure("cupola.pool " .. kind, size, function() p:alloc(size, s):free() end)
  end
  local arena <close> = cupola.pool { kind = "arena", upstream = "device", initial = "64MiB" }
  measure("cupola.pool arena (alloc + reset)", size, function() arena:alloc(size, s); arena:reset() end)
end
default.release_threshold = saved

print(string.format("alloc+free pair, host ns (median of 5 x %d), backend %s (%s)", n, cupola.backend(),
  cupola.device().name))
print(cupola.report.table({ "path", "size", "ns/pair" }, rows))
return rows
