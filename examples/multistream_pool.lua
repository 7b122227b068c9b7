-- A pool shared between two streams: allocate on s1, a kernel on
-- s1, an event, s2 waits for it, a kernel on s2, the free on s2; then a
-- check that s2's values are the ones left in memory.
--   bin/cupola examples/multistream_pool.lua
local cupola = cupola or require "cupola"
local K = cupola.kernels

local N = 1 << 20
local s1 <close> = cupola.stream()
local s2 <close> = cupola.stream()
local ev <close> = cupola.event { timing = false }

local data = cupola.malloc_async(N * 4, s1)
K.spin(5000, { stream = s1 }) -- make s1 slow enough that a missing wait would show
K.fill(data, 1.0, { stream = s1 })
ev:record(s1)
s2:wait(ev)
K.fill(data, 2.0, { stream = s2 })
local sum = K.checksum(data, { stream = s2 })
data:free(s2)
s2:synchronize()

local ok = sum == 2.0 * N
print(string.format("multi-stream pool sharing on backend %s: checksum %.0f (expected %.0f): %s",
  cupola.backend(), sum, 2.0 * N, ok and "ok" or "WRONG"))
if not ok then error("multi-stream pool sharing produced wrong data") end
return { checksum = sum, ok = ok }
