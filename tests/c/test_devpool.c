/*
 * test_devpool.c: the device pools through the backend table (dp_* in
 * backend.h), with no Lua: every allocator, runs that keep and runs that
 * free, exhaustion, two streams sharing a slab pool, reset and stats.  On
 * the backend CUPOLA_BACKEND selects; under `make test-tsan` this is the
 * host backend with ThreadSanitizer watching the allocators' atomics (the
 * same code the GPU runs, through the host shim).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "tap.h"

#define OK(cond, name) tap_ok_line((cond) != 0, __LINE__, "%s", (name))
#define OK_ST(call, name) tap_ok_line((call) == CP_OK, __LINE__, "%s", (name))

static const char *const kinds[] = {"bump", "warp_bump", "slab", "malloc", "heap"};

/* On a GPU up to ~270k threads hold blocks at once: pools and sizes there
 * are chosen so that what is live at once fits. */
static int on_cuda;

static cp_status run(cp_devpool *p, cp_stream *s, uint64_t threads, uint64_t lo, uint64_t hi,
                     int free_blocks, cp_dp_run_result *out)
{
    cp_dp_run_args a;
    cp_dp_run *r = NULL;
    cp_status st;
    memset(&a, 0, sizeof a);
    a.threads = threads;
    a.min_bytes = lo;
    a.max_bytes = hi;
    a.block = 128;
    a.free_blocks = free_blocks;
    a.verify = 1;
    a.seed = 42 + threads + lo;
    if ((st = cp_be->dp_launch(p, &a, s, &r)) != CP_OK)
        return st;
    return cp_be->dp_finish(r, out);
}

static void test_kind(cp_dp_kind kind, uint64_t n)
{
    cp_devpool *p = NULL;
    cp_dp_run_result r;
    cp_dp_stats st;

    snprintf(tap_group, sizeof tap_group, "%s", kinds[kind]);
    size_t cap = on_cuda ? (size_t)1 << 30 : (size_t)64 << 20;
    uint64_t hi = on_cuda ? 1024 : 4096;

    OK_ST(cp_be->dp_create(&p, kind, cap), "create");
    if (!p)
        return;
    OK(cp_be->dp_state(p) != NULL, "device-side state");
    OK_ST(run(p, NULL, n, 16, 16, 0, &r), "run: 16 B, kept");
    OK(r.ok == n && r.failed == 0, "every thread got a block");
    OK(r.overlaps == 0 && r.misaligned == 0, "disjoint and aligned");
    OK_ST(run(p, NULL, n, 4, hi, 1, &r), "run: mixed sizes from 4 B, freed");
    OK(r.ok == n && r.failed == 0 && r.overlaps == 0 && r.misaligned == 0, "mixed sizes, freed");
    OK_ST(cp_be->dp_stats(p, &st), "stats");
    OK(st.capacity == cap && st.failed == 0, "stats: capacity, nothing failed");
    if (kind == CP_DP_SLAB || kind == CP_DP_HEAP)
        OK(st.used == n * 16, "slab, heap: the kept blocks are what is used");
    OK_ST(cp_be->dp_reset(p, NULL), "reset");
    OK_ST(cp_be->dp_stats(p, &st), "stats after reset");
    if (kind != CP_DP_MALLOC)
        OK(st.used == 0 && st.peak > 0, "reset: nothing used, peak kept");
    OK_ST(cp_be->dp_destroy(p), "destroy");

    /* exhaustion: 64 KiB for n x 64 B */
    p = NULL;
    OK_ST(cp_be->dp_create(&p, kind, 64u << 10), "create 64 KiB");
    if (p) {
        OK_ST(run(p, NULL, n, 64, 64, 0, &r), "run past the capacity");
        OK(r.failed > 0 && r.ok > 0 && r.ok + r.failed == n, "exhaustion reported");
        OK(r.overlaps == 0, "no overlaps when exhausted");
        OK_ST(cp_be->dp_stats(p, &st), "stats");
        OK(st.failed == r.failed, "stats count the failures");
        OK_ST(cp_be->dp_destroy(p), "destroy");
    }
    tap_group[0] = '\0';
}

/* Two streams allocate and free from one pool (slab, heap) at the same
 * time; the heap's sizes reach past 8 KiB. */
static void test_shared(cp_dp_kind kind, uint64_t n)
{
    cp_devpool *p = NULL;
    cp_stream *s1 = NULL, *s2 = NULL;
    cp_dp_run_args a;
    cp_dp_run *r1 = NULL, *r2 = NULL;
    cp_dp_run_result x, y;
    cp_dp_stats st;

    OK_ST(cp_be->stream_create(&s1, 0, 0), "stream 1");
    OK_ST(cp_be->stream_create(&s2, 0, 0), "stream 2");
    snprintf(tap_group, sizeof tap_group, "%s, two streams", kinds[kind]);
    /* on a GPU ~540k threads of the two runs hold blocks at once */
    OK_ST(cp_be->dp_create(&p, kind, on_cuda ? (size_t)(kind == CP_DP_HEAP ? 1024 : 256) << 20 : (size_t)4 << 20),
          "pool");
    if (!p || !s1 || !s2)
        return;
    memset(&a, 0, sizeof a);
    a.threads = n;
    a.min_bytes = 16;
    a.max_bytes = kind == CP_DP_HEAP ? (on_cuda ? 1024 : 96 * 1024) : 256;
    a.block = 64;
    a.free_blocks = 1;
    a.verify = 1;
    a.seed = 7;
    OK_ST(cp_be->dp_launch(p, &a, s1, &r1), "launch on stream 1");
    a.seed = 8;
    OK_ST(cp_be->dp_launch(p, &a, s2, &r2), "launch on stream 2");
    if (r1)
        OK_ST(cp_be->dp_finish(r1, &x), "finish 1");
    if (r2)
        OK_ST(cp_be->dp_finish(r2, &y), "finish 2");
    OK(x.ok == n && y.ok == n && x.failed + y.failed == 0, "both streams served in full");
    OK(x.overlaps + y.overlaps == 0, "no overlaps between the streams");
    OK_ST(cp_be->dp_stats(p, &st), "stats");
    OK(st.used == 0, "every block came back");
    cp_be->dp_destroy(p);
    cp_be->stream_destroy(s1);
    cp_be->stream_destroy(s2);
    tap_group[0] = '\0';
}

int main(void)
{
    cp_status st = cp_backend_select(getenv("CUPOLA_BACKEND"));
    /* the host runs a kernel's threads on a few CPU threads (slower still
     * under ThreadSanitizer): 1e4 there, 1e6 on a GPU */
    uint64_t n;

    OK(st == CP_OK && cp_be != NULL, "cp_backend_select");
    if (st != CP_OK || !cp_be)
        return tap_finish();
    if (!cp_be->dp_create) {
        printf("# SKIP: this backend has no device pools\n");
        return tap_finish();
    }
    on_cuda = strcmp(cp_be->name, "cuda") == 0;
    /* compute-sanitizer (CUPOLA_SERIALIZED) checks every access: 2e4 there */
    n = on_cuda ? (getenv("CUPOLA_SERIALIZED") ? 20000u : 1000000u) : 10000u;
    printf("# backend: %s, %llu threads per run\n", cp_be->name, (unsigned long long)n);
    for (int k = 0; k < CP_DP_KIND_COUNT; k++)
        test_kind((cp_dp_kind)k, n);
    test_shared(CP_DP_SLAB, n);
    test_shared(CP_DP_HEAP, n);
    OK_ST(cp_be->device_synchronize(), "device_synchronize at the end");
    return tap_finish();
}
