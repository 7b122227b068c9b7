-- Raw allocation: p:alloc_raw(size, s) -> integer address, p:free_raw(address, s),
-- p:buffer(address) -> Buffer.  A raw block is a pool block without a Lua
-- object; its stream order, its hand-over to a Buffer, and its end with the
-- pool.  (Wrong uses: spec/misuse_spec.lua; every kind under the battery:
-- spec/pool_conformance_spec.lua, check "raw".)
local cupola = require "cupola"
local K = cupola.kernels

local MiB = 1024 * 1024

describe("raw allocation", function()
  it("hands out aligned integer addresses and counts them", function()
    local p <close> = cupola.pool { kind = "tlsf", upstream = "virtual", alignment = 4096 }
    local a = p:alloc_raw(100)
    local b = p:alloc_raw("64KiB")
    assert.equals("integer", math.type(a))
    assert.equals(0, a % 4096)
    assert.equals(0, b % 4096)
    assert.is_true(b >= a + 100 or a >= b + 65536, "no overlap")
    local st = p:stats()
    assert.equals(2, st.live_raw)
    assert.equals(0, st.live_buffers)
    assert.equals(100 + 65536, st.used)
    assert.equals(2, st.allocs)
    assert.matches("0 live, 2 raw%)$", tostring(p))
    p:free_raw(a)
    p:free_raw(b)
    st = p:stats()
    assert.equals(0, st.live_raw)
    assert.equals(0, st.used)
    assert.equals(2, st.frees)
    assert.matches("0 live%)$", tostring(p))
  end)

  it("keeps raw blocks and Buffers apart", function()
    local p <close> = cupola.pool { kind = "freelist" }
    local raw, bufs = {}, {}
    for i = 1, 50 do
      raw[i] = { address = p:alloc_raw(i * 100), size = i * 100 }
      bufs[i] = p:alloc(i * 100)
    end
    local all = {}
    for i = 1, 50 do all[#all + 1] = raw[i]; all[#all + 1] = bufs[i] end
    table.sort(all, function(x, y) return x.address < y.address end)
    for i = 2, #all do assert.is_true(all[i - 1].address + all[i - 1].size <= all[i].address) end
    for i = 1, 50 do p:free_raw(raw[i].address); bufs[i]:free() end
    assert.equals(0, p:stats().used)
  end)

  it("grows its map past many live blocks and many freed ones", function()
    local p <close> = cupola.pool { kind = "arena", upstream = "virtual" }
    local live = {}
    for i = 1, 5000 do
      live[i] = p:alloc_raw(64)
      -- an arena never hands an address out twice: every free leaves a mark
      p:free_raw(p:alloc_raw(32))
    end
    assert.equals(5000, p:stats().live_raw)
    for i = 5000, 1, -2 do p:free_raw(live[i]) end
    assert.equals(2500, p:stats().live_raw)
    assert.error_matches(function() p:free_raw(live[5000]) end, "double free", 1, true)
    for i = 1, 5000, 2 do p:free_raw(live[i]) end
    local st = p:stats()
    assert.equals(0, st.live_raw)
    assert.equals(st.allocs, st.frees)
  end)

  it("frees on the stream it was allocated on unless told another", function()
    local p <close> = cupola.pool { kind = "tlsf", initial = "4MiB", reuse = "stream" }
    local a <close> = cupola.stream()
    local b <close> = cupola.stream()
    -- freed on its own stream (a): reused there
    local x = p:alloc_raw(MiB, a)
    p:free_raw(x)
    local y = p:alloc_raw(MiB, a)
    assert.equals(x, y)
    -- freed on b: reused on b, and not on a while b's work may be pending
    K.spin(30000, { stream = b })
    p:free_raw(y, b)
    local z = p:alloc_raw(MiB, a)
    assert.are_not.equals(y, z)
    local w = p:alloc_raw(MiB, b)
    assert.equals(y, w)
    p:free_raw(z); p:free_raw(w)
    cupola.synchronize()
  end)

  it("never hands a raw block freed behind pending work to another stream (reuse event)", function()
    local p <close> = cupola.pool { kind = "caching", initial = "4MiB", reuse = "event" }
    local a <close> = cupola.stream()
    local b <close> = cupola.stream()
    local x = p:alloc_raw(MiB, a)
    local xb = p:buffer(x) -- the Buffer's stream is the raw block's
    assert.equals(a, xb.stream)
    K.spin(60000, { stream = a })
    K.fill(xb, 1, { type = "u8" })
    xb:free()
    local y = p:alloc_raw(MiB, b)
    assert.are_not.equals(x, y)
    local yb = p:buffer(y)
    K.fill(yb, 2, { type = "u8" })
    cupola.synchronize()
    assert.equals(2 * MiB, K.checksum(yb, { type = "u8" }))
    yb:free()
  end)

  it("hands a block over to a Buffer, which owns it from then on", function()
    local p <close> = cupola.pool { kind = "tlsf" }
    local s <close> = cupola.stream()
    local a = p:alloc_raw(256, s)
    local b = p:buffer(a)
    assert.equals("cupola.Buffer", getmetatable(b).__name)
    assert.equals(a, b.address)
    assert.equals(256, b.size)
    assert.equals(p, b.pool)
    assert.equals(s, b.stream)
    assert.equals("pool", b.origin)
    local st = p:stats()
    assert.equals(0, st.live_raw)
    assert.equals(1, st.live_buffers)
    assert.equals(256, st.used)
    b:write "raw bytes"
    assert.equals("raw bytes", b:read(0, 9))
    b:free()
    assert.equals(0, p:stats().used)
    assert.error_matches(function() p:free_raw(a) end, "already belongs to the Buffer")
    -- a block on the default stream: a Buffer on the default stream
    local c = p:buffer(p:alloc_raw(16))
    assert.equals(cupola.default_stream, c.stream)
    c:close()
  end)

  it("keeps its stream alive after the Stream's handle is gone", function()
    local p <close> = cupola.pool { kind = "tlsf" }
    local a, c
    do
      local s = cupola.stream()
      a = p:alloc_raw(64, s)
      c = p:alloc_raw(64, s)
      s:close()
    end
    collectgarbage(); collectgarbage()
    local b = p:buffer(a)
    local bs = b.stream
    assert.equals("cupola.Stream", getmetatable(bs).__name)
    assert.is_false(bs.closed)
    b:write "ok"
    assert.equals("ok", b:read(0, 2))
    assert.equals(bs, p:buffer(c).stream, "one handle for the stream")
    b:free()
    collectgarbage()
  end)

  it("takes raw addresses straight into kernels of one's own", function()
    local m <close> = cupola.module { name = "raw.cu", source = [[
extern "C" __global__ void iota(int *x, unsigned n)
{
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] = (int)i;
}
]] }
    local k = m:kernel("iota", { "ptr", "u32" })
    local p <close> = cupola.pool { kind = "tlsf" }
    local s <close> = cupola.stream()
    local a = p:alloc_raw(1024 * 4, s)
    k:launch({ threads = 1024, stream = s }, a, 1024)
    local b = p:buffer(a)
    assert.equals(1023 * 1024 // 2, K.checksum(b, { type = "i32" }))
    b:free()
  end)

  it("is freed with its pool: close() says how many, collection frees them too", function()
    local p = cupola.pool { kind = "freelist" }
    p:alloc_raw(100); p:alloc_raw(200); p:free_raw(p:alloc_raw(300))
    assert.equals(2, p:close())
    assert.is_true(p.closed)
    assert.equals(0, p:close())
    local log = os.tmpname()
    local addr
    do
      local q = cupola.pool { kind = "tlsf", upstream = "virtual", log = log }
      addr = q:alloc_raw(4096)
    end
    collectgarbage(); collectgarbage()
    local f = assert(io.open(log))
    local text = f:read "a"
    f:close()
    os.remove(log)
    assert.matches(string.format("free,0x%x,4096,", addr), text)
  end)

  it("goes with every other block at an arena's reset()", function()
    local p <close> = cupola.pool { kind = "arena", initial = "1MiB" }
    local a = p:alloc_raw(1000)
    local b = p:alloc(1000)
    p:reset()
    local st = p:stats()
    assert.equals(0, st.used)
    assert.equals(0, st.live_raw)
    assert.is_true(b.freed)
    assert.equals(a, p:alloc_raw(1000), "the arena starts again at its beginning")
  end)

  it("has its pool's own pair timed from C for make bench (cupola.core._pair_repeat)", function()
    local p <close> = cupola.pool { kind = "tlsf", upstream = "virtual" }
    local t = require("cupola.core")._pair_repeat(p, 1000, 4096)
    assert.is_true(t > 0 and t < 10)
    local st = p:stats()
    assert.equals(1000, st.allocs)
    assert.equals(1000, st.frees)
    assert.equals(0, st.used)
  end)

  it("works over every kind and both memory and virtual upstreams", function()
    for _, kind in ipairs { "arena", "freelist", "tlsf", "caching", "vmm", "cub", "torch" } do
      for _, up in ipairs { "device", "virtual" } do
        local p = cupola.pool { kind = kind, upstream = up }
        local a = assert(p:alloc_raw(5000))
        if up == "device" then
          local b = p:buffer(a)
          b:write "x"
          assert.equals("x", b:read(0, 1))
          b:free()
        else
          p:free_raw(a)
        end
        assert.equals(0, p:stats().used, kind .. "/" .. up)
        assert.equals(0, p:close())
      end
    end
  end)
end)
