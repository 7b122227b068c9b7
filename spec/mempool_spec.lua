-- Native stream-ordered pools (CUDA's, or their host emulation).
local cupola = require "cupola"
local MiB = 1024 * 1024

describe("mempool", function()
  it("gives the device's default pool, which is current at first", function()
    local d = cupola.mempool.default()
    assert.equals("cupola.Mempool", getmetatable(d).__name)
    assert.equals(d, cupola.mempool.default())
    assert.equals(d, cupola.mempool.current())
    d:close() -- does nothing, as on cupola.default_stream
    assert.is_false(d.closed)
    assert.equals(d, cupola.mempool.current())
    local b = assert(d:alloc(64))
    b:free()
  end)

  it("has the contract's attributes with the right access", function()
    local p <close> = cupola.mempool {}
    for _, k in ipairs { "release_threshold", "reserved_current", "reserved_high", "used_current", "used_high" } do
      assert.equals("integer", math.type(p[k]), k)
    end
    for _, k in ipairs { "reuse_follow_event_dependencies", "reuse_allow_opportunistic", "reuse_allow_internal_dependencies" } do
      assert.is_boolean(p[k], k)
      p[k] = false
      assert.is_false(p[k], k)
      p[k] = true
      assert.is_true(p[k], k)
    end
    p.release_threshold = "256MiB"
    assert.equals(256 * MiB, p.release_threshold)
    for _, k in ipairs { "reserved_current", "reserved_high", "used_current", "used_high" } do
      assert.error_matches(function() p[k] = 0 end, "attribute '" .. k .. "' is read%-only")
    end
    assert.error_matches(function() p.nope = 1 end, "has no attribute 'nope'")
    assert.error_matches(function() p.reuse_allow_opportunistic = 1 end, "must be a boolean, not number")
  end)

  it("keeps what a release threshold holds: used/reserved, free, trim", function()
    local s <close> = cupola.stream()
    local p <close> = cupola.mempool { release_threshold = "256MiB" }
    assert.equals(0, p.used_current)
    assert.equals(0, p.reserved_current)
    local b = p:alloc("100MiB", s)
    s:synchronize()
    assert.is_true(p.used_current >= 100 * MiB)
    assert.is_true(p.reserved_current >= p.used_current)
    b:free()
    s:synchronize()
    assert.equals(0, p.used_current)
    assert.is_true(p.reserved_current >= 100 * MiB, "kept for reuse below the threshold")
    p:trim(0)
    assert.equals(0, p.reserved_current)
    assert.is_true(p.reserved_high >= 100 * MiB)
    assert.is_true(p.used_high >= 100 * MiB)
    p:reset_high()
    assert.equals(0, p.used_high)
    assert.equals(0, p.reserved_high)
  end)

  it("releases above the threshold at synchronization", function()
    local s <close> = cupola.stream()
    local p <close> = cupola.mempool { release_threshold = 0 }
    local b = p:alloc("64MiB", s)
    b:free()
    s:synchronize()
    assert.equals(0, p.reserved_current)
  end)

  it("reuses freed memory on the same stream", function()
    local s <close> = cupola.stream()
    local p <close> = cupola.mempool { release_threshold = "1GiB" }
    local a = p:alloc("8MiB", s)
    local addr = a.address
    a:free()
    local b = p:alloc("8MiB", s)
    assert.equals(addr, b.address)
    b:free()
  end)

  it("serves malloc_async from the current pool, and switches back", function()
    local s <close> = cupola.stream()
    local p <close> = cupola.mempool {}
    cupola.mempool.set_current(p)
    assert.equals(p, cupola.mempool.current())
    local b = cupola.malloc_async("1MiB", s)
    assert.equals(p, b.pool)
    s:synchronize()
    assert.is_true(p.used_current >= MiB)
    b:free()
    cupola.mempool.set_current(cupola.mempool.default())
    assert.equals(cupola.mempool.default(), cupola.mempool.current())
  end)

  it("enforces max_size with out_of_memory", function()
    local s <close> = cupola.stream()
    local p <close> = cupola.mempool { max_size = "64MiB" }
    local b, msg, kind = p:alloc("128MiB", s)
    assert.is_nil(b)
    assert.is_string(msg)
    assert.equals("out_of_memory", kind)
    local ok = p:alloc("16MiB", s)
    ok:free()
  end)

  it("lives in host memory when asked", function()
    local s <close> = cupola.stream()
    local p <close> = cupola.mempool { location = "host" }
    local b = p:alloc("1MiB", s)
    b:write "pinned"
    assert.equals("pinned", b:read(0, 6))
    b:free()
  end)

  it("refuses to close with live buffers, saying how many", function()
    local p = cupola.mempool {}
    local a = p:alloc "1MiB"
    local b = p:alloc "1MiB"
    assert.error_matches(function() p:close() end, "2 live buffers")
    a:free(); b:free()
    p:close()
    p:close()
    assert.has_error(function() p:alloc "1MiB" end, "attempt to use a closed cupola.Mempool")
  end)

  it("stays alive for buffers whose pool handle was collected", function()
    local b
    do
      local p = cupola.mempool {}
      b = p:alloc "1MiB"
    end
    collectgarbage()
    b:write "still here"
    assert.equals("still here", b:read(0, 10))
    b:free()
  end)

  it("rejects unknown options and values", function()
    assert.error_matches(function() cupola.mempool { size = 1 } end, "unknown option 'size'")
    assert.error_matches(function() cupola.mempool { location = "moon" } end, "invalid option 'moon'")
    assert.error_matches(function() cupola.mempool { handle = "win32" } end, "invalid option 'win32'")
  end)

  it("creates a pool exportable as a POSIX file descriptor", function()
    local p <close> = cupola.mempool { handle = "posix_fd" }
    local b = p:alloc "2MiB"
    b:free()
  end)
end)
