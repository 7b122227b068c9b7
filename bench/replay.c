/*
 * bench/replay.c: replays every shipped trace on every pool kind over the
 * virtual upstream and prints, per trace and pool, peak reserved / peak live
 * (on a fresh pool, one pass of the trace) and nanoseconds per event (the
 * median over runs, each run a fresh pool replaying the trace `repeat`
 * times in one timed loop, so the figure is the steady state rather than
 * the first pass's page faults).  PyTorch's caching allocator's figure for
 * the same trace (traces/README.md) is printed beside it.
 *
 * Build and run from the repository root, after `make` (any backend):
 *   make NVCC= BUILD=build-host && cc -O2 -std=c11 -D_GNU_SOURCE -Isrc/core bench/replay.c \
 *      $(find build-host/obj/core -name '*.o') -lz -lpthread -lm -o build/bench_replay
 *   build/bench_replay [runs] [repeat] [trace ...]
 * Defaults: 5 runs, repeat 10, the three traces in $CUPOLA_TRACES or
 * examples/traces.  CUPOLA_BENCH_UPSTREAM=device (or async, managed,
 * pinned) replays over that upstream on the backend cp_backend_select
 * picks (the CUDA one on a GPU machine) instead of the virtual one.
 * CUPOLA_BENCH_RELEASE_THRESHOLD sets the pools' release_threshold
 * (18446744073709551615: keep every idle chunk, PyTorch's way).
 * A second table gives the host time of one alloc+free pair of 1 MiB on
 * the default stream, warm (median of runs of 200,000 pairs).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptrmap.h"
#include "pool/resource.h"
#include "trace/trace.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#include <time.h>

static cp_upstream_kind upstream = CP_UP_VIRTUAL;

/* CUPOLA_BENCH_STREAMS=2: a copy of the trace where allocation i (and its
 * free) runs on trace stream 1 + (i & 1), the two streams interleaved as
 * tightly as they can be, replayed on the backend's streams (the host
 * backend if no GPU).  Written as CSV to a temporary file. */
static cp_trace *two_streams(cp_trace *t)
{
    char path[] = "/tmp/cupola-2s-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    cp_trace *t2 = NULL;
    cp_ptrmap on; /* pointer -> stream + 1 */
    size_t i, n = cp_trace_events(t), k = 0;
    if (!f || cp_ptrmap_init(&on, 1024) != 0)
        return NULL;
    fprintf(f, "Thread,Time,Action,Pointer,Size,Stream\n");
    for (i = 0; i < n; i++) {
        cp_trace_row row;
        uint64_t sv;
        cp_trace_event(t, i, &row);
        if (!row.is_free) {
            sv = 1 + (k++ & 1);
            cp_ptrmap_put(&on, row.pointer, (void *)(uintptr_t)sv);
        } else {
            sv = (uint64_t)(uintptr_t)cp_ptrmap_get(&on, row.pointer);
            cp_ptrmap_del(&on, row.pointer);
        }
        fprintf(f, "0,%.3f,%s,0x%llx,%llu,0x%llx\n", row.time_us, row.is_free ? "free" : "allocate",
                (unsigned long long)row.pointer, (unsigned long long)row.size,
                (unsigned long long)sv);
    }
    fclose(f);
    cp_ptrmap_fini(&on);
    if (cp_trace_load(path, &t2) != CP_OK)
        fprintf(stderr, "%s\n", cp_error_msg());
    remove(path);
    return t2;
}

static cp_resource *fresh(const char *kind)
{
    cp_pool_opts o;
    cp_resource *r = NULL;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.upstream = upstream;
    if (getenv("CUPOLA_BENCH_RELEASE_THRESHOLD"))
        o.release_threshold = strtoull(getenv("CUPOLA_BENCH_RELEASE_THRESHOLD"), NULL, 0);
    o.grow = 1;
    o.alignment = 256;
    if (cp_pool_create(&r, &o) != CP_OK)
        fprintf(stderr, "%s: %s\n", kind, cp_error_msg());
    return r;
}

int main(int argc, char **argv)
{
    static const char *kinds[] = {"arena", "freelist", "tlsf", "caching", "vmm"};
    const int nkinds = (int)(sizeof kinds / sizeof kinds[0]);
    static const struct {
        const char *name;
        double pytorch, expandable;
    } known[] = {
        {"resnet50_train.csv.gz", 1.21, 1.017},
        {"gpt2_train.csv.gz", 1.10, 1.089},
        {"t5_train_varlen.csv.gz", 1.14, 1.040},
        {"mixtral_moe_train.csv.gz", 1.53, 1.087},
        {"convnext_multires_train.csv.gz", 1.21, 1.010},
        {"gpt2_beam_search.csv.gz", 1.09, 1.047},
    };
    const char *dir = getenv("CUPOLA_TRACES");
    int runs = argc > 1 ? atoi(argv[1]) : 5;
    int repeat = argc > 2 ? atoi(argv[2]) : 10;
    int ntraces = argc > 3 ? argc - 3 : (int)(sizeof known / sizeof known[0]);
    int ti, ki, run, rc = 0, streams2 = 0;

    const char *up = getenv("CUPOLA_BENCH_UPSTREAM");

    if (up && *up && strcmp(up, "virtual") != 0) {
        static const char *ups[] = {"device", "async", "managed", "pinned"};
        int u;
        for (u = 0; u < 4; u++)
            if (strcmp(up, ups[u]) == 0)
                upstream = (cp_upstream_kind)u;
        if (upstream == CP_UP_VIRTUAL || cp_backend_select(NULL) != CP_OK) {
            fprintf(stderr, "CUPOLA_BENCH_UPSTREAM=%s: %s\n", up, cp_error_msg());
            return 1;
        }
        printf("# upstream %s, backend %s\n", up, cp_be->name);
    }
    if (getenv("CUPOLA_BENCH_STREAMS") && atoi(getenv("CUPOLA_BENCH_STREAMS")) == 2) {
        if (cp_backend_select(NULL) != CP_OK) {
            fprintf(stderr, "%s\n", cp_error_msg());
            return 1;
        }
        streams2 = 1;
        printf("# two streams interleaved (allocation i on stream 1 + i %% 2), backend %s\n",
               cp_be->name);
    }
    if (!dir || !*dir)
        dir = "examples/traces";
    if (runs < 1)
        runs = 1;
    if (runs > 99)
        runs = 99;
    if (repeat < 1)
        repeat = 1;
    printf("%-24s %-9s %12s %14s %9s %8s %8s %10s %7s\n", "trace", "pool", "peak_live",
           "peak_reserved", "res/live", "pytorch", "expand", "ns/event", "maps");
    for (ti = 0; ti < ntraces; ti++) {
        char path[4096];
        const char *p, *base;
        double pt = 0, px = 0;
        cp_trace *t;
        size_t j;
        if (argc > 3) {
            p = argv[3 + ti];
        } else {
            snprintf(path, sizeof path, "%s/%s", dir, known[ti].name);
            p = path;
        }
        base = strrchr(p, '/') ? strrchr(p, '/') + 1 : p;
        for (j = 0; j < sizeof known / sizeof known[0]; j++)
            if (strcmp(base, known[j].name) == 0)
                pt = known[j].pytorch, px = known[j].expandable;
        if (cp_trace_load(p, &t) != CP_OK) {
            fprintf(stderr, "%s\n", cp_error_msg());
            rc = 1;
            continue;
        }
        if (streams2) {
            cp_trace *t2 = two_streams(t);
            cp_trace_free(t);
            if (!t2) {
                rc = 1;
                continue;
            }
            t = t2;
        }
        for (ki = 0; ki < nkinds; ki++) {
            double ns[99];
            cp_replay_result first;
            cp_replay_opts once = {0, 1, 0}, rep = {0, repeat, 0};
            cp_resource *r = fresh(kinds[ki]);
            if (!r || cp_trace_replay(t, r, &once, &first) != CP_OK) {
                fprintf(stderr, "%s: %s\n", kinds[ki], cp_error_msg());
                rc = 1;
                cp_resource_destroy(r);
                continue;
            }
            cp_resource_destroy(r);
            for (run = 0; run < runs; run++) {
                cp_replay_result res;
                r = fresh(kinds[ki]);
                if (!r || cp_trace_replay(t, r, &rep, &res) != CP_OK) {
                    rc = 1;
                    cp_resource_destroy(r);
                    break;
                }
                cp_resource_destroy(r);
                ns[run] = res.ns_per_event;
            }
            if (run < runs)
                continue;
            qsort(ns, (size_t)runs, sizeof ns[0], cmp_double);
            printf("%-24s %-9s %12llu %14llu %9.4f %8.2f %8.3f %10.1f %7llu\n", base, kinds[ki],
                   (unsigned long long)first.peak_live, (unsigned long long)first.peak_reserved,
                   first.reserved_over_live, pt, px, ns[runs / 2],
                   (unsigned long long)first.maps);
            if (first.failed)
                printf("  (%llu allocations failed)\n", (unsigned long long)first.failed);
        }
        cp_trace_free(t);
    }

    /* CUPOLA_BENCH_STEADY=1: the vmm pool's steady state, three passes of
     * each trace over one pool, with release_threshold 0 and max: res/live
     * and the pages mapped and unmapped per pass (deterministic over the
     * virtual upstream). */
    if (getenv("CUPOLA_BENCH_STEADY") && atoi(getenv("CUPOLA_BENCH_STEADY"))) {
        static const uint64_t keeps[2] = {0, UINT64_MAX};
        printf("\n%-31s %10s %9s %9s %9s %9s %9s\n", "vmm steady state", "threshold",
               "res/live", "maps 1", "unmaps 1", "maps 2", "unmaps 2");
        for (ti = 0; ti < ntraces; ti++) {
            char path[4096];
            const char *p;
            cp_trace *t;
            int k;
            if (argc > 3) {
                p = argv[3 + ti];
            } else {
                snprintf(path, sizeof path, "%s/%s", dir, known[ti].name);
                p = path;
            }
            if (cp_trace_load(p, &t) != CP_OK)
                continue;
            for (k = 0; k < 2; k++) {
                cp_pool_opts o;
                cp_resource *r = NULL;
                cp_replay_opts once = {0, 1, 0};
                cp_replay_result a, b, c;
                memset(&o, 0, sizeof o);
                o.kind = "vmm";
                o.upstream = CP_UP_VIRTUAL;
                o.grow = 1;
                o.alignment = 256;
                o.release_threshold = keeps[k];
                if (cp_pool_create(&r, &o) != CP_OK || cp_trace_replay(t, r, &once, &a) != CP_OK ||
                    cp_trace_replay(t, r, &once, &b) != CP_OK ||
                    cp_trace_replay(t, r, &once, &c) != CP_OK) {
                    fprintf(stderr, "vmm: %s\n", cp_error_msg());
                    cp_resource_destroy(r);
                    rc = 1;
                    continue;
                }
                printf("%-31s %10s %9.4f %9llu %9llu %9llu %9llu\n",
                       strrchr(p, '/') ? strrchr(p, '/') + 1 : p, k ? "max" : "0",
                       c.reserved_over_live, (unsigned long long)a.maps,
                       (unsigned long long)a.unmaps, (unsigned long long)c.maps,
                       (unsigned long long)c.unmaps);
                cp_resource_destroy(r);
            }
            cp_trace_free(t);
        }
    }

    if (getenv("CUPOLA_BENCH_NO_PAIRS"))
        return rc;
    printf("\n%-9s %14s\n", "pool", "ns/pair(1MiB)");
    for (ki = 0; ki < nkinds; ki++) {
        double ns[99];
        cp_resource *r = fresh(kinds[ki]);
        void *p;
        int i;
        if (!r)
            continue;
        for (run = 0; run < runs; run++) {
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            for (i = 0; i < 200000; i++) {
                if (cp_resource_alloc(r, 1u << 20, NULL, &p) != CP_OK)
                    break;
                cp_resource_free(r, p, 1u << 20, NULL);
            }
            clock_gettime(CLOCK_MONOTONIC, &b);
            ns[run] = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) /
                      200000.0;
        }
        qsort(ns, (size_t)runs, sizeof ns[0], cmp_double);
        printf("%-9s %14.1f\n", kinds[ki], ns[runs / 2]);
        cp_resource_destroy(r);
    }

    /* With a backend: the same pair on a stream of its own once the pool
     * has seen two streams, so that every free records a (pooled) event. */
    if (cp_be) {
        cp_stream *s1 = NULL, *s2 = NULL;
        printf("\n%-9s %20s   (backend %s)\n", "pool", "ns/pair 2 streams", cp_be->name);
        if (cp_be->stream_create(&s1, 0, 0) != CP_OK || cp_be->stream_create(&s2, 0, 0) != CP_OK)
            return 1;
        for (ki = 0; ki < nkinds; ki++) {
            double ns[99];
            cp_resource *r = fresh(kinds[ki]);
            void *p;
            int i;
            if (!r)
                continue;
            if (cp_resource_alloc(r, 4096, s2, &p) == CP_OK)
                cp_resource_free(r, p, 4096, s2);
            for (run = 0; run < runs; run++) {
                struct timespec a, b;
                clock_gettime(CLOCK_MONOTONIC, &a);
                for (i = 0; i < 20000; i++) {
                    if (cp_resource_alloc(r, 1u << 20, s1, &p) != CP_OK)
                        break;
                    cp_resource_free(r, p, 1u << 20, s1);
                }
                clock_gettime(CLOCK_MONOTONIC, &b);
                ns[run] = ((double)(b.tv_sec - a.tv_sec) * 1e9 +
                           (double)(b.tv_nsec - a.tv_nsec)) / 20000.0;
            }
            qsort(ns, (size_t)runs, sizeof ns[0], cmp_double);
            printf("%-9s %20.1f\n", kinds[ki], ns[runs / 2]);
            cp_be->device_synchronize();
            cp_resource_destroy(r);
        }
        cp_be->stream_destroy(s1);
        cp_be->stream_destroy(s2);
    }
    return rc;
}
