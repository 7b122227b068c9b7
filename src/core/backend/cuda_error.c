/*
 * cuda_error.c: the CUDA backend's errors (policy in cuda.c): a CUDA error
 * as a cp_status and a message "cudaErrorX: text (operation)", sticky errors
 * that leave the process unable to use the device, and the runtime's
 * shutdown treated as success by releases.
 */
#include "cuda_impl.h"

#include <stdarg.h>
#include <stdio.h>

/* ---- errors ---------------------------------------------------------------- */

static cp_status status_of(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return CP_OK;
    case cudaErrorMemoryAllocation: return CP_ERR_OOM;
    case cudaErrorNotReady: return CP_ERR_NOT_READY;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidResourceHandle: return CP_ERR_INVALID;
    case cudaErrorNotSupported: return CP_ERR_UNSUPPORTED;
    default: return CP_ERR_BACKEND;
    }
}

/* Stores the message for a failed CUDA call and returns its status.  The
 * message starts with the CUDA error name (backend.h's convention).  The
 * thread's last error is cleared so that a later launch's check reports
 * that launch, not this older failure (after an OOM above all, which
 * callers treat as data and carry on from). */
/* Errors after which the CUDA context is unusable: every later call of the
 * process fails with them. */
static int sticky(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorHardwareStackError:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
        return 1;
    default:
        return 0;
    }
}

cp_status cp_cuda_fail(cudaError_t e, const char *op)
{
    CP_GUARD();
    (void)cudaGetLastError();
    if (sticky(e)) {
        char msg[768];
        cp_sticky_message((int)e, cudaGetErrorName(e), cudaGetErrorString(e), op, msg,
                               sizeof msg);
        cp_mark_sticky(msg);
        return cp_unusable_error();
    }
    return cp_error_set(status_of(e), "%s: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e),
                        op);
}

/* A request cupola refuses before making the CUDA call that would fail (or,
 * for a stream priority, clamp it silently): worded as cp_cuda_fail() words
 * that call's error, with cupola's explanation where cp_cuda_fail() names the
 * call, so that both backends carry the same CUDA error name (backend.h).
 * Always CP_ERR_INVALID: the request is what is wrong. */
cp_status cp_cuda_refuse(cudaError_t e, const char *fmt, ...)
{
    char what[448];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return cp_error_set(CP_ERR_INVALID, "%s: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e),
                        what);
}

/* The runtime is being torn down (process exit): a handle or block is gone
 * with it, so releasing it has nothing left to do. */
static int shutting_down(cudaError_t e)
{
    return e == cudaErrorCudartUnloading || e == cudaErrorContextIsDestroyed;
}

cp_status cp_cuda_release_result(cudaError_t e, const char *op)
{
    CP_GUARD();
    if (e == cudaSuccess || shutting_down(e)) {
        (void)cudaGetLastError();
        return CP_OK;
    }
    return cp_cuda_fail(e, op);
}
