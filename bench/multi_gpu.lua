-- bench/multi_gpu.lua: cupola's multi-device paths from Lua, the same
-- measurements as bench/multi_gpu.cu (run both in one command and compare).
--   bin/cupola bench/multi_gpu.lua
-- Prints "key value" lines.
local cupola = cupola or require "cupola"

local n = cupola.device_count()
print("backend " .. cupola.backend())
print("devices " .. n)
if n < 2 then print "skipped needs two devices"; return end

local function median(t) table.sort(t); return t[(#t + 1) // 2] end

for _, p in ipairs { { 0, 1 }, { 1, 0 } } do
  if cupola.can_access_peer(p[1], p[2]) then cupola.enable_peer_access(p[1], p[2]) end
end

-- peer copies: b:copy_to across devices (cudaMemcpyPeerAsync), timed with events
local BYTES = 256 * 1024 * 1024
local b0 = cupola.malloc(BYTES, { device = 0 })
local b1 = cupola.malloc(BYTES, { device = 1 })
b0:memset(1); b1:memset(2)
cupola.synchronize(0); cupola.synchronize(1)
local function gbps(src, dst, dev)
  local s = cupola.stream { device = dev }
  local a, b = cupola.event {}, cupola.event {}
  local ms = {}
  for i = 1, 25 do
    a:record(s); src:copy_to(dst, s); b:record(s); b:synchronize()
    if i > 5 then ms[#ms + 1] = a:elapsed(b) end
  end
  s:close()
  return BYTES / (median(ms) * 1e-3) / 1e9
end
print(string.format("peer_copy_gbps_0to1 %.1f", gbps(b0, b1, 0)))
print(string.format("peer_copy_gbps_1to0 %.1f", gbps(b1, b0, 1)))
b0:free(); b1:free()

-- alloc + free pairs of 4 KiB from the default pools (threshold max)
local N = 20000
local s = { cupola.stream { device = 0 }, cupola.stream { device = 1 } }
local def = { cupola.mempool.default(0), cupola.mempool.default(1) }
for _, p in ipairs(def) do p.release_threshold = math.maxinteger end
def[2]:set_access(0, "rw")
local function pairs_ns(pick)
  local per = {}
  for rep = 1, 6 do
    local t0 = cupola.clock()
    for i = 1, N do
      local pool, st = pick(i)
      pool:alloc(4096, st):free()
    end
    local t1 = cupola.clock()
    s[1]:synchronize(); s[2]:synchronize()
    if rep > 1 then per[#per + 1] = (t1 - t0) * 1e9 / N end
  end
  return median(per)
end
print(string.format("pair_ns_dev0 %.0f", pairs_ns(function() return def[1], s[1] end)))
print(string.format("pair_ns_alternating %.0f", pairs_ns(function(i)
  local d = i % 2 + 1; return def[d], s[d] end)))
print(string.format("pair_ns_cross_pool %.0f", pairs_ns(function() return def[2], s[1] end)))
-- cupola's own pool over device 1's memory, used from device 0's stream
local tl = cupola.pool { kind = "tlsf", upstream = "device", device = 1 }
print(string.format("pair_ns_tlsf_cross %.0f", pairs_ns(function() return tl, s[1] end)))
tl:close()
s[1]:close(); s[2]:close()
