/*
 * cuda_kernels.c: the CUDA backend's built-in kernels (the launchers of
 * cuda/kernels.h, with the launch shape checked first) and the device
 * pools' entry points (cuda/devpool_cuda.h) (policy in cuda.c).
 */
#include "cuda_impl.h"
#include "devpool_cuda.h"
#include "kernels.h"

#include <pthread.h>
#include <string.h>

/* ---- kernels --------------------------------------------------------------------------- */

static const char *const dtype_names[CP_DTYPE_COUNT] = {"f32", "f64", "i32", "u32", "u8"};
static const size_t dtype_sizes[CP_DTYPE_COUNT] = {4, 8, 4, 4, 1};

/* Says which part of a user-given shape is wrong (the launchers only
 * answer cudaErrorInvalidValue), named as a launch of that shape fails and as
 * the host backend names it. */
static cp_status check_shape(const cp_shape *sh, unsigned max_grid, const char *kernel,
                             unsigned *grid, unsigned *block)
{
    CP_GUARD();
    *grid = sh ? sh->grid : 0;
    *block = sh ? sh->block : 0;
    if (*block > CP_CUDA_MAX_BLOCK)
        return cp_cuda_refuse(cudaErrorInvalidConfiguration,
                              "%s: block %u is out of range (1 to %u threads, 0 to choose)",
                              kernel, *block, CP_CUDA_MAX_BLOCK);
    if (*grid > max_grid)
        return cp_cuda_refuse(cudaErrorInvalidConfiguration,
                              "%s: grid %u is out of range (1 to %u blocks, 0 to choose)",
                              kernel, *grid, max_grid);
    return CP_OK;
}

static cp_status check_dtype(cp_dtype t, const char *kernel)
{
    CP_GUARD();
    if ((unsigned)t >= CP_DTYPE_COUNT)
        return cp_error_set(CP_ERR_INVALID, "%s: unknown element type %d", kernel, (int)t);
    return CP_OK;
}

static cp_status check_aligned(const void *p, size_t align, const char *kernel, const char *type)
{
    CP_GUARD();
    if ((uintptr_t)p % align != 0)
        return cp_error_set(CP_ERR_INVALID, "%s: address %p is not aligned for %s elements",
                            kernel, (void *)(uintptr_t)p, type);
    return CP_OK;
}

cp_status cp_cuda_k_fill(void *p, size_t count, cp_dtype t, cp_scalar v, const cp_shape *sh,
                                cp_stream *s)
{
    CP_GUARD();
    unsigned grid, block;
    cp_status st;
    if ((st = check_dtype(t, "fill")) ||
        (st = check_shape(sh, CP_CUDA_MAX_GRID, "fill", &grid, &block)) ||
        (st = check_aligned(p, dtype_sizes[t], "fill", dtype_names[t])))
        return st;
    if (!p && count > 0)
        return cp_error_set(CP_ERR_INVALID, "fill: pointer is NULL");
    ENTER_STREAM(s);
    CHECK(cp_cuda_fill(p, count, t, v, grid, block, cp_cuda_stream_handle(s)),
          "fill kernel launch");
    return CP_OK;
}

cp_status cp_cuda_k_sqrt_index(float *p, size_t count, const cp_shape *sh, cp_stream *s)
{
    CP_GUARD();
    unsigned grid, block;
    cp_status st;
    if ((st = check_shape(sh, CP_CUDA_MAX_GRID, "sqrt_index", &grid, &block)) ||
        (st = check_aligned(p, sizeof(float), "sqrt_index", "f32")))
        return st;
    if (!p && count > 0)
        return cp_error_set(CP_ERR_INVALID, "sqrt_index: pointer is NULL");
    ENTER_STREAM(s);
    CHECK(cp_cuda_sqrt_index(p, count, grid, block, cp_cuda_stream_handle(s)),
          "sqrt_index kernel launch");
    return CP_OK;
}

/* Scratch for the reductions comes from a private pool, so that a checksum
 * never shows up in the statistics of the user's current pool (used_high,
 * reserved) that experiments measure.  The pool keeps what it reserved
 * (threshold: max), so repeated checksums cost no mapping.  Without pool
 * support, scratch falls back to cudaMalloc. */
static pthread_mutex_t scratch_lock = PTHREAD_MUTEX_INITIALIZER;
/* per device: 0 not tried, 1 pool, -1 no pool support */
static int scratch_states[CP_MAX_DEVICES];
static cudaMemPool_t scratch_pools[CP_MAX_DEVICES];

/* The scratch of the thread's CUDA device (ENTER_STREAM made it the stream's). */
static cp_status scratch_init(int *state, cudaMemPool_t *pool)
{
    CP_GUARD();
    cp_status st = CP_OK;
    int dev = 0;
    CHECK(cudaGetDevice(&dev), "cudaGetDevice");
    if (dev < 0 || dev >= CP_MAX_DEVICES)
        return cp_error_set(CP_ERR_INVALID, "device %d: too many devices", dev);
    pthread_mutex_lock(&scratch_lock);
#define scratch_state scratch_states[dev]
#define scratch_pool scratch_pools[dev]
    if (scratch_state == 0) {
        struct cudaMemPoolProps pp;
        cudaError_t e;
        int v = 0;
        memset(&pp, 0, sizeof pp);
        pp.allocType = cudaMemAllocationTypePinned;
        pp.handleTypes = cudaMemHandleTypeNone;
        pp.location.type = cudaMemLocationTypeDevice;
        pp.location.id = dev;
        e = cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, dev);
        if (e != cudaSuccess) {
            st = cp_cuda_fail(e, "cudaDeviceGetAttribute(cudaDevAttrMemoryPoolsSupported)");
        } else if (!v) {
            scratch_state = -1;
        } else if ((e = cudaMemPoolCreate(&scratch_pool, &pp)) != cudaSuccess) {
            st = cp_cuda_fail(e, "cudaMemPoolCreate (checksum scratch)");
        } else {
            uint64_t keep = UINT64_MAX;
            e = cudaMemPoolSetAttribute(scratch_pool, cudaMemPoolAttrReleaseThreshold, &keep);
            if (e != cudaSuccess) {
                st = cp_cuda_fail(e, "cudaMemPoolSetAttribute (checksum scratch)");
                (void)cudaMemPoolDestroy(scratch_pool);
                (void)cudaGetLastError();
            } else {
                scratch_state = 1;
            }
        }
    }
    *state = scratch_state;
    *pool = scratch_pool;
#undef scratch_state
#undef scratch_pool
    pthread_mutex_unlock(&scratch_lock);
    return st;
}

static cp_status scratch_get(void **out, size_t bytes, cudaStream_t s, int *pooled)
{
    CP_GUARD();
    cp_status st;
    int state = 0;
    cudaMemPool_t pool = NULL;
    *out = NULL;
    if ((st = scratch_init(&state, &pool)) != CP_OK)
        return st;
    *pooled = state == 1;
    if (*pooled)
        CHECK(cudaMallocFromPoolAsync(out, bytes, pool, s),
              "cudaMallocFromPoolAsync (kernel scratch)");
    else
        CHECK(cudaMalloc(out, bytes), "cudaMalloc (kernel scratch)");
    return CP_OK;
}

static cudaError_t scratch_put(void *p, cudaStream_t s, int pooled)
{
    return pooled ? cudaFreeAsync(p, s) : cudaFree(p);
}

/* Runs a reduction's tail: copies the 8-byte result at scratch to *bits,
 * waits for s, and releases scratch whatever happened.  launch_e is the
 * launcher's result; the first error wins. */
static cp_status finish_reduction(cudaError_t launch_e, const char *launch_op, void *scratch,
                                  int pooled, cudaStream_t s, uint64_t *bits)
{
    CP_GUARD();
    cudaError_t e = launch_e, e2;
    const char *op = launch_op;
    if (e == cudaSuccess) {
        /* Pageable destination: returns once the copy is done. */
        e = cudaMemcpyAsync(bits, scratch, sizeof *bits, cudaMemcpyDeviceToHost, s);
        op = "cudaMemcpyAsync (reduction result)";
    }
    if (e == cudaSuccess) {
        e = cudaStreamSynchronize(s);
        op = "cudaStreamSynchronize";
    }
    e2 = scratch_put(scratch, s, pooled);
    if (e != cudaSuccess)
        return cp_cuda_fail(e, op);
    if (e2 != cudaSuccess)
        return cp_cuda_fail(e2, pooled ? "cudaFreeAsync (kernel scratch)"
                                       : "cudaFree (kernel scratch)");
    return CP_OK;
}

cp_status cp_cuda_k_checksum(const void *p, size_t bytes, cp_dtype t, const cp_shape *sh,
                                    cp_stream *s, cp_scalar *out)
{
    CP_GUARD();
    unsigned grid, block;
    size_t scratch_bytes = 0;
    void *scratch = NULL;
    uint64_t bits = 0;
    int pooled = 0;
    cudaStream_t cs = cp_cuda_stream_handle(s);
    cp_status st;

    if (!out)
        return cp_error_set(CP_ERR_INVALID, "checksum: out is NULL");
    if ((st = check_dtype(t, "checksum")) ||
        (st = check_shape(sh, CP_CUDA_MAX_REDUCE_GRID, "checksum", &grid, &block)) ||
        (st = check_aligned(p, dtype_sizes[t], "checksum", dtype_names[t])))
        return st;
    if (!p && bytes >= dtype_sizes[t])
        return cp_error_set(CP_ERR_INVALID, "checksum: pointer is NULL");
    CHECK(cp_cuda_checksum_scratch(bytes, t, grid, block, &scratch_bytes), "checksum shape");
    ENTER_STREAM(s);
    if ((st = scratch_get(&scratch, scratch_bytes, cs, &pooled)) != CP_OK)
        return st;
    st = finish_reduction(cp_cuda_checksum(p, bytes, t, grid, block, scratch, cs),
                          "checksum kernel launch", scratch, pooled, cs, &bits);
    if (st != CP_OK)
        return st;
    switch (t) {
    case CP_F32:
    case CP_F64: memcpy(&out->f, &bits, sizeof out->f); break;
    case CP_I32: memcpy(&out->i, &bits, sizeof out->i); break; /* two's complement */
    default: out->u = bits; break;
    }
    return CP_OK;
}

cp_status cp_cuda_k_spin(uint64_t microseconds, cp_stream *s)
{
    CP_GUARD();
    ENTER_STREAM(s);
    CHECK(cp_cuda_spin(microseconds, cp_cuda_stream_handle(s)), "spin kernel launch");
    return CP_OK;
}

cp_status cp_cuda_k_pattern(void *p, size_t bytes, uint64_t seed, cp_stream *s)
{
    CP_GUARD();
    if (!p && bytes > 0)
        return cp_error_set(CP_ERR_INVALID, "pattern: pointer is NULL");
    ENTER_STREAM(s);
    CHECK(cp_cuda_pattern(p, bytes, seed, cp_cuda_stream_handle(s)), "pattern kernel launch");
    return CP_OK;
}

cp_status cp_cuda_k_verify(const void *p, size_t bytes, uint64_t seed, cp_stream *s,
                                  uint64_t *bad)
{
    CP_GUARD();
    void *scratch = NULL;
    uint64_t bits = 0;
    int pooled = 0;
    cudaStream_t cs = cp_cuda_stream_handle(s);
    cp_status st;

    if (!bad)
        return cp_error_set(CP_ERR_INVALID, "verify: bad is NULL");
    if (!p && bytes > 0)
        return cp_error_set(CP_ERR_INVALID, "verify: pointer is NULL");
    ENTER_STREAM(s);
    if ((st = scratch_get(&scratch, sizeof(unsigned long long), cs, &pooled)) != CP_OK)
        return st;
    st = finish_reduction(cp_cuda_verify(p, bytes, seed, (unsigned long long *)scratch, cs),
                          "verify kernel launch", scratch, pooled, cs, &bits);
    if (st != CP_OK)
        return st;
    *bad = bits;
    return CP_OK;
}

/* ---- device pools (cuda/devpool.cu) ------------------------------------------ */

/* The device pools' own entry points (cuda/devpool.cu) refuse to run once
 * the context is unusable or the process is a fork's child, like every
 * other entry point here. */
cp_status cp_cuda_devpool_create(cp_devpool **out, cp_dp_kind kind, size_t capacity)
{
    CP_GUARD();
    return cp_cuda_dp_create(out, kind, capacity);
}

cp_status cp_cuda_devpool_destroy(cp_devpool *p)
{
    CP_GUARD();
    return cp_cuda_dp_destroy(p);
}

cp_status cp_cuda_devpool_finish(cp_dp_run *r, cp_dp_run_result *out)
{
    CP_GUARD();
    return cp_cuda_dp_finish(r, out);
}

cp_status cp_cuda_devpool_stats(cp_devpool *p, cp_dp_stats *out)
{
    CP_GUARD();
    return cp_cuda_dp_stats(p, out);
}

cp_status cp_cuda_devpool_launch(cp_devpool *p, const cp_dp_run_args *a, cp_stream *s,
                                        cp_dp_run **out)
{
    CP_GUARD();
    ENTER_STREAM(s);
    return cp_cuda_dp_launch(p, a, cp_cuda_stream_handle(s), out);
}

cp_status cp_cuda_devpool_reset(cp_devpool *p, cp_stream *s)
{
    CP_GUARD();
    ENTER_STREAM(s);
    return cp_cuda_dp_reset(p, cp_cuda_stream_handle(s));
}
