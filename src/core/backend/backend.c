/*
 * backend.c: choosing the backend once per process.
 *
 * The choice is process-wide because the device is: two Lua states in one
 * process share one CUDA context, so they must agree on the backend.
 */
#include "backend.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const cp_backend *cp_be = NULL;

int cp_forked;
_Thread_local int cp_streams_idle;
int cp_unusable;
static char sticky_msg[768];
static pid_t parent_pid;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_child(void)
{
    cp_forked = 1;
    cp_unusable = 1;
}

static void atfork_register(void)
{
    parent_pid = getpid();
    pthread_atfork(NULL, NULL, fork_child);
}

void cp_sticky_message(int code, const char *name, const char *what, const char *op, char *out,
                       size_t outlen)
{
    snprintf(out, outlen,
             "%s: %s (%s); the CUDA context is no longer usable after this error (code %d): "
             "every later CUDA call of this process fails, so cupola refuses them; start a new "
             "process",
             name, what, op, code);
}

void cp_mark_sticky(const char *msg)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    if (!sticky_msg[0]) {
        snprintf(sticky_msg, sizeof sticky_msg, "%s", msg);
        /* the message first, then the flag that makes readers use it */
        __atomic_store_n(&cp_unusable, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&mu);
}

cp_status cp_unusable_error(void)
{
    if (!cp_forked)
        return cp_error_set(CP_ERR_BACKEND, "%s", sticky_msg);
    return cp_error_set(CP_ERR_BACKEND,
                        "cupola cannot be used in a child process created by fork() after "
                        "cupola started (this process %ld, its parent %ld): the child has none "
                        "of the %s backend's %s; use cupola in the parent, or exec a new "
                        "program in the child",
                        (long)getpid(), (long)parent_pid, cp_be ? cp_be->name : "selected",
                        cp_be && strcmp(cp_be->name, "cuda") == 0 ? "CUDA context"
                                                                   : "stream worker threads");
}

/* Exactly what CUDA 12's cudaGetErrorName and cudaGetErrorString answer
 * (spec/error_names_spec.lua compares the two backends' messages). */
static const struct {
    const char *name, *string;
} cuda_errs[CP_CUDA_ERR_COUNT] = {
    [CP_CUDA_INVALID_VALUE] = {"cudaErrorInvalidValue", "invalid argument"},
    [CP_CUDA_NOT_READY] = {"cudaErrorNotReady", "device not ready"},
    [CP_CUDA_INVALID_HANDLE] = {"cudaErrorInvalidResourceHandle", "invalid resource handle"},
    [CP_CUDA_INVALID_DEVICE] = {"cudaErrorInvalidDevice", "invalid device ordinal"},
    [CP_CUDA_INVALID_CONFIG] = {"cudaErrorInvalidConfiguration", "invalid configuration argument"},
    [CP_CUDA_ILLEGAL_ADDRESS] = {"cudaErrorIllegalAddress",
                                 "an illegal memory access was encountered"},
    [CP_CUDA_ILLEGAL_INSTRUCTION] = {"cudaErrorIllegalInstruction",
                                     "an illegal instruction was encountered"},
};

const char *cp_cuda_err_name(cp_cuda_err e)
{
    return (unsigned)e < CP_CUDA_ERR_COUNT ? cuda_errs[e].name : "cudaErrorUnknown";
}

const char *cp_cuda_err_string(cp_cuda_err e)
{
    return (unsigned)e < CP_CUDA_ERR_COUNT ? cuda_errs[e].string : "unknown error";
}

static void cuda_err_vformat(char *out, size_t outlen, cp_cuda_err e, const char *fmt, va_list ap)
{
    char what[448];
    vsnprintf(what, sizeof what, fmt, ap);
    snprintf(out, outlen, "%s: %s (%s)", cp_cuda_err_name(e), cp_cuda_err_string(e), what);
}

void cp_cuda_err_format(char *out, size_t outlen, cp_cuda_err e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cuda_err_vformat(out, outlen, e, fmt, ap);
    va_end(ap);
}

cp_status cp_cuda_error(cp_status st, cp_cuda_err e, const char *fmt, ...)
{
    /* formatted here first: an argument may be the thread's last message */
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    cuda_err_vformat(msg, sizeof msg, e, fmt, ap);
    va_end(ap);
    return cp_error_set(st, "%s", msg);
}

const char *cp_dp_kind_name(int kind)
{
    static const char *const names[CP_DP_KIND_COUNT] = {
        [CP_DP_BUMP] = "bump",
        [CP_DP_WARP_BUMP] = "warp_bump",
        [CP_DP_SLAB] = "slab",
        [CP_DP_MALLOC] = "malloc",
        [CP_DP_HEAP] = "heap",
    };
    return kind >= 0 && kind < CP_DP_KIND_COUNT ? names[kind] : NULL;
}

static pthread_mutex_t select_lock = PTHREAD_MUTEX_INITIALIZER;

cp_status cp_backend_select(const char *force)
{
    cp_status st = CP_OK;
    char why[256] = "";
    const cp_backend *want = NULL;

    if (force && *force && strcmp(force, "cuda") != 0 && strcmp(force, "host") != 0)
        return cp_error_set(CP_ERR_INVALID,
                            "CUPOLA_BACKEND must be 'cuda' or 'host', not '%s'", force);

    if (cp_forked)
        return cp_unusable_error();
    pthread_once(&atfork_once, atfork_register);
    pthread_mutex_lock(&select_lock);
    if (cp_be) {
        if (force && *force && strcmp(force, cp_be->name) != 0)
            st = cp_error_set(CP_ERR_INVALID,
                              "backend '%s' requested, but this process already uses '%s'",
                              force, cp_be->name);
        pthread_mutex_unlock(&select_lock);
        return st;
    }
    if (force && strcmp(force, "host") == 0) {
        want = &cp_backend_host;
    } else if (cp_backend_cuda_probe(why, sizeof why)) {
        want = &cp_backend_cuda;
    } else if (force && strcmp(force, "cuda") == 0) {
        st = cp_error_set(CP_ERR_UNSUPPORTED,
                          "CUPOLA_BACKEND=cuda, but no CUDA device is usable: %s", why);
    } else {
        want = &cp_backend_host;
    }
    cp_be = want;
    pthread_mutex_unlock(&select_lock);
    return st;
}
