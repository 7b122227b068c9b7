-- A native pool, step by step: a pool made from properties, its attributes, an
-- allocation from it (cudaMallocFromPoolAsync), trimming, and the table
-- comparing the default pool with a custom one, with measured figures.
--   bin/cupola examples/custom_mempool.lua
local cupola = cupola or require "cupola"
local MiB = 1024 * 1024
local R = cupola.report

local s <close> = cupola.stream()
local pool <close> = cupola.mempool { location = "device", max_size = "1GiB", release_threshold = "1MiB" }

print(string.format("custom memory pool on backend %s (%s)", cupola.backend(), cupola.device().name))
local rows = {}
for _, k in ipairs { "release_threshold", "reuse_follow_event_dependencies", "reuse_allow_opportunistic",
  "reuse_allow_internal_dependencies", "reserved_current", "reserved_high", "used_current", "used_high" } do
  rows[#rows + 1] = { k, tostring(pool[k]) }
end
print(R.table({ "attribute", "value" }, rows))

local b = pool:alloc("64MiB", s)
s:synchronize()
print(string.format("after a 64 MiB allocation: used %d MiB, reserved %d MiB", pool.used_current // MiB, pool.reserved_current // MiB))
b:free()
s:synchronize()
print(string.format("after its free:             used %d MiB, reserved %d MiB (threshold 1 MiB)", pool.used_current // MiB, pool.reserved_current // MiB))
pool:trim(0)
print(string.format("after trim(0):              reserved %d MiB", pool.reserved_current // MiB))

-- Host cost of one stream-ordered alloc+free pair, 4 KiB, from each pool.
local default = cupola.mempool.default()
local function pair_default() cupola.malloc_async(4096, s):free() end
local function pair_custom() pool:alloc(4096, s):free() end
pool.release_threshold = "64MiB"
local ns_default = cupola.bench.host_ns(pair_default, 2000)
local ns_custom = cupola.bench.host_ns(pair_custom, 2000)
s:synchronize()

print()
print(R.table({ "feature", "default pool", "custom pool" }, {
  { "global, shared by the device", "yes", "no (per instance)" },
  { "created for you", "yes", "no (cupola.mempool{...})" },
  { "configurable", "release threshold, reuse", "location, max size, handles, all attributes" },
  { "used by malloc_async", cupola.mempool.current() == default and "yes" or "no", "after set_current" },
  { "lifetime", "the device's", "until closed or collected" },
  { "alloc+free pair, 4 KiB (ns, host)", string.format("%.0f", ns_default), string.format("%.0f", ns_custom) },
}))
return { ns_default = ns_default, ns_custom = ns_custom }
