-- A custom pool: one upstream allocation, sub-allocated by offset;
-- a kernel on the sub-allocations; everything freed at once with reset().
-- Then its pitfalls: what does not fit fails cleanly (or falls back
-- to the upstream), and a free list reuses what a bump pointer cannot.
-- Last, raw blocks: the same pool handing out bare addresses, for loops
-- that allocate and free at C speed, passed straight to a kernel.
--   bin/cupola examples/custom_pool.lua
local cupola = cupola or require "cupola"
local K, R = cupola.kernels, cupola.report

print(string.format("custom pool on backend %s (%s)", cupola.backend(), cupola.device().name))
local s <close> = cupola.stream()
local arena <close> = cupola.pool { kind = "arena", upstream = "device", initial = "32MiB", grow = false }

-- Sub-allocations from the one 32 MiB upstream block, a kernel on each.
local parts, rows = {}, {}
for i = 1, 4 do
  local b = assert(arena:alloc("4MiB", s))
  K.fill(b, i, { type = "f32" })
  parts[i] = b
end
for i, b in ipairs(parts) do
  rows[i] = { i, string.format("0x%x", b.address), b.address - parts[1].address, K.checksum(b) / (b.size // 4) }
end
print(R.table({ "block", "address", "offset", "value" }, rows))

-- 10M floats do not fit in 32 MiB: out of memory is data, three values
-- (nil, the message, the kind "out_of_memory"), not an error.
local big, msg, why = arena:alloc(10000000 * 4, s)
print(string.format("40 MB more from a 32 MiB arena: %s, kind %q, message:", tostring(big), why))
-- the message, cut at 100 columns
local line = " "
for word in msg:gmatch "%S+" do
  if #line + 1 + #word > 100 then
    print(line)
    line = " "
  end
  line = line .. " " .. word
end
print(line)
local st = arena:stats()
print(string.format("arena: used %s of %s reserved, %d failed", R.bytes(st.used), R.bytes(st.reserved), st.failed))

-- freeAll: every block at once.
arena:reset()
print(string.format("after reset(): used %s; the old buffers are closed: %s", R.bytes(arena:stats().used),
  tostring(parts[1].freed)))

-- Fallback: what the pool cannot hold goes straight to the upstream.
local fb <close> = cupola.pool { kind = "freelist", upstream = "device", initial = "32MiB", grow = false, fallback = true }
local x = assert(fb:alloc(10000000 * 4, s))
K.fill(x, 1.0)
print(string.format("with fallback = true the 40 MB request is served: sum %.0f", K.checksum(x)))
x:free()

-- A free list reuses freed blocks in any order, where the arena only resets.
local fl <close> = cupola.pool { kind = "freelist", upstream = "device", initial = "32MiB", grow = false }
local blocks = {}
for i = 1, 8 do blocks[i] = fl:alloc("4MiB", s) end
for i = 1, 8, 2 do blocks[i]:free() end
local st2 = fl:stats()
print(string.format("free list with every other 4 MiB block freed: largest free %s of %s free, fragmentation %.2f",
  R.bytes(st2.largest_free), R.bytes(st2.free_bytes), st2.fragmentation))
for i = 2, 8, 2 do blocks[i]:free() end
st2 = fl:stats()
print(string.format("after the rest: largest free %s (coalesced), fragmentation %.2f", R.bytes(st2.largest_free),
  st2.fragmentation))

-- Raw blocks: p:alloc_raw returns an integer address (no Buffer object made),
-- p:free_raw gives it back, stream-ordered like b:free.  The pool checks every
-- address against its own map, so a wrong one raises instead of corrupting it.
local t0, n = cupola.clock(), 100000
for _ = 1, n do fl:free_raw(fl:alloc_raw(4096, s)) end
print(string.format("raw alloc+free pair from Lua: %.0f ns", (cupola.clock() - t0) * 1e9 / n))
local a = fl:alloc_raw("4KiB", s)
local ok, err = pcall(fl.free_raw, fl, a + 256)
print("free_raw inside a block: " .. tostring(err):match "%((.-);")
-- A kernel of one's own takes the address as its "ptr" argument ...
local m <close> = cupola.module { name = "iota.cu", source = [[
extern "C" __global__ void iota(float *x, unsigned n)
{
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] = (float)i;
}
]] }
m:kernel("iota", { "ptr", "u32" }):launch({ threads = 1024, stream = s }, a, 1024)
-- ... and p:buffer(address) hands the block to a Buffer for what needs one:
-- the Buffer owns it from then on, and its free gives it back.
local b = fl:buffer(a)
print(string.format("buffer(a): %s, sum of 0..1023 = %.0f", tostring(b), K.checksum(b)))
b:free()
local raw1, raw2 = fl:alloc_raw(100, s), fl:alloc_raw(200, s)
print(string.format("live raw blocks %d; close() frees them with the pool: %d", fl:stats().live_raw, fl:close()))
assert(not ok and raw1 ~= raw2)
return { failed = st.failed }
