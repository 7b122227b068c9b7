-- Several devices: device selection, per-device pools, peers,
-- pool access, peer copies, and cupola pools over another device's memory.
--
-- Each case is a chunk of plain Lua (plain assert) that needs two devices.
-- On the host backend it runs in a child process with CUPOLA_HOST_DEVICES=2
-- (this process's backend is already initialised with however many devices
-- it was started with), or right here when this process already has two.
-- On the CUDA backend the cases are #gpu and run here on two GPUs; with one
-- GPU they are pending.
local cupola = require "cupola"
local run_child = require "spec.support.child"

local PRELUDE = [[
local cupola = require "cupola"
local MiB = 1024 * 1024
local function raises(fn, text)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error containing: " .. text)
  assert(tostring(err):find(text, 1, true), "error was: " .. tostring(err) .. "\nexpected: " .. text)
end
local HOST = cupola.backend() == "host"
]]

local function run(code)
  if cupola.device_count() >= 2 then
    assert(load(PRELUDE .. code, "=case"))()
    cupola.synchronize(0)
    cupola.synchronize(1)
    return
  end
  local rc, out, err = run_child(PRELUDE .. code .. "\nio.write 'ok'\n",
    { CUPOLA_HOST_DEVICES = "2", CUPOLA_BACKEND = "host" })
  assert.equals("ok", out, err)
  assert.equals(0, rc, err)
end

local function two(name, code)
  if cupola.backend() == "cuda" then
    if cupola.device_count() >= 2 then
      it(name .. " #gpu", function() run(code) end)
    else
      pending(name .. " #gpu (needs two CUDA devices; this machine has " .. cupola.device_count() .. ")")
    end
  elseif not run_child.available and cupola.device_count() < 2 then
    pending(name .. " (needs a child process, unavailable under this tool)")
  else
    it(name, function() run(code) end)
  end
end

describe("one device", function()
  it("keeps single-device behaviour: device 0, current 0, everything on it", function()
    assert.is_true(cupola.device_count() >= 1)
    assert.equals(0, cupola.current_device())
    assert.equals(0, cupola.device().index)
    assert.equals(0, cupola.device(0).index)
    local s <close> = cupola.stream {}
    assert.equals(0, s.device)
    assert.equals(0, cupola.default_stream.device)
    local b <close> = cupola.malloc(4096)
    assert.equals(0, b.device)
    local mp <close> = cupola.mempool {}
    assert.equals(0, mp.device)
    assert.equals("rw", mp:access(0))
    assert.equals(cupola.mempool.default(), cupola.mempool.default(0))
  end)

  it("a device index out of range or negative raises naming the argument", function()
    local n = cupola.device_count()
    assert.error_matches(function() cupola.device(n) end, "bad argument #1.*device " .. n .. " does not exist")
    assert.error_matches(function() cupola.device(-1) end, "bad argument #1.*device %-1 does not exist")
    assert.error_matches(function() cupola.stream { device = n } end, "cupola.stream: option 'device' is " .. n)
    assert.error_matches(function() cupola.mempool { device = -1 } end, "cupola.mempool: option 'device' is %-1")
    assert.error_matches(function() cupola.pool { device = "x" } end, "cupola.pool: option 'device' must be an integer")
    assert.error_matches(function() cupola.malloc(16, { device = n }) end, "cupola.malloc: option 'device'")
    assert.error_matches(function() cupola.set_device(n) end, "bad argument #1")
    assert.error_matches(function() cupola.mem_info(n) end, "bad argument #1")
  end)
end)

describe("two devices", function()
  two("counts and describes them; the current device is per thread and only a default", [[
    assert(cupola.device_count() == 2)
    assert(cupola.device(1).index == 1 and cupola.device(0).index == 0)
    assert(cupola.current_device() == 0)
    cupola.set_device(1)
    assert(cupola.current_device() == 1 and cupola.device().index == 1)
    local s = cupola.stream {}
    assert(s.device == 1)
    local b = cupola.malloc(4096)
    assert(b.device == 1)
    cupola.set_device(0)
    -- the objects keep their device whatever is current now
    b:write("abc", 0, s)
    assert(b:read(0, 3, s) == "abc")
    assert(s.device == 1)
    b:free(); s:close()
  ]])

  two("streams, native pools and buffers belong to the device they were made on", [[
    local s1 = cupola.stream { device = 1 }
    local mp = cupola.mempool { device = 1 }
    assert(mp.device == 1 and s1.device == 1)
    local b = mp:alloc("1MiB", s1)
    assert(b.device == 1)
    cupola.kernels.fill(b, 3, { type = "u8" })  -- on b's stream, device 1
    assert(cupola.kernels.checksum(b, { type = "u8" }) == 3 * MiB)
    b:free(); mp:close(); s1:close()
  ]])

  two("each device has its own default and current pool; malloc_async uses the stream's device", [[
    local d0, d1 = cupola.mempool.default(0), cupola.mempool.default(1)
    assert(d0 ~= d1 and d0.device == 0 and d1.device == 1)
    assert(cupola.mempool.current(1) == d1)
    local p1 = cupola.mempool { device = 1 }
    cupola.mempool.set_current(p1)
    assert(cupola.mempool.current(1) == p1)
    assert(cupola.mempool.current(0) == d0)   -- device 0 untouched
    local s1 = cupola.stream { device = 1 }
    local b = cupola.malloc_async("2MiB", s1)
    assert(b.pool == p1 and b.device == 1)
    assert(p1.used_current >= 2 * MiB)
    b:free(); s1:synchronize()
    cupola.mempool.set_current(d1)
    p1:close(); s1:close()
  ]])

  two("peers: can_access_peer, enable_peer_access (twice is fine, itself raises)", [[
    assert(cupola.can_access_peer(0, 1) == cupola.can_access_peer(0, 1))
    assert(cupola.can_access_peer(0, 0) == false)
    if cupola.can_access_peer(0, 1) then
      cupola.enable_peer_access(0, 1)
      cupola.enable_peer_access(0, 1)
      cupola.enable_peer_access(1, 0)
    end
    raises(function() cupola.enable_peer_access(1, 1) end, "cannot enable peer access to itself")
    raises(function() cupola.can_access_peer(0, 2) end, "device 2 does not exist")
  ]])

  two("pool access: only the owner at first; set_access grants and revokes", [[
    local mp = cupola.mempool { device = 1 }
    assert(mp:access(1) == "rw")
    assert(mp:access(0) == "none")
    mp:set_access(0, "rw")
    assert(mp:access(0) == "rw")
    local s0 = cupola.stream { device = 0 }
    local b = mp:alloc("64KiB", s0)
    assert(b.device == 1)
    cupola.kernels.fill(b, 5, { type = "u8", stream = s0 })   -- a kernel on device 0
    assert(cupola.kernels.checksum(b, { type = "u8", stream = s0 }) == 5 * 65536)
    b:free(s0); s0:synchronize()
    mp:set_access(0, "none")
    assert(mp:access(0) == "none")
    raises(function() mp:set_access(1, "none") end, "own device (1) always has read-write")
    raises(function() mp:set_access(0, "x") end, "invalid option 'x'")
    raises(function() mp:set_access(2, "rw") end, "device 2 does not exist")
    if HOST then
      -- the emulation enforces what it recorded (on a GPU this is a fault)
      -- memset on the buffer's own device's stream, finished before s0 reads
      -- it: s0 is not ordered after that stream, and without the wait the
      -- checksum could read the bytes before the memset wrote them (valgrind
      -- saw it: the sum's comparison depended on uninitialised bytes)
      local s1 = cupola.stream { device = 1 }
      local c = mp:alloc(4096, s1)
      c:memset(0)
      s1:synchronize()
      raises(function() cupola.kernels.fill(c, 1, { type = "u8", stream = s0 }) end,
        "device 0 has no access")
      mp:set_access(0, "r")
      assert(mp:access(0) == "r")
      assert(cupola.kernels.checksum(c, { type = "u8", stream = s0 }) >= 0)
      raises(function() cupola.kernels.fill(c, 1, { type = "u8", stream = s0 }) end,
        "read-only access")
      c:free()
    end
    cupola.synchronize(1)
    mp:close(); s0:close()
  ]])

  two("copy_to across devices, both ways, on a stream of either device", [[
    local s0, s1 = cupola.stream { device = 0 }, cupola.stream { device = 1 }
    -- native pool memory is touched from another device's stream only with
    -- access (CUDA does not extend peer access to pools)
    cupola.mempool.default(0):set_access(1, "rw")
    cupola.mempool.default(1):set_access(0, "rw")
    local a = cupola.mempool.default(0):alloc("1MiB", s0)
    local b = cupola.mempool.default(1):alloc("1MiB", s1)
    cupola.kernels.fill(a, 7, { type = "u32" })
    s0:synchronize()
    a:copy_to(b, s1)          -- 0 -> 1, ordered on device 1's stream
    assert(cupola.kernels.checksum(b, { type = "u32" }) == 7 * MiB / 4)
    cupola.kernels.fill(b, 9, { type = "u32" })
    s1:synchronize()
    b:copy_to(a, s0)          -- 1 -> 0, on device 0's stream
    assert(cupola.kernels.checksum(a, { type = "u32" }) == 9 * MiB / 4)
    local m0, m1 = cupola.malloc(4096, { device = 0 }), cupola.malloc(4096, { device = 1 })
    m0:write(string.rep("x", 4096))
    m0:copy_to(m1)            -- the default stream
    assert(m1:read() == string.rep("x", 4096))
    a:free(); b:free(); m0:free(); m1:free()
    s0:synchronize(); s1:synchronize()
  ]])

  -- Bug fixed with this case (kernel/cuda_module.c): a module was loaded in
  -- device 0's context only, so launching its kernel on a stream of device 1
  -- failed with CUDA_ERROR_INVALID_HANDLE (cuLaunchKernel); the soak found it
  -- on two H200s.  Modules now load on each device at its first launch there.
  two("a kernel of one's own runs on streams of either device, whichever device made the module", [[
    local SRC = [=[
extern "C" __global__ void put(unsigned *p, unsigned v, unsigned long long n)
{
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v + (unsigned)i;
}
]=]
    local function check(b, v, n)
      local words = { string.unpack(string.rep("I4", n), b:read(0, 4 * n)) }
      for i = 1, n do assert(words[i] == v + i - 1, "word " .. i .. ": " .. tostring(words[i])) end
    end
    local n = 5000
    for _, maker in ipairs { 0, 1 } do
      cupola.set_device(maker)
      local m = cupola.module { source = SRC, name = "two_devices.cu" }
      local k = m:kernel("put", { "ptr", "u32", "u64" })
      cupola.set_device(0)
      for _, d in ipairs { 1, 0, 1 } do
        local s = cupola.stream { device = d }
        local b = cupola.malloc(4 * n, { device = d })
        k:launch({ threads = n, block = 128, stream = s }, b, 100 * d + maker, n)
        s:synchronize()
        check(b, 100 * d + maker, n)
        -- the default stream follows the current device
        cupola.set_device(d)
        k:launch({ threads = n, block = 256 }, b, 7 + d, n)
        cupola.synchronize(d)
        check(b, 7 + d, n)
        cupola.set_device(0)
        b:free(); s:close()
      end
      k = nil
      m:close()
      collectgarbage()
    end
    assert(cupola.current_device() == 0)
  ]])

  two("a cupola pool over device 1's memory, used from streams of device 0", [[
    if cupola.can_access_peer(0, 1) then cupola.enable_peer_access(0, 1) end
    cupola.mempool.default(1):set_access(0, "rw")   -- the async upstream's memory
    for _, up in ipairs { "device", "async" } do
      local p = cupola.pool { kind = "tlsf", upstream = up, device = 1 }
      assert(p.device == 1)
      local s0 = cupola.stream { device = 0 }
      local b = assert(p:alloc("256KiB", s0))
      assert(b.device == 1)
      b:write("peer", 0, s0)
      assert(b:read(0, 4, s0) == "peer")
      local c = cupola.malloc("256KiB", { device = 0 })
      b:copy_to(c, s0)
      assert(c:read(0, 4, s0) == "peer")   -- ordered after the copy on s0
      b:free(s0); c:free(); s0:synchronize()
      assert(p:stats().used == 0)
      p:close(); s0:close()
    end
  ]])

  two("events recorded on one device are waited for on the other", [[
    local s0, s1 = cupola.stream { device = 0 }, cupola.stream { device = 1 }
    local e = cupola.event { timing = false }
    cupola.mempool.default(1):set_access(0, "rw")
    local b = cupola.mempool.default(1):alloc(4096, s1)
    cupola.kernels.spin(2000, { stream = s1 })
    cupola.kernels.fill(b, 1, { type = "u8" })
    e:record(s1)
    s0:wait(e)
    local c = cupola.mempool.default(0):alloc(4096, s0)
    b:copy_to(c, s0)
    assert(cupola.kernels.checksum(c, { type = "u8", stream = s0 }) == 4096)
    e:record(s0)   -- the same event, now on the other device
    e:synchronize()
    b:free(); c:free(s0); s0:synchronize(); s1:synchronize()
  ]])

  if cupola.backend() == "host" then
    two("the host emulation keeps a memory account per device", [[
      local f0 = cupola.mem_info(0)
      local f1, t1 = cupola.mem_info(1)
      assert(t1 > 0 and f1 <= t1)
      local b = cupola.malloc("64MiB", { device = 1 })
      local g0 = cupola.mem_info(0)
      local g1 = cupola.mem_info(1)
      assert(f1 - g1 >= 64 * MiB, "device 1's free memory must drop")
      assert(g0 >= f0 - MiB or g0 > g1, "device 0's account is separate")
      b:free()
      local mp = cupola.mempool { device = 1 }
      local x = mp:alloc("8MiB")
      assert(f1 - cupola.mem_info(1) >= 8 * MiB)
      x:free(); cupola.synchronize(1); mp:close()
      -- more than device 1's share is out of memory, as data
      local r, msg, kind = cupola.malloc(t1 + 4096, { device = 1 })
      assert(r == nil and kind == "out_of_memory", msg)
    ]])
  end
end)
