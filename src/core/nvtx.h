/*
 * nvtx.h: NVTX ranges, over NVTX v3, which is header-only in the
 * CUDA Toolkit: with no tool attached every call is a few instructions; a
 * profiler (Nsight Systems, Nsight Compute's --nvtx, or any library named by
 * NVTX_INJECTION64_PATH) is loaded on the first call and sees the ranges.
 * Built without the toolkit's headers (no CUPOLA_HAVE_NVTX), every function
 * is a no-op that keeps the same bookkeeping.
 *
 *  - The user's ranges (cupola.nvtx.push/pop/mark) go to NVTX's default
 *    domain.  Each thread counts its open ranges, so a pop without a push is
 *    refused instead of corrupting a profiler's stack.
 *  - cupola's own ranges go to a domain named "cupola", only when
 *    cp_nvtx_on is set (CUPOLA_NVTX=1 when the module is loaded): every pool
 *    allocation and free (resource.c) and every built-in kernel launch.
 *    Off, they cost one test of a global.
 */
#ifndef CUPOLA_NVTX_H
#define CUPOLA_NVTX_H

#ifdef __cplusplus
extern "C" {
#endif

extern int cp_nvtx_on;

/* Reads CUPOLA_NVTX (once; later calls change nothing). */
void cp_nvtx_init(void);

/* Default domain: push returns the new depth; pop returns the depth after
 * it, or -1 (and pops nothing) when no range of this thread is open. */
int cp_nvtx_push(const char *name);
int cp_nvtx_pop(void);
void cp_nvtx_mark(const char *name);
int cp_nvtx_depth(void);
/* Whether the module was built with NVTX (1) or as no-ops (0). */
int cp_nvtx_available(void);

/* The "cupola" domain (callers test cp_nvtx_on first). */
void cp_nvtx_cupola_push(const char *name);
void cp_nvtx_cupola_pop(void);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_NVTX_H */
