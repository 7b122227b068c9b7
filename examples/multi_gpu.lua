-- Streams on two GPUs sharing one pool vs a pool each.
--   bin/cupola examples/multi_gpu.lua [rounds]
-- Each round allocates a block on a stream of each device, writes it with a
-- kernel on that device, reads it back in a checksum and frees it.  "shared":
-- one native pool on device 0 that device 1 may read and write
-- (mp:set_access(1, "rw")), so device 1's kernels reach over the link to
-- device 0's memory; "a pool each": each device allocates its own memory.
-- The same again with cupola's own TLSF pool (upstream "device"), shared
-- through peer access.  With one device both streams sit on device 0 (the
-- figures then compare nothing across devices); CUPOLA_HOST_DEVICES=2 gives
-- the host backend two.
local cupola = cupola or require "cupola"
local K = cupola.kernels

local ROUNDS = tonumber(arg and arg[1]) or tonumber(os.getenv "CUPOLA_ITERS") or 50
local SIZE = 16 * 1024 * 1024
local n = cupola.device_count()
local d1 = n >= 2 and 1 or 0
local peers = n >= 2 and cupola.can_access_peer(1, 0) and cupola.can_access_peer(0, 1)
if peers then
  cupola.enable_peer_access(0, 1)
  cupola.enable_peer_access(1, 0)
end

local streams = { cupola.stream { device = 0 }, cupola.stream { device = d1 } }

-- one run: pools[i] serves the stream of device i-1; returns ms per round
local function run(pools)
  local want = SIZE / 4 * 3.0
  cupola.synchronize(0); cupola.synchronize(d1)
  local t0 = cupola.clock()
  for _ = 1, ROUNDS do
    local bufs = {}
    for i, s in ipairs(streams) do
      local b = assert(pools[i]:alloc(SIZE, s))
      K.fill(b, 3.0, { stream = s })
      bufs[i] = b
    end
    for i, s in ipairs(streams) do
      local sum = K.checksum(bufs[i], { stream = s })
      if sum ~= want then error(string.format("device %d read %.0f, expected %.0f", i - 1, sum, want)) end
      bufs[i]:free(s)
    end
  end
  for _, s in ipairs(streams) do s:synchronize() end
  return (cupola.clock() - t0) * 1e3 / ROUNDS
end

print(string.format("multi_gpu on backend %s: %d device(s)%s, %d rounds of {alloc 16 MiB, fill, checksum, free} on each device",
  cupola.backend(), n, n >= 2 and (peers and ", peers enabled" or ", no peer access") or " (both streams on device 0)", ROUNDS))

local results = {}
-- native pools
local shared = cupola.mempool { device = 0, release_threshold = "1GiB" }
if n >= 2 then shared:set_access(1, "rw") end
results.mempool_shared = run { shared, shared }
local own = { cupola.mempool { device = 0, release_threshold = "1GiB" } }
own[2] = d1 == 0 and own[1] or cupola.mempool { device = 1, release_threshold = "1GiB" }
results.mempool_each = run(own)
-- cupola pools (TLSF over cudaMalloc); sharing needs peer access for kernels
local tl_shared = cupola.pool { kind = "tlsf", upstream = "device", device = 0 }
if n < 2 or peers then results.tlsf_shared = run { tl_shared, tl_shared } end
local tl_own = { cupola.pool { kind = "tlsf", upstream = "device", device = 0 },
                 cupola.pool { kind = "tlsf", upstream = "device", device = d1 } }
results.tlsf_each = run(tl_own)

for _, k in ipairs { "mempool_shared", "mempool_each", "tlsf_shared", "tlsf_each" } do
  if results[k] then print(string.format("  %-16s %9.3f ms per round", k, results[k])) end
end
print(string.format("  shared/each (native pools): %.2fx", results.mempool_shared / results.mempool_each))
print("data checked: ok")

shared:close(); own[1]:close(); if own[2] ~= own[1] then own[2]:close() end
tl_shared:close(); tl_own[1]:close(); tl_own[2]:close()
for _, s in ipairs(streams) do s:close() end
return results
