-- Buffers from cudaMalloc and cudaMallocAsync: data, ordering, lifetimes.
local cupola = require "cupola"
local K = cupola.kernels

describe("buffers", function()
  it("come from malloc with the contract's fields", function()
    local b <close> = cupola.malloc "4KiB"
    assert.equals("cupola.Buffer", getmetatable(b).__name)
    assert.equals(4096, b.size)
    assert.equals(4096, #b)
    assert.is_true(math.type(b.address) == "integer" and b.address ~= 0)
    assert.equals(0, b.address % 256)
    assert.equals(cupola.default_stream, b.stream)
    assert.is_nil(b.pool)
    assert.equals("malloc", b.origin)
    assert.matches("^cupola.Buffer %(4096 bytes", tostring(b))
  end)

  it("come from malloc_async on a stream and from the current pool", function()
    local s <close> = cupola.stream()
    local b = cupola.malloc_async("1MiB", s)
    assert.equals(s, b.stream)
    assert.equals(cupola.mempool.current(), b.pool)
    assert.equals("malloc_async", b.origin)
    b:free()
    assert.is_true(b.freed)
    s:synchronize()
  end)

  it("write, read, memset and copy", function()
    local s <close> = cupola.stream()
    local a = cupola.malloc_async(64, s)
    local b = cupola.malloc_async(64, s)
    a:write(string.rep("x", 64))
    a:write("hello", 10)
    assert.equals("xxxxxxxxxxhelloxxx", a:read(0, 18))
    a:copy_to(b)
    assert.equals(a:read(), b:read())
    b:memset(0x41)
    assert.equals(string.rep("A", 64), b:read())
    assert.equals("", b:read(64, 0))
    a:free(); b:free()
  end)

  it("order reads after the work queued before them on the stream", function()
    local s <close> = cupola.stream()
    local b = cupola.malloc_async("1MiB", s)
    K.spin(20000, { stream = s })
    b:memset(7)
    assert.equals(string.rep("\7", 16), b:read(1000, 16))
    b:free()
  end)

  it("copy across streams once the consumer waits", function()
    local s1 <close> = cupola.stream()
    local s2 <close> = cupola.stream()
    local a = cupola.malloc_async("256KiB", s1)
    local b = cupola.malloc_async("256KiB", s2)
    K.spin(20000, { stream = s1 })
    K.fill(a, 3, { type = "u8" })
    local e <close> = cupola.event { timing = false }
    e:record(s1)
    s2:wait(e)
    a:copy_to(b, s2)
    assert.equals(3 * 256 * 1024, K.checksum(b, { type = "u8" }))
    a:free(s2) -- freed where it was last used
    b:free()
  end)

  it("raise on out-of-range reads and writes", function()
    local b <close> = cupola.malloc(16)
    assert.error_matches(function() b:read(0, 17) end, "past the end")
    assert.error_matches(function() b:read(17) end, "offset 17 out of range")
    assert.error_matches(function() b:read(-1) end, "out of range")
    assert.error_matches(function() b:write("x", 16) end, "past the end")
    assert.error_matches(function() b:write(string.rep("x", 17)) end, "past the end")
    assert.error_matches(function() b:memset(256) end, "0..255")
    local small <close> = cupola.malloc(8)
    assert.error_matches(function() b:copy_to(small) end, "destination holds 8 bytes, source has 16")
  end)

  it("raise on double free, and on use after free", function()
    local b = cupola.malloc(16)
    b:free()
    assert.error_matches(function() b:free() end, "double free")
    assert.has_error(function() b:read() end,
      "attempt to use a closed cupola.Buffer: it was freed (free(), close() or the end of its <close> scope)")
    b:close() -- close is safe twice
    local c = cupola.malloc_async(16)
    c:close()
    c:close()
    assert.error_matches(function() c:free() end, "double free")
  end)

  it("reject bad sizes", function()
    assert.error_matches(function() cupola.malloc(-1) end, "negative")
    assert.error_matches(function() cupola.malloc(0) end, "at least 1 byte")
    assert.error_matches(function() cupola.malloc "lots" end, "malformed size")
    assert.error_matches(function() cupola.malloc_async(1.5) end, "whole number")
    assert.error_matches(function() cupola.malloc_async(16, 3) end, "cupola.Stream expected")
  end)

  it("return nil, msg, 'out_of_memory' when the memory is not there", function()
    local b, msg, kind = cupola.malloc "1TiB"
    assert.is_nil(b)
    assert.is_string(msg)
    assert.equals("out_of_memory", kind)
    b, msg, kind = cupola.malloc_async("1TiB")
    assert.is_nil(b)
    assert.equals("out_of_memory", kind)
    -- and everything still works afterwards
    local ok <close> = cupola.malloc "1MiB"
    K.fill(ok, 1, { type = "u8" })
    assert.equals(1024 * 1024, K.checksum(ok, { type = "u8" }))
  end)

  it("are freed by the collector without synchronizing the device", function()
    local s <close> = cupola.stream()
    for _ = 1, 50 do
      local b = cupola.malloc_async("64KiB", s)
      K.fill(b, 1, { type = "u8" })
    end
    -- a collection that synchronized would wait for the spin: it returns
    -- before the spin ends (while_spinning fails otherwise)
    while_spinning(100000, function(us)
      local m = cupola.malloc "64KiB"
      K.spin(us, { stream = s })
      m = nil
      collectgarbage()
      collectgarbage()
      return m
    end)
    cupola.synchronize()
  end)

  it("keep their stream alive after the stream handle is closed", function()
    local s = cupola.stream()
    local b = cupola.malloc_async("1MiB", s)
    K.spin(10000, { stream = s })
    s:close()
    b:memset(1) -- still ordered on the stream's C object
    assert.equals("\1\1", b:read(0, 2))
    b:free()
    cupola.synchronize()
  end)

  it("survive a collection of buffers, streams and pools in one cycle", function()
    do
      local s = cupola.stream()
      local p = cupola.mempool {}
      for _ = 1, 10 do
        local b = p:alloc("8KiB", s)
        K.fill(b, 2, { type = "u8" })
      end
    end
    collectgarbage()
    collectgarbage()
    cupola.synchronize()
  end)
end)
