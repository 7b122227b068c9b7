-- examples/own_kernel.lua: a kernel of your own over a pool's buffers.
-- The access pattern is the experiment's: here a strided gather
-- (y[i] += a * x[(i * stride) % n]), so the same bytes are touched the way a
-- workload with poor locality would touch them.  The kernel is CUDA C,
-- compiled at run time (NVRTC on a GPU; the system C++ compiler on the host
-- backend), cached on disk for the next run, and timed with events.
--   bin/cupola examples/own_kernel.lua [n] [stride]
local cupola = cupola or require "cupola"
local R = cupola.report
local n = tonumber(arg and arg[1]) or 1 << 20
local stride = tonumber(arg and arg[2]) or 33
local iters = tonumber(os.getenv "CUPOLA_ITERS") or 20

local m = cupola.module { name = "gather.cu", source = [[
#include <cupola/device.h>

extern "C" __global__ void gather_axpy(float *y, const float *x, float a,
                                       unsigned long long n, unsigned long long stride)
{
    for (unsigned long long i = cupola_global_index(); i < n; i += cupola_grid_size())
        y[i] += a * x[(i * stride) % n];
}
]] }
local k = m:kernel("gather_axpy", { "ptr", "ptr", "f32", "u64", "u64" })

local s <close> = cupola.stream()
local pool <close> = cupola.pool { kind = "tlsf", upstream = "device", initial = "64MiB" }
local x = pool:alloc(4 * n, s)
local y = pool:alloc(4 * n, s)
cupola.kernels.fill(x, 1.0, { stream = s })
cupola.kernels.fill(y, 0.0, { stream = s })

local start, stop = cupola.event(), cupola.event()
local shape = { threads = n, block = 256, stream = s }
k:launch(shape, y, x, 0.0, n, stride) -- warm-up
start:record(s)
for _ = 1, iters do k:launch(shape, y, x, 1.0, n, stride) end
stop:record(s)
stop:synchronize()
local ms = start:elapsed(stop) / iters

-- every y[i] is iters * 1.0: the gather read x everywhere
local sum = cupola.kernels.checksum(y, { stream = s })
assert(math.abs(sum - iters * n) < 1e-3 * iters * n, "wrong result: " .. sum)

print(string.format("module %s (%s), kernel %s, backend %s", m.name, m.code, "gather_axpy", cupola.backend()))
print(string.format("n = %d floats, stride %d: %.3f ms per launch, %s moved per second",
  n, stride, ms, R.bytes(3 * 4 * n / (ms / 1e3))))
x:free(s)
y:free(s)
