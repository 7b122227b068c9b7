-- Plugin device pools (cupola.device_pool{kind = "plugin"}): a user's own
-- in-kernel allocator, compiled at run time with cupola's run and
-- verification kernels and held to the same checks as cupola's pools (the
-- claim map, alignment, patterns, NULL on exhaustion), on both backends.
local cupola = require "cupola"

local GPU = cupola.backend() == "cuda"
local N = tonumber(os.getenv "CUPOLA_DP_THREADS") or (GPU and (SERIALIZED and 20000 or 1000000) or 20000)
local MiB = 1024 * 1024
local EXAMPLE = "examples/plugins/stackalloc.cu"

local function clean(r, n)
  assert.equal(0, r.overlaps, "overlaps")
  assert.equal(0, r.misaligned, "misaligned")
  if n then assert.equal(n, r.ok + r.failed) end
end

-- Small allocators that break the contract on purpose: each must be caught.
local BROKEN = {
  -- every thread gets the same block
  same = [[
#include <cupola/plugin.h>
__device__ void cupola_plugin_init(cupola_device_pool *, unsigned long long, unsigned long long) {}
__device__ void *cupola_plugin_alloc(cupola_device_pool *pool, unsigned long long) { return cupola_pool_base(pool); }
__device__ void cupola_plugin_free(cupola_device_pool *, void *) {}
]],
  -- a bump pointer 8 bytes off the 16-byte grid
  misaligned = [[
#include <cupola/plugin.h>
__device__ void cupola_plugin_init(cupola_device_pool *pool, unsigned long long t, unsigned long long)
{ if (t == 0) *(unsigned long long *)cupola_pool_base(pool) = 64; }
__device__ void *cupola_plugin_alloc(cupola_device_pool *pool, unsigned long long bytes)
{
    unsigned long long r = (bytes + 15) & ~15ull;
    unsigned long long off = atomicAdd((unsigned long long *)cupola_pool_base(pool), r);
    if (off + r + 8 > cupola_pool_capacity(pool)) return 0;
    return cupola_pool_base(pool) + off + 8;
}
__device__ void cupola_plugin_free(cupola_device_pool *, void *) {}
]],
  -- a bump pointer that never says NULL: past the end it hands out memory
  -- that is not the pool's
  never_null = [[
#include <cupola/plugin.h>
__device__ void cupola_plugin_init(cupola_device_pool *pool, unsigned long long t, unsigned long long)
{ if (t == 0) *(unsigned long long *)cupola_pool_base(pool) = 64; }
__device__ void *cupola_plugin_alloc(cupola_device_pool *pool, unsigned long long bytes)
{
    unsigned long long r = (bytes + 15) & ~15ull;
    unsigned long long off = atomicAdd((unsigned long long *)cupola_pool_base(pool), r);
    if (off + r > cupola_pool_capacity(pool))   /* wraps around instead of failing */
        off = 64 + off % 4096;
    return cupola_pool_base(pool) + off;
}
__device__ void cupola_plugin_free(cupola_device_pool *, void *) {}
]],
}

describe("plugin device pools", function()
  it("the example plugin passes dp:run's checks: kept, freed, mixed sizes", function()
    -- On a GPU ~270k threads hold a block at once, and a block freed in one
    -- class or list serves only that one: 1e6 blocks of 64 B stay live, then
    -- up to 4 KiB each (with the header) pass through: 256 MiB ran out there.
    local cap = GPU and 2048 * MiB or 256 * MiB
    local dp <close> = cupola.device_pool { kind = "plugin", path = EXAMPLE, capacity = cap }
    assert.equal("plugin", dp.kind)
    assert.equal("stackalloc.cu", dp.name)
    assert.matches("cupola_plugin_alloc", dp.source)
    assert.matches("cupola.DevicePool %(plugin", tostring(dp))
    local r = dp:run { threads = N, bytes = 48 }
    clean(r, N)
    assert.equal(N, r.ok)
    r = dp:run { threads = N, bytes = { 4, 2048 }, free = true }
    clean(r, N)
    assert.equal(N, r.ok)
    -- freed blocks come back: far more than the capacity passes through
    for seed = 1, 3 do
      r = dp:run { threads = N, bytes = 256, free = true, seed = seed }
      clean(r, N)
      assert.equal(N, r.ok)
    end
    local st = dp:stats()
    assert.equal(cap, st.capacity)
    assert.equal(0, st.failed)
    assert.is_nil(st.used) -- what a plugin holds is its own
  end)

  it("exhaustion: NULL, counted, nothing overlapping; reset runs the plugin's init again", function()
    local cap = GPU and 4 * MiB or 1 * MiB
    local dp <close> = cupola.device_pool { kind = "plugin", path = EXAMPLE, capacity = cap }
    local r = dp:run { threads = N, bytes = 1024 }
    clean(r, N)
    assert.is_true(r.failed > 0 and r.ok > 0)
    -- a 1 KiB block takes 2 KiB with its header: at most capacity / 2 KiB
    assert.is_true(r.ok * 2048 <= cap)
    assert.equal(r.failed, dp:stats().failed)
    dp:reset()
    r = dp:run { threads = 100, bytes = 1024 }
    clean(r, 100)
    assert.equal(100, r.ok)
  end)

  it("catches a plugin that hands out one block twice", function()
    local dp <close> = cupola.device_pool { kind = "plugin", source = BROKEN.same, capacity = 1 * MiB }
    local r = dp:run { threads = 1000, bytes = 64 }
    assert.is_true(r.overlaps > 0, "overlaps must be seen")
    local r2 = dp:run { threads = 1000, bytes = 64, free = true }
    assert.is_true(r2.overlaps > 0)
  end)

  it("catches a plugin whose blocks are not 16-byte aligned", function()
    local dp <close> = cupola.device_pool { kind = "plugin", source = BROKEN.misaligned, capacity = 4 * MiB }
    local r = dp:run { threads = 1000, bytes = 64 }
    assert.equal(1000, r.misaligned)
  end)

  it("catches a plugin that never says NULL when it is exhausted", function()
    local dp <close> = cupola.device_pool { kind = "plugin", source = BROKEN.never_null, capacity = 64 * 1024 }
    local r = dp:run { threads = 10000, bytes = 64 }
    assert.equal(0, r.failed)
    assert.is_true(r.overlaps > 0, "blocks past the end overlap live ones")
  end)

  it("two streams share a plugin pool", function()
    local s1 <close> = cupola.stream()
    local s2 <close> = cupola.stream()
    local dp <close> = cupola.device_pool { kind = "plugin", path = EXAMPLE, capacity = (GPU and 1024 or 256) * MiB }
    local r = cupola.run_concurrent {
      { pool = dp, stream = s1, threads = N // 2, bytes = { 16, 512 }, free = true },
      { pool = dp, stream = s2, threads = N // 2, bytes = { 16, 512 }, free = true },
    }
    clean(r[1], N // 2)
    clean(r[2], N // 2)
    assert.equal(N // 2, r[1].ok)
    assert.equal(N // 2, r[2].ok)
  end)

  it("a compile error raises with the compiler's log, naming the plugin's file and line", function()
    local ok, err = pcall(cupola.device_pool, { kind = "plugin", name = "oops.cu", capacity = 1 * MiB,
      source = "#include <cupola/plugin.h>\n__device__ void *cupola_plugin_alloc(cupola_device_pool *p,\n" ..
        "    unsigned long long b) { return nope; }\n" })
    assert.is_false(ok)
    assert.matches("cupola.device_pool:", err)
    assert.matches("oops.cu", err)
    assert.matches("3", err)
  end)

  it("refuses what it cannot do, naming the option", function()
    assert.has_error(function()
      cupola.device_pool { kind = "plugin", capacity = 1 * MiB }
    end, "cupola.device_pool: a plugin pool takes exactly one of 'source' and 'path'")
    assert.has_error(function()
      cupola.device_pool { kind = "plugin", capacity = 1 * MiB, source = BROKEN.same, path = EXAMPLE }
    end, "cupola.device_pool: a plugin pool takes exactly one of 'source' and 'path'")
    assert.has_error(function()
      cupola.device_pool { kind = "plugin", capacity = 1 * MiB, path = "/nonexistent/x.cu" }
    end)
    assert.has_error(function()
      cupola.device_pool { kind = "plugin", capacity = 1 * MiB, source = BROKEN.same, init_threads = 0 }
    end, "cupola.device_pool: option 'init_threads' must be an integer in 1..2^30, not number 0")
    assert.has_error(function()
      cupola.device_pool { kind = "plugin", capacity = 1 * MiB, source = BROKEN.same, options = { "--evil" } }
    end)
    assert.has_error(function()
      cupola.device_pool { kind = "heap", capacity = 1 * MiB, source = BROKEN.same }
    end)
    local dp <close> = cupola.device_pool { kind = "plugin", capacity = 1 * MiB, path = EXAMPLE }
    assert.has_error(function() dp:run { threads = 10, bytes = 16, hold_us = 10 } end,
      "plugin device pools take no hold_us")
    assert.has_error(function() dp:run { threads = 10, bytes = 16, children = 2 } end)
  end)

  it("closes, twice, and then refuses use", function()
    local dp = cupola.device_pool { kind = "plugin", capacity = 1 * MiB, path = EXAMPLE }
    dp:close()
    dp:close()
    assert.is_true(dp.closed)
    assert.has_error(function() dp:run { threads = 1, bytes = 1 } end, "attempt to use a closed cupola.DevicePool")
  end)

  -- A kernel of one's own reaches the plugin through cupola_alloc when the
  -- plugin's source is in front of it, and gets NULL without it.
  it("a kernel of one's own allocates from a plugin pool with the plugin's source in front", function()
    local f = assert(io.open(EXAMPLE))
    local plugin = f:read "a"
    f:close()
    local KERNEL = [[
extern "C" __global__ void use(cupola_device_pool *pool, unsigned long long *out, unsigned long long n)
{
    unsigned long long i = cupola_global_index();
    if (i >= n)
        return;
    unsigned long long *p = (unsigned long long *)cupola_alloc(pool, 32);
    if (!p) {
        atomicAdd(&out[1], 1ull);
        return;
    }
    p[0] = i;
    p[3] = i;
    if (p[0] == i && p[3] == i)
        atomicAdd(&out[0], 1ull);
    cupola_free(pool, p);
}
]]
    local dp <close> = cupola.device_pool { kind = "plugin", source = plugin, capacity = 16 * MiB }
    local out = cupola.malloc(16)
    local n = 10000
    for _, case in ipairs { { plugin .. KERNEL, n, 0 }, { "#include <cupola/device.h>\n" .. KERNEL, 0, n } } do
      out:memset(0)
      local m = cupola.module { name = "own.cu", source = case[1] }
      local k = m:kernel("use", { "device_pool", "ptr", "u64" })
      k:launch({ threads = n }, dp, out, n)
      local ok, failed = string.unpack("<I8I8", out:read(0, 16))
      assert.equal(case[2], ok)
      assert.equal(case[3], failed)
    end
    out:free()
  end)
end)

-- Plugins created and destroyed on the host (cupola/plugin.h's
-- cupola_plugin_create / cupola_plugin_destroy), the interface the peers'
-- adapters (bench/peers/) are written against: a small bump allocator whose
-- host part notes each call in a file.
describe("plugins created on the host", function()
  local LOG = os.tmpname()
  local HOSTED = ([[
#include <cupola/plugin.h>
struct hb_state { unsigned long long top, cap; unsigned char *base; };
#if CUPOLA_PLUGIN_HOST_PART
#include <stdio.h>
#include <stdlib.h>
#if !CUPOLA_ON_HOST
#include <cuda_runtime.h>
#endif
static void hb_note(const char *what, unsigned long long v)
{
    FILE *f = fopen("%s", "a");
    if (f) { fprintf(f, "%%s %%llu\n", what, v); fclose(f); }
}
CUPOLA_PLUGIN_HOST int cupola_plugin_create(unsigned long long cap, void **dev, void **host)
{
    hb_note("create", cap);
    if (cap < 4096) return 7;
    hb_state *s = NULL;
    /* memory both the host part and the kernels reach (on the GPU: managed) */
#if CUPOLA_ON_HOST
    s = (hb_state *)aligned_alloc(256, 256 + cap);
#else
    if (cudaMallocManaged((void **)&s, 256 + cap) != cudaSuccess) s = NULL;
#endif
    if (!s) return 8;
    s->top = 0; s->cap = cap; s->base = (unsigned char *)s + 256;
    *dev = s; *host = s;
    return 0;
}
CUPOLA_PLUGIN_HOST void cupola_plugin_destroy(void *dev, void *host)
{
    hb_note("destroy", dev == host);
#if CUPOLA_ON_HOST
    free(host);
#else
    cudaFree(host);
#endif
}
#endif
__device__ void cupola_plugin_init(cupola_device_pool *, unsigned long long, unsigned long long) {}
__device__ void *cupola_plugin_alloc(cupola_device_pool *pool, unsigned long long bytes)
{
    hb_state *s = (hb_state *)cupola_pool_peer(pool);
    unsigned long long r = (bytes + 15) & ~15ull;
    unsigned long long off = atomicAdd(&s->top, r);
    return off + r <= s->cap ? s->base + off : nullptr;
}
__device__ void cupola_plugin_free(cupola_device_pool *, void *) {}
]]):format(LOG)
  local KERNEL = [[
extern "C" __global__ void take(cupola_device_pool *pool, unsigned long long *out, unsigned long long n,
                                unsigned long long bytes)
{
    unsigned long long i = cupola_global_index();
    if (i >= n)
        return;
    unsigned long long *p = (unsigned long long *)cupola_alloc(pool, bytes);
    if (!p) {
        atomicAdd(&out[1], 1ull);
        return;
    }
    p[0] = i;
    if (p[0] == i)
        atomicAdd(&out[0], 1ull);
}
]]
  local function log()
    local f = io.open(LOG)
    if not f then return "" end
    local s = f:read "a"
    f:close()
    return s
  end
  before_each(function() os.remove(LOG) end)
  teardown(function() os.remove(LOG) end)

  -- n allocations of bytes from dp in a kernel of one's own: served, NULLs
  local function take(dp, n, bytes)
    local m = cupola.module { name = "take.cu", source = HOSTED .. KERNEL }
    local k = m:kernel("take", { "device_pool", "ptr", "u64", "u64" })
    local out <close> = cupola.malloc(16)
    out:memset(0)
    k:launch({ threads = n }, dp, out, n, bytes)
    return string.unpack("<I8I8", out:read(0, 16))
  end

  it("creates the peer with the pool's capacity, serves from its memory, destroys it on close", function()
    local dp = cupola.device_pool { kind = "plugin", source = HOSTED, name = "hb.cu", capacity = 64 * 1024 }
    assert.equal("create 65536\n", log())
    assert.equal(64 * 1024, dp:stats().capacity)
    -- 64 KiB of 64-byte blocks: 1024 served, the rest NULL
    local ok, failed = take(dp, 2000, 64)
    assert.equal(1024, ok)
    assert.equal(976, failed)
    dp:close()
    dp:close()
    assert.equal("create 65536\ndestroy 1\n", log())
  end)

  it("dp:reset destroys and creates the peer again (a fresh allocator)", function()
    local dp <close> = cupola.device_pool { kind = "plugin", source = HOSTED, name = "hb.cu", capacity = 8192 }
    assert.equal(128, (take(dp, 200, 64)))
    assert.equal(0, (take(dp, 10, 64)))
    dp:reset()
    assert.equal("create 8192\ndestroy 1\ncreate 8192\n", log())
    assert.equal(128, (take(dp, 200, 64)))
  end)

  it("a create that fails is out of memory: nil, the message, 'out_of_memory'", function()
    local dp, msg, code = cupola.device_pool { kind = "plugin", source = HOSTED, name = "hb.cu", capacity = 1024 }
    assert.is_nil(dp)
    assert.matches("cupola_plugin_create%(1024%) failed %(returned 7%)", msg)
    assert.equal("out_of_memory", code)
    assert.equal("create 1024\n", log())
  end)

  it("dp:run is refused (the blocks lie outside cupola's claim map): the survey measures it", function()
    local dp <close> = cupola.device_pool { kind = "plugin", source = HOSTED, name = "hb.cu", capacity = 8192 }
    assert.has_error(function() dp:run { threads = 10, bytes = 16 } end,
      "dp:run checks blocks against the claim map of the pool's own bytes, and a plugin created on the host " ..
      "keeps its blocks in its own memory: measure it with cupola.survey")
  end)

  it("a plugin that names create but lacks destroy is refused, naming both", function()
    local src = HOSTED:gsub("CUPOLA_PLUGIN_HOST void cupola_plugin_destroy", "void hb_unused_destroy")
    local ok, err = pcall(cupola.device_pool, { kind = "plugin", source = src, name = "half.cu", capacity = 8192 })
    assert.is_false(ok)
    assert.matches("half.cu names cupola_plugin_create but does not define both", err, 1, true)
  end)

  it("takes include folders and a compiler, and refuses bad ones, naming the option", function()
    local dp <close> = cupola.device_pool { kind = "plugin", path = "examples/plugins/hostslots.cu",
      capacity = 1 * MiB, include = { "examples/plugins" }, compiler = "nvcc", options = { "-DHS_SLOT=256" } }
    assert.equal("nvcc", dp.compiler)
    assert.same({ "-DHS_SLOT=256", "-Iexamples/plugins" }, dp.options)
    assert.has_error(function()
      cupola.device_pool { kind = "plugin", path = EXAMPLE, capacity = 1 * MiB, include = { "/nonexistent/dir" } }
    end, "cupola.device_pool: option 'include': '/nonexistent/dir' is not a folder")
    assert.has_error(function()
      cupola.device_pool { kind = "plugin", path = EXAMPLE, capacity = 1 * MiB, include = "examples" }
    end, "cupola.device_pool: option 'include' must be a list of folders, not string 'examples'")
    assert.has_error(function()
      cupola.device_pool { kind = "plugin", path = EXAMPLE, capacity = 1 * MiB, include = { 3 } }
    end)
    assert.has_error(function()
      cupola.device_pool { kind = "plugin", path = EXAMPLE, capacity = 1 * MiB, compiler = "clang" }
    end, "cupola.device_pool: option 'compiler' must be \"nvrtc\" or \"nvcc\", not 'clang'")
    assert.has_error(function()
      cupola.module { source = "", compiler = "gcc" }
    end, "cupola.module: option 'compiler' must be \"nvrtc\" or \"nvcc\", not 'gcc'")
    assert.has_error(function()
      cupola.module { ptx = ".version 8.0", compiler = "nvcc" }
    end, "cupola.module: option 'compiler' applies to source= and path= only")
  end)
end)
