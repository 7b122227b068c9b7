-- Allocators of the user's own (kind = "plugin", <cupola/allocator.h>): a
-- working one (examples/plugins/buddy.c) given by path and by source is held
-- to the conformance battery; a broken one (spec/plugins/broken.c) is caught
-- with a short reproducer; loading errors are clear; out of memory is data;
-- adaptors, fallback and replay work on a plugin like on any pool.
local cupola = require "cupola"
local K = cupola.kernels
require "cupola.busted"

local MiB = 1024 * 1024

local read = read_file

local BUDDY_SRC = read "examples/plugins/buddy.c"
local BROKEN_SRC = read "spec/plugins/broken.c"

-- A shared object built the way a user's Makefile would (the system C
-- compiler, the installed header's directory on the include path).
local built = {}
-- a fresh temporary name with a suffix (os.tmpname creates the bare one)
local function tmpname(suffix)
  local base = os.tmpname()
  os.remove(base)
  return base .. suffix
end

local function build(src_path)
  if built[src_path] then return built[src_path] end
  local out = tmpname ".so"
  local cmd = string.format("cc -shared -fPIC -O2 -I'%s' -o '%s' '%s' 2>&1", cupola.include_dir, out, src_path)
  local p = io.popen(cmd)
  local log = p:read "a"
  local ok = p:close()
  assert(ok, "cc failed: " .. log)
  built[src_path] = out
  return out
end

local function factory(base)
  return function(o)
    local t = {}
    for k, v in pairs(base) do t[k] = v end
    for k, v in pairs(o) do t[k] = v end
    return cupola.pool(t)
  end
end

teardown(function()
  for _, path in pairs(built) do os.remove(path) end
end)

describe("a plugin allocator", function()
  it("has its header where cupola.include_dir says", function()
    assert.is_string(cupola.include_dir)
    assert.is_not_nil(io.open(cupola.include_dir .. "/cupola/allocator.h"))
  end)

  for _, up in ipairs { "device", "async", "virtual" } do
    it("given by path, passes the conformance battery over " .. up, function()
      assert.is_conforming_pool(factory { kind = "plugin", path = build "examples/plugins/buddy.c",
        symbol = "buddy_allocator", upstream = up }, { ops = 300, seed = 11 })
    end)
  end

  it("given by source, passes the conformance battery (compiled once, then cached)", function()
    assert.is_conforming_pool(factory { kind = "plugin", source = BUDDY_SRC, symbol = "buddy_allocator",
      options = "chunk=8MiB" }, { ops = 300, seed = 12 })
  end)

  it("is a Pool like any other: kind, stats from its hook, data", function()
    local p <close> = cupola.pool { kind = "plugin", source = BUDDY_SRC, symbol = "buddy_allocator",
      options = "chunk=4MiB" }
    assert.equals("plugin", p.kind)
    assert.matches("cupola.Pool %(plugin over device", tostring(p))
    local b = assert(p:alloc(1000))
    b:write "plugged in"
    assert.equals("plugged in", b:read(0, 10))
    local st = p:stats()
    assert.equals(1000, st.used)
    assert.equals(4 * MiB, st.reserved, "one chunk, through the upstream")
    assert.is_true(st.largest_free > 0 and st.largest_free <= st.free_bytes)
    b:free()
    assert.equals(4 * MiB, p:stats().largest_free, "merged back into the whole chunk")
  end)

  it("takes what its create reserves as the first peak, and grow = false stops it there", function()
    local p <close> = cupola.pool { kind = "plugin", source = BUDDY_SRC, symbol = "buddy_allocator",
      options = "chunk=4MiB,reserve", grow = false }
    local st = p:stats()
    assert.equals(4 * MiB, st.reserved)
    assert.equals(4 * MiB, st.reserved_peak)
    local a = assert(p:alloc "2MiB")
    local b = assert(p:alloc "1MiB")
    local none, _, why = p:alloc "2MiB"
    assert.is_nil(none, "no second chunk without grow")
    assert.equals("out_of_memory", why)
    a:free(); b:free()
    assert.equals(4 * MiB, p:stats().reserved)
  end)

  it("may be written in C++ against the same header", function()
    local src = tmpname ".cpp"
    local f = assert(io.open(src, "w"))
    f:write [[
#include <cupola/allocator.h>
#include <new>
struct state { cupola_upstream *up; };
static void *create(cupola_upstream *up, const char *) { return new (std::nothrow) state{up}; }
static void destroy(void *s) { delete static_cast<state *>(s); }
static void *allocate(void *s, size_t n, void *st) {
  cupola_upstream *up = static_cast<state *>(s)->up;
  return up->allocate(up, n, st);
}
static void deallocate(void *s, void *p, size_t n, void *st) {
  cupola_upstream *up = static_cast<state *>(s)->up;
  up->deallocate(up, p, n, st);
}
extern "C" const cupola_allocator passthrough = {CUPOLA_ALLOCATOR_VERSION, create, destroy, allocate,
                                                 deallocate, 0, nullptr};
]]
    f:close()
    local so = tmpname ".so"
    local p = io.popen(string.format("c++ -std=c++11 -Wall -Wextra -shared -fPIC -I'%s' -o '%s' '%s' 2>&1",
      cupola.include_dir, so, src))
    local log = p:read "a"
    assert(p:close(), log)
    os.remove(src)
    assert.is_conforming_pool(factory { kind = "plugin", path = so, symbol = "passthrough" },
      { checks = { "random", "conserved", "lifetime" }, ops = 100 })
    os.remove(so)
  end)

  it("reports a compile error with the compiler's log", function()
    assert.error_matches(function()
      cupola.pool { kind = "plugin", source = "this is not C", symbol = "x" }
    end, "compile error")
  end)
end)

describe("a broken plugin", function()
  local path
  setup(function() path = build "spec/plugins/broken.c" end)

  it("that returns overlapping blocks is caught with a short reproducer", function()
    local make = factory { kind = "plugin", path = path, symbol = "broken_allocator", options = "overlap_after=5" }
    local report = cupola.conformance(make, { checks = { "random" }, ops = 300, seed = 3 })
    assert.is_false(report.ok)
    assert.matches("overlaps the live block", report.violations[1].message)
    assert.is_true(#report.ops <= 5, #report.ops .. " operations")
    assert.matches("b%[5%] = pool:alloc", report.reproducer)
    local ok, err = pcall(assert.is_conforming_pool, make, { checks = { "random" }, seed = 3 })
    assert.is_false(ok)
    assert.matches("reproduced by %(5 operations%)", tostring(err))
  end)

  it("that returns misaligned blocks has them aligned by cupola (padded and adjusted)", function()
    local p <close> = cupola.pool { kind = "plugin", path = path, symbol = "broken_allocator",
      options = "misalign_after=2" }
    local a = assert(p:alloc(100))
    local b = assert(p:alloc(100))
    assert.equals(0, b.address % 256)
    b:memset(9)
    assert.equals(9 * 100, K.checksum(b, { type = "u8" }))
    local st = p:stats()
    assert.equals(2, st.allocs)
    assert.equals(200, st.used)
    a:free(); b:free()
    assert.is_conforming_pool(factory { kind = "plugin", path = path, symbol = "broken_allocator",
      options = "misalign_after=2" }, { checks = { "random", "conserved" }, ops = 200 })
  end)

  it("whose allocate returns NULL gives out_of_memory as data", function()
    local p <close> = cupola.pool { kind = "plugin", path = path, symbol = "broken_allocator",
      options = "null_after=2" }
    local a = assert(p:alloc(100))
    local b, msg, why = p:alloc(100)
    assert.is_nil(b)
    assert.equals("out_of_memory", why)
    assert.matches("returned NULL", msg)
    assert.equals(1, p:stats().failed)
    a:free()
  end)

  it("is refused at load time with a clear error", function()
    local function pool(symbol, extra)
      return function()
        cupola.pool { kind = "plugin", path = extra or path, symbol = symbol }
      end
    end
    assert.error_matches(pool "no_such_symbol", "has no symbol 'no_such_symbol'")
    assert.error_matches(pool "broken_v2", "interface version 2; this cupola speaks version 1")
    assert.error_matches(pool "broken_nocreate", "leaves create NULL")
    assert.error_matches(pool "broken_failcreate", "create of 'broken_failcreate' returned NULL")
    assert.error_matches(pool "broken_function", "is a function, not a const cupola_allocator")
    assert.error_matches(pool("x", "/nonexistent/libnone.so"), "cannot load '/nonexistent/libnone.so'")
  end)

  it("never sees a free before it is safe, unless it orders frees itself", function()
    local s1 <close> = cupola.stream()
    local s2 <close> = cupola.stream()
    -- held: the free on another stream waits in cupola's stream-order layer
    local held <close> = cupola.pool { kind = "plugin", path = path, symbol = "broken_allocator" }
    local a = held:alloc(MiB, s1)
    cupola.kernels.spin(20000, { stream = s2 })
    a:free(s2)
    assert.is_true(held:stats().reserved > 0, "the plugin has not been given the block back yet")
    cupola.synchronize()
    held:trim()
    assert.equals(0, held:stats().reserved)
    -- ordered: the plugin says it orders frees itself, and gets them at once
    local own <close> = cupola.pool { kind = "plugin", path = path, symbol = "broken_ordered" }
    local b = own:alloc(MiB, s1)
    cupola.synchronize()
    b:free(s2)
    assert.equals(0, own:stats().reserved)
  end)
end)

describe("a plugin pool with cupola's options", function()
  it("works under limit= and log=", function()
    local log = os.tmpname()
    do
      local p <close> = cupola.pool { kind = "plugin", source = BUDDY_SRC, symbol = "buddy_allocator",
        limit = "2MiB", log = log }
      local a = assert(p:alloc "1MiB")
      local none, _, why = p:alloc "2MiB"
      assert.is_nil(none)
      assert.equals("out_of_memory", why)
      a:free()
    end
    collectgarbage()
    local text = read(log)
    os.remove(log)
    assert.matches("allocate,0x%x+,1048576,", text)
    assert.matches("free,0x%x+,1048576,", text)
  end)

  it("falls back to the upstream when the plugin cannot serve", function()
    local p <close> = cupola.pool { kind = "plugin", source = BROKEN_SRC, symbol = "broken_allocator",
      options = "null_after=1", fallback = true }
    local b = assert(p:alloc "1MiB", "fallback serves it")
    b:write "fb"
    assert.equals("fb", b:read(0, 2))
    b:free()
    assert.equals(0, p:stats().used)
  end)

  it("replays a shipped trace", function()
    local t <close> = cupola.trace.load(assert(cupola.trace.find "gpt2_train"))
    local p <close> = cupola.pool { kind = "plugin", source = BUDDY_SRC, symbol = "buddy_allocator",
      upstream = "virtual" }
    local r = cupola.trace.replay(t, p)
    assert.equals(#t, r.events)
    assert.equals(0, r.failed)
    assert.equals(0, p:stats().used)
    assert.is_true(r.reserved_over_live >= 1)
  end)

  gpu_it("runs over the device upstream on the GPU, kernels checking its blocks", function()
    assert.is_conforming_pool(factory { kind = "plugin", source = BUDDY_SRC, symbol = "buddy_allocator",
      upstream = "device" }, { ops = 400, seed = 21 })
    local p <close> = cupola.pool { kind = "plugin", source = BUDDY_SRC, symbol = "buddy_allocator" }
    local b = assert(p:alloc(4 * MiB))
    cupola.kernels.fill(b, 1.5, { type = "f32" })
    assert.equals(1.5 * MiB, cupola.kernels.checksum(b, { type = "f32" }))
    b:free()
  end)
end)

-- A plugin's block must lie inside memory the plugin holds from its upstream
-- (cupola sees every upstream call), and is aligned by cupola to the pool's
-- alignment whatever the plugin returns.
describe("a plugin's blocks, checked against its upstream and aligned by cupola", function()
  local path
  setup(function() path = build "spec/plugins/broken.c" end)

  -- the probe's plugin: every block at an address it never got
  local WILD = [[
#include <cupola/allocator.h>
static void *create(cupola_upstream *up, const char *o) { (void)o; return up; }
static void destroy(void *s) { (void)s; }
static void *aw(void *s, size_t n, void *st) { (void)s; (void)n; (void)st; return (void *)0x100000; }
static void dw(void *s, void *p, size_t n, void *st) { (void)s; (void)p; (void)n; (void)st; }
const cupola_allocator wild = {CUPOLA_ALLOCATOR_VERSION, create, destroy, aw, dw, 0, 0};
]]

  local function broken(options, extra)
    local t = { kind = "plugin", path = path, symbol = "broken_allocator", options = options }
    for k, v in pairs(extra or {}) do t[k] = v end
    return cupola.pool(t)
  end

  for _, up in ipairs { "device", "virtual" } do
    it("refuses a block at an address the plugin never got, over " .. up, function()
      local p <close> = cupola.pool { kind = "plugin", source = WILD, symbol = "wild", upstream = up }
      assert.error_matches(function() p:alloc(100) end,
        "plugin 'wild' returned a block [0x100000, +100) outside the memory it holds from its upstream", 1, true)
      local st = p:stats()
      assert.equals(0, st.allocs)
      assert.equals(0, st.used)
      assert.equals(0, st.live_buffers)
    end)
  end

  it("refuses a wild block after good ones, and the pool stays consistent and usable", function()
    local p <close> = broken "wild_after=3"
    local a = assert(p:alloc(1000))
    local b = assert(p:alloc(2000))
    assert.error_matches(function() p:alloc(100) end,
      "'broken_allocator' returned a block [0x100000, +100) outside the memory it holds from its upstream "
      .. "(the nearest upstream block: [0x", 1, true)
    local st = p:stats()
    assert.equals(2, st.allocs)
    assert.equals(3000, st.used)
    assert.equals(2, st.live_buffers)
    a:memset(1); b:memset(2)
    cupola.synchronize()
    assert.equals(1000, K.checksum(a, { type = "u8" }))
    assert.equals(4000, K.checksum(b, { type = "u8" }))
    a:free(); b:free()
    assert.equals(0, p:stats().used)
  end)

  it("refuses a block that runs past the end of its upstream block", function()
    local p <close> = broken "past_end_after=1"
    assert.error_matches(function() p:alloc(4096) end,
      "returned a block %[0x%x+, %+4096%) outside the memory it holds from its upstream %(the nearest "
      .. "upstream block: %[0x%x+, %+4096%)%)")
    assert.equals(0, p:stats().live_buffers)
    assert.equals(0, p:stats().used)
  end)

  for _, up in ipairs { "device", "virtual" } do
    it("makes the conformance battery report a wild plugin with a reproducer, over " .. up, function()
      local report = cupola.conformance(factory { kind = "plugin", source = WILD, symbol = "wild",
        upstream = up }, { ops = 100, seed = 5 })
      assert.is_false(report.ok)
      assert.equals(#report.checks - #report.skipped, #report.violations)
      local v = report.violations[1]
      assert.equals("random", v.check)
      assert.equals("address", v.class)
      assert.matches("0x100000, %+%d+%) outside the memory it holds from its upstream", v.message)
      assert.equals(1, #report.ops)
      assert.matches("b%[1%] = pool:alloc%(%d+, s%[%d%]%)", report.reproducer)
      -- a plugin that goes wild later is shrunk to the allocations it takes
      local late = cupola.conformance(factory { kind = "plugin", path = path, symbol = "broken_allocator",
        options = "wild_after=4", upstream = up }, { checks = { "random" }, ops = 300, seed = 6 })
      assert.is_false(late.ok)
      assert.equals("address", late.violations[1].class)
      assert.is_true(#late.ops <= 4, #late.ops .. " operations")
      assert.matches("b%[4%] = pool:alloc", late.reproducer)
    end)
  end

  it("ignores an upstream deallocate of a pointer the plugin never got, or not at a block's start", function()
    local p <close> = broken "free_foreign"
    local list = {}
    for i = 1, 8 do list[i] = assert(p:alloc(i * 1000)) end
    for i = 1, 8 do list[i]:free() end
    local st = p:stats()
    assert.equals(0, st.used)
    assert.equals(0, st.reserved, "every upstream block given back once, at its start")
    assert.is_conforming_pool(factory { kind = "plugin", path = path, symbol = "broken_allocator",
      options = "free_foreign" }, { checks = { "random", "conserved" }, ops = 200 })
  end)

  it("keeps upstream memory the plugin gives back under a live block until that block is freed", function()
    local p <close> = broken "drop_after=2"
    local a = assert(p:alloc(MiB))
    local b = assert(p:alloc(1000)) -- the plugin gives a's upstream memory back here
    assert.equals(MiB + 8 + 1000 + 8, p:stats().reserved, "still held, by cupola")
    a:memset(3)
    cupola.synchronize()
    assert.equals(3 * MiB, K.checksum(a, { type = "u8" }), "a's memory is still there")
    a:free()
    p:trim()
    assert.equals(1000 + 8, p:stats().reserved, "freed once nothing lay in it")
    b:free()
    assert.equals(0, p:stats().reserved)
  end)

  local function aligned_run(p, align)
    local list, total = {}, 0
    for i = 1, 40 do
      local n = (i * 7919) % 70000 + 1
      local b = assert(p:alloc(n))
      assert.equals(0, b.address % align, string.format("block %d at 0x%x", i, b.address))
      K.fill(b, i % 251, { type = "u8" })
      list[i], total = b, total + n
    end
    assert.equals(total, p:stats().used, "used counts the bytes requested")
    for i = 1, 40, 2 do list[i]:free() end
    for i = 1, 40, 2 do list[i] = assert(p:alloc(i * 3 + 1)) ; K.fill(list[i], i % 251, { type = "u8" }) end
    for i, b in ipairs(list) do
      assert.equals((i % 251) * b.size, K.checksum(b, { type = "u8" }), "block " .. i)
      b:free()
    end
    assert.equals(0, p:stats().used)
  end

  for _, align in ipairs { 4096, 65536 } do
    it("honours alignment = " .. align .. " for a plugin that does not align, data checked", function()
      local p <close> = broken("misalign_after=1", { alignment = align })
      aligned_run(p, align)
      p:trim()
      assert.equals(0, p:stats().reserved)
      assert.is_conforming_pool(factory { kind = "plugin", path = path, symbol = "broken_allocator",
        options = "misalign_after=1", alignment = align }, { ops = 200, seed = align })
    end)

    it("honours alignment = " .. align .. " for the buddy plugin, data checked", function()
      local p <close> = cupola.pool { kind = "plugin", source = BUDDY_SRC, symbol = "buddy_allocator",
        alignment = align }
      assert.equals(align, p.alignment)
      aligned_run(p, align)
      assert.is_conforming_pool(factory { kind = "plugin", source = BUDDY_SRC, symbol = "buddy_allocator",
        alignment = align }, { ops = 200, seed = align + 1 })
    end)
  end

  it("asks a plugin that already aligns for exactly the bytes requested", function()
    -- the pass-through over the virtual upstream returns 4 KiB-aligned blocks
    local p <close> = broken("", { upstream = "virtual", alignment = 4096 })
    local a = assert(p:alloc(1000))
    assert.equals(1000 + 8, p:stats().reserved, "not padded")
    a:free()
    -- and one that does not is padded by the alignment it lacks
    local q <close> = broken("misalign_after=1", { alignment = 4096 })
    local b = assert(q:alloc(1000))
    assert.equals(0, b.address % 4096)
    assert.equals(1000, q:stats().used)
    assert.is_true(q:stats().reserved > 1000 + 8, "padded")
    b:free()
  end)
end)

-- The compile log of a plugin's source reaches the caller whole (the core's
-- message buffer holds 512 bytes: a long log lost its later errors).
describe("a plugin's compile errors", function()
  it("raise with the whole compiler log, the last error's file:line included", function()
    local src = { "#include <cupola/allocator.h>" }
    for i = 1, 30 do src[#src + 1] = "int f" .. i .. "(void) { return nope" .. i .. "; }" end
    local ok, err = pcall(cupola.pool, { kind = "plugin", source = table.concat(src, "\n"), symbol = "x" })
    assert.is_false(ok)
    assert.is_true(#err > 2048, err)
    assert.matches("plugin.c:2:", err, 1, true)
    assert.matches("plugin.c:31:", err, 1, true)
  end)
end)
