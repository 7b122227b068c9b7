-- kind = "cub": CUB's CachingDeviceAllocator modelled exactly
-- (src/core/pool/cub.c states the rules).  Each rule has a case; the last
-- ones replay traces and compare with a second statement of the same rules
-- written here in Lua, so a slip in either shows.  The GPU comparison with
-- CUB itself is bench/cub-gpu.sh.
local cupola = require "cupola"
local K = cupola.kernels
local KiB, MiB = 1024, 1024 * 1024

local function cub(o)
  o = o or {}
  o.kind = "cub"
  o.upstream = o.upstream or "virtual"
  return cupola.pool(o)
end

describe("cub pool", function()
  it("rounds requests up to CUB's default bins (512 B, 4 KiB, 32 KiB, 256 KiB, 2 MiB)", function()
    local p <close> = cub()
    local cases = { { 1, 512 }, { 512, 512 }, { 513, 4 * KiB }, { 4 * KiB + 1, 32 * KiB },
      { 200 * KiB, 256 * KiB }, { 2 * MiB, 2 * MiB } }
    local live = {}
    for _, c in ipairs(cases) do
      local before = p:stats().reserved
      live[#live + 1] = p:alloc(c[1])
      assert.equals(c[2], p:stats().reserved - before, "request of " .. c[1])
    end
    assert.equals(#cases, p:stats().device_allocs)
    for _, b in ipairs(live) do b:free() end
    local st = p:stats()
    assert.equals(0, st.device_frees)
    assert.equals(st.reserved, st.cached_bytes)
    assert.equals(#cases, st.cached_blocks)
  end)

  it("serves requests above the largest bin exactly and frees them at once", function()
    local p <close> = cub()
    local b = p:alloc(2 * MiB + 1)
    assert.equals(2 * MiB + 1, p:stats().reserved)
    b:free()
    local st = p:stats()
    assert.equals(0, st.reserved)
    assert.equals(1, st.device_frees)
    assert.equals(0, st.cached_blocks)
  end)

  it("reuses the oldest cached block of the bin, and never a block of another bin", function()
    local p <close> = cub()
    local a, b, c = p:alloc(1000), p:alloc(1000), p:alloc(1000)
    local aa, ba = a.address, b.address
    b:free(); a:free()
    local x = p:alloc(3000) -- same bin (4 KiB): b was cached first
    assert.equals(ba, x.address)
    local y = p:alloc(4096)
    assert.equals(aa, y.address)
    local small = p:alloc(10) -- bin 512 B: nothing cached there
    assert.equals(4, p:stats().device_allocs)
    x:free(); y:free(); c:free(); small:free()
    local big = p:alloc(5000) -- bin 32 KiB: the 4 KiB blocks do not serve it
    assert.equals(5, p:stats().device_allocs)
    big:free()
  end)

  it("frees instead of caching once max_cached_bytes would be passed", function()
    local p <close> = cub { max_cached_bytes = 8 * KiB }
    local b = { p:alloc(4096), p:alloc(4096), p:alloc(4096) }
    for _, x in ipairs(b) do x:free() end
    local st = p:stats()
    assert.equals(8 * KiB, st.cached_bytes)
    assert.equals(2, st.cached_blocks)
    assert.equals(1, st.device_frees)
  end)

  it("takes bin_growth, min_bin and max_bin as CUB's constructor does", function()
    local p <close> = cub { bin_growth = 2, min_bin = 10, max_bin = 12 }
    local function grows(n)
      local before = p:stats().reserved
      local b = p:alloc(n)
      return p:stats().reserved - before, b
    end
    local d1, b1 = grows(100)
    local d2, b2 = grows(3000)
    local d3, b3 = grows(5000)
    assert.same({ 1024, 4096, 5000 }, { d1, d2, d3 })
    b1:free(); b2:free(); b3:free()
    assert.equals(1, p:stats().device_frees) -- the exact 5000 only
  end)

  it("frees every cached block and retries when the upstream refuses (max as a full device)", function()
    local p <close> = cub { max = "4MiB" }
    local a, b = p:alloc "2MiB", p:alloc "2MiB"
    a:free(); b:free()
    assert.equals(4 * MiB, p:stats().cached_bytes)
    local c = p:alloc "100KiB" -- bin 256 KiB: 4 MiB + 256 KiB would pass max
    local st = p:stats()
    assert.equals(1, st.retries)
    assert.equals(2, st.device_frees)
    assert.equals(256 * KiB, st.reserved)
    assert.equals(1, st.device_alloc_failures)
    c:free()
    local none, msg, kind = p:alloc "5MiB"
    assert.is_nil(none)
    assert.equals("out_of_memory", kind)
    assert.matches("cub", msg)
    st = p:stats()
    assert.equals(2, st.retries)
    assert.equals(1, st.failed)
    assert.equals(0, st.reserved) -- the retry emptied the cache first
  end)

  it("trims in FreeAllCached's order: smallest bin first, oldest first", function()
    local p <close> = cub()
    local blocks = { p:alloc(100), p:alloc(1000), p:alloc(10000), p:alloc(100) }
    for _, b in ipairs(blocks) do b:free() end
    assert.equals(512 + 4096 + 32768 + 512, p:stats().cached_bytes)
    p:trim(32768 + 4096)
    assert.equals(32768 + 4096, p:stats().cached_bytes)
    p:trim(0)
    assert.equals(0, p:stats().reserved)
    assert.equals(4, p:stats().device_frees)
  end)

  it("counts its figures: reserved is CUB's live plus cached bytes", function()
    local p <close> = cub()
    local a, b = p:alloc(100), p:alloc "3MiB"
    a:free()
    local st = p:stats()
    assert.equals(st.reserved, st.live_bytes + st.cached_bytes)
    assert.equals(3 * MiB, st.live_bytes)
    assert.equals(512, st.largest_free)
    b:free()
  end)

  describe("streams", function()
    it("over the virtual upstream counts every free as complete (another stream reuses at once)", function()
      local s1 <close> = cupola.stream()
      local s2 <close> = cupola.stream()
      for _, reuse in ipairs { "event", "wait" } do
        local p <close> = cub { reuse = reuse }
        local a = p:alloc(1000, s1)
        local addr = a.address
        a:free(s1)
        local b = p:alloc(1000, s2)
        assert.equals(addr, b.address, reuse)
        b:free(s2)
      end
      local p <close> = cub { reuse = "stream" }
      local a = p:alloc(1000, s1)
      local addr = a.address
      a:free(s1)
      local b = p:alloc(1000, s2)
      assert.not_equals(addr, b.address)
      assert.equals(2, p:stats().device_allocs)
      b:free(s2)
    end)

    it("over the device upstream hands a block to another stream only once its ready event completed", function()
      local A <close> = cupola.stream()
      local B <close> = cupola.stream()
      -- (a pool of its own for each try of while_spinning: a try that ran
      -- past the spin leaves its blocks in the pool it used)
      local p <close>, addr, y, z = while_spinning(50000, function(us)
        local p = cub { upstream = "device" }
        local x = p:alloc(1000, A)
        local addr = x.address
        -- B's own block, cached after x's: y is served from the cache, not
        -- by a cudaMalloc, which would wait for the device (the spin)
        local v = p:alloc(1000, B)
        K.spin(us, { stream = A })
        x:free(A)
        v:free(B)
        -- the bin is searched oldest first: x's block, then B's own
        local y = p:alloc(1000, B) -- A is still spinning: not reusable by B
        local z = p:alloc(1000, A) -- its own stream: at once
        return p, addr, y, z
      end)
      assert.not_equals(addr, y.address)
      assert.equals(addr, z.address)
      z:free(A)
      A:synchronize()
      local w = p:alloc(1000, B) -- the event has completed
      assert.equals(addr, w.address)
      y:free(B); w:free(B)
    end)

    it("with reuse = \"wait\" hands it over at once, behind a wait on the event", function()
      local A <close> = cupola.stream()
      local B <close> = cupola.stream()
      local p <close> = cub { upstream = "device", reuse = "wait" }
      local x = p:alloc(4096, A)
      local addr = x.address
      K.spin(30000, { stream = A })
      K.fill(x, 1, { type = "u8", stream = A })
      x:free(A)
      local y = p:alloc(4096, B)
      assert.equals(addr, y.address)
      K.fill(y, 2, { type = "u8", stream = B })
      cupola.synchronize()
      assert.equals(2 * 4096, K.checksum(y, { type = "u8" }))
      y:free(B)
    end)
  end)

  describe("options", function()
    local bad = {
      { { bin_growth = 1 }, "option 'bin_growth' must be an integer from 2 to 4294967295.*not 1" },
      { { bin_growth = 0 }, "option 'bin_growth'.*not 0" },
      { { bin_growth = 2.5 }, "option 'bin_growth' must be a non%-negative integer, not 2.5" },
      { { min_bin = -1 }, "option 'min_bin' must be a non%-negative integer, not %-1" },
      { { min_bin = 11 }, "option 'min_bin' = 11 makes bin_growth%^min_bin %(8%^11%) pass 2%^32" },
      { { max_bin = "seven" }, "option 'max_bin' must be a non%-negative integer, not 'seven'" },
      { { max_bin = 1 << 40 }, "option 'max_bin' must be an integer from 0 to 4294967295, not 1099511627776" },
      { { max_cached_bytes = "lots" }, "option 'max_cached_bytes': bad size 'lots'" },
      { { initial = "1MiB" }, "option 'initial' is not supported.*not 1048576" },
      { { release_threshold = 4096 }, "option 'release_threshold' is not supported.*not 4096" },
      { { grow = false }, "option 'grow' = false is not supported" },
      { { alignment = 8192, upstream = "device" }, "option 'alignment' = 8192 is more than the device upstream's own 256" },
    }
    for _, c in ipairs(bad) do
      it("refuses " .. c[2]:gsub("%%", ""), function()
        local ok, err = pcall(cub, c[1])
        assert.is_false(ok)
        assert.matches(c[2], err)
      end)
    end

    it("are refused for other kinds", function()
      local ok, err = pcall(cupola.pool, { kind = "tlsf", max_bin = 9 })
      assert.is_false(ok)
      assert.matches("are for kind 'cub', not 'tlsf'", err)
    end)

    it("accept CUB's limits: growth 2^32-1, bins up to 2^32-1, a cache of 2^62 bytes", function()
      local p <close> = cub { bin_growth = 4294967295, min_bin = 1, max_bin = 4294967295,
        max_cached_bytes = 1 << 62 }
      local b = p:alloc(10)
      assert.equals(4294967295, p:stats().reserved)
      b:free()
      -- 2^40 bytes: bin 2, (2^32-1)^2 bytes, which no upstream serves
      local none, _, kind = p:alloc(1 << 40)
      assert.is_nil(none)
      assert.equals("out_of_memory", kind)
    end)
  end)

  -- CUB's rules once more, in Lua, over the virtual upstream's assumption
  -- (every free complete when a later request looks): upstream calls and
  -- the peak of bytes held, for a trace, freeing what it leaves live in
  -- allocation order as trace.replay does.
  local function reference(t, growth, min_bin, max_bin, cap)
    local bins, live, held, peak, mallocs, frees, cached = {}, {}, 0, 0, 0, 0, 0
    local bybin = {}
    local ord, blocks = {}, {}
    local function alloc(size, k)
      local bin, bytes = 0, 1
      while bytes < size do bytes = bytes * growth; bin = bin + 1 end
      if bin > max_bin then
        bin, bytes = nil, size
      else
        if bin < min_bin then
          bin, bytes = min_bin, 1
          for _ = 1, min_bin do bytes = bytes * growth end
        end
        local list = bybin[bin]
        if list and #list > 0 then
          table.remove(list, 1)
          cached = cached - bytes
          blocks[k] = { bin = bin, bytes = bytes }
          return
        end
      end
      mallocs = mallocs + 1
      held = held + bytes
      if held > peak then peak = held end
      blocks[k] = { bin = bin, bytes = bytes }
    end
    local function free(k)
      local b = blocks[k]
      blocks[k] = nil
      if b.bin and cached + b.bytes <= cap then
        bybin[b.bin] = bybin[b.bin] or {}
        table.insert(bybin[b.bin], true)
        cached = cached + b.bytes
      else
        frees = frees + 1
        held = held - b.bytes
      end
    end
    local n = 0
    for i = 1, t.events do
      local e = t:event(i)
      if e.action == "allocate" then
        n = n + 1
        live[e.pointer] = n
        alloc(e.size, n)
      else
        free(live[e.pointer])
        live[e.pointer] = nil
      end
    end
    for k = 1, n do if blocks[k] then free(k) end end
    return { mallocs = mallocs, frees = frees, peak = peak }
  end

  local function synthetic(path)
    -- three streams, sizes across every bin and beyond, frees on the
    -- allocating stream
    local f = assert(io.open(path, "w"))
    f:write "Thread,Time,Action,Pointer,Size,Stream\n"
    local x, live, nextp = 12345, {}, 0x100000
    local function rand(n)
      x = (x * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff
      return (x >> 20) % n + 1
    end
    for i = 1, 3000 do
      if #live > 0 and (rand(100) <= 45 or #live > 60) then
        local b = table.remove(live, rand(#live))
        f:write(("0,%d,free,0x%x,%d,0x%x\n"):format(i, b[1], b[2], b[3]))
      else
        local size = rand(100) <= 90 and rand(300000) or rand(8 * MiB)
        local s = ({ 0, 0x51, 0x52 })[rand(3)]
        live[#live + 1] = { nextp, size, s }
        f:write(("0,%d,allocate,0x%x,%d,0x%x\n"):format(i, nextp, size, s))
        nextp = nextp + size + 4096
      end
    end
    f:close()
  end

  for _, setting in ipairs { { 8, 3, 7, 6291455 }, { 8, 3, 7, 256 * MiB }, { 2, 9, 26, 4096 * MiB } } do
    it(("replays equal the rules restated in Lua (setting %d,%d,%d,%d)"):format(table.unpack(setting)), function()
      local synth = os.tmpname()
      synthetic(synth)
      for _, path in ipairs { cupola.trace.find "resnet50_train", synth } do
        local t = cupola.trace.load(path)
        local p <close> = cub { bin_growth = setting[1], min_bin = setting[2], max_bin = setting[3],
          max_cached_bytes = setting[4] }
        local r = cupola.trace.replay(t, p)
        local st = p:stats()
        local want = reference(t, table.unpack(setting))
        assert.same(want, { mallocs = st.device_allocs, frees = st.device_frees, peak = r.peak_reserved }, path)
      end
      os.remove(synth)
    end)
  end
end)
