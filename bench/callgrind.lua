-- bench/callgrind.lua: one call shape of the binding, repeated n times, for
-- counting instructions with callgrind (bench/callgrind.sh runs it twice,
-- with two counts, and reports the difference per call: setup, module
-- loading and teardown cancel out).  Host backend; no timing here.
--   lua5.4 bench/callgrind.lua <shape> <n>
-- Shapes:
--   pair       p:alloc(4096, s):free()  (tlsf, virtual upstream, reuse "event")
--   raw        p:free_raw(p:alloc_raw(4096, s))  (the same pool: the pair without a Buffer)
--   rawfloor   the same calls on bench/floor.c's "raw" object (no allocator: Lua's own share;
--              needs build/bench_floor.so)
--   sqrt       kernels.sqrt_index(b)
--   fill       kernels.fill(b, 1, {stream = s})  (the table built per call)
--   user3      k:launch(opts, b, 1024, 2.0)  (a run-time compiled kernel, 3 args, opts reused)
--   user3new   k:launch({grid = 1, block = 32, stream = s}, b, 1024, 2.0)
--   event      e:record(s); e:query()
--   async      cupola.malloc_async(65536, s):free()
--   mempool    m:alloc(65536, s):free()  (m = cupola.mempool {})
--   seed       b = cupola.malloc_async(4096, s); kernels.sqrt_index(b); b:free() (bench/speed.lua's loop)
--   plugin     p:alloc(4096, s):free()  (the buddy plugin, examples/plugins/buddy.c, virtual upstream)
--   pluginpass the same pair on a pass-through plugin (each block an upstream block of its own)
--   pluginlive pluginpass with 4096 blocks live: cupola's checks of a plugin's block against 4096
--              blocks and 4096 upstream blocks
--   pluginalign the pass-through pair with alignment = 65536 over the virtual upstream (4 KiB
--              aligned): every block over-allocated and its address adjusted by cupola
-- Kernels drain the stream every 64 calls (in every run, so per call it is
-- the same share).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local cupola = require "cupola"
local K = cupola.kernels

local shape, n = arg[1], tonumber(arg[2])
assert(shape and n, "usage: lua5.4 bench/callgrind.lua <shape> <n>")
local s = cupola.stream()

if shape == "pair" then
  local p = cupola.pool { kind = "tlsf", upstream = "virtual", initial = "64MiB", reuse = "event" }
  for _ = 1, n do p:alloc(4096, s):free() end
elseif shape == "raw" then
  local p = cupola.pool { kind = "tlsf", upstream = "virtual", initial = "64MiB", reuse = "event" }
  for _ = 1, n do p:free_raw(p:alloc_raw(4096, s)) end
elseif shape == "rawfloor" then
  local p = require("bench_floor").pool "raw"
  for _ = 1, n do p:free_raw(p:alloc_raw(4096, s)) end
elseif shape == "sqrt" or shape == "fill" then
  local b = cupola.malloc(4096)
  local ds = cupola.default_stream
  if shape == "sqrt" then
    for i = 1, n do
      K.sqrt_index(b)
      if i % 64 == 0 then ds:synchronize() end
    end
  else
    for i = 1, n do
      K.fill(b, 1, { stream = s })
      if i % 64 == 0 then s:synchronize() end
    end
  end
  cupola.synchronize()
  b:free()
elseif shape == "user3" or shape == "user3new" then
  local m = cupola.module { name = "cg.cu", source = [[
#include <cupola/device.h>
extern "C" __global__ void scale(float *p, unsigned n, float a)
{
    unsigned i = cupola_global_index();
    if (i < n)
        p[i] *= a;
}
]] }
  local k = m:kernel("scale", { "ptr", "u32", "f32" })
  local b = cupola.malloc(4096)
  local opts = { grid = 1, block = 32, stream = s }
  if shape == "user3" then
    for i = 1, n do
      k:launch(opts, b, 1024, 2.0)
      if i % 64 == 0 then s:synchronize() end
    end
  else
    for i = 1, n do
      k:launch({ grid = 1, block = 32, stream = s }, b, 1024, 2.0)
      if i % 64 == 0 then s:synchronize() end
    end
  end
  s:synchronize()
  b:free()
elseif shape == "event" then
  local e = cupola.event { timing = false }
  for _ = 1, n do e:record(s); e:query() end
  s:synchronize()
elseif shape == "async" then
  for i = 1, n do
    cupola.malloc_async(65536, s):free()
    if i % 64 == 0 then s:synchronize() end
  end
  s:synchronize()
elseif shape == "mempool" then
  local m = cupola.mempool {}
  for i = 1, n do
    m:alloc(65536, s):free()
    if i % 64 == 0 then s:synchronize() end
  end
  s:synchronize()
  m:close()
elseif shape == "seed" then
  for i = 1, n do
    local b = cupola.malloc_async(4096, s)
    K.sqrt_index(b)
    b:free()
    if i % 64 == 0 then s:synchronize() end
  end
  s:synchronize()
elseif shape == "plugin" then
  local f = assert(io.open "examples/plugins/buddy.c")
  local src = f:read "a"
  f:close()
  local p = cupola.pool { kind = "plugin", source = src, symbol = "buddy_allocator", upstream = "virtual" }
  for _ = 1, n do p:alloc(4096, s):free() end
elseif shape == "pluginpass" or shape == "pluginlive" or shape == "pluginalign" then
  local p = cupola.pool { kind = "plugin", symbol = "pass", upstream = "virtual",
    alignment = shape == "pluginalign" and 65536 or nil, source = [[
#include <cupola/allocator.h>
static void *create(cupola_upstream *up, const char *o) { (void)o; return up; }
static void destroy(void *s) { (void)s; }
static void *allocate(void *s, size_t n, void *st) {
  cupola_upstream *up = s;
  return up->allocate(up, n, st);
}
static void deallocate(void *s, void *p, size_t n, void *st) {
  cupola_upstream *up = s;
  up->deallocate(up, p, n, st);
}
const cupola_allocator pass = {CUPOLA_ALLOCATOR_VERSION, create, destroy, allocate, deallocate, 0, 0};
]] }
  local keep = {}
  if shape == "pluginlive" then
    for i = 1, 4096 do keep[i] = p:alloc(4096, s) end
  end
  for _ = 1, n do p:alloc(4096, s):free() end
  for _, b in ipairs(keep) do b:free() end
else
  error("unknown shape " .. shape)
end
