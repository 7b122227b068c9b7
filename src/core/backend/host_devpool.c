/*
 * backend/host_devpool.c: device pools on the host backend.
 *
 * The allocators are the very code the GPU runs (cuda/include/cupola/
 * device_alloc.cuh, compiled here as C with its host shim: GCC atomics, a
 * warp of one lane), and a run is the GPU's run body (cuda/include/cupola/dp_body.cuh).
 *
 * Policy, exactly:
 *  - A pool is one posix_memalign'd allocation laid out as on the GPU
 *    (cuda/devpool_layout.h); the state lives in host memory.  One larger
 *    than RAM + swap is refused as out of memory (the backend's rule).
 *  - A run is one work item on its stream.  Its "kernel" is executed by
 *    max(4, online CPUs) POSIX threads that take blocks of `block` thread
 *    indices from a shared atomic counter, as SMs take thread blocks: the
 *    pool sees real concurrency (at least 4 threads even on a 2-core machine).
 *    A run with hold_us is split in two passes (all allocations and writes,
 *    then the hold, then every check), because CPU threads run the kernel's
 *    threads a few at a time: that is what a GPU whose threads are all
 *    resident does.  The verification pass (free=false) is a second kernel,
 *    run the same way after the first has finished.  ms times the
 *    allocating pass(es) with CLOCK_MONOTONIC.
 *  - Nested launches (children > 0) are refused: a kernel cannot launch a
 *    kernel on the host backend (CP_ERR_UNSUPPORTED, the message says so).
 *  - reset is a work item on its stream; stats and destroy synchronize the
 *    device first (destroy: no queued run may still use the memory).
 */
#include "host_devpool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cupola/dp_body.cuh"
#include "devpool_layout.h"

static const cp_host_exec *X;

void cp_host_devpool_bind(const cp_host_exec *x)
{
    X = x;
}

struct cp_devpool {
    cupola_device_pool st; /* first: dp_state points here */
    cp_dp_kind kind;
    size_t capacity;
    cpd_layout L;
    unsigned char *mem;
};

struct cp_dp_run {
    cp_devpool *pool;
    cpd_run_params prm;
    unsigned block;
    int reset_first;
    cpd_u64 *ptrs; /* free=false, or hold: per thread */
    uint64_t sid, ticket;
    cpd_u64 counters[CPD_NCOUNTERS];
    double ms;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static unsigned cpu_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 4)
        n = 4;
    if (n > 64)
        n = 64;
    return (unsigned)n;
}

/* ---- one "kernel": a pass over every thread index ------------------------ */

typedef enum pass_kind { PASS_RUN, PASS_ALLOC, PASS_FINISH, PASS_VERIFY, PASS_FREE } pass_kind;

typedef struct pass {
    cp_dp_run *r;
    pass_kind kind;
    cpd_u64 t0;
    cpd_u64 next; /* the next block of indices to take (atomic) */
} pass;

static void count(cpd_u64 *c, cpd_u32 res)
{
    c[0] += (res & CPD_R_OK) != 0;
    c[1] += (res & CPD_R_FAILED) != 0;
    c[2] += (res & CPD_R_OVERLAP) != 0;
    c[3] += (res & CPD_R_MISALIGNED) != 0;
}

static void *pass_worker(void *arg)
{
    pass *ps = arg;
    cp_dp_run *r = ps->r;
    cupola_device_pool *pool = &r->pool->st;
    cpd_u32 *claims = r->pool->kind == CP_DP_MALLOC ? NULL : (cpd_u32 *)(void *)(r->pool->mem + r->pool->L.claims_off);
    cpd_u64 local[CPD_NCOUNTERS] = {0};
    cpd_u64 n = r->prm.threads;

    for (;;) {
        cpd_u64 lo = __atomic_fetch_add(&ps->next, (cpd_u64)r->block, __ATOMIC_RELAXED), hi;
        if (lo >= n)
            break;
        hi = lo + r->block < n ? lo + r->block : n;
        for (cpd_u64 i = lo; i < hi; i++) {
            switch (ps->kind) {
            case PASS_RUN: count(local, cpd_run_thread(pool, &r->prm, i, r->ptrs, claims, pool->kind)); break;
            case PASS_ALLOC: r->ptrs[i] = (cpd_u64)(size_t)cpd_run_alloc(pool, &r->prm, i, pool->kind); break;
            case PASS_FINISH:
                count(local, cpd_run_finish(pool, &r->prm, i, (unsigned char *)(size_t)r->ptrs[i],
                                            ps->t0, r->ptrs, claims, pool->kind));
                break;
            case PASS_VERIFY: count(local, cpd_verify_thread(pool, &r->prm, i, r->ptrs, claims)); break;
            case PASS_FREE: cpd_free_kind(pool, (void *)(size_t)(r->ptrs[i] & ~1ull), pool->kind); break;
            }
        }
    }
    for (int k = 0; k < CPD_NCOUNTERS; k++)
        __atomic_fetch_add(&r->counters[k], local[k], __ATOMIC_RELAXED);
    return NULL;
}

static void run_pass(cp_dp_run *r, pass_kind kind, cpd_u64 t0)
{
    enum { MAXT = 64 };
    pthread_t th[MAXT];
    unsigned want = cpu_threads(), started = 0;
    pass ps = {r, kind, t0, 0};

    for (; started < want && started < MAXT; started++)
        if (pthread_create(&th[started], NULL, pass_worker, &ps) != 0)
            break;
    pass_worker(&ps); /* this worker too; alone if no thread could start */
    for (unsigned k = 0; k < started; k++)
        pthread_join(th[k], NULL);
}

static void clear_arrays(cp_devpool *p)
{
    if (p->kind != CP_DP_MALLOC)
        memset(p->mem + p->L.claims_off, 0, p->L.claims_bytes);
    if (p->kind == CP_DP_SLAB) {
        memset(p->mem + p->L.class_off, 0, (size_t)p->L.nslabs * 4u);
        memset(p->mem + p->L.used_off, 0, (size_t)p->L.nslabs * 4u);
        memset(p->mem + p->L.bitmaps_off, 0, p->L.bitmaps_bytes);
        memset(p->mem + p->L.lists_off, 0xff, p->L.lists_bytes);
    }
    if (p->kind == CP_DP_HEAP) {
        memset(p->mem + p->L.heap_off, 0, (size_t)p->L.heap_bytes);
        memset(p->mem + p->L.hslots_off, 0xff, (size_t)p->L.nslots_total * 4u);
    }
}

static void reset_now(cp_devpool *p)
{
    /* on a stream worker: later runs follow it through the stream (same
     * worker, or the scheduler's lock), so plain writes are enough */
    clear_arrays(p);
    cpd_reset_state(&p->st);
}

static void run_exec(void *arg)
{
    cp_dp_run *r = arg;
    double t;

    if (r->reset_first)
        reset_now(r->pool);
    t = now_ms();
    if (r->prm.hold_ns) {
        cpd_u64 t0 = cpd_now_ns(), end;
        run_pass(r, PASS_ALLOC, 0);
        end = t0 + r->prm.hold_ns;
        while (cpd_now_ns() < end) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
        run_pass(r, PASS_FINISH, t0);
    } else {
        run_pass(r, PASS_RUN, 0);
    }
    r->ms = now_ms() - t;
    if (!r->prm.free_blocks && r->prm.verify)
        run_pass(r, PASS_VERIFY, 0);
    if (!r->prm.free_blocks && r->pool->kind == CP_DP_MALLOC)
        run_pass(r, PASS_FREE, 0);
}

static void reset_exec(void *arg)
{
    reset_now(arg);
}

/* ---- the operations ------------------------------------------------------ */

cp_status cp_host_dp_create(cp_devpool **out, cp_dp_kind kind, size_t capacity)
{
    CP_GUARD();
    cp_devpool *p;
    void *mem = NULL;
    int e;

    *out = NULL;
    if ((unsigned)kind >= CP_DP_KIND_COUNT || capacity == 0)
        return cp_error_set(CP_ERR_INVALID, "device pool: bad kind or capacity");
    if (!(p = calloc(1, sizeof *p)))
        return cp_error_set(CP_ERR_OOM, "device pool: out of host memory");
    p->kind = kind;
    p->capacity = capacity;
    cpd_layout_make((cpd_u32)kind, capacity, &p->L);
    if ((kind != CP_DP_MALLOC && p->L.total < capacity) || (X && X->too_big((size_t)p->L.total)) ||
        (e = posix_memalign(&mem, 256, (size_t)p->L.total)) != 0) {
        free(p);
        return cp_error_set(CP_ERR_OOM, "device pool: cannot allocate %zu bytes", capacity);
    }
    p->mem = mem;
    cpd_state_init(&p->st, (cpd_u32)kind, capacity, &p->L, p->mem);
    reset_now(p);
    *out = p;
    return CP_OK;
}

cp_status cp_host_dp_destroy(cp_devpool *p)
{
    CP_GUARD();
    if (!p)
        return CP_OK;
    if (X)
        X->device_synchronize();
    free(p->mem);
    free(p);
    return CP_OK;
}

void *cp_host_dp_state(cp_devpool *p)
{
    return &p->st;
}

cp_status cp_host_dp_launch(cp_devpool *p, const cp_dp_run_args *a, cp_stream *s, cp_dp_run **out)
{
    CP_GUARD();
    cp_dp_run *r;
    cp_status st;

    *out = NULL;
    if (a->children)
        return cp_error_set(CP_ERR_UNSUPPORTED,
                            "nested launches (children=%u) need the CUDA backend: on the host "
                            "backend a kernel cannot launch a kernel",
                            a->children);
    if (a->threads == 0 || a->min_bytes == 0 || a->min_bytes > a->max_bytes || a->block == 0 ||
        a->block > 1024)
        return cp_error_set(CP_ERR_INVALID, "device pool run: bad arguments");
    if (!(r = calloc(1, sizeof *r)))
        return cp_error_set(CP_ERR_OOM, "device pool run: out of host memory");
    r->pool = p;
    r->block = a->block;
    r->reset_first = a->reset_first;
    r->prm.threads = a->threads;
    r->prm.min_bytes = a->min_bytes;
    r->prm.max_bytes = a->max_bytes;
    r->prm.seed = a->seed;
    r->prm.hold_ns = a->hold_us * 1000u;
    r->prm.free_blocks = a->free_blocks;
    r->prm.verify = a->verify;
    if (!a->free_blocks || a->hold_us) {
        if (a->threads > SIZE_MAX / sizeof(cpd_u64) ||
            !(r->ptrs = calloc((size_t)a->threads, sizeof(cpd_u64)))) {
            free(r);
            return cp_error_set(CP_ERR_OOM, "device pool run: no memory for %llu block records",
                                (unsigned long long)a->threads);
        }
    }
    if ((st = X->enqueue_call(s, run_exec, r, &r->sid, &r->ticket)) != CP_OK) {
        free(r->ptrs);
        free(r);
        return st;
    }
    *out = r;
    return CP_OK;
}

cp_status cp_host_dp_finish(cp_dp_run *r, cp_dp_run_result *out)
{
    CP_GUARD();
    X->wait(r->sid, r->ticket);
    memset(out, 0, sizeof *out);
    out->ok = r->counters[0];
    out->failed = r->counters[1];
    out->overlaps = r->counters[2];
    out->misaligned = r->counters[3];
    out->launch_errors = r->counters[4];
    out->ms = r->ms;
    free(r->ptrs);
    free(r);
    return CP_OK;
}

cp_status cp_host_dp_reset(cp_devpool *p, cp_stream *s)
{
    CP_GUARD();
    return X->enqueue_call(s, reset_exec, p, NULL, NULL);
}

cp_status cp_host_dp_stats(cp_devpool *p, cp_dp_stats *out)
{
    CP_GUARD();
    cp_status st = X->device_synchronize();
    cpd_u64 used = 0, peak = 0;
    if (st != CP_OK)
        return st;
    out->capacity = p->capacity;
    out->failed = p->st.failed;
    if (p->kind == CP_DP_HEAP)
        cpd_heap_usage(&p->st, (const cpd_u32 *)(const void *)(p->mem + p->L.cstate_off),
                       (const cpd_u32 *)(const void *)(p->mem + p->L.runlen_off), &used, &peak);
    else
        cpd_usage(&p->st,
                  p->kind == CP_DP_SLAB ? (const cpd_u32 *)(const void *)(p->mem + p->L.class_off) : NULL,
                  p->kind == CP_DP_SLAB ? (const cpd_u32 *)(const void *)(p->mem + p->L.used_off) : NULL,
                  &used, &peak);
    out->used = used;
    out->peak = peak;
    return CP_OK;
}
