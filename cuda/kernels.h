/*
 * kernels.h: the extern "C" launchers of cupola's built-in CUDA kernels.
 *
 * The CUDA backend (backend/cuda*.c) is plain C and cannot use <<<>>>, so
 * every kernel sits behind a launcher here that takes a cudaStream_t and
 * returns a cudaError_t: the error of the launch itself (cudaGetLastError
 * after it) or cudaErrorInvalidValue for a launch shape it rejects.  The
 * launchers never synchronize; the backend decides when to wait.
 *
 * Launch shape: grid/block 0 means "choose from the problem size" (block
 * 256, grid covering the elements, capped; the loops are grid-stride so any
 * grid is correct).  A given block must be 1..1024, a given grid
 * 1..CP_CUDA_MAX_GRID (CP_CUDA_MAX_REDUCE_GRID for the reductions, whose
 * scratch holds one partial per block).
 *
 * This header compiles as C and C++.
 */
#ifndef CUPOLA_KERNELS_H
#define CUPOLA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CP_CUDA_DEFAULT_BLOCK 256u
#define CP_CUDA_MAX_BLOCK 1024u
#define CP_CUDA_MAX_GRID 0x7fffffffu
/* A reduction's default grid: fixed, not derived from the SM count, so a
 * float checksum sums in the same order on every device. */
#define CP_CUDA_REDUCE_GRID 1024u
#define CP_CUDA_MAX_REDUCE_GRID (1u << 20)

/* cudaSuccess when this module's kernels can run on the current device
 * (an image for its architecture exists), else the error that says why. */
cudaError_t cp_cuda_kernels_check(void);

/* p[0..count) = v converted to t (.f for floats, .i for i32, .u for u32/u8). */
cudaError_t cp_cuda_fill(void *p, size_t count, cp_dtype t, cp_scalar v,
                         unsigned grid, unsigned block, cudaStream_t s);

/* p[i] = cp_body_sqrt_index(i) for i in [0, count). */
cudaError_t cp_cuda_sqrt_index(float *p, size_t count, unsigned grid, unsigned block,
                               cudaStream_t s);

/* Bytes of device scratch that cp_cuda_checksum needs for this problem. */
cudaError_t cp_cuda_checksum_scratch(size_t bytes, cp_dtype t, unsigned grid, unsigned block,
                                     size_t *scratch_bytes);

/* Sums the bytes / sizeof(t) elements of p; the 8-byte result (a double for
 * f32/f64, a wrapping 64-bit integer sum for the others) is written to the
 * first 8 bytes of scratch, which must be device-accessible, 8-byte aligned
 * and hold cp_cuda_checksum_scratch() bytes.  Deterministic: for the same
 * input and shape, the same bits. */
cudaError_t cp_cuda_checksum(const void *p, size_t bytes, cp_dtype t, unsigned grid,
                             unsigned block, void *scratch, cudaStream_t s);

/* One thread busy-waits on %globaltimer for microseconds. */
cudaError_t cp_cuda_spin(uint64_t microseconds, cudaStream_t s);

/* Byte i of p = cp_body_pattern_byte(seed, i). */
cudaError_t cp_cuda_pattern(void *p, size_t bytes, uint64_t seed, cudaStream_t s);

/* *bad_dev (device-accessible, 8-byte aligned) = the number of bytes of p
 * that differ from the pattern of seed; it is zeroed on s first. */
cudaError_t cp_cuda_verify(const void *p, size_t bytes, uint64_t seed,
                           unsigned long long *bad_dev, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_KERNELS_H */
