/*
 * kernels.cu: cupola's built-in CUDA kernels and their extern "C" launchers
 * (see kernels.h).
 *
 * The per-element work comes from kernel_body.h, which the host backend
 * compiles too, so both backends produce the same bytes.  Every loop is
 * grid-stride, so the launch shape only changes speed, never the result,
 * except for the order of a float checksum's additions, which is fixed for
 * a given shape (see checksum below).
 *
 * Every launcher validates its shape and pointers before launching: a
 * misaligned or out-of-range access inside a kernel is a sticky error that
 * ends the CUDA context, so it is cheaper to refuse up front.
 */
#include "kernels.h"

#include <atomic>

#include "kernel_body.h"

namespace {

/* Clears an error left by an earlier failed call on this thread, so that
 * the check after a launch reports the launch and nothing older (earlier
 * calls returned their own errors already; sticky ones come back anyway). */
inline void clear_stale_error()
{
    (void)cudaGetLastError();
}

/* The error of the launch just made (configuration or resources). */
inline cudaError_t launch_result()
{
    return cudaGetLastError();
}

size_t dtype_size(cp_dtype t)
{
    switch (t) {
    case CP_F32: return sizeof(float);
    case CP_F64: return sizeof(double);
    case CP_I32: return sizeof(int32_t);
    case CP_U32: return sizeof(uint32_t);
    case CP_U8: return sizeof(uint8_t);
    default: return 0;
    }
}

/* SM count of the current device, cached for device 0 (the one cupola
 * uses) so that a launch does not pay for the query. */
cudaError_t sm_count(unsigned *out)
{
    static std::atomic<int> cached0{0};
    int dev = 0, n = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return e;
    if (dev == 0 && (n = cached0.load(std::memory_order_relaxed)) > 0) {
        *out = (unsigned)n;
        return cudaSuccess;
    }
    e = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess)
        return e;
    if (n < 1)
        n = 1;
    if (dev == 0)
        cached0.store(n, std::memory_order_relaxed);
    *out = (unsigned)n;
    return cudaSuccess;
}

/* Chooses or validates a launch shape for n elements.  cap bounds the
 * default grid; max_grid bounds a grid the caller gave. */
cudaError_t pick_shape(size_t n, unsigned grid, unsigned block, unsigned cap, unsigned max_grid,
                       unsigned *g, unsigned *b)
{
    if (block == 0)
        block = CP_CUDA_DEFAULT_BLOCK;
    if (block > CP_CUDA_MAX_BLOCK)
        return cudaErrorInvalidValue;
    if (grid == 0) {
        size_t need = n / block + (n % block != 0);
        if (need < 1)
            need = 1;
        grid = need < cap ? (unsigned)need : cap;
    } else if (grid > max_grid) {
        return cudaErrorInvalidValue;
    }
    *g = grid;
    *b = block;
    return cudaSuccess;
}

/* The default grid cap of element-wise kernels: enough blocks to fill the
 * device several times over; the grid-stride loop does the rest. */
cudaError_t elementwise_shape(size_t n, unsigned grid, unsigned block, unsigned *g, unsigned *b)
{
    unsigned sms = 0, cap;
    if (grid == 0) {
        cudaError_t e = sm_count(&sms);
        if (e != cudaSuccess)
            return e;
    }
    cap = sms > CP_CUDA_MAX_GRID / 32u ? CP_CUDA_MAX_GRID : sms * 32u;
    return pick_shape(n, grid, block, cap, CP_CUDA_MAX_GRID, g, b);
}

inline bool misaligned(const void *p, size_t align)
{
    return ((uintptr_t)p % align) != 0;
}

__device__ __forceinline__ size_t first_index()
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ size_t grid_stride()
{
    return (size_t)gridDim.x * blockDim.x;
}

/* ---- fill, sqrt_index -------------------------------------------------- */

template <typename T> __global__ void fill_kernel(T *p, size_t n, T v)
{
    for (size_t i = first_index(); i < n; i += grid_stride())
        p[i] = v;
}

template <typename T>
cudaError_t launch_fill(void *p, size_t n, T v, unsigned grid, unsigned block, cudaStream_t s)
{
    unsigned g, b;
    cudaError_t e;
    if ((p == nullptr && n > 0) || misaligned(p, sizeof(T)))
        return cudaErrorInvalidValue;
    if ((e = elementwise_shape(n, grid, block, &g, &b)) != cudaSuccess)
        return e;
    if (n == 0)
        return cudaSuccess;
    clear_stale_error();
    fill_kernel<T><<<g, b, 0, s>>>(static_cast<T *>(p), n, v);
    return launch_result();
}

__global__ void sqrt_index_kernel(float *p, size_t n)
{
    for (size_t i = first_index(); i < n; i += grid_stride())
        p[i] = cp_body_sqrt_index((uint64_t)i);
}

/* ---- reductions --------------------------------------------------------- */

/* Dynamic shared memory, 8 bytes per thread: every accumulator is 8 bytes. */
extern __shared__ unsigned long long cp_reduce_smem[];

/* Sums v over the block in a fixed tree order (the same bits every run) and
 * returns the total in every thread.  Works for any blockDim.x: the part
 * above the largest power of two is folded in first. */
template <typename Acc> __device__ Acc block_sum(Acc v)
{
    Acc *sh = reinterpret_cast<Acc *>(cp_reduce_smem);
    const unsigned t = threadIdx.x, nb = blockDim.x;
    unsigned p2 = 1;
    while (p2 * 2u <= nb)
        p2 *= 2u;
    sh[t] = v;
    __syncthreads();
    if (t + p2 < nb)
        sh[t] += sh[t + p2];
    __syncthreads();
    for (unsigned half = p2 / 2u; half > 0; half /= 2u) {
        if (t < half)
            sh[t] += sh[t + half];
        __syncthreads();
    }
    Acc total = sh[0];
    /* No thread may overwrite sh[0] in a later call before all have read it. */
    __syncthreads();
    return total;
}

/* How each element type enters its accumulator: floats are summed in
 * double; integers in 64 bits, wrapping, i32 sign-extended. */
__device__ __forceinline__ double widen(float x) { return (double)x; }
__device__ __forceinline__ double widen(double x) { return x; }
__device__ __forceinline__ unsigned long long widen(int32_t x)
{
    return (unsigned long long)(long long)x;
}
__device__ __forceinline__ unsigned long long widen(uint32_t x) { return x; }
__device__ __forceinline__ unsigned long long widen(uint8_t x) { return x; }

/* Pass 1: each block writes the sum of its grid-stride share to
 * partials[blockIdx.x]; the thread-local order is fixed by the shape. */
template <typename T, typename Acc>
__global__ void checksum_partial_kernel(const T *p, size_t n, Acc *partials)
{
    Acc acc = 0;
    for (size_t i = first_index(); i < n; i += grid_stride())
        acc += widen(p[i]);
    Acc total = block_sum<Acc>(acc);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = total;
}

/* Pass 2, one block: sums the partials in a fixed order into *result. */
template <typename Acc>
__global__ void checksum_final_kernel(const Acc *partials, unsigned nparts, Acc *result)
{
    Acc acc = 0;
    for (unsigned i = threadIdx.x; i < nparts; i += blockDim.x)
        acc += partials[i];
    Acc total = block_sum<Acc>(acc);
    if (threadIdx.x == 0)
        *result = total;
}

constexpr unsigned FINAL_BLOCK = 256u;

cudaError_t reduce_shape(size_t n, unsigned grid, unsigned block, unsigned *g, unsigned *b)
{
    return pick_shape(n, grid, block, CP_CUDA_REDUCE_GRID, CP_CUDA_MAX_REDUCE_GRID, g, b);
}

template <typename T, typename Acc>
cudaError_t launch_checksum(const void *p, size_t n, unsigned g, unsigned b, void *scratch,
                            cudaStream_t s)
{
    /* scratch: [0] the result, [1 .. g] the partials */
    Acc *result = static_cast<Acc *>(scratch);
    Acc *partials = result + 1;
    cudaError_t e;
    clear_stale_error();
    checksum_partial_kernel<T, Acc>
        <<<g, b, (size_t)b * sizeof(Acc), s>>>(static_cast<const T *>(p), n, partials);
    if ((e = launch_result()) != cudaSuccess)
        return e;
    checksum_final_kernel<Acc>
        <<<1, FINAL_BLOCK, (size_t)FINAL_BLOCK * sizeof(Acc), s>>>(partials, g, result);
    return launch_result();
}

/* ---- spin ---------------------------------------------------------------- */

__device__ __forceinline__ unsigned long long globaltimer_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void spin_kernel(unsigned long long ns)
{
    const unsigned long long t0 = globaltimer_ns();
    while (globaltimer_ns() - t0 < ns) {
    }
}

/* ---- pattern, verify ------------------------------------------------------ */

__global__ void pattern_kernel(uint8_t *p, size_t n, uint64_t seed)
{
    for (size_t i = first_index(); i < n; i += grid_stride())
        p[i] = cp_body_pattern_byte(seed, (uint64_t)i);
}

__global__ void verify_kernel(const uint8_t *p, size_t n, uint64_t seed, unsigned long long *bad)
{
    unsigned long long count = 0;
    for (size_t i = first_index(); i < n; i += grid_stride())
        count += (p[i] != cp_body_pattern_byte(seed, (uint64_t)i));
    unsigned long long total = block_sum<unsigned long long>(count);
    /* Integer atomics commute, so the count is exact whatever the order. */
    if (threadIdx.x == 0 && total != 0)
        atomicAdd(bad, total);
}

} // namespace

/* ---- launchers ------------------------------------------------------------ */

extern "C" cudaError_t cp_cuda_kernels_check(void)
{
    cudaFuncAttributes attr;
    /* Fails with cudaErrorNoKernelImageForDevice (or InvalidDeviceFunction)
     * when none of the compiled architectures runs on this device. */
    return cudaFuncGetAttributes(&attr, spin_kernel);
}

extern "C" cudaError_t cp_cuda_fill(void *p, size_t count, cp_dtype t, cp_scalar v,
                                    unsigned grid, unsigned block, cudaStream_t s)
{
    switch (t) {
    case CP_F32: return launch_fill<float>(p, count, (float)v.f, grid, block, s);
    case CP_F64: return launch_fill<double>(p, count, v.f, grid, block, s);
    case CP_I32: return launch_fill<int32_t>(p, count, (int32_t)v.i, grid, block, s);
    case CP_U32: return launch_fill<uint32_t>(p, count, (uint32_t)v.u, grid, block, s);
    case CP_U8: return launch_fill<uint8_t>(p, count, (uint8_t)v.u, grid, block, s);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t cp_cuda_sqrt_index(float *p, size_t count, unsigned grid, unsigned block,
                                          cudaStream_t s)
{
    unsigned g, b;
    cudaError_t e;
    if ((p == nullptr && count > 0) || misaligned(p, sizeof(float)))
        return cudaErrorInvalidValue;
    if ((e = elementwise_shape(count, grid, block, &g, &b)) != cudaSuccess)
        return e;
    if (count == 0)
        return cudaSuccess;
    clear_stale_error();
    sqrt_index_kernel<<<g, b, 0, s>>>(p, count);
    return launch_result();
}

extern "C" cudaError_t cp_cuda_checksum_scratch(size_t bytes, cp_dtype t, unsigned grid,
                                                unsigned block, size_t *scratch_bytes)
{
    size_t size = dtype_size(t);
    unsigned g, b;
    cudaError_t e;
    if (size == 0)
        return cudaErrorInvalidValue;
    if ((e = reduce_shape(bytes / size, grid, block, &g, &b)) != cudaSuccess)
        return e;
    *scratch_bytes = ((size_t)g + 1u) * 8u;
    return cudaSuccess;
}

extern "C" cudaError_t cp_cuda_checksum(const void *p, size_t bytes, cp_dtype t, unsigned grid,
                                        unsigned block, void *scratch, cudaStream_t s)
{
    size_t size = dtype_size(t), n;
    unsigned g, b;
    cudaError_t e;
    if (size == 0 || scratch == nullptr || misaligned(scratch, 8))
        return cudaErrorInvalidValue;
    n = bytes / size;
    if ((p == nullptr && n > 0) || misaligned(p, size))
        return cudaErrorInvalidValue;
    if ((e = reduce_shape(n, grid, block, &g, &b)) != cudaSuccess)
        return e;
    /* n == 0 still runs: the partial pass writes zeros and the result. */
    switch (t) {
    case CP_F32: return launch_checksum<float, double>(p, n, g, b, scratch, s);
    case CP_F64: return launch_checksum<double, double>(p, n, g, b, scratch, s);
    case CP_I32: return launch_checksum<int32_t, unsigned long long>(p, n, g, b, scratch, s);
    case CP_U32: return launch_checksum<uint32_t, unsigned long long>(p, n, g, b, scratch, s);
    case CP_U8: return launch_checksum<uint8_t, unsigned long long>(p, n, g, b, scratch, s);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t cp_cuda_spin(uint64_t microseconds, cudaStream_t s)
{
    /* Saturate rather than wrap: an absurd duration spins "forever", not 0. */
    unsigned long long ns = microseconds > UINT64_MAX / 1000u
                                ? (unsigned long long)UINT64_MAX
                                : (unsigned long long)microseconds * 1000u;
    clear_stale_error();
    spin_kernel<<<1, 1, 0, s>>>(ns);
    return launch_result();
}

extern "C" cudaError_t cp_cuda_pattern(void *p, size_t bytes, uint64_t seed, cudaStream_t s)
{
    unsigned g, b;
    cudaError_t e;
    if (p == nullptr && bytes > 0)
        return cudaErrorInvalidValue;
    if ((e = elementwise_shape(bytes, 0, 0, &g, &b)) != cudaSuccess)
        return e;
    if (bytes == 0)
        return cudaSuccess;
    clear_stale_error();
    pattern_kernel<<<g, b, 0, s>>>(static_cast<uint8_t *>(p), bytes, seed);
    return launch_result();
}

extern "C" cudaError_t cp_cuda_verify(const void *p, size_t bytes, uint64_t seed,
                                      unsigned long long *bad_dev, cudaStream_t s)
{
    unsigned g, b;
    cudaError_t e;
    if ((p == nullptr && bytes > 0) || bad_dev == nullptr || misaligned(bad_dev, 8))
        return cudaErrorInvalidValue;
    if ((e = elementwise_shape(bytes, 0, 0, &g, &b)) != cudaSuccess)
        return e;
    if ((e = cudaMemsetAsync(bad_dev, 0, sizeof *bad_dev, s)) != cudaSuccess)
        return e;
    if (bytes == 0)
        return cudaSuccess;
    clear_stale_error();
    verify_kernel<<<g, b, (size_t)b * sizeof(unsigned long long), s>>>(
        static_cast<const uint8_t *>(p), bytes, seed, bad_dev);
    return launch_result();
}
