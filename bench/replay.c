/*
 * bench/replay.c: replays every shared trace on every pool kind over the
 * virtual upstream and prints peak reserved / peak live and ns per event
 * (median of several runs; each run replays a fresh pool).
 *
 *   cc ... bench/replay.c build/obj/core/(all objects) -lz -lpthread -lm -o build/bench_replay
 *   build/bench_replay [runs] [trace.csv.gz ...]   (default: $CUPOLA_TRACES or
 *                                                  ../shared/traces, 5 runs)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resource.h"
#include "trace.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    static const char *kinds[] = {"arena", "freelist", "tlsf", "caching"};
    static const char *names[] = {"resnet50_train.csv.gz", "gpt2_train.csv.gz",
                                  "t5_train_varlen.csv.gz"};
    const char *dir = getenv("CUPOLA_TRACES");
    char path[4096];
    int runs = argc > 1 ? atoi(argv[1]) : 5;
    int ntraces = argc > 2 ? argc - 2 : 3;
    int ti, ki, run, rc = 0;

    if (!dir)
        dir = "../shared/traces";
    if (runs < 1)
        runs = 1;
    printf("%-24s %-9s %12s %14s %9s %10s %7s\n", "trace", "pool", "peak_live", "peak_reserved",
           "res/live", "ns/event", "failed");
    for (ti = 0; ti < ntraces; ti++) {
        cp_trace *t;
        cp_trace_info info;
        const char *p = argc > 2 ? argv[2 + ti] : path;
        if (argc <= 2)
            snprintf(path, sizeof path, "%s/%s", dir, names[ti]);
        if (cp_trace_load(p, &t) != CP_OK) {
            fprintf(stderr, "%s\n", cp_error_msg());
            rc = 1;
            continue;
        }
        cp_trace_info_get(t, &info);
        for (ki = 0; ki < 4; ki++) {
            double ns[64], ratio = 0;
            uint64_t live = 0, res = 0, failed = 0;
            int n = runs > 64 ? 64 : runs;
            for (run = 0; run < n; run++) {
                cp_pool_opts o;
                cp_resource *r;
                cp_replay_result out;
                memset(&o, 0, sizeof o);
                o.kind = kinds[ki];
                o.upstream = CP_UP_VIRTUAL;
                o.grow = 1;
                o.alignment = 256;
                if (cp_pool_create(&r, &o) != CP_OK ||
                    cp_trace_replay(t, r, NULL, &out) != CP_OK) {
                    fprintf(stderr, "%s: %s\n", kinds[ki], cp_error_msg());
                    rc = 1;
                    break;
                }
                cp_resource_destroy(r);
                ns[run] = out.ns_per_event;
                ratio = out.reserved_over_live;
                live = out.peak_live;
                res = out.peak_reserved;
                failed = out.failed;
            }
            if (run < n)
                continue;
            qsort(ns, (size_t)n, sizeof ns[0], cmp_double);
            {
                const char *base = strrchr(p, '/');
                printf("%-24s %-9s %12llu %14llu %9.4f %10.1f %7llu\n", base ? base + 1 : p,
                       kinds[ki], (unsigned long long)live, (unsigned long long)res, ratio,
                       ns[n / 2], (unsigned long long)failed);
            }
        }
        cp_trace_free(t);
    }
    return rc;
}
