/*
 * test_nomem.c: the pools and replays when host memory runs out half way
 * (TAP output).  Each case runs again and again with every allocation of
 * the C library refused from the n-th on (failmalloc.h), n = 0, 1, 2, ...
 * until a run needs no refusal, so that each malloc, calloc and realloc of
 * the code under test fails once, each at its own point.  What must hold
 * every time: the call fails cleanly or succeeds, and once memory is back,
 * the blocks still live can be freed and trim(0) gives every byte back to
 * the upstream (nothing reserved is lost track of).  Leaks are for make
 * test-asan (LeakSanitizer).
 *
 * On the fake backend (fake_backend.h): its device memory is malloc's, so
 * the device runs out with the host.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "failmalloc.h"
#include "fake_backend.h"
#include "pool/torch.h"
#include "tap.h"
#include "trace/advise.h"
#include "trace/trace.h"

#define NB 24
#define MAX_RUNS 20000 /* far more allocations than any case makes */

/* One run of a case with the n-th allocation on refused; returns 0 when
 * what must hold held, and sets *refused to how many were refused. */
typedef int (*run_fn)(long n, const void *arg, long *refused);

static void sweep(const char *name, run_fn run, const void *arg)
{
    long n, refused = 0, bad_at = -1;
    for (n = 0; n < MAX_RUNS; n++) {
        if (run(n, arg, &refused) != 0 && bad_at < 0)
            bad_at = n;
        if (refused == 0)
            break;
    }
    tap_ok(bad_at < 0 && n < MAX_RUNS, "%s: every allocation refused in turn (%ld runs)%s", name,
           n + 1, bad_at >= 0 ? ": broken from the run refusing allocation" : "");
    if (bad_at >= 0)
        printf("#   first broken run: allocations from #%ld on refused\n", bad_at);
}

/* What holds once memory is back: the live blocks free, trim(0) returns
 * everything (the torch model: its own counters agree), destroy. */
static int settle(cp_resource *r, void **p, const size_t *sz, int nb, cp_stream *s)
{
    cp_stats st;
    cp_torch *t = cp_torch_of(r);
    int i, bad = 0;
    for (i = 0; i < nb; i++)
        if (p[i] && cp_resource_free(r, p[i], sz[i], s) != CP_OK)
            bad = 1;
    if (cp_resource_trim(r, 0) != CP_OK)
        bad = 1;
    cp_resource_stats(r, &st);
    if (st.reserved != 0 || st.used != 0)
        bad = 1;
    if (t) {
        cp_torch_stats ts;
        cp_torch_get_stats(t, &ts);
        if (ts.reserved_bytes[CP_TORCH_ALL].current != 0 ||
            ts.allocated_bytes[CP_TORCH_ALL].current != 0 || ts.active[CP_TORCH_ALL].current != 0)
            bad = 1;
    }
    if (bad)
        printf("#   left: reserved %llu, used %llu\n", (unsigned long long)st.reserved,
               (unsigned long long)st.used);
    cp_resource_destroy(r);
    return bad;
}

typedef struct pool_case {
    const char *kind, *conf;
    cp_upstream_kind up;
    int two_streams; /* frees on a second stream too */
} pool_case;

/* Allocations of mixed sizes (small, split, large, past a segment), half
 * freed, more allocated into the holes, a trim, then the rest. */
static int run_pool(long n, const void *arg, long *refused)
{
    const pool_case *c = (const pool_case *)arg;
    static const size_t sizes[NB] = {
        512,        1000,       4096,       100000,     1u << 20,   (1u << 20) + 1,
        3u << 20,   9u << 20,   11u << 20,  25u << 20,  64,         200000,
        700,        (2u << 20), 5u << 20,   (21u << 20), 300,       50000,
        8u << 20,   1,          600000,     (12u << 20), 2048,      (30u << 20)};
    cp_pool_opts o;
    cp_resource *r = NULL;
    cp_stream *s2 = NULL;
    void *p[NB] = {0};
    size_t sz[NB];
    int i;

    memset(&o, 0, sizeof o);
    o.kind = c->kind;
    o.upstream = c->up;
    o.grow = 1;
    o.alignment = 256;
    o.reuse = CP_REUSE_EVENT;
    if (c->conf)
        ((cp_torch_opts *)cp_pool_own(&o))->conf = c->conf;
    if (c->two_streams && cp_be->stream_create(&s2, 0, 0) != CP_OK)
        return 1;
    failmalloc_arm(n);
    if (cp_pool_create(&r, &o) != CP_OK) {
        *refused = failmalloc_disarm();
        if (s2)
            cp_be->stream_destroy(s2);
        return *refused == 0; /* only host memory may refuse it */
    }
    for (i = 0; i < NB; i++) {
        sz[i] = sizes[i];
        if (cp_resource_alloc(r, sz[i], NULL, &p[i]) != CP_OK)
            p[i] = NULL;
    }
    /* every other one freed (on the second stream too), the holes refilled */
    for (i = 0; i < NB; i += 2) {
        if (p[i] && cp_resource_free(r, p[i], sz[i], (i & 2) ? s2 : NULL) != CP_OK)
            continue; /* still live: settle frees it */
        sz[i] = sizes[(i + 6) % NB];
        if (cp_resource_alloc(r, sz[i], NULL, &p[i]) != CP_OK)
            p[i] = NULL;
    }
    cp_resource_trim(r, 0);
    for (i = 0; i < NB; i += 3)
        if (p[i] && cp_resource_free(r, p[i], sz[i], s2) == CP_OK)
            p[i] = NULL;
    *refused = failmalloc_disarm();
    {
        int bad = settle(r, p, sz, NB, NULL);
        if (s2) {
            cp_be->stream_synchronize(s2);
            cp_be->stream_destroy(s2);
        }
        return bad;
    }
}

typedef struct replay_case {
    const cp_trace *t;
    const char *kind, *conf;
    int recorded, record;
    uint64_t max;
} replay_case;

static int run_replay(long n, const void *arg, long *refused)
{
    const replay_case *c = (const replay_case *)arg;
    cp_pool_opts o;
    cp_replay_opts ro;
    cp_replay_result res;
    cp_resource *r = NULL;
    cp_status st;

    memset(&o, 0, sizeof o);
    o.kind = c->kind;
    o.upstream = CP_UP_VIRTUAL;
    o.grow = 1;
    o.alignment = 256;
    o.max = c->max;
    if (c->conf)
        ((cp_torch_opts *)cp_pool_own(&o))->conf = c->conf;
    memset(&ro, 0, sizeof ro);
    ro.repeat = 1;
    ro.recorded_addresses = c->recorded;
    ro.record = c->record;
    memset(&res, 0, sizeof res);
    failmalloc_arm(n);
    if (cp_pool_create(&r, &o) != CP_OK) {
        *refused = failmalloc_disarm();
        return *refused == 0;
    }
    st = cp_trace_replay(c->t, r, &ro, &res);
    *refused = failmalloc_disarm();
    cp_replay_result_fini(&res);
    if (st != CP_OK && *refused == 0)
        return 1;
    return settle(r, NULL, NULL, 0, NULL);
}

static int run_advise(long n, const void *arg, long *refused)
{
    const cp_trace *t = (const cp_trace *)arg;
    cp_advise_job j[3];
    int i;
    memset(j, 0, sizeof j);
    for (i = 0; i < 3; i++) {
        j[i].pool.kind = i == 2 ? "tlsf" : "torch";
        j[i].pool.upstream = CP_UP_VIRTUAL;
        j[i].pool.grow = 1;
        j[i].pool.alignment = 256;
        if (i < 2)
            ((cp_torch_opts *)cp_pool_own(&j[i].pool))->conf =
                i == 1 ? "expandable_segments:True" : "";
        j[i].recorded = i == 0;
        j[i].search = i == 2; /* (a search repeats the replays: one is enough) */
        j[i].limit = i == 0 ? 0 : 900u << 20;
    }
    failmalloc_arm(n);
    cp_advise_run(t, j, 3, 1, NULL, NULL);
    *refused = failmalloc_disarm();
    for (i = 0; i < 3; i++)
        if (j[i].st != CP_OK && *refused == 0)
            return 1;
    cp_advise_jobs_fini(j, 3);
    return 0;
}

/* The fake backend with the device's memory figures (the torch model
 * sizes its expandable ranges from them). */
static cp_status nomem_get_info(size_t *free_bytes, size_t *total_bytes)
{
    *free_bytes = *total_bytes = (size_t)80 << 30;
    return CP_OK;
}

static cp_backend nomem_backend;

int main(void)
{
    static const pool_case pools[] = {
        {"torch", "", CP_UP_VIRTUAL, 0},
        {"torch", "max_split_size_mb:20,roundup_power2_divisions:4", CP_UP_VIRTUAL, 0},
        {"torch", "expandable_segments:True", CP_UP_VIRTUAL, 0},
        {"torch", "", CP_UP_DEVICE, 1},
        {"cub", NULL, CP_UP_DEVICE, 1},
        {"cub", NULL, CP_UP_VIRTUAL, 0},
        {"vmm", NULL, CP_UP_VIRTUAL, 0},
        {"tlsf", NULL, CP_UP_DEVICE, 1},
    };
    char path[512], name[160];
    const char *dir = getenv("CUPOLA_TRACES");
    cp_trace *t = NULL;
    size_t i;

    setvbuf(stdout, NULL, _IOLBF, 0);
    nomem_backend = fake_backend;
    nomem_backend.mem_get_info = nomem_get_info;
    cp_be = &nomem_backend;
    for (i = 0; i < sizeof pools / sizeof pools[0]; i++) {
        snprintf(name, sizeof name, "%s pool (%s%s%s, %s upstream)", pools[i].kind,
                 pools[i].conf ? "conf \"" : "", pools[i].conf ? pools[i].conf : "default",
                 pools[i].conf ? "\"" : "", cp_upstream_name(pools[i].up));
        sweep(name, run_pool, &pools[i]);
    }
    snprintf(path, sizeof path, "%s/torch/varlen.limit-default.cpsnap.gz",
             dir ? dir : "examples/traces");
    tap_ok(cp_trace_load(path, &t) == CP_OK, "a snapshot loads");
    if (t) {
        static const char *const confs[] = {"", "expandable_segments:True",
                                            "garbage_collection_threshold:0.7"};
        for (i = 0; i < 3; i++) {
            replay_case c = {t, "torch", confs[i], i == 0, 1, 2614765568u};
            snprintf(name, sizeof name, "a torch replay (conf \"%s\"%s)", confs[i],
                     i == 0 ? ", recorded addresses" : "");
            sweep(name, run_replay, &c);
        }
        cp_trace_free(t);
    }
    /* smaller, for the cases that allocate per block or replay many times */
    snprintf(path, sizeof path, "%s/torch/twostream.default.cpsnap.gz",
             dir ? dir : "examples/traces");
    t = NULL;
    tap_ok(cp_trace_load(path, &t) == CP_OK, "a second snapshot loads");
    if (t) {
        replay_case c = {t, "cub", NULL, 0, 1, 0};
        sweep("a cub replay", run_replay, &c);
        sweep("advise's jobs (one thread)", run_advise, t);
        cp_trace_free(t);
    }
    return tap_finish();
}
