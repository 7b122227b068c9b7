/*
 * devpool_cuda.h: the CUDA side of the device pools (cuda/devpool.cu), called by
 * backend/cuda_kernels.c, which turns its cp_stream into the cudaStream_t these
 * take.
 * The operations are those of cp_backend's dp_* block (devpool.h);
 * on failure they set the message ("cudaErrorX: text (operation)").
 *
 * This header compiles as C and C++.
 */
#ifndef CUPOLA_CUDA_DEVPOOL_H
#define CUPOLA_CUDA_DEVPOOL_H

#include <cuda_runtime_api.h>

#include "devpool.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

cp_status cp_cuda_dp_create(cp_devpool **out, cp_dp_kind kind, size_t capacity);
cp_status cp_cuda_dp_destroy(cp_devpool *p);
void *cp_cuda_dp_state(cp_devpool *p);
cp_status cp_cuda_dp_launch(cp_devpool *p, const cp_dp_run_args *a, cudaStream_t s,
                            cp_dp_run **out);
cp_status cp_cuda_dp_finish(cp_dp_run *r, cp_dp_run_result *out);
cp_status cp_cuda_dp_reset(cp_devpool *p, cudaStream_t s);
cp_status cp_cuda_dp_stats(cp_devpool *p, cp_dp_stats *out);

#ifdef __cplusplus
}
#endif

#if defined(__CUDACC__)
#include "cupola/dp_body.cuh"
/* devpool_nested.cu: launches the parent kernel of a nested run on s (the
 * error of the launch).  kind is a CPD_KIND_*. */
extern "C" cudaError_t cp_cuda_dp_launch_nested(unsigned kind, cupola_device_pool *pool,
                                                const cpd_run_params *prm, unsigned children,
                                                unsigned block, cpd_u64 *ptrs, cpd_u32 *claims,
                                                unsigned long long *counters, cudaStream_t s);
#endif

#endif /* CUPOLA_CUDA_DEVPOOL_H */
