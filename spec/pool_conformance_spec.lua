-- One conformance spec over every allocator and upstream (issue 5): random
-- alloc/free sequences across two streams, with the invariants checked after
-- every step; out of memory reported and recovered from; stream safety.
local cupola = require "cupola"
local K = cupola.kernels

local kinds = { "arena", "freelist", "tlsf", "caching", "vmm" }
-- vmm maps device memory itself: no async, managed or pinned upstream
local function serves(kind, up)
  return kind ~= "vmm" or up == "device" or up == "virtual"
end
local upstreams = { "device", "async", "managed", "pinned", "virtual" }
local MiB = 1024 * 1024

-- A small deterministic generator, so a failure can be replayed.
local function rng(seed)
  local x = seed
  return function(n)
    x = (x * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff
    return (x >> 20) % n + 1
  end
end

local function check_invariants(p, live, alignment)
  local sorted, used = {}, 0
  for b in pairs(live) do
    assert.equals(0, b.address % alignment, "alignment")
    sorted[#sorted + 1] = b
    used = used + b.size
  end
  table.sort(sorted, function(a, b) return a.address < b.address end)
  for i = 2, #sorted do
    local prev, cur = sorted[i - 1], sorted[i]
    assert(prev.address + prev.size <= cur.address,
      string.format("overlap: [%x,+%d) and [%x,+%d)", prev.address, prev.size, cur.address, cur.size))
  end
  local st = p:stats()
  assert.equals(used, st.used, "used == sum of live sizes")
  assert.equals(#sorted, st.allocs - st.frees, "allocs - frees == live blocks")
  assert.is_true(st.reserved >= st.used, "reserved >= used")
  assert.is_true(st.used_peak >= st.used and st.reserved_peak >= st.reserved, "peaks")
  assert.is_true(st.fragmentation >= 0 and st.fragmentation <= 1, "fragmentation in [0,1]")
  assert.equals(#sorted, st.live_buffers)
end

local function tag(b)
  return string.pack("<I8I8", b.address, b.size)
end

for _, kind in ipairs(kinds) do
  for _, up in ipairs(upstreams) do
    if serves(kind, up) then
    describe(kind .. " over " .. up, function()
      it("keeps its invariants over a random sequence on two streams", function()
        local alignment = 256
        local p <close> = cupola.pool { kind = kind, upstream = up, initial = "8MiB", alignment = alignment }
        local s1 <close> = cupola.stream()
        local s2 <close> = cupola.stream()
        local streams = { s1, s2 }
        local rand = rng(#kind * 1000 + #up)
        local live, list = {}, {}
        local has_memory = up ~= "virtual"
        for _ = 1, 300 do
          if #list > 0 and (rand(100) <= 45 or #list > 40) then
            local i = rand(#list)
            local b = table.remove(list, i)
            live[b] = nil
            if has_memory then
              -- what was written at allocation is unchanged until the free
              assert.equals(tag(b), b:read(0, 16), "data of a live block changed")
              assert.equals(tag(b), b:read(b.size - 16, 16), "data of a live block changed")
            end
            b:free(streams[rand(2)])
          else
            local size = rand(100) <= 10 and rand(2 * MiB) + 32 or rand(64 * 1024) + 32
            local b, msg, why = p:alloc(size, streams[rand(2)])
            if b then
              if has_memory then
                b:write(tag(b), 0)
                b:write(tag(b), b.size - 16)
              end
              live[b] = true
              list[#list + 1] = b
            else
              assert.equals("out_of_memory", why, msg)
            end
          end
          check_invariants(p, live, alignment)
        end
        for _, b in ipairs(list) do b:free() end
        live = {}
        check_invariants(p, live, alignment)
        cupola.synchronize()
        p:trim(0)
        local st = p:stats()
        assert.equals(0, st.used)
        assert.is_true(st.free_bytes <= st.reserved)
      end)
    end)
    end
  end
end

for _, kind in ipairs(kinds) do
  describe(kind, function()
    it("reports out of memory at its limit and recovers", function()
      local p <close> = cupola.pool { kind = kind, upstream = "device", initial = "4MiB", max = "8MiB" }
      local a = assert(p:alloc "2MiB")
      local b, msg, why = p:alloc "64MiB"
      assert.is_nil(b)
      assert.equals("out_of_memory", why)
      assert.is_string(msg)
      assert.equals(1, p:stats().failed)
      local c = assert(p:alloc "1MiB", "the pool still serves what fits")
      a:free(); c:free()
      assert.equals(0, p:stats().used)
    end)

    it("is never collected while one of its buffers is alive", function()
      local b
      do
        local p = cupola.pool { kind = kind, upstream = "device", initial = "1MiB" }
        b = p:alloc "4KiB"
      end
      collectgarbage(); collectgarbage()
      b:write "alive"
      assert.equals("alive", b:read(0, 5))
      assert.equals(kind, b.pool.kind)
      b:free()
    end)

    it("refuses to close with live buffers, saying how many", function()
      local p = cupola.pool { kind = kind, upstream = "device", initial = "1MiB" }
      local a = p:alloc "4KiB"
      assert.error_matches(function() p:close() end, "1 live buffer")
      a:free()
      p:close()
      p:close()
      assert.has_error(function() p:alloc "4KiB" end, "attempt to use a closed cupola.Pool")
    end)
  end)
end

-- A block freed behind unfinished work on stream A must never be handed to
-- stream B unsafely.  The data tells: A's late fill(1) must never land on
-- what B wrote (2) into the block it got.
for _, reuse in ipairs { "stream", "event", "wait" } do
  describe("reuse = " .. reuse, function()
    -- (async + initial: a device synchronization in the single-stream
    -- phase once marked every later free as complete, and "wait" then
    -- handed A's pending block to B with no wait.)
    for _, case in ipairs { { "freelist", "device", "4MiB" }, { "tlsf", "device", "4MiB" },
      { "caching", "device", "4MiB" }, { "freelist", "async", "4MiB" }, { "tlsf", "async", "4MiB" },
      { "caching", "async", "4MiB" }, { "tlsf", "async", 0 }, { "tlsf", "device", 0 },
      { "vmm", "device", "4MiB" }, { "vmm", "device", 0 } } do
      local kind, upstream, initial = case[1], case[2], case[3]
      it(kind .. " over " .. upstream .. " (initial " .. initial .. ") never hands a block to another stream before it is safe", function()
        local size = 1 * MiB
        local p <close> = cupola.pool { kind = kind, upstream = upstream, initial = initial, reuse = reuse }
        local a <close> = cupola.stream()
        local b <close> = cupola.stream()
        local first = p:alloc(size, a)
        local addr = first.address
        K.spin(60000, { stream = a })
        K.fill(first, 1, { type = "u8" }) -- runs after the spin, on a
        first:free(a)
        local second = p:alloc(size, b)
        if reuse ~= "wait" then
          assert.are_not.equal(addr, second.address, "reused across streams while the free is pending")
        end
        K.fill(second, 2, { type = "u8" }) -- on b, its stream
        cupola.synchronize()
        assert.equals(2 * size, K.checksum(second, { type = "u8" }), "another stream's work landed on the block")
        second:free()
      end)
    end

    it("reuses a block on the stream that freed it", function()
      local p <close> = cupola.pool { kind = "tlsf", upstream = "device", initial = "4MiB", reuse = reuse }
      local a <close> = cupola.stream()
      local x = p:alloc("1MiB", a)
      local addr = x.address
      x:free(a)
      local y = p:alloc("1MiB", a)
      assert.equals(addr, y.address)
      y:free()
    end)
  end)
end

describe("cupola.pool options", function()
  it("rejects unknown kinds, upstreams, reuse policies and options", function()
    assert.error_matches(function() cupola.pool { kind = "buddy" } end, "option 'kind' must be one of")
    assert.error_matches(function() cupola.pool { upstream = "disk" } end, "option 'upstream' must be one of")
    assert.error_matches(function() cupola.pool { reuse = "never" } end, "option 'reuse' must be one of")
    assert.error_matches(function() cupola.pool { alignment = 100 } end, "power of two")
    assert.error_matches(function() cupola.pool { sizes = 1 } end, "unknown option 'sizes'")
    assert.error_matches(function() cupola.pool { initial = "9MiB", max = "8MiB" } end, "larger than 'max'")
  end)

  it("honours alignment", function()
    local p <close> = cupola.pool { kind = "tlsf", upstream = "virtual", alignment = 4096 }
    for i = 1, 20 do
      local b = p:alloc(i * 100)
      assert.equals(0, b.address % 4096)
      b:free()
    end
  end)

  it("serves what the pool cannot hold from the upstream with fallback", function()
    local p <close> = cupola.pool { kind = "tlsf", upstream = "device", initial = "4MiB", grow = false,
      fallback = true }
    local big = p:alloc "16MiB"
    assert.is_not_nil(big, "fallback serves it")
    big:write "fb"
    assert.equals("fb", big:read(0, 2))
    big:free()
  end)

  it("resets an arena, closing its buffers", function()
    local p <close> = cupola.pool { kind = "arena", upstream = "device", initial = "4MiB" }
    local a = p:alloc "1MiB"
    local b = p:alloc "1MiB"
    local first = a.address
    assert.is_true(b.address > first)
    p:reset()
    assert.equals(0, p:stats().used)
    assert.is_true(a.freed)
    assert.error_matches(function() a:read() end, "reset")
    a:free() -- already given back by reset: only drops the references
    local c = p:alloc "1MiB"
    assert.equals(first, c.address, "the arena starts again at its beginning")
    c:free()
    assert.error_matches(function() cupola.pool { kind = "tlsf" }:reset() end, "only arena pools")
  end)

  it("keeps no memory for buffers of a virtual upstream", function()
    local p <close> = cupola.pool { kind = "tlsf", upstream = "virtual" }
    local b = p:alloc "1GiB"
    assert.error_matches(function() b:read(0, 1) end, "no memory behind it")
    assert.error_matches(function() K.fill(b, 1) end, "no memory behind it")
    b:free()
  end)

  it("logs RMM's CSV and limits through adaptors", function()
    local path = os.tmpname()
    do
      local p <close> = cupola.pool { kind = "tlsf", upstream = "device", log = path, limit = "2MiB" }
      local a = p:alloc "1MiB"
      local none, _, why = p:alloc "2MiB"
      assert.is_nil(none)
      assert.equals("out_of_memory", why)
      a:free()
    end
    collectgarbage()
    local f = assert(io.open(path))
    local text = f:read "a"
    f:close()
    local t = cupola.trace.load(path) -- the log is itself a loadable trace
    assert.is_true(#t >= 2)
    os.remove(path)
    assert.matches("^Thread,Time,Action,Pointer,Size,Stream\n", text)
    assert.matches("allocate,0x%x+,1048576,", text)
    assert.matches("free,0x%x+,1048576,", text)
  end)
end)
