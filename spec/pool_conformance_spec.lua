-- One conformance battery over every allocator and upstream,
-- written once in lua/cupola/conformance.lua and used here through the
-- luassert assertion that users' specs use for their own allocators
-- (require "cupola.busted"): random alloc/free sequences across two streams
-- with the invariants checked after every step and the data checked by
-- kernels, out of memory reported and recovered from, bytes conserved,
-- stream safety under each reuse policy, pool lifetimes.  A violation is
-- reported with a shrunk sequence that reproduces it.
local cupola = require "cupola"
require "cupola.busted"
local K = cupola.kernels

-- The kinds held to the battery: a new allocator is one more entry (with its
-- stream-safety cases below, if it reuses blocks across streams).
local kinds = { "arena", "freelist", "tlsf", "caching", "vmm", "cub", "cupy" }
local upstreams = { "device", "async", "managed", "pinned", "virtual" }
-- vmm maps device memory itself: no async, managed or pinned upstream
local function serves(kind, up)
  return kind ~= "vmm" or up == "device" or up == "virtual"
end

-- A factory: the pool options of the case, with those the battery asks for.
-- (CUB's allocator reserves nothing at creation: kind "cub" refuses
-- `initial`, so the factory leaves it out.)
local function factory(base)
  return function(o)
    local t = {}
    for k, v in pairs(base) do t[k] = v end
    for k, v in pairs(o) do t[k] = v end
    if t.kind == "cub" or t.kind == "cupy" then t.initial = nil end
    return cupola.pool(t)
  end
end

for _, kind in ipairs(kinds) do
  for _, up in ipairs(upstreams) do
    if serves(kind, up) then describe(kind .. " over " .. up, function()
      it("keeps its invariants over a random sequence on two streams, raw blocks too, and conserves bytes", function()
        assert.is_conforming_pool(factory { kind = kind, upstream = up, initial = "8MiB", alignment = 256 },
          { checks = { "random", "conserved", "raw" }, ops = 300, seed = #kind * 1000 + #up })
      end)
    end) end
  end
end

-- PyTorch's allocator (kind "torch") has no alignment, initial or reuse
-- options (its settings are its conf), so it gets the checks that need none;
-- its limits are spec/torch_spec.lua's.  (Raw blocks need no option.)
for _, up in ipairs { "device", "virtual" } do
  for _, conf in ipairs { "", "expandable_segments:True", "max_split_size_mb:20" } do
    describe("torch over " .. up .. " (conf '" .. conf .. "')", function()
      it("keeps its invariants over a random sequence on two streams, raw blocks too, conserves bytes, outlives its buffers", function()
        -- Over the device an expandable segment's range (1 1/8 of
        -- device_memory, one per stream and pool) is reserved for real:
        -- with the device's whole memory, the third such range passed what
        -- valgrind lets a process map, and a 4 KiB request was refused.
        local dm = up == "device" and "4GiB" or nil
        assert.is_conforming_pool(function()
          return cupola.pool { kind = "torch", upstream = up, conf = conf, device_memory = dm }
        end,
          { checks = { "random", "conserved", "lifetime", "raw" }, ops = 300, seed = #conf * 1000 + #up })
      end)
    end)
  end
end

-- XLA's BFC allocator (kind "bfc") has memory_limit where the others have
-- max, and no initial, alignment or reuse options: the factory maps the
-- battery's max to memory_limit (with and without growth).
for _, up in ipairs { "device", "virtual" } do
  for _, growth in ipairs { false, true } do
    describe("bfc over " .. up .. (growth and " (allow_growth)" or ""), function()
      it("keeps its invariants over a random sequence on two streams, raw blocks too, conserves bytes, reports out of memory at its limit, outlives its buffers", function()
        assert.is_conforming_pool(function(o)
          return cupola.pool { kind = "bfc", upstream = up, allow_growth = growth,
            memory_limit = o.max or "64MiB" }
        end,
          { checks = { "random", "conserved", "oom", "lifetime", "raw" }, ops = 300,
            seed = (growth and 7 or 3) * 100 + #up })
      end)
    end)
  end
end

for _, kind in ipairs(kinds) do
  describe(kind, function()
    it("reports out of memory at its limit and recovers, and lives as long as its buffers", function()
      assert.is_conforming_pool(factory { kind = kind, upstream = "device", initial = "1MiB" },
        { checks = { "oom", "lifetime" } })
    end)
  end)
end

-- A block freed behind unfinished work on stream A must never be handed to
-- stream B unsafely, under each reuse policy (the battery's "streams" check:
-- A's late fill must never land on what B wrote into the block it got; under
-- "stream" and "event", B gets another block, since cupola's pools never wait).
-- (async + initial: a device synchronization in the single-stream phase once
-- marked every later free as complete, and "wait" then handed A's pending
-- block to B with no wait.)
for _, case in ipairs { { "freelist", "device", "4MiB" }, { "tlsf", "device", "4MiB" },
  { "caching", "device", "4MiB" }, { "freelist", "async", "4MiB" }, { "tlsf", "async", "4MiB" },
  { "caching", "async", "4MiB" }, { "tlsf", "async", 0 }, { "tlsf", "device", 0 },
  { "vmm", "device", "4MiB" }, { "vmm", "device", 0 }, { "cub", "device", 0 }, { "cub", "async", 0 }, { "cupy", "device", 0 } } do
  local kind, upstream, initial = case[1], case[2], case[3]
  describe(kind .. " over " .. upstream .. " (initial " .. initial .. ")", function()
    it("never hands a block to another stream before it is safe, under each reuse policy", function()
      assert.is_conforming_pool(factory { kind = kind, upstream = upstream, initial = initial },
        { checks = { "streams" }, nonblocking = true })
    end)
  end)
end

for _, reuse in ipairs { "stream", "event", "wait" } do
  describe("reuse = " .. reuse, function()
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

describe("the battery itself", function()
  -- A pool whose blocks overlap, seen only through the Lua interface: the
  -- battery must catch it and shrink the sequence that shows it.
  it("catches a violation and shrinks its reproducer", function()
    local function bad_pool(o)
      local p = cupola.pool { kind = "tlsf", upstream = "virtual", reuse = o.reuse }
      local n = 0
      -- a proxy whose fourth allocation reports the third block's address
      local proxy = setmetatable({}, { __index = function(_, k)
        local v = p[k]
        if k == "alloc" then
          return function(_, size, s)
            n = n + 1
            local b, msg, why = p:alloc(size, s)
            if b and n == 4 then
              return setmetatable({}, { __index = function(_, f)
                if f == "address" then return b.address - 256 end
                local g = b[f]
                if type(g) == "function" then return function(_, ...) return g(b, ...) end end
                return g
              end })
            end
            return b, msg, why
          end
        elseif type(v) == "function" then
          return function(_, ...) return v(p, ...) end
        end
        return v
      end })
      return proxy
    end
    local report = cupola.conformance(bad_pool, { checks = { "random" }, ops = 200, seed = 7 })
    assert.is_false(report.ok)
    assert.equals("random", report.violations[1].check)
    assert.equals("overlap", report.violations[1].class)
    assert.is_true(#report.ops <= 6, "shrunk to " .. #report.ops .. " operations")
    assert.matches("pool:alloc", report.reproducer)
    assert.has_error(function() assert.is_conforming_pool(bad_pool, { checks = { "random" }, ops = 200, seed = 7 }) end)
    assert.is_not_conforming_pool(bad_pool, { checks = { "random" }, ops = 200, seed = 7 })
  end)
end)

-- Bug fixed with this spec: a shrunk sequence whose allocation was taken
-- out but whose free was kept (the final run, after shrinking, no longer
-- failing the same way) made the reproducer raise "bad argument to 'format'".
it("the battery's reproducer leaves out operations on blocks never allocated", function()
  local text = require("cupola.conformance").reproducer {
    { op = "free", id = 3, s = 1 }, { op = "raw", id = 4, size = 64, s = 2 }, { op = "wrap", id = 9 },
    { op = "free", id = 4, s = 2 },
  }
  assert.equals("local b = {}\nb[1] = pool:alloc_raw(64, s[2])\npool:free_raw(b[1], s[2])",
    text:match "local b = {}.*$")
end)

describe("the battery's raw check", function()
  -- A pool whose fourth raw block is reported 256 bytes into the third one:
  -- the raw check must catch it.
  it("catches raw blocks that overlap", function()
    local function bad_pool(o)
      local p = cupola.pool { kind = "tlsf", upstream = "virtual", reuse = o.reuse }
      local n, last = 0, nil
      return setmetatable({}, { __index = function(_, k)
        local v = p[k]
        if k == "alloc_raw" then
          return function(_, size, s)
            n = n + 1
            local a, msg, why = p:alloc_raw(size, s)
            if a and n == 4 and last then return last + 256 end
            last = a
            return a, msg, why
          end
        elseif type(v) == "function" then
          return function(_, ...) return v(p, ...) end
        end
        return v
      end })
    end
    local report = cupola.conformance(bad_pool, { checks = { "raw" }, ops = 200, seed = 7 })
    assert.is_false(report.ok)
    assert.equals("raw", report.violations[1].check)
    assert.matches("pool:alloc_raw", report.reproducer)
  end)

  it("skips a pool without alloc_raw", function()
    local function proxy()
      local p = cupola.pool { kind = "tlsf", upstream = "virtual" }
      return setmetatable({}, { __index = function(_, k)
        if k == "alloc_raw" then return nil end
        local v = p[k]
        if type(v) == "function" then return function(_, ...) return v(p, ...) end end
        return v
      end })
    end
    local report = cupola.conformance(proxy, { checks = { "raw" } })
    assert.is_true(report.ok)
    assert.matches("raw: the pool has no alloc_raw", report.skipped[1], 1, true)
  end)
end)

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
    -- already freed by reset: free is a double free (close() is quiet)
    assert.error_matches(function() a:free() end, "double free (the buffer was freed by its pool's reset())", 1, true)
    a:close()
    local c = p:alloc "1MiB"
    assert.equals(first, c.address, "the arena starts again at its beginning")
    c:free()
    assert.error_matches(function() cupola.pool { kind = "tlsf" }:reset() end, "only arena pools")
  end)

  -- Found by a probe: an arena kept its current chunk through trim(0) with
  -- nothing live, while every other kind gave everything back.
  it("trims every entirely free chunk, an arena's current one included", function()
    for _, k in ipairs { "arena", "freelist", "tlsf", "caching", "vmm" } do
      for _, initial in ipairs { 0, 32 << 20 } do
        local p <close> = cupola.pool { kind = k, initial = initial }
        p:alloc(100):free()
        local big = p:alloc("20MiB")
        big:free()
        cupola.synchronize()
        p:trim(0)
        assert.equals(0, p:stats().reserved, k)
        local b = assert(p:alloc(100))
        b:write("abc")
        assert.equals("abc", b:read(0, 3))
        b:free()
        cupola.synchronize()
        p:trim(p:stats().reserved) -- keep everything: nothing goes
        assert.is_true(p:stats().reserved > 0, k)
      end
    end
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

-- A kind that exists only in the tests (tests/c/model_bump.c): its own file
-- and one registry row, nothing in src/.  It lives in a copy of the module
-- that make test links beside this one (<build>/testmod/models), so the
-- battery runs in a child process that loads that copy; the module this
-- process loaded never knows it.
describe("bump, a kind from the tests alone", function()
  local child = require "spec.support.child"
  local here = package.searchpath("cupola.core", package.cpath)
  local copy = here and here:gsub("cupola/core%.so$", "testmod/models/cupola/core.so")
  local f = copy and io.open(copy)
  if f then f:close() end
  if not f or not child.available then
    pending("needs " .. tostring(copy) .. " (make test builds it) and child processes")
    return
  end

  it("is unknown to the module everyone loads", function()
    assert.is_nil(cupola.pool_kinds().bump)
    assert.error_matches(function() cupola.pool { kind = "bump" } end, "not 'bump'")
  end)

  it("registers once, reads its option in a table and a spec, and passes the battery over every upstream", function()
    local code, out, err = child(string.format([[
package.preload["cupola.core"] = assert(package.loadlib(%q, "luaopen_cupola_core"))
local cupola = require "cupola"
local util = require "cupola.util"
local kinds = cupola.pool_kinds()
assert(kinds.bump and kinds[#kinds] == kinds.bump, "bump is not the last kind")
local chunk
for _, o in ipairs(kinds.bump.options) do if o.name == "chunk" then chunk = o end end
assert(chunk and chunk.type == "size" and chunk.default == 1048576 and chunk.spec, "its option")
local ok, err = pcall(cupola.pool, { kind = "tlsf", chunk = "1MiB" })
assert(not ok and err:find("option 'chunk' is for kind 'bump', not 'tlsf'", 1, true), err)
ok, err = pcall(cupola.pool, { kind = "bump", chunk = 100 })
assert(not ok and err:find("option 'chunk' must be at least 4096 bytes, not 100", 1, true), err)
local p = cupola.pool(require("cupola.core").trace.serving(util.pool_spec "bump,chunk=64KiB,upstream=virtual"))
local a, b = p:alloc(100), p:alloc(100)
assert(b.address - a.address == 256, "one chunk, bumped")
a:free(); b:free(); p:close()
for _, up in ipairs { "device", "async", "managed", "pinned", "virtual" } do
  local report = cupola.conformance(function(o)
    return cupola.pool { kind = "bump", upstream = up, reuse = o.reuse, max = o.max,
      initial = o.initial, chunk = "1MiB" }
  end, { ops = 300, seed = #up * 100 })
  print(up, report.ok and "ok" or require("cupola.conformance").describe(report))
end
]], copy))
    assert.equals(0, code, out .. err)
    for _, up in ipairs { "device", "async", "managed", "pinned", "virtual" } do
      assert.matches("\n?" .. up .. "\tok\n", out, 1, false)
    end
  end)
end)
