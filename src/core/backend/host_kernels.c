/*
 * host_kernels.c: the host backend's copies, memsets, built-in kernels (the
 * bodies of cuda/kernel_body.h) and host tasks (run-time compiled kernels),
 * each a work item run by a stream's worker (policy in host.c).
 */
#include "host_impl.h"
#include "kernel_body.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- copies and kernels ------------------------------------------------------ */

static void run_copy(hwork *w)
{
    memmove(w->u.copy.dst, w->u.copy.src, w->u.copy.n);
}

static void run_set(hwork *w)
{
    memset(w->u.set.dst, w->u.set.byte, w->u.set.n);
}

static void run_fill(hwork *w)
{
    size_t n = w->u.fill.count;
    cp_scalar v = w->u.fill.v;
    switch (w->u.fill.t) {
    case CP_F32: {
        float *p = w->u.fill.p, x = (float)v.f;
        for (size_t i = 0; i < n; i++)
            p[i] = x;
        break;
    }
    case CP_F64: {
        double *p = w->u.fill.p;
        for (size_t i = 0; i < n; i++)
            p[i] = v.f;
        break;
    }
    case CP_I32: {
        int32_t *p = w->u.fill.p, x = (int32_t)v.i;
        for (size_t i = 0; i < n; i++)
            p[i] = x;
        break;
    }
    case CP_U32: {
        uint32_t *p = w->u.fill.p, x = (uint32_t)v.u;
        for (size_t i = 0; i < n; i++)
            p[i] = x;
        break;
    }
    case CP_U8:
        memset(w->u.fill.p, (int)(uint8_t)v.u, n);
        break;
    default:
        break;
    }
}

static void run_sqrt(hwork *w)
{
    for (size_t i = 0; i < w->u.sqrt.count; i++)
        w->u.sqrt.p[i] = cp_body_sqrt_index(i);
}

static void run_sum(hwork *w)
{
    const void *p = w->u.sum.p;
    cp_scalar *out = w->u.sum.out;
    switch (w->u.sum.t) {
    case CP_F32: {
        const float *a = p;
        size_t n = w->u.sum.bytes / sizeof *a;
        double acc = 0;
        for (size_t i = 0; i < n; i++)
            acc += (double)a[i];
        out->f = acc;
        break;
    }
    case CP_F64: {
        const double *a = p;
        size_t n = w->u.sum.bytes / sizeof *a;
        double acc = 0;
        for (size_t i = 0; i < n; i++)
            acc += a[i];
        out->f = acc;
        break;
    }
    case CP_I32: {
        const int32_t *a = p;
        size_t n = w->u.sum.bytes / sizeof *a;
        uint64_t acc = 0;
        for (size_t i = 0; i < n; i++)
            acc += (uint64_t)(int64_t)a[i];
        memcpy(&out->i, &acc, sizeof acc); /* wrapping, as the GPU's unsigned sum */
        break;
    }
    case CP_U32: {
        const uint32_t *a = p;
        size_t n = w->u.sum.bytes / sizeof *a;
        uint64_t acc = 0;
        for (size_t i = 0; i < n; i++)
            acc += a[i];
        out->u = acc;
        break;
    }
    case CP_U8: {
        const uint8_t *a = p;
        uint64_t acc = 0;
        for (size_t i = 0; i < w->u.sum.bytes; i++)
            acc += a[i];
        out->u = acc;
        break;
    }
    default:
        break;
    }
}

static void run_spin(hwork *w)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += (time_t)(w->u.spin.us / 1000000u);
    t.tv_nsec += (long)(w->u.spin.us % 1000000u) * 1000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR)
        ;
}

static void run_pattern(hwork *w)
{
    uint8_t *p = w->u.pat.p;
    for (size_t i = 0; i < w->u.pat.bytes; i++)
        p[i] = cp_body_pattern_byte(w->u.pat.seed, i);
}

static void run_verify(hwork *w)
{
    const uint8_t *p = w->u.pat.p;
    uint64_t bad = 0;
    for (size_t i = 0; i < w->u.pat.bytes; i++)
        bad += p[i] != cp_body_pattern_byte(w->u.pat.seed, i);
    *w->u.pat.bad = bad;
}

/* A copy of bytes (> 0) from src to dst, not queued yet; NULL with *st set
 * (a NULL pointer, or no memory for the work item). */
static hwork *copy_work(void *dst, const void *src, size_t bytes, const char *what, cp_status *st)
{
    hwork *w;
    if (!dst || !src) {
        *st = cp_error_set(CP_ERR_INVALID, "%s: NULL pointer", what);
        return NULL;
    }
    if (!(w = cp_host_work_or_oom(run_copy))) {
        *st = CP_ERR_OOM;
        return NULL;
    }
    w->u.copy.dst = dst;
    w->u.copy.src = src;
    w->u.copy.n = bytes;
    return w;
}

cp_status cp_host_memcpy_async(void *dst, const void *src, size_t bytes, cp_stream *s)
{
    CP_GUARD();
    hwork *w;
    cp_status st;
    if (bytes == 0)
        return CP_OK;
    if (!(w = copy_work(dst, src, bytes, "memcpy_async", &st)))
        return st;
    /* synchronous for the caller: the source may be a Lua string (pageable) */
    return cp_host_enqueue_and_wait(s, w);
}

cp_status cp_host_memset_async(void *dst, int byte, size_t bytes, cp_stream *s)
{
    CP_GUARD();
    hwork *w;
    if (bytes == 0)
        return CP_OK;
    if (!dst)
        return cp_error_set(CP_ERR_INVALID, "memset_async: NULL pointer");
    if (cp_host_pool_check_access(dst, cp_host_stream_device(s), 1) != CP_OK)
        return CP_ERR_INVALID;
    w = cp_host_work_or_oom(run_set);
    if (!w)
        return CP_ERR_OOM;
    w->u.set.dst = dst;
    w->u.set.byte = byte;
    w->u.set.n = bytes;
    return cp_host_enqueue(s, w, NULL, NULL);
}

static cp_status check_shape(const cp_shape *sh)
{
    if (!sh)
        return CP_OK;
    if (sh->block > 1024u)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_CONFIG,
                             "block of %u threads (1..1024)", sh->block);
    if (sh->grid > 0x7fffffffu)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_CONFIG,
                             "grid of %u blocks (1..2147483647)", sh->grid);
    return CP_OK;
}

static cp_status check_dtype(cp_dtype t)
{
    if ((unsigned)t >= (unsigned)CP_DTYPE_COUNT)
        return cp_error_set(CP_ERR_INVALID, "unknown element type %d", (int)t);
    return CP_OK;
}

cp_status cp_host_k_fill(void *p, size_t count, cp_dtype t, cp_scalar v, const cp_shape *sh,
                                cp_stream *s)
{
    CP_GUARD();
    hwork *w;
    cp_status st = check_shape(sh);
    if (st == CP_OK)
        st = check_dtype(t);
    if (st != CP_OK)
        return st;
    if (count == 0)
        return CP_OK;
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "fill: NULL pointer");
    if ((st = cp_host_pool_check_access(p, cp_host_stream_device(s), 1)) != CP_OK)
        return st;
    w = cp_host_work_or_oom(run_fill);
    if (!w)
        return CP_ERR_OOM;
    w->u.fill.p = p;
    w->u.fill.count = count;
    w->u.fill.t = t;
    w->u.fill.v = v;
    return cp_host_enqueue(s, w, NULL, NULL);
}

cp_status cp_host_k_sqrt_index(float *p, size_t count, const cp_shape *sh, cp_stream *s)
{
    CP_GUARD();
    hwork *w;
    cp_status st = check_shape(sh);
    if (st != CP_OK)
        return st;
    if (count == 0)
        return CP_OK;
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "sqrt_index: NULL pointer");
    if ((st = cp_host_pool_check_access(p, cp_host_stream_device(s), 1)) != CP_OK)
        return st;
    w = cp_host_work_or_oom(run_sqrt);
    if (!w)
        return CP_ERR_OOM;
    w->u.sqrt.p = p;
    w->u.sqrt.count = count;
    return cp_host_enqueue(s, w, NULL, NULL);
}

cp_status cp_host_k_checksum(const void *p, size_t bytes, cp_dtype t, const cp_shape *sh,
                                    cp_stream *s, cp_scalar *out)
{
    CP_GUARD();
    hwork *w;
    cp_scalar r;
    cp_status st = check_shape(sh);
    if (st == CP_OK)
        st = check_dtype(t);
    if (st != CP_OK)
        return st;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "checksum: out is NULL");
    r.u = 0;
    if (bytes > 0 && !p)
        return cp_error_set(CP_ERR_INVALID, "checksum: NULL pointer");
    if ((st = cp_host_pool_check_access(p, cp_host_stream_device(s), 0)) != CP_OK)
        return st;
    w = cp_host_work_or_oom(run_sum);
    if (!w)
        return CP_ERR_OOM;
    w->u.sum.p = p;
    w->u.sum.bytes = bytes;
    w->u.sum.t = t;
    w->u.sum.out = &r;
    st = cp_host_enqueue_and_wait(s, w);
    if (st == CP_OK)
        *out = r;
    return st;
}

cp_status cp_host_k_spin(uint64_t microseconds, cp_stream *s)
{
    CP_GUARD();
    hwork *w = cp_host_work_or_oom(run_spin);
    if (!w)
        return CP_ERR_OOM;
    w->u.spin.us = microseconds;
    return cp_host_enqueue(s, w, NULL, NULL);
}

cp_status cp_host_k_pattern(void *p, size_t bytes, uint64_t seed, cp_stream *s)
{
    CP_GUARD();
    hwork *w;
    cp_status st;
    if (bytes == 0)
        return CP_OK;
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "pattern: NULL pointer");
    if ((st = cp_host_pool_check_access(p, cp_host_stream_device(s), 1)) != CP_OK)
        return st;
    w = cp_host_work_or_oom(run_pattern);
    if (!w)
        return CP_ERR_OOM;
    w->u.pat.p = p;
    w->u.pat.bytes = bytes;
    w->u.pat.seed = seed;
    return cp_host_enqueue(s, w, NULL, NULL);
}

cp_status cp_host_k_verify(const void *p, size_t bytes, uint64_t seed, cp_stream *s,
                                  uint64_t *bad)
{
    CP_GUARD();
    hwork *w;
    uint64_t r = 0;
    cp_status st;
    if (!bad)
        return cp_error_set(CP_ERR_INVALID, "verify: bad is NULL");
    if (bytes > 0 && !p)
        return cp_error_set(CP_ERR_INVALID, "verify: NULL pointer");
    if ((st = cp_host_pool_check_access(p, cp_host_stream_device(s), 0)) != CP_OK)
        return st;
    w = cp_host_work_or_oom(run_verify);
    if (!w)
        return CP_ERR_OOM;
    /* the union keeps a mutable pointer; verify only reads through it */
    memcpy(&w->u.pat.p, &p, sizeof p);
    w->u.pat.bytes = bytes;
    w->u.pat.seed = seed;
    w->u.pat.bad = &r;
    st = cp_host_enqueue_and_wait(s, w);
    if (st == CP_OK)
        *bad = r;
    return st;
}

/* ---- host tasks (run-time compiled kernels) ------------------------------- */

static void run_task(hwork *w)
{
    char err[sizeof G.kerr];
    cp_stream *s = cp_host_worker_stream();
    int rc;
    if (s && s->fault_set) {
        w->u.task.fn(w->u.task.data, NULL, 0); /* cancelled: release, run nothing */
        return;
    }
    err[0] = '\0';
    rc = w->u.task.fn(w->u.task.data, err, sizeof err);
    if (rc == 2 && s) {
        /* a fault: the stream stays in error (the message is complete) */
        pthread_mutex_lock(&G.mu);
        snprintf(s->fault, sizeof s->fault, "%s", err);
        s->fault_set = 1;
        pthread_mutex_unlock(&G.mu);
    } else if (rc != 0) {
        pthread_mutex_lock(&G.mu);
        if (!G.kerr_set) {
            memcpy(G.kerr, err, sizeof err);
            G.kerr[sizeof G.kerr - 1] = '\0';
            G.kerr_set = 1;
        }
        pthread_mutex_unlock(&G.mu);
    }
}

cp_status cp_host_task(cp_stream *s, int (*fn)(void *, char *, size_t), const void *data,
                              size_t len)
{
    CP_GUARD();
    hwork *w;
    if (!fn)
        return cp_error_set(CP_ERR_INVALID, "host_task: fn is NULL");
    if (len > ((size_t)1 << 20))
        return cp_error_set(CP_ERR_INVALID, "host_task: %zu bytes of data is too much", len);
    /* one allocation: the item and its data, which follows it (8-aligned) */
    w = calloc(1, sizeof *w + ((len + 7) & ~(size_t)7));
    if (!w)
        return cp_error_set(CP_ERR_OOM, "host backend: out of memory for a work item");
    w->run = run_task;
    w->always_run = 1;
    w->deps = w->inline_deps;
    w->capdeps = sizeof w->inline_deps / sizeof w->inline_deps[0];
    w->u.task.fn = fn;
    w->u.task.data = w + 1;
    if (len)
        memcpy(w + 1, data, len);
    return cp_host_enqueue(s, w, NULL, NULL);
}

/* Device to device: asynchronous, unlike memcpy_async (no pageable memory). */
cp_status cp_host_memcpy_peer_async(void *dst, int dst_dev, const void *src, int src_dev,
                                           size_t bytes, cp_stream *s)
{
    CP_GUARD();
    hwork *w;
    cp_status st;
    if ((st = cp_host_check_device(dst_dev)) != CP_OK ||
        (st = cp_host_check_device(src_dev)) != CP_OK)
        return st;
    if (bytes == 0)
        return CP_OK;
    if (!(w = copy_work(dst, src, bytes, "memcpy_peer_async", &st)))
        return st;
    return cp_host_enqueue(s, w, NULL, NULL);
}
