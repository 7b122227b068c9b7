-- Kernels of your own: cupola.module / m:kernel / k:launch.
-- Every case runs on both backends (NVRTC on a GPU, the system C++ compiler
-- and cupola's prelude on the host) and checks results element by element;
-- #gpu cases cover what only CUDA has (nested launches, PTX and cubin).
local cupola = require "cupola"
local K = cupola.kernels
local HOST = cupola.backend() == "host"
-- cases that start a child process (pending where they cannot: a preloaded libtsan)
local it_child = require("spec.support.child").available and it or pending

-- n values of a buffer (string.unpack's last result, the position, dropped)
local function unpack_n(fmt, b, n, size)
  local t = { string.unpack(string.rep(fmt, n), b:read(0, size * n)) }
  t[#t] = nil
  return t
end
local function f32s(b, n) return unpack_n("f", b, n, 4) end
local function i32s(b, n) return unpack_n("i4", b, n, 4) end
local function u32s(b, n) return unpack_n("I4", b, n, 4) end
local function put_f32(b, t) b:write(string.pack(string.rep("f", #t), table.unpack(t)), 0) end
local function put_i32(b, t) b:write(string.pack(string.rep("i4", #t), table.unpack(t)), 0) end

-- A source with a counter, so a spec can ask for a module that was never
-- compiled before in this process (or on this disk).
local SALT = tostring(os.time()) .. "_" .. tostring(math.random(1 << 30))

local SRC = [[
#include <cupola/device.h>

extern "C" __global__ void axpy(float *y, const float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

extern "C" __global__ void stride_fill(unsigned *out, unsigned long long n)
{
    for (unsigned long long i = cupola_global_index(); i < n; i += cupola_grid_size())
        out[i] = (unsigned)(i * 3 + 1);
}

/* one partial sum per block, static shared memory and barriers */
extern "C" __global__ void block_sum(const int *x, int *partial, int n)
{
    __shared__ int s[256];
    unsigned t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? x[i] : 0;
    __syncthreads();
    for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k)
            s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0)
        partial[blockIdx.x] = s[0];
}

/* the same with dynamic shared memory */
extern "C" __global__ void block_sum_dyn(const int *x, int *partial, int n)
{
    extern __shared__ int sd[];
    unsigned t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    sd[t] = i < n ? x[i] : 0;
    __syncthreads();
    for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k)
            sd[t] += sd[t + k];
        __syncthreads();
    }
    if (t == 0)
        partial[blockIdx.x] = sd[0];
}

extern "C" __global__ void histogram(const int *x, unsigned *bins, int n, int nbins)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&bins[x[i] % nbins], 1u);
}

/* warp sums by shuffles; lane 0 of each warp adds its warp's sum */
extern "C" __global__ void warp_sum(const int *x, int *out, int *per_warp)
{
    int v = x[blockIdx.x * blockDim.x + threadIdx.x];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    int w = __shfl_sync(0xffffffffu, v, 0);   /* lane 0's total, to every lane */
    int x2 = __shfl_xor_sync(0xffffffffu, w, 1);
    unsigned odd = __ballot_sync(0xffffffffu, threadIdx.x & 1);
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(out, v);
        per_warp[(blockIdx.x * blockDim.x + threadIdx.x) / 32] = (x2 == w && odd == 0xaaaaaaaau) ? w : -1;
    }
}

extern "C" __global__ void atomics(int *i, unsigned *u, unsigned long long *ull, float *f, double *d)
{
    atomicAdd(&i[0], 2);
    atomicSub(&i[1], 1);
    atomicMax(&i[2], (int)threadIdx.x);
    atomicMin(&i[3], -(int)threadIdx.x);
    atomicOr(&u[0], 1u << (threadIdx.x % 32));
    atomicAnd(&u[1], ~(1u << (threadIdx.x % 32)));
    atomicCAS(&u[2], 0u, threadIdx.x + 1);
    atomicExch(&u[3], 7u);
    atomicAdd(&ull[0], 1ull << 33);
    atomicAdd(f, 0.5f);
    atomicAdd(d, 0.25);
    __threadfence();
}

/* every argument type, written back so the spec can read them */
extern "C" __global__ void args(char *out, int a, unsigned b, long long c, unsigned long long d,
                                float e, double f, int *p)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        memcpy(out + 0, &a, 4);
        memcpy(out + 4, &b, 4);
        memcpy(out + 8, &c, 8);
        memcpy(out + 16, &d, 8);
        memcpy(out + 24, &e, 4);
        memcpy(out + 32, &f, 8);
        *p = 99;
    }
}

extern "C" __global__ void dims(unsigned *out)
{
    unsigned b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    unsigned t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    unsigned nt = blockDim.x * blockDim.y * blockDim.z;
    out[b * nt + t] = b * 1000 + t;
}

extern "C" __global__ void empty(void) {}
]]

-- Runs script in a child lua5.4 with env (e.g. "CUPOLA_CACHE_DIR=/tmp/x")
-- and this process's module paths; returns its output (stdout and stderr).
local function child(env, script)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(string.format("package.path = %q .. package.path\npackage.cpath = %q .. package.cpath\n",
    "lua/?.lua;lua/?/init.lua;", package.cpath .. ";"))
  f:write(script)
  f:close()
  local p = io.popen(string.format("%s lua5.4 %s 2>&1", env, path))
  local out = p:read "a"
  p:close()
  os.remove(path)
  return out
end

describe("cupola.module #kernels", function()
  local m
  setup(function()
    m = cupola.module { source = SRC, name = "spec.cu" }
  end)
  teardown(function() if m then m:close() end end)

  it("compiles a module and names it", function()
    assert.equals("spec.cu", m.name)
    assert.matches("cupola.Module 'spec.cu'", tostring(m))
  end)

  it("axpy: y = a*x + y, element by element", function()
    local n = 1000
    local x, y = cupola.malloc(4 * n), cupola.malloc(4 * n)
    local xs, ys = {}, {}
    for i = 1, n do xs[i], ys[i] = i - 1, 2 * (i - 1) end
    put_f32(x, xs); put_f32(y, ys)
    local k = m:kernel("axpy", { "ptr", "ptr", "f32", "i32" })
    k:launch({ threads = n, block = 128 }, y, x, 3.0, n)
    cupola.synchronize()
    local got = f32s(y, n)
    for i = 1, n do assert.equals(3 * (i - 1) + 2 * (i - 1), got[i]) end
  end)

  it("a grid-stride loop over more elements than threads", function()
    local n = 10000
    local out = cupola.malloc(4 * n)
    m:kernel("stride_fill", { "ptr", "u64" }):launch({ grid = 3, block = 64 }, out, n)
    local got = u32s(out, n)
    for i = 1, n do assert.equals(((i - 1) * 3 + 1) & 0xffffffff, got[i]) end
  end)

  it("block reduction with static shared memory and barriers", function()
    local n, blocks = 1000, 4
    local x, partial = cupola.malloc(4 * n), cupola.malloc(4 * blocks)
    local xs = {}
    for i = 1, n do xs[i] = i end
    put_i32(x, xs)
    m:kernel("block_sum", { "ptr", "ptr", "i32" }):launch({ grid = blocks, block = 256 }, x, partial, n)
    local got = i32s(partial, blocks)
    for b = 0, blocks - 1 do
      local want = 0
      for i = b * 256 + 1, math.min(n, (b + 1) * 256) do want = want + i end
      assert.equals(want, got[b + 1])
    end
  end)

  it("block reduction with dynamic shared memory (extern __shared__)", function()
    local n, blocks = 512, 4
    local x, partial = cupola.malloc(4 * n), cupola.malloc(4 * blocks)
    local xs = {}
    for i = 1, n do xs[i] = 3 * i end
    put_i32(x, xs)
    m:kernel("block_sum_dyn", { "ptr", "ptr", "i32" })
     :launch({ grid = blocks, block = 128, shared = 128 * 4 }, x, partial, n)
    local got = i32s(partial, blocks)
    for b = 0, blocks - 1 do
      local want = 0
      for i = b * 128 + 1, (b + 1) * 128 do want = want + 3 * i end
      assert.equals(want, got[b + 1])
    end
  end)

  it("histogram with atomics over many blocks", function()
    local n, nbins = 20000, 17
    local x, bins = cupola.malloc(4 * n), cupola.malloc(4 * nbins)
    local xs, want = {}, {}
    for i = 1, nbins do want[i] = 0 end
    for i = 1, n do
      xs[i] = (i * 7919) % 1000
      want[xs[i] % nbins + 1] = want[xs[i] % nbins + 1] + 1
    end
    put_i32(x, xs)
    bins:memset(0)
    m:kernel("histogram", { "ptr", "ptr", "i32", "i32" }):launch({ grid = 16, block = 128 }, x, bins, n, nbins)
    local got = u32s(bins, nbins)
    for i = 1, nbins do assert.equals(want[i], got[i]) end
  end)

  it("warp shuffles and ballots", function()
    local blocks, threads = 2, 128
    local n = blocks * threads
    local x, out, per_warp = cupola.malloc(4 * n), cupola.malloc(4), cupola.malloc(4 * n // 32)
    local xs, total = {}, 0
    for i = 1, n do xs[i] = i; total = total + i end
    put_i32(x, xs)
    out:memset(0)
    m:kernel("warp_sum", { "ptr", "ptr", "ptr" }):launch({ grid = blocks, block = threads }, x, out, per_warp)
    assert.equals(total, i32s(out, 1)[1])
    local pw = i32s(per_warp, n // 32)
    for w = 0, n // 32 - 1 do
      local want = 0
      for i = w * 32 + 1, w * 32 + 32 do want = want + i end
      assert.equals(want, pw[w + 1])
    end
  end)

  it("the atomic functions on 32- and 64-bit integers, float and double", function()
    local ib, ub, ullb, fb, db = cupola.malloc(16), cupola.malloc(16), cupola.malloc(8), cupola.malloc(4), cupola.malloc(8)
    put_i32(ib, { 0, 0, -1, 0 })
    ub:write(string.pack("I4I4I4I4", 0, 0xffffffff, 0, 0), 0)
    ullb:memset(0); fb:memset(0); db:memset(0)
    m:kernel("atomics", { "ptr", "ptr", "ptr", "ptr", "ptr" }):launch({ grid = 2, block = 64 }, ib, ub, ullb, fb, db)
    local i = i32s(ib, 4)
    assert.same({ 256, -128, 63, -63 }, i)
    local u = u32s(ub, 4)
    assert.equals(0xffffffff, u[1])
    assert.equals(0, u[2])
    assert.is_true(u[3] >= 1 and u[3] <= 64)
    assert.equals(7, u[4])
    assert.equals(128 * (1 << 33), string.unpack("I8", ullb:read(0, 8)))
    assert.equals(64.0, f32s(fb, 1)[1])
    assert.equals(32.0, string.unpack("d", db:read(0, 8)))
  end)

  it("passes every argument type, a pointer also as an integer address", function()
    local out, p = cupola.malloc(40), cupola.malloc(4)
    local k = m:kernel("args", { "ptr", "i32", "u32", "i64", "u64", "f32", "f64", "ptr" })
    k:launch({ grid = 1, block = 1 }, out, -5, 4000000000, -(1 << 40), 1 << 62, 1.5, 2.25, p.address)
    local a, b, c, d = string.unpack("i4I4i8i8", out:read(0, 24))
    assert.equals(-5, a)
    assert.equals(4000000000, b)
    assert.equals(-(1 << 40), c)
    assert.equals(1 << 62, d)
    assert.equals(1.5, string.unpack("f", out:read(24, 4)))
    assert.equals(2.25, string.unpack("d", out:read(32, 8)))
    assert.equals(99, i32s(p, 1)[1])
    assert.equals("cupola.Kernel 'args' (8 parameters)", tostring(k))
  end)

  it("3-D grids and blocks give every thread its indices", function()
    local gx, gy, gz, bx, by, bz = 2, 3, 2, 4, 2, 3
    local nb, nt = gx * gy * gz, bx * by * bz
    local out = cupola.malloc(4 * nb * nt)
    m:kernel("dims", { "ptr" }):launch({ grid = { gx, gy, gz }, block = { bx, by, bz } }, out)
    local got = u32s(out, nb * nt)
    for b = 0, nb - 1 do
      for t = 0, nt - 1 do assert.equals(b * 1000 + t, got[b * nt + t + 1]) end
    end
  end)

  it("launches in stream order", function()
    local s = cupola.stream()
    local out = cupola.malloc(4 * 64)
    K.spin(20000, { stream = s })
    K.fill(out, 5, { type = "u32", stream = s })
    m:kernel("stride_fill", { "ptr", "u64" }):launch({ grid = 1, block = 32, stream = s }, out, 32)
    K.fill(out, 9, { type = "u32", stream = s })
    -- the spin, the fill, the kernel over the first half, a fill over all: 9s
    s:synchronize()
    for _, v in ipairs(u32s(out, 64)) do assert.equals(9, v) end
    out:free()
    s:close()
  end)

  it("a kernel keeps its module's code alive after the module is closed", function()
    local mm = cupola.module { source = SRC, name = "spec.cu" }
    local k = mm:kernel("stride_fill", { "ptr", "u64" })
    mm:close()
    mm = nil
    collectgarbage()
    local out = cupola.malloc(16)
    k:launch({ grid = 1, block = 4 }, out, 4)
    assert.same({ 1, 4, 7, 10 }, u32s(out, 4))
    k:close()
    k:close()
  end)

  it_child("a barrier reached through a user header (-I) still waits", function()
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir -p " .. dir)
    local f = assert(io.open(dir .. "/blocksum.h", "w"))
    f:write [[
static __device__ int block_total(int v)
{
    __shared__ int s[64];
    s[threadIdx.x] = v;
    __syncthreads();
    int t = 0;
    for (unsigned i = 0; i < blockDim.x; i++)
        t += s[i];
    __syncthreads();
    return t;
}
]]
    f:close()
    local mm = cupola.module { name = "hdr.cu", options = { "-I" .. dir }, source = [[
#include "blocksum.h"
extern "C" __global__ void totals(int *out) { out[blockIdx.x * blockDim.x + threadIdx.x] = block_total((int)threadIdx.x + 1); }
]] }
    os.execute("rm -rf " .. dir)
    local out = cupola.malloc(4 * 128)
    mm:kernel("totals", { "ptr" }):launch({ grid = 2, block = 64 }, out)
    for _, v in ipairs(i32s(out, 128)) do assert.equals(64 * 65 // 2, v) end
  end)

  it_child("finds <cupola/device.h>; $CUPOLA_INCLUDE overrides where", function()
    local found = false
    for _, d in ipairs(require("cupola.core")._include_path()) do
      local f = io.open(d .. "/cupola/device.h")
      if f then f:close() found = true end
    end
    assert.is_true(found)
    local out = child("CUPOLA_INCLUDE=/nonexistent/include", string.format([[
      local cupola = require "cupola"
      io.write(table.concat(require("cupola.core")._include_path(), ":"), "\n")
      local ok, err = pcall(cupola.module, { source = %q, name = "inc.cu" })
      io.write(tostring(ok), " ", tostring(err), "\n")
    ]], '#include <cupola/device.h>\nextern "C" __global__ void f(void) {}\n'))
    assert.matches("^/nonexistent/include\nfalse ", out)
    assert.matches(HOST and "host_prelude%.h not found" or "cupola/device%.h", out)
  end)

  describe("cache", function()
    it("a second compile of the same source is a hit", function()
      local src = SRC .. "\n// " .. SALT .. "\n"
      local m1 = cupola.module { source = src, name = "c.cu" }
      assert.is_false(m1.cached)
      assert.equals("compiled", m1.code)
      local before = cupola.module_cache_stats()
      local m2 = cupola.module { source = src, name = "c.cu" }
      assert.is_true(m2.cached)
      assert.equals("memory", m2.code)
      assert.equals(before.memory_hits + 1, cupola.module_cache_stats().memory_hits)
      if cupola.module_cache_stats().disk then
        cupola.module_cache_forget()
        local m3 = cupola.module { source = src, name = "c.cu" }
        assert.equals("disk", m3.code)
      end
      -- other options are another entry
      local m4 = cupola.module { source = src, name = "c.cu", options = { "-DSPEC_X=1" } }
      assert.is_false(m4.cached)
    end)

    it_child("a script's second run reads the disk cache; a truncated entry is rebuilt, never loaded", function()
      local dir = os.tmpname()
      os.remove(dir)
      local script = string.format([[
        local cupola = require "cupola"
        local m = cupola.module { source = %q, name = "d.cu" }
        local out = cupola.malloc(16)
        m:kernel("stride_fill", { "ptr", "u64" }):launch({ grid = 1, block = 4 }, out, 4)
        local a, b, c, d = string.unpack("I4I4I4I4", out:read(0, 16))
        local st = cupola.module_cache_stats()
        io.write(m.code, " ", a + b + c + d, " ", tostring(st.disk), " ", st.rebuilt, "\n")
      ]], SRC .. "// disk " .. SALT)
      local env = "CUPOLA_CACHE_DIR=" .. dir
      assert.equals("compiled 22 true 0\n", child(env, script))
      assert.equals("disk 22 true 0\n", child(env, script))
      -- the directory is private
      local p = io.popen("stat -c %a " .. dir)
      assert.equals("700", p:read "l")
      p:close()
      -- truncate every entry: detected, rebuilt
      os.execute("for f in " .. dir .. "/*; do truncate -s 100 \"$f\"; done")
      assert.equals("compiled 22 true 1\n", child(env, script))
      assert.equals("disk 22 true 0\n", child(env, script))
      os.execute("rm -rf " .. dir)
    end)

    it_child("refuses a cache directory that is a symbolic link (and still compiles)", function()
      local dir = os.tmpname()
      os.remove(dir)
      os.execute("mkdir -m 700 " .. dir .. " && ln -s " .. dir .. " " .. dir .. ".link")
      local out = child("CUPOLA_CACHE_DIR=" .. dir .. ".link", string.format([[
        local cupola = require "cupola"
        local m = cupola.module { source = %q, name = "l.cu" }
        local st = cupola.module_cache_stats()
        io.write(m.code, " ", tostring(st.disk), " ", st.why or "", "\n")
      ]], SRC .. "// link " .. SALT))
      assert.matches("^compiled false .*symbolic link", out)
      os.execute("rm -rf " .. dir .. " " .. dir .. ".link")
    end)
  end)

  describe("errors", function()
    it("a compile error raises with the compiler's log, naming the module and the line", function()
      local ok, err = pcall(cupola.module, { name = "broken.cu", source = [[
extern "C" __global__ void f(int *x)
{
    x[0] = undefined_thing;
}
]] })
      assert.is_false(ok)
      assert.matches("broken%.cu", err)
      assert.matches("broken%.cu[:%(]3", err)
      assert.matches("undefined_thing", err)
    end)

    it("an option outside the allow-list is an error naming it", function()
      local ok, err = pcall(cupola.module, { source = SRC, options = { "-fplugin=/tmp/x.so" } })
      assert.is_false(ok)
      assert.matches("'%-fplugin=/tmp/x%.so' is not allowed", err)
      assert.has_error(function() cupola.module { source = SRC, options = { 42 } } end)
      assert.has_error(function() cupola.module { source = SRC, options = "-O2" } end)
    end)

    it("module options: exactly one source, known keys", function()
      assert.has_error(function() cupola.module {} end)
      assert.has_error(function() cupola.module { source = SRC, ptx = "x" } end)
      assert.has_error(function() cupola.module { source = SRC, colour = "red" } end)
      assert.has_error(function() cupola.module { source = 42 } end)
      assert.has_error(function() cupola.module { path = "/nonexistent/k.cu" } end)
      assert.has_error(function() cupola.module "source" end)
    end)

    it("reads a module from a file", function()
      local path = tmpfile(SRC)
      local mf = cupola.module { path = path }
      os.remove(path)
      assert.equals(path:match "[^/]+$", mf.name)
      local out = cupola.malloc(8)
      mf:kernel("stride_fill", { "ptr", "u64" }):launch({ grid = 1, block = 2 }, out, 2)
      assert.same({ 1, 4 }, u32s(out, 2))
    end)

    it("unknown kernel, unknown type name, closed module, closed kernel", function()
      assert.has_error(function() m:kernel("nope", {}) end, "bad argument #1 to 'kernel' (no kernel 'nope' in module spec.cu" ..
        (HOST and "" or " (is it declared extern \"C\" __global__?)") .. ")")
      local ok, err = pcall(m.kernel, m, "axpy", { "ptr", "ptr", "float", "i32" })
      assert.is_false(ok)
      assert.matches("unknown type 'float'", err)
      assert.has_error(function() m:kernel("axpy", { "ptr", "ptr", 1, "i32" }) end)
      local mm = cupola.module { source = SRC }
      mm:close()
      assert.has_error(function() mm:kernel("axpy", {}) end, "attempt to use a closed cupola.Module")
      assert.equals("cupola.Module (closed)", tostring(mm))
      local k = m:kernel("empty", {})
      k:close()
      assert.has_error(function() k:launch({ grid = 1, block = 1 }) end, "attempt to use a closed cupola.Kernel")
    end)

    it("declared types that do not match the kernel", function()
      -- f32 (4 bytes) where the kernel takes a pointer (8 bytes)
      local ok, err = pcall(m.kernel, m, "axpy", { "f32", "ptr", "f32", "i32" })
      assert.is_false(ok)
      assert.matches("parameter 1", err)
      ok, err = pcall(m.kernel, m, "axpy", { "ptr", "ptr", "f32" })
      assert.is_false(ok)
      assert.matches("parameters", err)
      ok = pcall(m.kernel, m, "axpy", { "ptr", "ptr", "f32", "i32", "i32" })
      assert.is_false(ok)
    end)

    it("wrong argument count, type and range raise naming the argument", function()
      local k = m:kernel("args", { "ptr", "i32", "u32", "i64", "u64", "f32", "f64", "ptr" })
      local out, p = cupola.malloc(40), cupola.malloc(4)
      local L = { grid = 1, block = 1 }
      local function e(...) local ok, err = pcall(k.launch, k, L, ...) assert.is_false(ok) return err end
      assert.matches("takes 8 arguments, got 7", e(out, 1, 2, 3, 4, 5, 6))
      assert.matches("takes 8 arguments, got 9", e(out, 1, 2, 3, 4, 5, 6, p, 9))
      assert.matches("bad argument #3 to 'launch' %(kernel 'args' parameter 2, i32: 2147483648 is out of range",
        e(out, 1 << 31, 2, 3, 4, 5, 6, p))
      assert.matches("bad argument #3 .*i32", e(out, -(1 << 31) - 1, 2, 3, 4, 5, 6, p))
      assert.matches("bad argument #4 .*u32: %-1 is out of range", e(out, 1, -1, 3, 4, 5, 6, p))
      assert.matches("bad argument #4 .*u32: 4294967296 is out of range", e(out, 1, 1 << 32, 3, 4, 5, 6, p))
      assert.matches("bad argument #6 .*u64: %-1 is negative", e(out, 1, 2, 3, -1, 5, 6, p))
      assert.matches("bad argument #3 .*integer expected, got string", e(out, "1", 2, 3, 4, 5, 6, p))
      assert.matches("bad argument #3 .*no integer representation", e(out, 1.5, 2, 3, 4, 5, 6, p))
      assert.matches("bad argument #7 .*f32: number expected, got boolean", e(out, 1, 2, 3, 4, true, 6, p))
      assert.matches("bad argument #2 .*ptr: a cupola.Buffer or an integer address expected, got table",
        e({}, 1, 2, 3, 4, 5, 6, p))
      assert.matches("bad argument #9 .*ptr: a cupola.Buffer or an integer address expected, got cupola.Stream",
        e(out, 1, 2, 3, 4, 5, 6, cupola.default_stream))
      local gone = cupola.malloc(4)
      gone:free()
      assert.matches("bad argument #9 .*closed", e(out, 1, 2, 3, 4, 5, 6, gone))
      -- a buffer its pool's reset() took away is closed too
      local arena <close> = cupola.pool { kind = "arena", upstream = "device", initial = "1MiB" }
      local pb = arena:alloc(64)
      arena:reset()
      assert.matches("bad argument #9 .*closed", e(out, 1, 2, 3, 4, 5, 6, pb))
      -- the method called on something else
      local ok, err = pcall(k.launch, m, L, out, 1, 2, 3, 4, 5, 6, p)
      assert.is_false(ok)
      assert.matches("cupola.Kernel expected, got cupola.Module", err)
      -- nothing was launched by the failed calls, and a good one still works
      k:launch(L, out, 1, 2, 3, 4, 5, 6, p)
      cupola.synchronize()
    end)

    it("bad launch shapes raise naming the option", function()
      local k = m:kernel("empty", {})
      local function e(opts) local ok, err = pcall(k.launch, k, opts) assert.is_false(ok) return err end
      assert.matches("option 'grid': x is 0", e { grid = 0, block = 1 })
      assert.matches("option 'block': x is 0", e { grid = 1, block = 0 })
      assert.matches("option 'grid': y is 0", e { grid = { 1, 0 }, block = 1 })
      assert.matches("option 'block': x = 1025 exceeds the device's limit 1024", e { grid = 1, block = 1025 })
      assert.matches("option 'block'.*exceed", e { grid = 1, block = { 32, 32, 2 } })
      assert.matches("option 'block': z = 65", e { grid = 1, block = { 1, 1, 65 } })
      assert.matches("option 'grid': y = 65536", e { grid = { 1, 65536 }, block = 1 })
      assert.matches("option 'grid': x = 2147483648", e { grid = 1 << 31, block = 1 })
      assert.matches("option 'grid' must be an integer", e { grid = 1 << 32, block = 1 })
      assert.matches("option 'shared'.*exceed the limit", e { grid = 1, block = 1, shared = 1 << 20 })
      assert.matches("option 'shared' must be", e { grid = 1, block = 1, shared = -1 })
      assert.matches("option 'threads' must be", e { threads = 0 })
      assert.matches("'grid' or 'threads', not both", e { threads = 10, grid = 1 })
      assert.matches("option 'grid' is required", e { block = 1 })
      assert.matches("unknown option 'blocks'", e { grid = 1, blocks = 1 })
      assert.matches("launch options expected", (select(2, pcall(k.launch, k, 1))))
      assert.matches("option 'grid' must be", e { grid = "1", block = 1 })
      assert.matches("option 'stream' must be", e { grid = 1, block = 1, stream = 1 })
    end)

    it("a launch of kernels from kernels #cdp", function()
      local src = [[
extern "C" __global__ void child(int *x) { atomicAdd(x, 1); }
extern "C" __global__ void parent(int *x)
{
    child<<<1, 32>>>(x);
}
]]
      if HOST then
        local ok, err = pcall(cupola.module, { source = src, name = "nest.cu" })
        assert.is_false(ok)
        assert.matches("nest%.cu:4: compile error: a kernel launches a kernel", err)
        assert.matches("CUDA backend", err)
      else
        local mm = cupola.module { source = src, name = "nest.cu" }
        local x = cupola.malloc(4)
        x:memset(0)
        mm:kernel("parent", { "ptr" }):launch({ grid = 8, block = 1 }, x)
        assert.equals(8 * 32, i32s(x, 1)[1])
      end
    end)

    it("PTX and cubin need the CUDA backend", function()
      if HOST then
        assert.has_error(function() cupola.module { ptx = ".version 8.0" } end,
          "cupola.module: module.ptx: PTX needs the CUDA backend (this is the host backend)")
        assert.has_error(function() cupola.module { cubin = "/tmp/x.cubin" } end)
      end
    end)

    if HOST then
      it("a deadlock at the barriers is reported at the next synchronization (host)", function()
        local mm = cupola.module { name = "dead.cu", source = [[
extern "C" __global__ void dead(int *x)
{
    if (threadIdx.x == 0)
        __syncthreads();
    else
        __syncwarp();
    x[0] = 1;
}
extern "C" __global__ void trap(void) { __trap(); }
]] }
        local x = cupola.malloc(4)
        mm:kernel("dead", { "ptr" }):launch({ grid = 2, block = 64 }, x)
        local ok, err = pcall(cupola.synchronize)
        assert.is_false(ok)
        assert.matches("cupolaErrorHostKernel: kernel 'dead': deadlock in block", err)
        cupola.synchronize() -- reported once
        -- a trap is sticky (as on CUDA): its own stream, left in error
        local s = cupola.stream()
        mm:kernel("trap", {}):launch({ grid = 1, block = 1, stream = s })
        ok, err = pcall(s.synchronize, s)
        assert.is_false(ok)
        assert.matches("__trap", err)
        local ok2, err2 = pcall(s.synchronize, s)
        assert.is_false(ok2)
        assert.equals(err, err2)
        s:close()
        cupola.synchronize()
      end)

      it("code outside the subset is a compile error (host)", function()
        local ok, err = pcall(cupola.module, { name = "tex.cu", source = [[
extern "C" __global__ void f(float *x, cudaTextureObject_t t)
{
    x[0] = tex1Dfetch<float>(t, 0);
}
]] })
        assert.is_false(ok)
        assert.matches("tex%.cu:1:", err)
      end)
    end
  end)

  it("device_pool arguments take a cupola.DevicePool", function()
    local mm = cupola.module { source = [[
extern "C" __global__ void use_pool(void *pool, int *out) { if (threadIdx.x == 0) *out = pool != 0; }
]] }
    local k = mm:kernel("use_pool", { "device_pool", "ptr" })
    local out = cupola.malloc(4)
    local ok, err = pcall(k.launch, k, { grid = 1, block = 1 }, out, out)
    assert.is_false(ok)
    assert.matches("device_pool: a cupola.DevicePool expected, got cupola.Buffer", err)
    if cupola.device_pool then
      local dp = cupola.device_pool { kind = "bump", capacity = "1MiB" }
      k:launch({ grid = 1, block = 1 }, dp, out)
      assert.equals(1, i32s(out, 1)[1])
    end
  end)
end)

describe("cupola.module on the GPU", function()
  gpu_it("loads PTX", function()
    local ptx = [[
.version 8.0
.target sm_90
.address_size 64
.visible .entry set42(.param .u64 p)
{
    .reg .b64 %rd<3>;
    .reg .b32 %r<2>;
    ld.param.u64 %rd1, [p];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, 42;
    st.global.u32 [%rd2], %r1;
    ret;
}
]]
    local mm = cupola.module { ptx = ptx, name = "set42.ptx" }
    assert.equals("as given", mm.code)
    local x = cupola.malloc(4)
    mm:kernel("set42", { "ptr" }):launch({ grid = 1, block = 1 }, x)
    assert.equals(42, i32s(x, 1)[1])
  end)

  gpu_it("loads a cubin built by nvcc", function()
    local nvcc = (os.getenv "CUDA_HOME" or "/usr/local/cuda") .. "/bin/nvcc"
    local src = tmpfile [[extern "C" __global__ void set7(int *x) { *x = 7; }]]
    local cubin = src .. ".cubin"
    os.rename(src, src .. ".cu")
    local ok = os.execute(string.format("%s -cubin -arch=sm_90 -o %s %s.cu", nvcc, cubin, src))
    os.remove(src .. ".cu")
    assert.is_true(ok, "nvcc could not build the cubin")
    local mm = cupola.module { cubin = cubin }
    os.remove(cubin)
    local x = cupola.malloc(4)
    mm:kernel("set7", { "ptr" }):launch({ grid = 1, block = 1 }, x)
    assert.equals(7, i32s(x, 1)[1])
  end)

  gpu_it("relocatable device code on request (-rdc=true) links with cudadevrt #cdp", function()
    local mm = cupola.module { name = "rdc.cu", options = { "-rdc=true" }, source = [[
extern "C" __global__ void child(int *x, int k) { atomicAdd(x, k); }
extern "C" __global__ void parent(int *x)
{
    if (threadIdx.x == 0)
        child<<<2, 16>>>(x, (int)blockIdx.x + 1);
}
]] }
    local x = cupola.malloc(4)
    x:memset(0)
    mm:kernel("parent", { "ptr" }):launch({ grid = 4, block = 32 }, x)
    assert.equals(32 * (1 + 2 + 3 + 4), i32s(x, 1)[1])
  end)

  gpu_it("a fault surfaces at the next synchronization with the CUDA error name #fault", function()
    -- in a child: a fault leaves the CUDA context unusable
    local out = child("", [[
      local cupola = require "cupola"
      local mm = cupola.module { name = "fault.cu", source = [=[
extern "C" __global__ void fault(int *x) { x[threadIdx.x] = 1; }
]=] }
      mm:kernel("fault", { "ptr" }):launch({ grid = 1, block = 32 }, 16)
      io.write("launched\n")
      local ok, err = pcall(cupola.synchronize)
      io.write(tostring(ok), " ", tostring(err), "\n")
    ]])
    assert.matches("launched\nfalse .*[Ii]llegal", out)
  end)
end)

-- Threads that exit before a barrier, names the prelude must not
-- take from the user, compile errors that keep the user's file:line, and
-- device-side malloc.
describe("kernels of your own: early exits, reserved names, whole compile logs", function()
  local SENT = -7

  -- threads i >= n return at once; the others meet at the barrier (threads
  -- that have exited take no part in a block's barriers, as on CUDA since
  -- Volta); a second kernel has exited threads interleaved with the live
  -- ones and uses two barriers and a counting barrier
  local EARLY = [[
extern "C" __global__ void early(int *o, int n)
{
    __shared__ int sh[1024];
    int i = threadIdx.x;
    if (i >= n)
        return;
    sh[i] = i;
    __syncthreads();
    o[i] = sh[n - 1 - i];
}
extern "C" __global__ void holes(int *o)
{
    __shared__ int sh[1024];
    int i = threadIdx.x;
    if (i % 3 == 1)
        return;
    sh[i] = 2 * i;
    __syncthreads();
    int c = __syncthreads_count(1);
    int j = (i + 3) % (int)blockDim.x;
    __syncthreads();
    o[i] = (j % 3 == 1 ? -1 : sh[j]) + 4096 * c;
}
extern "C" __global__ void early_direct(int *o, int n)
{
    int i = threadIdx.x;
    if (i >= n)
        return;
    o[i] = n - 1 - i;
}
]]

  it("threads that return before a __syncthreads: the others complete with the right data", function()
    local m = cupola.module { name = "early.cu", source = EARLY }
    local early = m:kernel("early", { "ptr", "i32" })
    local holes = m:kernel("holes", { "ptr" })
    local direct = cupola.module { name = "early_direct.cu", source = EARLY:match('extern "C" __global__ void early_direct.*') }
    local early_direct = direct:kernel("early_direct", { "ptr", "i32" })
    local s = cupola.stream()
    local o = cupola.malloc(1024 * 4)
    local sentinel = {}
    for i = 1, 1024 do sentinel[i] = SENT end
    for _, block in ipairs { 1, 2, 32, 33, 64, 256, 1024 } do
      local ns = { 0, 1, block // 2, block - 1, block }
      for _, n in ipairs(ns) do
        for _, k in ipairs { early, early_direct } do
          put_i32(o, sentinel)
          k:launch({ grid = 1, block = block, stream = s }, o, n)
          s:synchronize()
          local got = i32s(o, block)
          for i = 0, block - 1 do
            local want = i < n and n - 1 - i or SENT
            if got[i + 1] ~= want then
              error(string.format("block %d, n %d: o[%d] = %d, want %d", block, n, i, got[i + 1], want))
            end
          end
        end
      end
      put_i32(o, sentinel)
      holes:launch({ grid = 2, block = block, stream = s }, o)
      s:synchronize()
      local got, live = i32s(o, block), 0
      for i = 0, block - 1 do if i % 3 ~= 1 then live = live + 1 end end
      for i = 0, block - 1 do
        local j = (i + 3) % block
        local want = i % 3 == 1 and SENT or ((j % 3 == 1 and -1 or 2 * j) + 4096 * live)
        if got[i + 1] ~= want then
          error(string.format("holes, block %d: o[%d] = %d, want %d", block, i, got[i + 1], want))
        end
      end
    end
    o:free()
    s:close()
    m:close()
    direct:close()
  end)

  -- kernels and parameters named like the prelude's internals, before and
  -- after they were renamed (the table's lambda had a parameter `a`, which
  -- hid a kernel named a)
  local NAMES = [[
extern "C" __global__ void a(int *o, int a) { o[0] = a; }
extern "C" __global__ void b(int *fn, int cur, int tid, int blk) { fn[1] = cur + tid + blk; }
extern "C" __global__ void i(int *i) { i[2] = 3; }
extern "C" __global__ void k(int *l, int s, int n) { l[3] = s + n; }
extern "C" __global__ void p(int *p) { p[4] = 5; }
extern "C" __global__ void s(int *s) { s[5] = 6; }
extern "C" __global__ void x(int *x) { x[6] = 7 + (int)threadIdx.x; }
extern "C" __global__ void invoke(int *invoke) { invoke[7] = 8; }
extern "C" __global__ void launch(int *params, int nparams) { params[8] = nparams; }
extern "C" __global__ void call(int *sig, int run_block, int entry) { sig[9] = run_block + entry; }
]]
  local WANT = { 1, 6, 3, 9, 5, 6, 7, 8, 9, 10 }
  local function run_names(m)
    local o = cupola.malloc(16 * 4)
    o:memset(0)
    m:kernel("a", { "ptr", "i32" }):launch({ grid = 1, block = 1 }, o, 1)
    m:kernel("b", { "ptr", "i32", "i32", "i32" }):launch({ grid = 1, block = 1 }, o, 1, 2, 3)
    m:kernel("i", { "ptr" }):launch({ grid = 1, block = 1 }, o)
    m:kernel("k", { "ptr", "i32", "i32" }):launch({ grid = 1, block = 1 }, o, 4, 5)
    for _, name in ipairs { "p", "s", "x", "invoke" } do
      m:kernel(name, { "ptr" }):launch({ grid = 1, block = 1 }, o)
    end
    m:kernel("launch", { "ptr", "i32" }):launch({ grid = 1, block = 1 }, o, 9)
    m:kernel("call", { "ptr", "i32", "i32" }):launch({ grid = 1, block = 1 }, o, 4, 6)
    cupola.synchronize()
    assert.same(WANT, { table.unpack(i32s(o, 10)) })
    o:free()
  end

  it("kernels named a, b, i, k, p, s, x, invoke, launch, call (parameters too) compile and run", function()
    run_names(cupola.module { name = "names.cu", source = NAMES })
    -- the same with a barrier in the module: threads as fibers
    run_names(cupola.module { name = "names_sync.cu", source = NAMES .. [[
extern "C" __global__ void with_barrier(int *o) { __syncthreads(); }
]] })
  end)

  if HOST then
    -- a user's macros (options and #define) never rewrite the prelude's
    -- code, nor what its macros (threadIdx, the kernel table) expand to
    it("user macros named like the prelude's internals: -DN -DT -Di -Da -Db -Dk -Dp -Ds and #defines (host)", function()
      local opts = {}
      for _, name in ipairs { "N", "T", "i", "a", "b", "k", "p", "s", "f", "l", "n", "v", "r", "m", "fn",
        "A", "B", "I", "C", "U", "lim", "mask", "src", "width", "d", "w", "j", "size", "kind", "name",
        "block", "grid", "args", "kernel", "shared", "lo", "entry", "wait", "state", "lane", "index" } do
        opts[#opts + 1] = "-D" .. name .. "=(syntax error"
      end
      opts[#opts + 1] = "-DNUM=5"
      local src = [[
#define cur oops(
#define tid oops(
#define blk oops(
#define bid oops(
#define bdim oops(
#define gdim oops(
#define dyn oops(
#define invoke oops(
#define nparams oops(
#define params oops(
#define run_block oops(
#define visibility oops(
#define always_inline oops(
#define aligned oops(
#define noinline oops(
extern "C" __global__ void macros(int *out)
{
    extern __shared__ int dynsh[];
    unsigned t = threadIdx.x + blockIdx.x * blockDim.x;
    dynsh[threadIdx.x] = (int)t;
    __syncthreads();
    out[t] = dynsh[(threadIdx.x + 1) % blockDim.x] + NUM * (int)gridDim.x;
}
]]
      local m = cupola.module { name = "macros.cu", source = src, options = opts }
      local o = cupola.malloc(64 * 4)
      m:kernel("macros", { "ptr" }):launch({ grid = 2, block = 32, shared = 32 * 4 }, o)
      cupola.synchronize()
      local got = i32s(o, 64)
      for t = 0, 63 do
        local blk = t // 32
        assert.equals(blk * 32 + (t % 32 + 1) % 32 + 10, got[t + 1])
      end
      o:free()
      -- a user macro is still a macro for the user's code, and -U undoes one
      local m2 = cupola.module { name = "macros2.cu", options = { "-DVAL=41", "-DGONE=1", "-UGONE" }, source = [[
#ifdef GONE
#error GONE was undefined
#endif
extern "C" __global__ void val(int *o) { o[0] = VAL + 1; }
]] }
      local o2 = cupola.malloc(4)
      m2:kernel("val", { "ptr" }):launch({ grid = 1, block = 1 }, o2)
      cupola.synchronize()
      assert.equals(42, i32s(o2, 1)[1])
      o2:free()
    end)
  end

  -- the compile error names the user's file and line first, and the whole
  -- log is kept (the core's message buffer is 512 bytes)
  -- (NVRTC writes "b.cu(1): error"; where an unclosed brace is reported at
  -- the end of input may be the next line there)
  local WHERE = HOST and "b%.cu:1:" or "b%.cu%(%d+%)"
  it("a syntax error that runs into cupola's own code still names b.cu:1", function()
    for _, src in ipairs { "broken(", 'extern "C" __global__ void k(int *o) { o[0] = 1;', "{" } do
      local ok, err = pcall(cupola.module, { source = src, name = "b.cu" })
      assert.is_false(ok)
      assert.matches("cupola.module: b.cu: compile error", err, 1, true)
      assert.matches(WHERE, err)
      if HOST then
        assert.is_nil(err:find("host_prelude.h", 1, true), err)
      end
    end
  end)

  it("a long log is kept whole: its last error is in the message", function()
    local lines = { 'extern "C" __global__ void k(int *o)', "{" }
    for n = 1, 40 do
      lines[#lines + 1] = string.format("    o[%d] = undeclared_name_number_%d;", n, n)
    end
    lines[#lines + 1] = "}"
    local ok, err = pcall(cupola.module, { source = table.concat(lines, "\n"), name = "long.cu" })
    assert.is_false(ok)
    assert.is_true(#err > 2048, #err)
    assert.matches("undeclared_name_number_1[^%d]", err)
    assert.matches("undeclared_name_number_40", err, 1, true)
    assert.matches(HOST and "long.cu:42" or "long.cu(42)", err, 1, true)
  end)

  -- device-side malloc/free are legal CUDA; on the host backend they are the
  -- C library's
  it("device-side malloc and free in a kernel", function()
    local m = cupola.module { name = "dmalloc.cu", source = [[
extern "C" __global__ void dm(int *o)
{
    int *p = (int *)malloc(16 * sizeof(int));
    if (!p) {
        o[threadIdx.x] = -1;
        return;
    }
    for (int j = 0; j < 16; j++)
        p[j] = (int)threadIdx.x + j;
    o[threadIdx.x] = p[15];
    free(p);
}
]] }
    local o = cupola.malloc(64 * 4)
    m:kernel("dm", { "ptr" }):launch({ grid = 1, block = 64 }, o)
    cupola.synchronize()
    local got = i32s(o, 64)
    for t = 0, 63 do assert.equals(t + 15, got[t + 1]) end
    o:free()
  end)
end)
