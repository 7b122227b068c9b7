/*
 * devpool_kernels.cuh: the run kernel of the device pools, one instantiation
 * per kind, shared by cuda/devpool.cu (launched from the host) and
 * cuda/devpool_nested.cu (launched by a parent kernel, relocatable device
 * code).  Each includer gets its own copy (anonymous namespace), so the
 * relocatable module is loaded only by nested runs.
 */
#ifndef CUPOLA_DEVPOOL_KERNELS_CUH
#define CUPOLA_DEVPOOL_KERNELS_CUH

#include "cupola/dp_body.cuh"

namespace {

/* One instantiation per kind: the allocator is inlined, no dispatch, and
 * only the malloc kind's kernels call CUDA's malloc. */
template <cpd_u32 KIND>
__global__ void dp_run_kernel(cupola_device_pool *pool, cpd_run_params prm, cpd_u64 count,
                              cpd_u64 *ptrs, cpd_u32 *claims, unsigned long long *counters)
{
    cpd_u64 k = (cpd_u64)blockIdx.x * blockDim.x + threadIdx.x;
    cpd_u32 r = 0;
    if (k < count)
        r = cpd_run_thread(pool, &prm, prm.first + k, ptrs, claims, KIND);
    cpd_run_count(counters, r);
}

} // namespace

#endif /* CUPOLA_DEVPOOL_KERNELS_CUH */
