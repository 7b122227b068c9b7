/*
 * cupola/dp_harness.cuh: dp:run's kernels for a plugin pool (cupola/plugin.h),
 * compiled at run time after the plugin's source (src/core/kernel/
 * dp_plugin.c puts the module together).  The bodies are those every pool
 * is run and checked with (cupola/dp_body.cuh), here with the plugin's
 * allocator behind cupola_alloc.
 */
#ifndef CUPOLA_DP_HARNESS_CUH
#define CUPOLA_DP_HARNESS_CUH

#include "cupola/plugin.h"
#include "cupola/dp_body.cuh"

/* One call of the plugin's init per thread of the init grid. */
extern "C" __global__ void cupola_dp_init(cupola_device_pool *pool, unsigned long long threads)
{
    unsigned long long i = cupola_global_index();
    if (i < threads)
        cupola_plugin_init(pool, i, threads);
}

/* Thread i of a run: allocate, write the pattern, free or record. */
extern "C" __global__ void cupola_dp_run(cupola_device_pool *pool, const cpd_run_params *prm,
                                         unsigned long long *ptrs, unsigned int *claims,
                                         unsigned long long *counters)
{
    unsigned long long i = cupola_global_index();
    cpd_u32 r = 0;
    if (i < prm->threads)
        r = cpd_run_thread(pool, prm, i, ptrs, claims, CPD_KIND_PLUGIN);
    cpd_run_count(counters, r);
}

/* The verification of a run that kept its blocks. */
extern "C" __global__ void cupola_dp_verify(cupola_device_pool *pool, const cpd_run_params *prm,
                                            unsigned long long *ptrs, unsigned int *claims,
                                            unsigned long long *counters)
{
    unsigned long long i = cupola_global_index();
    cpd_u32 r = 0;
    if (i < prm->threads)
        r = cpd_verify_thread(pool, prm, i, ptrs, claims);
    cpd_run_count(counters, r);
}

/* On the host backend the module's table of kernels lists these too (the
 * scan that finds kernels reads only the module's own source). */
#if CUPOLA_ON_HOST
#define CUPOLA_HK_MORE_KERNELS                                                                    \
    CUPOLA_HK_KERNEL(cupola_dp_init) CUPOLA_HK_KERNEL(cupola_dp_run) CUPOLA_HK_KERNEL(cupola_dp_verify)
#endif

#endif /* CUPOLA_DP_HARNESS_CUH */
