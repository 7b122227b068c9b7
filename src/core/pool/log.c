/*
 * pool/log.c: logs every allocation and free of a resource to a CSV file
 * in RMM's logging-adaptor format, the format of the shared traces, so that
 * cp_trace_load() reads it back:
 *
 *     Thread,Time,Action,Pointer,Size,Stream
 *     0,12.345,allocate,0x7f76ec000000,4096,0x0
 *
 * Thread is a small number given to each host thread on its first logged
 * call; Time is microseconds since the adaptor was made; Stream is the
 * stream's id (cp_be->stream_id, 0 for the default stream) in hexadecimal.
 * Refused allocations are logged with the action "allocate failure" (as RMM
 * does); the loader skips such rows.  Rows are written under the adaptor's
 * lock, so they appear in the order the wrapped resource saw the calls.
 * The file is flushed at trim() and closed when the adaptor is destroyed.
 */
#include "resource_impl.h"

#include <string.h>
#include "streamorder.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct log_res {
    cp_resource base;
    cp_resource *inner;
    FILE *f;
    struct timespec t0;
} log_res;

static atomic_uint next_thread;
static _Thread_local unsigned thread_no;
static _Thread_local int thread_named;

static unsigned this_thread(void)
{
    if (!thread_named) {
        thread_no = atomic_fetch_add(&next_thread, 1u);
        thread_named = 1;
    }
    return thread_no;
}

static double since_us(const log_res *l)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - l->t0.tv_sec) * 1e6 + (double)(t.tv_nsec - l->t0.tv_nsec) / 1e3;
}

static void row(log_res *l, const char *action, const void *p, size_t bytes, cp_stream *s)
{
    fprintf(l->f, "%u,%.3f,%s,%#llx,%zu,%#llx\n", this_thread(), since_us(l), action,
            (unsigned long long)(uintptr_t)p, bytes, (unsigned long long)cp_so_sid(s));
}

static cp_status log_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    log_res *l = (log_res *)r;
    cp_status st = cp_resource_alloc(l->inner, bytes, s, out);
    row(l, st == CP_OK ? "allocate" : "allocate failure", st == CP_OK ? *out : NULL, bytes, s);
    return st;
}

static cp_status log_free(cp_resource *r, void *p, size_t bytes, cp_stream *s)
{
    log_res *l = (log_res *)r;
    cp_status st = cp_resource_free(l->inner, p, bytes, s);
    if (st == CP_OK)
        row(l, "free", p, bytes, s);
    return st;
}

static cp_status log_trim(cp_resource *r, size_t keep)
{
    log_res *l = (log_res *)r;
    fflush(l->f);
    return cp_resource_trim(l->inner, keep);
}

static cp_status log_reset(cp_resource *r)
{
    return cp_resource_reset(((log_res *)r)->inner);
}

static void log_free_info(cp_resource *r, uint64_t *largest, uint64_t *free_bytes)
{
    cp_adaptor_free_info(((log_res *)r)->inner, largest, free_bytes);
}

static void log_vm_info(cp_resource *r, cp_stats *out)
{
    cp_adaptor_vm_info(((log_res *)r)->inner, out);
}

static uint64_t log_reserved(cp_resource *r)
{
    return cp_resource_reserved(((log_res *)r)->inner);
}

static void log_destroy(cp_resource *r)
{
    log_res *l = (log_res *)r;
    fclose(l->f);
    cp_resource_destroy(l->inner);
    free(l);
}

static const cp_resource_ops log_ops = {
    .kind = "log",
    .alloc = log_alloc,
    .free = log_free,
    .trim = log_trim,
    .reset = log_reset,
    .free_info = log_free_info,
    .reserved = log_reserved,
    .destroy = log_destroy,
    .vm_info = log_vm_info,
};

cp_status cp_log_adaptor(cp_resource **out, cp_resource *inner, const char *csv_path)
{
    log_res *l;
    *out = NULL;
    if (!inner)
        return cp_error_set(CP_ERR_INVALID, "log adaptor: no resource to wrap");
    l = malloc(sizeof *l);
    if (!l)
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    l->f = fopen(csv_path, "w");
    if (!l->f) {
        free(l);
        return cp_error_set(CP_ERR_INVALID, "log adaptor: cannot open '%s' for writing",
                            csv_path);
    }
    fputs("Thread,Time,Action,Pointer,Size,Stream\n", l->f);
    cp_resource_init(&l->base, &log_ops);
    l->base.clock = inner->clock; /* setting the adaptor's clock sets the pool's */
    l->inner = inner;
    clock_gettime(CLOCK_MONOTONIC, &l->t0);
    *out = &l->base;
    return CP_OK;
}
