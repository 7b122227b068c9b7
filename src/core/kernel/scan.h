/*
 * kernel/scan.h: a light scan of CUDA C source text (comments, strings and
 * preprocessor lines skipped), enough for what cupola must know before
 * compiling: which kernels a module defines, whether it launches kernels
 * from kernels, and, for the host backend, `extern __shared__` declarations
 * rewritten into pointers to the launch's dynamic shared memory.
 */
#ifndef CUPOLA_KERNEL_SCAN_H
#define CUPOLA_KERNEL_SCAN_H

#include <stddef.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cp_kscan {
    int launch_line;      /* line of the first `<<<` (a nested launch); 0: none */
    int uses_sync;        /* names a barrier, a warp operation or __trap (host: needs fibers) */
    char **kernels;       /* names of the non-template __global__ functions */
    size_t nkernels;
    char *text;           /* the source with `extern __shared__` rewritten (host), or NULL */
    size_t text_len;
} cp_kscan;

/* rewrite_shared: produce out->text for the host backend. */
cp_status cp_kscan_source(const char *src, size_t n, int rewrite_shared, cp_kscan *out);
void cp_kscan_free(cp_kscan *s);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_KERNEL_SCAN_H */
