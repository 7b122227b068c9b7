/*
 * dtype.h: the element types of the built-in kernels and a value of any of
 * them.  Both the backends (backend.h) and the CUDA launchers (cuda/kernels.h)
 * speak in these, so they sit below both.
 *
 * This header compiles as C and C++.
 */
#ifndef CUPOLA_DTYPE_H
#define CUPOLA_DTYPE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of the built-in kernels. */
typedef enum cp_dtype {
    CP_F32 = 0,
    CP_F64,
    CP_I32,
    CP_U32,
    CP_U8,
    CP_DTYPE_COUNT
} cp_dtype;

/* A kernel argument or result of any cp_dtype. */
typedef union cp_scalar {
    double f;
    int64_t i;
    uint64_t u;
} cp_scalar;

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_DTYPE_H */
