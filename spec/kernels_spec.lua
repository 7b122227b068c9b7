-- The built-in kernels: same results on both backends.
local cupola = require "cupola"
local K = cupola.kernels

describe("kernels", function()
  local s
  before_each(function() s = cupola.stream() end)
  after_each(function() s:close() end)

  it("fill every type and checksum it exactly", function()
    local b = cupola.malloc_async("64KiB", s)
    K.fill(b, 1.5, { type = "f32" })
    assert.equals(1.5 * 16384, K.checksum(b, { type = "f32" }))
    K.fill(b, 2.25, { type = "f64" })
    assert.equals(2.25 * 8192, K.checksum(b, { type = "f64" }))
    K.fill(b, -3, { type = "i32" })
    assert.equals(-3 * 16384, K.checksum(b, { type = "i32" }))
    K.fill(b, 4000000000, { type = "u32" })
    assert.equals(4000000000 * 16384, K.checksum(b, { type = "u32" }))
    K.fill(b, 255, { type = "u8" })
    assert.equals(255 * 65536, K.checksum(b, { type = "u8" }))
    assert.equals(string.rep("\255", 8), b:read(0, 8))
    b:free()
  end)

  it("compute the seeds' sqrt_index", function()
    local n = 1 << 20
    local b = cupola.malloc_async(n * 4, s)
    K.sqrt_index(b)
    local v = string.unpack("<f", b:read(4 * 12345, 4))
    assert.is_true(math.abs(v - math.sqrt(12345)) < 1e-3)
    local want = 0
    for i = 0, n - 1 do want = want + math.sqrt(i) end
    local got = K.checksum(b)
    assert.is_true(math.abs(got - want) / want < 1e-6, got .. " vs " .. want)
    b:free()
  end)

  it("accept launch shapes and reject bad ones", function()
    local b = cupola.malloc_async(4096, s)
    K.fill(b, 1, { type = "u8", grid = 1, block = 32 })
    assert.equals(4096, K.checksum(b, { type = "u8" }))
    K.sqrt_index(b, { grid = 2, block = 64, stream = s })
    assert.error_matches(function() K.fill(b, 1, { block = 2048 }) end, "'block' must be in 1..1024")
    assert.error_matches(function() K.fill(b, 1, { grid = -1 }) end, "'grid'")
    assert.error_matches(function() K.fill(b, 1, { kind = "u8" }) end, "unknown option 'kind'")
    assert.error_matches(function() K.fill(b, 1, { type = "f16" }) end, "'type' must be one of")
    assert.error_matches(function() K.fill(b, 1.5, { type = "u8" }) end, "integer value")
    assert.error_matches(function() K.fill(b, 300, { type = "u8" }) end, "0..255")
    assert.error_matches(function() K.spin(-1) end, "0..60000000")
    b:free()
  end)

  it("run on the buffer's own stream unless told", function()
    local b = cupola.malloc_async(1024, s)
    assert.is_false(while_spinning(30000, function(us)
      K.spin(us, { stream = s })
      K.fill(b, 9, { type = "u8" }) -- queued behind the spin on s
      return s:query()
    end))
    assert.equals(9 * 1024, K.checksum(b, { type = "u8" }))
    b:free()
  end)

  it("write and verify integrity patterns", function()
    local b = cupola.malloc_async("1MiB", s)
    K.pattern(b, 42)
    assert.equals(0, K.verify(b, 42))
    assert.is_true(K.verify(b, 43) > 1000000 * 0.9)
    b:write("\0\0\0", 4096)
    local bad = K.verify(b, 42)
    assert.is_true(bad >= 1 and bad <= 3)
    b:free()
  end)

  it("refuse freed buffers", function()
    local b = cupola.malloc_async(64, s)
    b:free()
    assert.has_error(function() K.fill(b, 1) end,
      "attempt to use a closed cupola.Buffer: it was freed (free(), close() or the end of its <close> scope)")
  end)
end)
