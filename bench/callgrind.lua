-- bench/callgrind.lua: one call shape of the binding, repeated n times, for
-- counting instructions with callgrind (bench/callgrind.sh runs it twice,
-- with two counts, and reports the difference per call: setup, module
-- loading and teardown cancel out).  Host backend; no timing here.
--   lua5.4 bench/callgrind.lua <shape> <n>
-- Shapes:
--   pair       p:alloc(4096, s):free()  (tlsf, virtual upstream, reuse "event")
--   sqrt       kernels.sqrt_index(b)
--   fill       kernels.fill(b, 1, {stream = s})  (the table built per call)
--   user3      k:launch(opts, b, 1024, 2.0)  (a run-time compiled kernel, 3 args, opts reused)
--   user3new   k:launch({grid = 1, block = 32, stream = s}, b, 1024, 2.0)
--   event      e:record(s); e:query()
--   async      cupola.malloc_async(65536, s):free()
--   mempool    m:alloc(65536, s):free()  (m = cupola.mempool {})
--   seed       b = cupola.malloc_async(4096, s); kernels.sqrt_index(b); b:free() (bench/speed.lua's loop)
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
else
  error("unknown shape " .. shape)
end
