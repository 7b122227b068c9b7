/*
 * speed.c: the C side of `make bench` (bench/speed.lua runs it in the same
 * invocation and puts each figure beside the same operation done from Lua).
 *
 * Every operation goes through cupola's core exactly as the binding calls it
 * (cp_resource_* for pools, cp_be->* for CUDA's own paths, kernels and
 * events), so the ratio Lua / C is the cost of the binding alone.  On the
 * CUDA backend cp_be->mem_alloc_async is cudaMallocAsync plus a return-code
 * check, i.e. "cudaMallocAsync called from C".
 *
 *   build/bench/speed [scale]      (CUPOLA_BACKEND picks the backend)
 *
 * Output: '#' comment lines, then one line per figure, "name value unit",
 * each the median of REPS repetitions after a warm-up:
 *   pool_pair_virtual   ns   tlsf pool, virtual upstream, 4 KiB, on a stream
 *   pool_pair_device    ns   tlsf pool, device upstream, 64 KiB, on a stream
 *   async_pair          ns   mem_alloc_async + mem_free_async, 64 KiB
 *   launch              ns   sqrt_index over 1024 floats (host time per launch)
 *   event_record_query  ns   event_record + event_query on a stream
 *   seed_loop           ms   100 x {alloc_async 4 MiB, sqrt_index, free_async},
 *                            device time between two events
 * Exit status non-zero on any failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "pool/resource.h"

#define REPS 7

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void check(cp_status st, const char *what)
{
    if (st != CP_OK) {
        fprintf(stderr, "speed: %s failed: %s\n", what, cp_error_msg());
        exit(1);
    }
}

static double median(double *x, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && x[j - 1] > x[j]; j--) {
            double t = x[j];
            x[j] = x[j - 1];
            x[j - 1] = t;
        }
    return x[n / 2];
}

static cp_resource *make_pool(cp_upstream_kind up)
{
    cp_pool_opts o;
    cp_resource *r = NULL;
    memset(&o, 0, sizeof o);
    o.kind = "tlsf";
    o.upstream = up;
    o.initial = 64u << 20;
    o.grow = 1;
    o.alignment = 256;
    o.reuse = CP_REUSE_EVENT;
    check(cp_pool_create(&r, &o), "cp_pool_create");
    return r;
}

/* ns per alloc+free pair of r on s */
static double pool_pair(cp_resource *r, size_t size, cp_stream *s, int n)
{
    double t[REPS];
    for (int rep = -1; rep < REPS; rep++) {
        double t0 = now_ns();
        for (int i = 0; i < n; i++) {
            void *p = NULL;
            check(cp_resource_alloc(r, size, s, &p), "cp_resource_alloc");
            check(cp_resource_free(r, p, size, s), "cp_resource_free");
        }
        if (rep >= 0)
            t[rep] = (now_ns() - t0) / n;
    }
    return median(t, REPS);
}

static double async_pair(size_t size, cp_stream *s, int n)
{
    double t[REPS];
    for (int rep = -1; rep < REPS; rep++) {
        double t0 = now_ns();
        for (int i = 0; i < n; i++) {
            void *p = NULL;
            check(cp_be->mem_alloc_async(&p, size, s), "mem_alloc_async");
            check(cp_be->mem_free_async(p, s), "mem_free_async");
        }
        if (rep >= 0)
            t[rep] = (now_ns() - t0) / n;
        check(cp_be->stream_synchronize(s), "stream_synchronize");
    }
    return median(t, REPS);
}

/* host ns per launch; the stream is drained between repetitions */
static double launch(float *p, size_t count, cp_stream *s, int n)
{
    double t[REPS];
    for (int rep = -1; rep < REPS; rep++) {
        double t0 = now_ns();
        for (int i = 0; i < n; i++)
            check(cp_be->k_sqrt_index(p, count, NULL, s), "k_sqrt_index");
        if (rep >= 0)
            t[rep] = (now_ns() - t0) / n;
        check(cp_be->stream_synchronize(s), "stream_synchronize");
    }
    return median(t, REPS);
}

static double event_record_query(cp_event *e, cp_stream *s, int n)
{
    double t[REPS];
    for (int rep = -1; rep < REPS; rep++) {
        int done = 0;
        double t0 = now_ns();
        for (int i = 0; i < n; i++) {
            check(cp_be->event_record(e, s), "event_record");
            check(cp_be->event_query(e, &done), "event_query");
        }
        if (rep >= 0)
            t[rep] = (now_ns() - t0) / n;
        check(cp_be->stream_synchronize(s), "stream_synchronize");
    }
    return median(t, REPS);
}

/* the seed's loop: device ms between events around it */
static double seed_loop(cp_stream *s, int iters)
{
    const size_t n = (size_t)1 << 20;
    double t[REPS];
    cp_event *e0 = NULL, *e1 = NULL;
    check(cp_be->event_create(&e0, 1), "event_create");
    check(cp_be->event_create(&e1, 1), "event_create");
    for (int rep = -1; rep < REPS; rep++) {
        float ms = 0;
        check(cp_be->event_record(e0, s), "event_record");
        for (int i = 0; i < iters; i++) {
            void *p = NULL;
            check(cp_be->mem_alloc_async(&p, n * sizeof(float), s), "mem_alloc_async");
            check(cp_be->k_sqrt_index((float *)p, n, NULL, s), "k_sqrt_index");
            check(cp_be->mem_free_async(p, s), "mem_free_async");
        }
        check(cp_be->event_record(e1, s), "event_record");
        check(cp_be->event_synchronize(e1), "event_synchronize");
        check(cp_be->event_elapsed(e0, e1, &ms), "event_elapsed");
        if (rep >= 0)
            t[rep] = ms;
    }
    cp_be->event_destroy(e0);
    cp_be->event_destroy(e1);
    return median(t, REPS);
}

int main(int argc, char **argv)
{
    double scale = argc > 1 ? atof(argv[1]) : 1.0;
    int n_pair = (int)(200000 * scale), n_async = (int)(20000 * scale);
    int n_launch = (int)(500 * scale), n_event = (int)(20000 * scale);
    cp_device_info info;
    cp_stream *s = NULL;
    cp_event *e = NULL;
    cp_resource *rv, *rd;
    void *small = NULL;

    if (n_pair < 1 || n_async < 1 || n_launch < 1 || n_event < 1) {
        fprintf(stderr, "speed: scale too small\n");
        return 2;
    }
    check(cp_backend_select(getenv("CUPOLA_BACKEND")), "backend selection");
    check(cp_be->device_info(&info), "device_info");
    printf("# speed.c: backend %s, device %s, median of %d after a warm-up\n", cp_be->name,
           info.name, REPS);
    check(cp_be->stream_create(&s, 0, 0), "stream_create");
    check(cp_be->event_create(&e, 0), "event_create");
    rv = make_pool(CP_UP_VIRTUAL);
    rd = make_pool(CP_UP_DEVICE);
    check(cp_be->mem_alloc(&small, 1024 * sizeof(float), CP_MEM_DEVICE), "mem_alloc");

    printf("pool_pair_virtual %.1f ns\n", pool_pair(rv, 4096, s, n_pair));
    printf("pool_pair_device %.1f ns\n", pool_pair(rd, 65536, s, n_pair));
    printf("async_pair %.1f ns\n", async_pair(65536, s, n_async));
    printf("launch %.1f ns\n", launch((float *)small, 1024, s, n_launch));
    printf("event_record_query %.1f ns\n", event_record_query(e, s, n_event));
    printf("seed_loop %.4f ms\n", seed_loop(s, 100));

    check(cp_be->stream_synchronize(s), "stream_synchronize");
    cp_resource_destroy(rv);
    cp_resource_destroy(rd);
    cp_be->mem_free(small, CP_MEM_DEVICE);
    cp_be->event_destroy(e);
    cp_be->stream_destroy(s);
    return 0;
}
