/*
 * devpool_nested.cu: nested device-pool runs (dp:run{children=k}): a parent
 * kernel whose threads each launch the run kernel over their share of the
 * threads.  The only file built with relocatable device code (-rdc) and
 * device-linked with libcudadevrt (see the Makefile): the other kernels stay
 * in an ordinary module, which tools that do not support dynamic
 * parallelism (compute-sanitizer's racecheck) can follow.
 */
#include "devpool_cuda.h"
#include "devpool_kernels.cuh"

namespace {

/* Each of `children` parent threads launches the run kernel over its share
 * of the threads; the children finish before this grid counts as complete
 * (CUDA 12's device runtime).  A child launch that fails is counted. */
template <cpd_u32 KIND>
__global__ void dp_parent_kernel(cupola_device_pool *pool, cpd_run_params prm, unsigned children,
                                 unsigned block, cpd_u64 *ptrs, cpd_u32 *claims,
                                 unsigned long long *counters)
{
    unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
    cpd_u64 per, first, cnt;
    cpd_run_params q = prm;
    if (c >= children)
        return;
    per = (prm.threads + children - 1) / children;
    first = (cpd_u64)c * per;
    if (first >= prm.threads)
        return;
    cnt = prm.threads - first < per ? prm.threads - first : per;
    q.first = first;
    dp_run_kernel<KIND><<<(unsigned)((cnt + block - 1) / block), block>>>(pool, q, cnt, ptrs,
                                                                          claims, counters);
    if (cudaGetLastError() != cudaSuccess)
        atomicAdd(&counters[4], 1ull);
}

} // namespace

extern "C" cudaError_t cp_cuda_dp_launch_nested(unsigned kind, cupola_device_pool *pool,
                                                const cpd_run_params *prm, unsigned children,
                                                unsigned block, cpd_u64 *ptrs, cpd_u32 *claims,
                                                unsigned long long *counters, cudaStream_t s)
{
    unsigned grid = (children + 255u) / 256u;
    switch (kind) {
    case CPD_KIND_BUMP:
        dp_parent_kernel<CPD_KIND_BUMP><<<grid, 256u, 0, s>>>(pool, *prm, children, block, ptrs,
                                                             claims, counters);
        break;
    case CPD_KIND_WARP_BUMP:
        dp_parent_kernel<CPD_KIND_WARP_BUMP><<<grid, 256u, 0, s>>>(pool, *prm, children, block,
                                                                  ptrs, claims, counters);
        break;
    case CPD_KIND_SLAB:
        dp_parent_kernel<CPD_KIND_SLAB><<<grid, 256u, 0, s>>>(pool, *prm, children, block, ptrs,
                                                             claims, counters);
        break;
    case CPD_KIND_HEAP:
        dp_parent_kernel<CPD_KIND_HEAP><<<grid, 256u, 0, s>>>(pool, *prm, children, block, ptrs,
                                                             claims, counters);
        break;
    default:
        dp_parent_kernel<CPD_KIND_MALLOC><<<grid, 256u, 0, s>>>(pool, *prm, children, block, ptrs,
                                                               claims, counters);
        break;
    }
    return cudaGetLastError();
}
