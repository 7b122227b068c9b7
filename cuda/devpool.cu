/*
 * devpool.cu: device pools on the CUDA backend: the run, verification and
 * reset kernels over the allocators of <cupola/device.h>, and the host side
 * that lays a pool out and launches them (declared in devpool_cuda.h).
 *
 * An ordinary module: the parent kernel of nested runs lives in
 * devpool_nested.cu, the one file built with relocatable device code.
 *
 * A run, all on its stream and in this order: the counters are zeroed;
 * (reset, if asked); event; the run kernel (threads = ceil(N / block) blocks
 * of block threads, one allocation per thread) or the parent kernel
 * (children threads, each launching the run kernel over its share of the
 * N threads); event; the verification kernel (free=false and verify);
 * a kernel freeing the blocks of a malloc pool (free=false: CUDA's heap
 * cannot be reset, so a run does not leave blocks there).  Scratch memory
 * (counters, one record per thread) comes from cudaMallocAsync on the stream,
 * so launching never synchronizes and runs on several streams overlap.
 * Finishing a run waits for its stream only.
 */
#include "devpool_cuda.h"

#include <stdlib.h>
#include <string.h>

#include "devpool_kernels.cuh"
#include "devpool_layout.h"

struct cp_devpool {
    unsigned char *mem; /* device: state | claims | slab metadata | pool bytes */
    cpd_layout L;
    cp_dp_kind kind;
    size_t capacity;
};

struct cp_dp_run {
    cudaStream_t s;
    void *scratch; /* counters (64 bytes) then one record per thread */
    cudaEvent_t start, stop;
    int children;
};

namespace {

cp_status status_of(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return CP_OK;
    case cudaErrorMemoryAllocation: return CP_ERR_OOM;
    case cudaErrorInvalidValue: return CP_ERR_INVALID;
    case cudaErrorNotSupported: return CP_ERR_UNSUPPORTED;
    default: return CP_ERR_BACKEND;
    }
}

cp_status fail(cudaError_t e, const char *op)
{
    (void)cudaGetLastError();
    return cp_error_set(status_of(e), "%s: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e),
                        op);
}

__global__ void dp_verify_kernel(const cupola_device_pool *pool, cpd_run_params prm,
                                 const cpd_u64 *ptrs, cpd_u32 *claims,
                                 unsigned long long *counters)
{
    cpd_u64 i = (cpd_u64)blockIdx.x * blockDim.x + threadIdx.x;
    cpd_u32 r = 0;
    if (i < prm.threads)
        r = cpd_verify_thread(pool, &prm, i, ptrs, claims);
    cpd_run_count(counters, r);
}

/* Frees a malloc pool's blocks after a run that kept them. */
__global__ void dp_free_kernel(cupola_device_pool *pool, cpd_u64 n, const cpd_u64 *ptrs)
{
    cpd_u64 i = (cpd_u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        cpd_free_kind(pool, (void *)(size_t)(ptrs[i] & ~1ull), CPD_KIND_MALLOC);
}

/* The launch of a run (children == 0) or of its parent, for the kind. */
template <cpd_u32 KIND>
cudaError_t launch_kind(cupola_device_pool *pool, const cpd_run_params &prm, unsigned children,
                        unsigned grid, unsigned block, cpd_u64 *ptrs, cpd_u32 *claims,
                        unsigned long long *counters, cudaStream_t s)
{
    if (children)
        return cp_cuda_dp_launch_nested(KIND, pool, &prm, children, block, ptrs, claims, counters, s);
    dp_run_kernel<KIND><<<grid, block, 0, s>>>(pool, prm, prm.threads, ptrs, claims, counters);
    return cudaGetLastError();
}

__global__ void dp_reset_kernel(cupola_device_pool *pool)
{
    cpd_reset_state(pool);
}

cudaError_t enqueue_reset(cp_devpool *p, cudaStream_t s)
{
    cudaError_t e = cudaSuccess;
    unsigned char *m = p->mem;
    if (p->kind != CP_DP_MALLOC && (e = cudaMemsetAsync(m + p->L.claims_off, 0, p->L.claims_bytes, s)) != cudaSuccess)
        return e;
    if (p->kind == CP_DP_SLAB) {
        if ((e = cudaMemsetAsync(m + p->L.class_off, 0, (size_t)p->L.nslabs * 4u, s)) != cudaSuccess ||
            (e = cudaMemsetAsync(m + p->L.used_off, 0, (size_t)p->L.nslabs * 4u, s)) != cudaSuccess ||
            (e = cudaMemsetAsync(m + p->L.bitmaps_off, 0, p->L.bitmaps_bytes, s)) != cudaSuccess ||
            (e = cudaMemsetAsync(m + p->L.lists_off, 0xff, p->L.lists_bytes, s)) != cudaSuccess)
            return e;
    }
    if (p->kind == CP_DP_HEAP) {
        if ((e = cudaMemsetAsync(m + p->L.heap_off, 0, (size_t)p->L.heap_bytes, s)) != cudaSuccess ||
            (e = cudaMemsetAsync(m + p->L.hslots_off, 0xff, (size_t)p->L.nslots_total * 4u, s)) != cudaSuccess)
            return e;
    }
    (void)cudaGetLastError();
    dp_reset_kernel<<<1, 1, 0, s>>>((cupola_device_pool *)(void *)m);
    return cudaGetLastError();
}

int kind_is_malloc(const cp_devpool *p)
{
    return p->kind == CP_DP_MALLOC;
}

unsigned grid_for(cpd_u64 n, unsigned block)
{
    cpd_u64 g = (n + block - 1) / block;
    return g > 0x7fffffffull ? 0u : (unsigned)g;
}

} // namespace

extern "C" cp_status cp_cuda_dp_create(cp_devpool **out, cp_dp_kind kind, size_t capacity)
{
    cp_devpool *p;
    cupola_device_pool st;
    cudaError_t e;

    *out = NULL;
    if ((unsigned)kind >= CP_DP_KIND_COUNT || capacity == 0)
        return cp_error_set(CP_ERR_INVALID, "device pool: bad kind or capacity");
    if (!(p = (cp_devpool *)calloc(1, sizeof *p)))
        return cp_error_set(CP_ERR_OOM, "device pool: out of host memory");
    p->kind = kind;
    p->capacity = capacity;
    cpd_layout_make((cpd_u32)kind, capacity, &p->L);
    if (kind == CP_DP_MALLOC) {
        /* The heap grows to the pool's capacity.  CUDA refuses a new heap
         * size once a kernel that calls malloc has run (cudaErrorInvalidValue):
         * the pool then works with the heap as it is, and requests the heap
         * cannot hold come back NULL like any other exhaustion. */
        size_t cur = 0;
        if ((e = cudaDeviceGetLimit(&cur, cudaLimitMallocHeapSize)) != cudaSuccess) {
            free(p);
            return fail(e, "cudaDeviceGetLimit(cudaLimitMallocHeapSize)");
        }
        if (cur < capacity && (e = cudaDeviceSetLimit(cudaLimitMallocHeapSize, capacity)) != cudaSuccess) {
            if (e != cudaErrorInvalidValue) {
                free(p);
                return fail(e, "cudaDeviceSetLimit(cudaLimitMallocHeapSize) for a malloc device pool");
            }
            (void)cudaGetLastError();
        }
    }
    if (kind != CP_DP_MALLOC && p->L.total < capacity) {
        free(p);
        return cp_error_set(CP_ERR_OOM, "device pool: capacity too large");
    }
    if ((e = cudaMalloc((void **)&p->mem, (size_t)p->L.total)) != cudaSuccess) {
        free(p);
        return fail(e, "cudaMalloc of a device pool");
    }
    cpd_state_init(&st, (cpd_u32)kind, capacity, &p->L, p->mem);
    if ((e = cudaMemcpy(p->mem, &st, sizeof st, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = enqueue_reset(p, cudaStreamLegacy)) != cudaSuccess ||
        (e = cudaStreamSynchronize(cudaStreamLegacy)) != cudaSuccess) {
        cudaFree(p->mem);
        free(p);
        return fail(e, "initializing a device pool");
    }
    *out = p;
    return CP_OK;
}

extern "C" cp_status cp_cuda_dp_destroy(cp_devpool *p)
{
    cudaError_t e;
    if (!p)
        return CP_OK;
    e = cudaFree(p->mem); /* waits for the kernels still using it */
    free(p);
    if (e != cudaSuccess && e != cudaErrorCudartUnloading)
        return fail(e, "cudaFree of a device pool");
    return CP_OK;
}

extern "C" void *cp_cuda_dp_state(cp_devpool *p)
{
    return p->mem;
}

extern "C" cp_status cp_cuda_dp_launch(cp_devpool *p, const cp_dp_run_args *a, cudaStream_t s,
                                       cp_dp_run **out)
{
    cp_dp_run *r;
    cpd_run_params prm;
    cupola_device_pool *pool = (cupola_device_pool *)(void *)p->mem;
    cpd_u32 *claims = p->kind == CP_DP_MALLOC ? NULL : (cpd_u32 *)(void *)(p->mem + p->L.claims_off);
    /* one record per thread for the verification pass, and for freeing
     * a malloc pool's blocks after the run */
    int need_ptrs = !a->free_blocks && (a->verify || kind_is_malloc(p));
    size_t bytes = 64;
    unsigned long long *counters;
    cpd_u64 *ptrs = NULL;
    unsigned grid;
    cudaError_t e;
    const char *op = "";

    *out = NULL;
    if (a->threads == 0 || a->min_bytes == 0 || a->min_bytes > a->max_bytes || a->block == 0 ||
        a->block > 1024)
        return cp_error_set(CP_ERR_INVALID, "device pool run: bad arguments");
    if (!(grid = grid_for(a->threads, a->block)))
        return cp_error_set(CP_ERR_INVALID, "device pool run: %llu threads need more than 2^31-1 blocks of %u",
                            (unsigned long long)a->threads, a->block);
    if (need_ptrs) {
        if (a->threads > (SIZE_MAX - 64) / 8)
            return cp_error_set(CP_ERR_OOM, "device pool run: too many threads");
        bytes += (size_t)a->threads * 8u;
    }
    memset(&prm, 0, sizeof prm);
    prm.threads = a->threads;
    prm.min_bytes = a->min_bytes;
    prm.max_bytes = a->max_bytes;
    prm.seed = a->seed;
    prm.hold_ns = a->hold_us * 1000u;
    prm.free_blocks = a->free_blocks;
    prm.verify = a->verify;

    if (!(r = (cp_dp_run *)calloc(1, sizeof *r)))
        return cp_error_set(CP_ERR_OOM, "device pool run: out of host memory");
    r->s = s;
    r->children = (int)a->children;
    (void)cudaGetLastError();
    if ((e = cudaMallocAsync(&r->scratch, bytes, s)) != cudaSuccess) {
        free(r);
        return fail(e, "cudaMallocAsync of a run's records");
    }
    counters = (unsigned long long *)r->scratch;
    if (need_ptrs)
        ptrs = (cpd_u64 *)(void *)((unsigned char *)r->scratch + 64);
    if ((e = cudaEventCreate(&r->start)) != cudaSuccess) {
        op = "cudaEventCreate";
        goto fail_scratch;
    }
    if ((e = cudaEventCreate(&r->stop)) != cudaSuccess) {
        cudaEventDestroy(r->start);
        op = "cudaEventCreate";
        goto fail_scratch;
    }
    if ((e = cudaMemsetAsync(counters, 0, 64, s)) != cudaSuccess) {
        op = "cudaMemsetAsync";
        goto fail_events;
    }
    if (a->reset_first && (e = enqueue_reset(p, s)) != cudaSuccess) {
        op = "reset before a run";
        goto fail_events;
    }
    if ((e = cudaEventRecord(r->start, s)) != cudaSuccess) {
        op = "cudaEventRecord";
        goto fail_events;
    }
    op = a->children ? "parent kernel launch" : "run kernel launch";
    switch (p->kind) {
    case CP_DP_BUMP:
        e = launch_kind<CPD_KIND_BUMP>(pool, prm, a->children, grid, a->block, ptrs, claims, counters, s);
        break;
    case CP_DP_WARP_BUMP:
        e = launch_kind<CPD_KIND_WARP_BUMP>(pool, prm, a->children, grid, a->block, ptrs, claims, counters, s);
        break;
    case CP_DP_SLAB:
        e = launch_kind<CPD_KIND_SLAB>(pool, prm, a->children, grid, a->block, ptrs, claims, counters, s);
        break;
    case CP_DP_HEAP:
        e = launch_kind<CPD_KIND_HEAP>(pool, prm, a->children, grid, a->block, ptrs, claims, counters, s);
        break;
    default:
        e = launch_kind<CPD_KIND_MALLOC>(pool, prm, a->children, grid, a->block, ptrs, claims, counters, s);
        break;
    }
    if (e != cudaSuccess)
        goto fail_events;
    if ((e = cudaEventRecord(r->stop, s)) != cudaSuccess) {
        op = "cudaEventRecord";
        goto fail_events;
    }
    if (need_ptrs && a->verify) {
        dp_verify_kernel<<<grid_for(a->threads, 256u), 256u, 0, s>>>(pool, prm, ptrs, claims, counters);
        if ((e = cudaGetLastError()) != cudaSuccess) {
            op = "verification kernel launch";
            goto fail_events;
        }
    }
    if (need_ptrs && p->kind == CP_DP_MALLOC) {
        dp_free_kernel<<<grid_for(a->threads, 256u), 256u, 0, s>>>(pool, a->threads, ptrs);
        if ((e = cudaGetLastError()) != cudaSuccess) {
            op = "free kernel launch";
            goto fail_events;
        }
    }
    *out = r;
    return CP_OK;

fail_events:
    cudaEventDestroy(r->start);
    cudaEventDestroy(r->stop);
fail_scratch:
    {
        cp_status st = fail(e, op);
        cudaFreeAsync(r->scratch, s);
        free(r);
        return st;
    }
}

extern "C" cp_status cp_cuda_dp_finish(cp_dp_run *r, cp_dp_run_result *out)
{
    unsigned long long c[CPD_NCOUNTERS] = {0};
    float ms = 0;
    cudaError_t e;
    const char *op = "cudaStreamSynchronize after a run";

    memset(out, 0, sizeof *out);
    if ((e = cudaStreamSynchronize(r->s)) == cudaSuccess) {
        op = "copying a run's counters";
        if ((e = cudaMemcpyAsync(c, r->scratch, sizeof c, cudaMemcpyDeviceToHost, r->s)) == cudaSuccess &&
            (e = cudaStreamSynchronize(r->s)) == cudaSuccess) {
            op = "cudaEventElapsedTime";
            e = cudaEventElapsedTime(&ms, r->start, r->stop);
        }
    }
    cudaEventDestroy(r->start);
    cudaEventDestroy(r->stop);
    cudaFreeAsync(r->scratch, r->s);
    free(r);
    if (e != cudaSuccess)
        return fail(e, op);
    out->ok = c[0];
    out->failed = c[1];
    out->overlaps = c[2];
    out->misaligned = c[3];
    out->launch_errors = c[4];
    out->ms = ms;
    return CP_OK;
}

extern "C" cp_status cp_cuda_dp_reset(cp_devpool *p, cudaStream_t s)
{
    cudaError_t e = enqueue_reset(p, s);
    return e == cudaSuccess ? CP_OK : fail(e, "device pool reset");
}

/* Two arrays of n bytes of the pool's memory (at offsets a_off and b_off)
 * into host copies *a and *b, which the caller frees, also on failure. */
static cp_status read_arrays(cp_devpool *p, size_t a_off, size_t b_off, size_t n, cpd_u32 **a,
                             cpd_u32 **b, const char *what)
{
    cudaError_t e;
    *a = (cpd_u32 *)malloc(n ? n : 1);
    *b = (cpd_u32 *)malloc(n ? n : 1);
    if (!*a || !*b)
        return cp_error_set(CP_ERR_OOM, "device pool stats: out of host memory");
    if (n && ((e = cudaMemcpy(*a, p->mem + a_off, n, cudaMemcpyDeviceToHost)) != cudaSuccess ||
              (e = cudaMemcpy(*b, p->mem + b_off, n, cudaMemcpyDeviceToHost)) != cudaSuccess))
        return fail(e, what);
    return CP_OK;
}

extern "C" cp_status cp_cuda_dp_stats(cp_devpool *p, cp_dp_stats *out)
{
    cupola_device_pool st;
    cpd_u32 *a = NULL, *b = NULL;
    cpd_u64 u = 0, pk = 0;
    cudaError_t e;
    cp_status rc = CP_OK;

    if ((e = cudaDeviceSynchronize()) != cudaSuccess ||
        (e = cudaMemcpy(&st, p->mem, sizeof st, cudaMemcpyDeviceToHost)) != cudaSuccess)
        return fail(e, "reading a device pool's state");
    if (p->kind == CP_DP_HEAP) {
        /* each chunk's state and run length */
        rc = read_arrays(p, p->L.cstate_off, p->L.runlen_off, (size_t)p->L.nchunks * 4u, &a, &b,
                         "reading a heap pool's chunks");
        if (rc == CP_OK)
            cpd_heap_usage(&st, a, b, &u, &pk);
    } else if (p->kind == CP_DP_SLAB && p->L.nslabs) {
        /* each slab's class and count */
        rc = read_arrays(p, p->L.class_off, p->L.used_off, (size_t)p->L.nslabs * 4u, &a, &b,
                         "reading a slab pool's counts");
        if (rc == CP_OK)
            cpd_usage(&st, a, b, &u, &pk);
    } else {
        cpd_usage(&st, NULL, NULL, &u, &pk);
    }
    free(a);
    free(b);
    if (rc != CP_OK)
        return rc;
    out->capacity = p->capacity;
    out->used = u;
    out->peak = pk;
    out->failed = st.failed;
    return CP_OK;
}
