-- The stream-ordered allocation benchmark: 100 x {allocate 4 MiB, sqrt_index, free}, once with
-- cudaMalloc/cudaFree (each synchronizes the device) and once stream-ordered
-- with cudaMallocAsync/cudaFreeAsync, timed with events (median of 5 runs
-- after a warm-up).  Also times the 100 kernels alone, the floor.
--   bin/cupola examples/stream_ordered_alloc.lua [iterations]   (or CUPOLA_ITERS)
local cupola = cupola or require "cupola"
local K, bench = cupola.kernels, cupola.bench

local iters = tonumber(arg and arg[1]) or tonumber(os.getenv "CUPOLA_ITERS") or 100
local N = 1 << 20
local size = N * 4 -- 4 MiB of float32
local s <close> = cupola.stream { blocking = true }

local function with_malloc()
  for _ = 1, iters do
    local b = cupola.malloc(size)
    K.sqrt_index(b, { stream = s })
    b:free()
  end
end

local function with_malloc_async()
  for _ = 1, iters do
    local b = cupola.malloc_async(size, s)
    K.sqrt_index(b)
    b:free()
  end
end

local scratch = cupola.malloc_async(size, s)
local function kernels_only()
  for _ = 1, iters do K.sqrt_index(scratch) end
end

local sync_ms = bench.device_ms(with_malloc, { stream = s })
local async_ms = bench.device_ms(with_malloc_async, { stream = s })
local kernel_ms = bench.device_ms(kernels_only, { stream = s })
scratch:free()

print(string.format("stream-ordered allocation, %d x {alloc 4 MiB, sqrt_index, free} on %s", iters,
  cupola.backend() == "cuda" and cupola.device().name or "the host backend"))
print(string.format("  synchronous (malloc/free):        %8.3f ms", sync_ms))
print(string.format("  stream-ordered (malloc_async):    %8.3f ms", async_ms))
print(string.format("  kernels alone:                    %8.3f ms", kernel_ms))
print(string.format("  speedup:                          %8.1fx", sync_ms / async_ms))

return { malloc_ms = sync_ms, async_ms = async_ms, kernels_ms = kernel_ms, speedup = sync_ms / async_ms }
