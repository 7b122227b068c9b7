/*
 * test_pools.c: the conformance test of every pool kind over every upstream
 * (TAP output).  Each case runs on the fake backend (fake_backend.h: stream
 * completion under the test's control) and again on the host backend.
 *
 *  - random alloc/free over two streams and the default one: live blocks
 *    never overlap, are aligned, stats are conserved (used == sum of live
 *    sizes, reserved >= used, allocs - frees == live), all returned at the end;
 *  - out of memory is reported (CP_ERR_OOM, failed counter) and recovered from;
 *  - 4 host threads share a pool, each checking its blocks' contents;
 *  - stream safety: reuse=stream never hands a block freed on A to B;
 *    reuse=event not before A's work has completed; reuse=wait at once, with
 *    B waiting on A's event; blocks freed before the pool saw a second stream;
 *  - invalid frees, fallback, arena reset, limit adaptor.
 *
 * Built with -DTEST_NO_HOST when the host backend is not linked in.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_backend.h"
#include "pool/bfc.h"
#include "pool/resource.h"
#include "tap.h"

#define ok tap_ok

static const char *kinds[] = {"arena", "freelist", "tlsf", "caching"};
static const char *upnames[] = {"device", "async", "managed", "pinned", "virtual"};

static int is_heap(const char *kind)
{
    return strcmp(kind, "arena") != 0;
}

static cp_pool_opts opts(const char *kind, cp_upstream_kind up, cp_reuse reuse)
{
    cp_pool_opts o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.upstream = up;
    o.grow = 1;
    o.alignment = 256;
    o.reuse = reuse;
    return o;
}

typedef struct live_blk {
    uintptr_t p;
    size_t n;
    cp_stream *s;
} live_blk;

static int cmp_live(const void *a, const void *b)
{
    uintptr_t x = ((const live_blk *)a)->p, y = ((const live_blk *)b)->p;
    return (x > y) - (x < y);
}

/* 1 when no two live blocks overlap. */
static int no_overlap(const live_blk *v, size_t n)
{
    live_blk *c = malloc((n ? n : 1) * sizeof *c);
    size_t i;
    int good = 1;
    memcpy(c, v, n * sizeof *c);
    qsort(c, n, sizeof *c, cmp_live);
    for (i = 1; i < n; i++)
        if (c[i - 1].p + c[i - 1].n > c[i].p)
            good = 0;
    free(c);
    return good;
}

static int stats_consistent(cp_resource *r, const live_blk *v, size_t n, char *why, size_t wl)
{
    cp_stats st;
    uint64_t sum = 0;
    size_t i;
    for (i = 0; i < n; i++)
        sum += v[i].n;
    cp_resource_stats(r, &st);
    if (st.used != sum)
        return snprintf(why, wl, "used %llu != sum of live %llu", (unsigned long long)st.used,
                        (unsigned long long)sum), 0;
    if (st.reserved < st.used)
        return snprintf(why, wl, "reserved %llu < used %llu", (unsigned long long)st.reserved,
                        (unsigned long long)st.used), 0;
    if (st.allocs - st.frees != n)
        return snprintf(why, wl, "allocs-frees %llu != live %zu",
                        (unsigned long long)(st.allocs - st.frees), n), 0;
    if (st.free_bytes > st.reserved || st.largest_free > st.free_bytes)
        return snprintf(why, wl, "free figures off: largest %llu free %llu reserved %llu",
                        (unsigned long long)st.largest_free, (unsigned long long)st.free_bytes,
                        (unsigned long long)st.reserved), 0;
    if (st.fragmentation < 0 || st.fragmentation > 1)
        return snprintf(why, wl, "fragmentation %g", st.fragmentation), 0;
    if (st.used_peak < st.used || st.reserved_peak < st.reserved)
        return snprintf(why, wl, "peaks below current"), 0;
    return 1;
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static size_t rnd_size(void)
{
    switch (rnd() % 4) {
    case 0: return 1 + rnd() % 512;
    case 1: return 1 + rnd() % 65536;
    case 2: return 1 + rnd() % (1u << 20);
    default: return 1 + rnd() % (6u << 20);
    }
}

/* ---- random sequences over streams ---- */

static void test_random(const char *kind, cp_upstream_kind up, cp_reuse reuse)
{
    cp_pool_opts o = opts(kind, up, reuse);
    cp_resource *r;
    cp_stream *sv[3] = {NULL, NULL, NULL};
    live_blk *v = calloc(4096, sizeof *v);
    size_t n = 0, i;
    int aligned = 1, overlap_ok = 1, stats_ok = 1, alloc_ok = 1, free_ok = 1;
    char why[256] = "";
    cp_stats st;

    cp_be->stream_create(&sv[1], 0, 0);
    cp_be->stream_create(&sv[2], 0, 0);
    if (cp_pool_create(&r, &o) != CP_OK) {
        ok(0, "create");
        goto out;
    }
    for (i = 0; i < 3000; i++) {
        int do_alloc = n == 0 || (n < 4096 && rnd() % 100 < 55);
        if (do_alloc) {
            size_t sz = rnd_size();
            cp_stream *s = sv[rnd() % 3];
            void *p;
            if (cp_resource_alloc(r, sz, s, &p) != CP_OK) {
                alloc_ok = 0;
                snprintf(why, sizeof why, "%s", cp_error_msg());
                break;
            }
            if ((uintptr_t)p % 256)
                aligned = 0;
            v[n].p = (uintptr_t)p;
            v[n].n = sz;
            v[n].s = s;
            n++;
            if (rnd() % 8 == 0)
                cp_be->k_spin(10, s);
        } else {
            size_t k = rnd() % n;
            /* free on the stream that used it, or sometimes on another one */
            cp_stream *s = rnd() % 4 ? v[k].s : sv[rnd() % 3];
            if (cp_resource_free(r, (void *)v[k].p, v[k].n, s) != CP_OK)
                free_ok = 0;
            v[k] = v[--n];
        }
        if (rnd() % 16 == 0)
            fake_complete(sv[rnd() % 3]);
        if (i % 100 == 0) {
            if (!no_overlap(v, n))
                overlap_ok = 0;
            if (stats_ok && !stats_consistent(r, v, n, why, sizeof why))
                stats_ok = 0;
        }
    }
    ok(alloc_ok, "3000 random allocations served %s", why);
    ok(aligned, "every block 256-byte aligned");
    ok(overlap_ok && no_overlap(v, n), "live blocks never overlap");
    ok(stats_ok, "stats conserved %s", stats_ok ? "" : why);
    while (n) {
        n--;
        if (cp_resource_free(r, (void *)v[n].p, v[n].n, v[n].s) != CP_OK)
            free_ok = 0;
    }
    ok(free_ok, "every free accepted");
    cp_resource_stats(r, &st);
    ok(st.used == 0 && st.allocs == st.frees, "all returned: used %llu, allocs %llu frees %llu",
       (unsigned long long)st.used, (unsigned long long)st.allocs,
       (unsigned long long)st.frees);
    if (is_heap(kind)) {
        ok(st.free_bytes == st.reserved, "free bytes == reserved when empty (%llu, %llu)",
           (unsigned long long)st.free_bytes, (unsigned long long)st.reserved);
    }
    cp_be->device_synchronize();
    cp_resource_trim(r, 0);
    cp_resource_stats(r, &st);
    if (is_heap(kind))
        ok(st.reserved == 0, "trim(0) returns every chunk (reserved %llu)",
           (unsigned long long)st.reserved);
    cp_resource_destroy(r);
out:
    cp_be->stream_destroy(sv[1]);
    cp_be->stream_destroy(sv[2]);
    free(v);
}

/* ---- out of memory ---- */

static void test_oom(const char *kind, cp_upstream_kind up)
{
    cp_pool_opts o = opts(kind, up, CP_REUSE_STREAM);
    cp_resource *r;
    void *p[64];
    int n = 0, i;
    cp_status st = CP_OK;
    cp_stats s1, s2;
    void *q;

    o.max = 8u << 20;
    if (cp_pool_create(&r, &o) != CP_OK) {
        ok(0, "create with max");
        return;
    }
    while (n < 64 && (st = cp_resource_alloc(r, 1u << 20, NULL, &p[n])) == CP_OK)
        n++;
    ok(st == CP_ERR_OOM && n >= 1 && n <= 8, "max=8MiB: %d x 1MiB served, then CP_ERR_OOM", n);
    ok(strstr(cp_error_msg(), "out of memory") != NULL, "message says out of memory: %s",
       cp_error_msg());
    cp_resource_stats(r, &s1);
    ok(s1.failed == 1 && s1.reserved <= o.max, "failed counter 1 (%llu), reserved %llu <= max",
       (unsigned long long)s1.failed, (unsigned long long)s1.reserved);
    st = cp_resource_alloc(r, 64u << 20, NULL, &q);
    ok(st == CP_ERR_OOM, "a request larger than max is refused");
    for (i = 0; i < n; i++)
        cp_resource_free(r, p[i], 1u << 20, NULL);
    st = cp_resource_alloc(r, 1u << 20, NULL, &q);
    ok(st == CP_OK, "recovered: allocation works after frees");
    if (st == CP_OK)
        cp_resource_free(r, q, 1u << 20, NULL);
    cp_resource_stats(r, &s2);
    ok(s2.used == 0 && s2.failed == 2, "consistent after OOM: used %llu failed %llu",
       (unsigned long long)s2.used, (unsigned long long)s2.failed);
    cp_resource_destroy(r);
}

/* ---- threads ---- */

typedef struct thr {
    cp_resource *r;
    int id;
    int bad;
    int failed;
    int real_memory;
} thr;

static void *thread_main(void *arg)
{
    thr *t = arg;
    cp_stream *s = NULL;
    live_blk v[64];
    int n = 0, i;
    uint64_t seed = 0x1234567ull * (uint64_t)(t->id + 1);
    cp_be->stream_create(&s, 0, 0);
    for (i = 0; i < 2000; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        if (n < 64 && (n == 0 || seed % 2)) {
            size_t sz = 16 + seed % (256u << 10);
            void *p;
            if (cp_resource_alloc(t->r, sz, s, &p) != CP_OK) {
                t->failed++;
                continue;
            }
            if (t->real_memory) {
                uint64_t tag = ((uint64_t)t->id << 32) | (uint64_t)i;
                memcpy(p, &tag, 8);
                memcpy((char *)p + sz - 8, &tag, 8);
            }
            v[n].p = (uintptr_t)p;
            v[n].n = sz;
            v[n].s = (cp_stream *)(uintptr_t)i; /* the tag's low half */
            n++;
        } else {
            int k = (int)(seed % (uint64_t)n);
            if (t->real_memory) {
                uint64_t tag = ((uint64_t)t->id << 32) | (uint64_t)(uintptr_t)v[k].s, a, b;
                memcpy(&a, (void *)v[k].p, 8);
                memcpy(&b, (char *)v[k].p + v[k].n - 8, 8);
                if (a != tag || b != tag)
                    t->bad++;
            }
            cp_resource_free(t->r, (void *)v[k].p, v[k].n, s);
            v[k] = v[--n];
        }
    }
    while (n--)
        cp_resource_free(t->r, (void *)v[n].p, v[n].n, s);
    cp_be->stream_synchronize(s);
    cp_be->stream_destroy(s);
    return NULL;
}

static void test_threads(const char *kind, cp_upstream_kind up)
{
    cp_pool_opts o = opts(kind, up, CP_REUSE_WAIT);
    cp_resource *r;
    pthread_t th[4];
    thr t[4];
    int i, bad = 0, failed = 0;
    cp_stats st;
    if (cp_pool_create(&r, &o) != CP_OK) {
        ok(0, "create");
        return;
    }
    for (i = 0; i < 4; i++) {
        t[i].r = r;
        t[i].id = i;
        t[i].bad = t[i].failed = 0;
        /* the host writes tags into blocks: only where it can reach them */
        t[i].real_memory = up != CP_UP_VIRTUAL &&
                           (strcmp(cp_be->name, "cuda") != 0 || up == CP_UP_MANAGED ||
                            up == CP_UP_PINNED);
        pthread_create(&th[i], NULL, thread_main, &t[i]);
    }
    for (i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        bad += t[i].bad;
        failed += t[i].failed;
    }
    cp_resource_stats(r, &st);
    ok(failed == 0, "4 threads: no allocation failed (%d)", failed);
    ok(bad == 0, "4 threads: no block overwritten by another (%d corrupted)", bad);
    ok(st.used == 0 && st.allocs == st.frees && st.allocs > 0,
       "4 threads: stats balance (allocs %llu frees %llu used %llu)",
       (unsigned long long)st.allocs, (unsigned long long)st.frees,
       (unsigned long long)st.used);
    cp_resource_destroy(r);
}

/* ---- stream safety ---- */

static int overlaps(uintptr_t a, size_t an, uintptr_t b, size_t bn)
{
    return a < b + bn && b < a + an;
}

/* Allocates count blocks of sz on s; returns how many overlap [x, x+xn). */
static int alloc_many(cp_resource *r, cp_stream *s, size_t sz, int count, uintptr_t x,
                      size_t xn, void **out)
{
    int i, hits = 0;
    for (i = 0; i < count; i++) {
        if (cp_resource_alloc(r, sz, s, &out[i]) != CP_OK) {
            out[i] = NULL;
            continue;
        }
        if (overlaps((uintptr_t)out[i], sz, x, xn))
            hits++;
    }
    return hits;
}

static void free_many(cp_resource *r, cp_stream *s, size_t sz, int count, void **v)
{
    int i;
    for (i = 0; i < count; i++)
        if (v[i])
            cp_resource_free(r, v[i], sz, s);
}

/* Big blocks take whole chunks; a second one is made and freed on B first,
 * so that B's later request finds room without the pool growing past its
 * peak (which would return idle chunks upstream, after a device
 * synchronization: safe, but then any address may come back). */
static void warm_big(cp_resource *r, cp_stream *b, size_t sz)
{
    void *w;
    if (cp_resource_alloc(r, sz, b, &w) == CP_OK)
        cp_resource_free(r, w, sz, b);
}

static void test_streams(const char *kind, cp_upstream_kind up, int real_backend, size_t SZ)
{
    cp_stream *a = NULL, *b = NULL;
    cp_resource *r;
    cp_pool_opts o;
    void *x, *y, *v[128];
    int hits, big = SZ >= (64u << 20), cnt = big ? 1 : 16;
    char tagbuf[sizeof tap_group];
    snprintf(tagbuf, sizeof tagbuf, "%s", tap_group);
    if (big)
        snprintf(tap_group, sizeof tap_group, "%.140s (big blocks)", tagbuf);
    cp_be->stream_create(&a, 0, 0);
    cp_be->stream_create(&b, 0, 0);

    /* reuse=stream: never across */
    o = opts(kind, up, CP_REUSE_STREAM);
    if (cp_pool_create(&r, &o) == CP_OK) {
        cp_resource_alloc(r, SZ, a, &x);
        cp_resource_alloc(r, SZ, b, &y);
        if (big)
            warm_big(r, b, SZ);
        cp_be->k_spin(20000, a);
        cp_resource_free(r, x, SZ, a);
        hits = alloc_many(r, b, SZ, cnt, (uintptr_t)x, SZ, v);
        ok(hits == 0, "reuse=stream: block freed on A never returned on B (%d)", hits);
        if (!real_backend)
            fake_complete(a);
        cp_be->stream_synchronize(a);
        free_many(r, b, SZ, cnt, v);
        hits = alloc_many(r, b, SZ, cnt, (uintptr_t)x, SZ, v);
        ok(hits == 0, "reuse=stream: not even after A completed (%d)", hits);
        free_many(r, b, SZ, cnt, v);
        cp_resource_free(r, y, SZ, b);
        cp_be->device_synchronize();
        cp_resource_destroy(r);
    }

    /* reuse=event: only after A's work completed */
    o = opts(kind, up, CP_REUSE_EVENT);
    if (cp_pool_create(&r, &o) == CP_OK) {
        cp_resource_alloc(r, SZ, a, &x);
        cp_resource_alloc(r, SZ, b, &y);
        if (big)
            warm_big(r, b, SZ);
        cp_be->k_spin(20000, a);
        cp_resource_free(r, x, SZ, a);
        if (!real_backend) {
            hits = alloc_many(r, b, SZ, cnt, (uintptr_t)x, SZ, v);
            ok(hits == 0, "reuse=event: not reused while A's work is pending (%d)", hits);
            free_many(r, b, SZ, cnt, v);
            fake_complete(a);
        } else {
            /* A real backend may finish the spin at any time: check only that
             * any reuse happened after A's work completed. */
            int idle = 0;
            hits = alloc_many(r, b, SZ, 1, (uintptr_t)x, SZ, v);
            cp_be->stream_query(a, &idle);
            ok(!hits || idle, "reuse=event: reused only once A was idle");
            free_many(r, b, SZ, 1, v);
            cp_be->stream_synchronize(a);
        }
        /* B's own free memory may come first (best fit): ask until the pool
         * must take x's block rather than grow */
        hits = alloc_many(r, b, SZ, big ? 1 : 128, (uintptr_t)x, SZ, v);
        if (is_heap(kind) && !big)
            ok(hits == 1, "reuse=event: reused on B once A's event completed");
        free_many(r, b, SZ, big ? 1 : 128, v);
        cp_resource_free(r, y, SZ, b);
        cp_be->device_synchronize();
        cp_resource_destroy(r);
    }

    /* reuse=wait: at once, B waiting on A */
    o = opts(kind, up, CP_REUSE_WAIT);
    if (cp_pool_create(&r, &o) == CP_OK) {
        uint64_t waits = real_backend ? 0 : b->waits;
        cp_resource_alloc(r, SZ, a, &x);
        cp_resource_alloc(r, SZ, b, &y);
        cp_be->k_spin(20000, a);
        cp_resource_free(r, x, SZ, a);
        hits = alloc_many(r, b, SZ, 1, (uintptr_t)x, SZ, v);
        if (is_heap(kind)) {
            ok(hits == 1, "reuse=wait: reused on B at once");
            if (!real_backend)
                ok(b->waits > waits && b->waited_on == a, "reuse=wait: B waits on A's event");
        }
        free_many(r, b, SZ, 1, v);
        cp_resource_free(r, y, SZ, b);
        cp_be->device_synchronize();
        cp_resource_destroy(r);
    }

    /* reuse=wait: a free already complete needs no wait, and the block is
     * idle again (ANY): it merges with what is beside it */
    if (!real_backend && is_heap(kind) && !big) {
        o = opts(kind, up, CP_REUSE_WAIT);
        if (cp_pool_create(&r, &o) == CP_OK) {
            uint64_t waits;
            cp_resource_alloc(r, SZ, a, &x);
            cp_resource_alloc(r, SZ, b, &y);
            cp_be->k_spin(20000, a);
            cp_resource_free(r, x, SZ, a);
            fake_complete(a);
            waits = b->waits;
            hits = alloc_many(r, b, SZ, 128, (uintptr_t)x, SZ, v);
            ok(hits == 1, "reuse=wait, A complete: reused on B");
            ok(b->waits == waits, "reuse=wait, A complete: B does not wait (%llu waits)",
               (unsigned long long)(b->waits - waits));
            free_many(r, b, SZ, 128, v);
            cp_resource_free(r, y, SZ, b);
            cp_be->device_synchronize();
            cp_resource_destroy(r);
        }
    }

    /* Blocks freed while the pool knew one stream record no event; the
     * pool's legacy event covers them once their stream is seen again. */
    if (!real_backend && !big) {
        o = opts(kind, up, CP_REUSE_EVENT);
        if (cp_pool_create(&r, &o) == CP_OK) {
            uint64_t syncs = fake_syncs;
            void *z;
            cp_resource_alloc(r, SZ, a, &x);
            cp_be->k_spin(20000, a);
            cp_resource_free(r, x, SZ, a);
            hits = alloc_many(r, b, SZ, 1, (uintptr_t)x, SZ, v);
            ok(hits == 0 && fake_syncs == syncs,
               "single-stream frees, reuse=event: not crossed to B, and nothing blocked");
            free_many(r, b, SZ, 1, v);
            cp_resource_alloc(r, 256, a, &z); /* A seen again: legacy event recorded */
            cp_resource_free(r, z, 256, a);
            hits = alloc_many(r, b, SZ, 1, (uintptr_t)x, SZ, v);
            ok(hits == 0, "single-stream frees, reuse=event: not while A's work is pending");
            free_many(r, b, SZ, 1, v);
            fake_complete(a);
            /* B's own free chunks may come first (best fit): ask until the
             * pool must take x's chunk rather than grow */
            hits = alloc_many(r, b, SZ, 128, (uintptr_t)x, SZ, v);
            if (is_heap(kind))
                ok(hits == 1 && fake_syncs == syncs,
                   "single-stream frees, reuse=event: reused once A's legacy event completed");
            free_many(r, b, SZ, 128, v);
            cp_be->device_synchronize();
            cp_resource_destroy(r);
        }
        o = opts(kind, up, CP_REUSE_WAIT);
        if (cp_pool_create(&r, &o) == CP_OK) {
            uint64_t waits = b->waits;
            void *z;
            cp_resource_alloc(r, SZ, a, &x);
            cp_be->k_spin(20000, a);
            cp_resource_free(r, x, SZ, a);
            cp_resource_alloc(r, 4u << 20, b, &z); /* the pool sees B (elsewhere) ... */
            cp_resource_free(r, z, 4u << 20, b);
            cp_resource_alloc(r, 256, a, &z); /* ... then A again */
            cp_resource_free(r, z, 256, a);
            hits = alloc_many(r, b, SZ, 128, (uintptr_t)x, SZ, v);
            if (is_heap(kind))
                ok(hits == 1 && b->waits > waits && b->waited_on == a,
                   "single-stream frees, reuse=wait: reused on B, waiting on A's legacy event");
            free_many(r, b, SZ, 128, v);
            cp_be->device_synchronize();
            cp_resource_destroy(r);
        }
    }
    cp_be->stream_destroy(a);
    cp_be->stream_destroy(b);
    snprintf(tap_group, sizeof tap_group, "%s", tagbuf);
}

/* ---- misuse, fallback, reset, limit ---- */

/* cp_streams_idle (backend.h): on a thread whose streams run no work (an
 * advise replay), a pool takes every recorded event as complete, whatever
 * the backend would answer; the fake backend, like CUDA a moment after a
 * record, says A's free is still pending. */
static void test_streams_idle(const char *kind)
{
    const size_t SZ = 64u << 10;
    cp_stream *a = NULL, *b = NULL;
    cp_resource *r;
    cp_pool_opts o = opts(kind, CP_UP_VIRTUAL, CP_REUSE_EVENT);
    void *x, *y, *w, *v[16];
    uint64_t q0;
    int hits;
    snprintf(tap_group, sizeof tap_group, "advise's replays (cp_streams_idle)");
    cp_be->stream_create(&a, 0, 0);
    cp_be->stream_create(&b, 0, 0);
    if (cp_pool_create(&r, &o) != CP_OK) {
        ok(0, "%s: pool: %s", kind, cp_error_msg());
        return;
    }
    cp_resource_alloc(r, SZ, a, &x);
    cp_resource_alloc(r, SZ, b, &y);
    cp_be->k_spin(20000, a); /* pending until fake_complete */
    cp_resource_free(r, x, SZ, a);
    /* the pool's next operation on A records the free's event */
    cp_resource_alloc(r, 256, a, &w);
    cp_resource_free(r, w, 256, a);
    hits = alloc_many(r, b, SZ, 16, (uintptr_t)x, SZ, v);
    ok(hits == 0, "%s: A's free pending: not B's (%d)", kind, hits);
    free_many(r, b, SZ, 16, v);
    q0 = fake_queries;
    cp_streams_idle = 1;
    hits = alloc_many(r, b, SZ, 16, (uintptr_t)x, SZ, v);
    cp_streams_idle = 0;
    ok(hits == 1 && fake_queries == q0,
       "%s: streams idle: B gets A's block at once, the backend unasked (%d; %llu queries)", kind,
       hits, (unsigned long long)(fake_queries - q0));
    free_many(r, b, SZ, 16, v);
    fake_complete(a);
    cp_resource_free(r, y, SZ, b);
    cp_be->device_synchronize();
    cp_resource_destroy(r);
    cp_be->stream_destroy(a);
    cp_be->stream_destroy(b);
}

static void test_misc(const char *kind, cp_upstream_kind up)
{
    cp_pool_opts o = opts(kind, up, CP_REUSE_STREAM);
    cp_resource *r, *l;
    void *p, *q;
    cp_stats st;
    cp_status s;

    if (cp_pool_create(&r, &o) != CP_OK) {
        ok(0, "create");
        return;
    }
    cp_resource_alloc(r, 1000, NULL, &p);
    s = cp_resource_free(r, (char *)p + 256, 1000, NULL);
    ok(s == CP_ERR_INVALID, "free of an address inside a block is refused: %s", cp_error_msg());
    cp_resource_free(r, p, 1000, NULL);
    s = cp_resource_free(r, p, 1000, NULL);
    ok(s == CP_ERR_INVALID, "double free is refused");
    cp_resource_stats(r, &st);
    ok(st.frees == 1 && st.used == 0, "refused frees leave the stats alone");
    s = cp_resource_reset(r);
    if (is_heap(kind)) {
        ok(s == CP_ERR_UNSUPPORTED, "reset() unsupported");
    } else {
        void *a1, *a2;
        cp_resource_alloc(r, 4096, NULL, &a1);
        cp_resource_alloc(r, 4096, NULL, &q);
        s = cp_resource_reset(r);
        cp_resource_stats(r, &st);
        ok(s == CP_OK && st.used == 0 && st.allocs == st.frees, "reset() frees everything");
        cp_resource_alloc(r, 4096, NULL, &a2);
        ok(a2 == a1, "after reset() the arena starts over at its base");
        ok(cp_resource_free(r, q, 4096, NULL) == CP_ERR_INVALID,
           "a block from before reset() cannot be freed");
        cp_resource_free(r, a2, 4096, NULL);
    }
    cp_resource_destroy(r);

    /* fallback: a pool that may not grow serves big requests from upstream */
    o = opts(kind, up, CP_REUSE_STREAM);
    o.grow = 0;
    o.initial = 1u << 20;
    o.fallback = 1;
    if (cp_pool_create(&r, &o) == CP_OK) {
        s = cp_resource_alloc(r, 4u << 20, NULL, &p);
        cp_resource_stats(r, &st);
        ok(s == CP_OK && st.reserved >= (5u << 20), "fallback serves what the pool cannot "
           "(reserved %llu)", (unsigned long long)st.reserved);
        if (s == CP_OK)
            cp_resource_free(r, p, 4u << 20, NULL);
        cp_resource_stats(r, &st);
        ok(st.used == 0 && st.reserved == (1u << 20), "fallback block returned upstream");
        cp_resource_destroy(r);
    } else {
        ok(0, "create with fallback: %s", cp_error_msg());
    }

    /* release_threshold: idle chunks up to it survive growth (here: all) */
    if (is_heap(kind)) {
        void *q2;
        o = opts(kind, up, CP_REUSE_STREAM);
        o.release_threshold = UINT64_MAX;
        if (cp_pool_create(&r, &o) == CP_OK) {
            cp_stats s1;
            cp_resource_alloc(r, 96u << 20, NULL, &p);
            cp_resource_free(r, p, 96u << 20, NULL);
            cp_resource_stats(r, &s1);
            cp_resource_alloc(r, 8u << 20, NULL, &q2); /* fits the idle chunk */
            cp_resource_stats(r, &st);
            ok(st.reserved == s1.reserved && s1.reserved >= (96u << 20),
               "release_threshold=max: an idle chunk is used, not returned (reserved %llu)",
               (unsigned long long)st.reserved);
            cp_resource_free(r, q2, 8u << 20, NULL);
            cp_resource_trim(r, 0);
            cp_resource_stats(r, &st);
            ok(st.reserved == 0, "trim(0) still returns it (reserved %llu)",
               (unsigned long long)st.reserved);
            cp_resource_destroy(r);
        }
    }

    /* limit adaptor */
    o = opts(kind, up, CP_REUSE_STREAM);
    if (cp_pool_create(&r, &o) == CP_OK && cp_limit_adaptor(&l, r, 3u << 20) == CP_OK) {
        cp_status s1 = cp_resource_alloc(l, 2u << 20, NULL, &p);
        cp_status s2 = cp_resource_alloc(l, 2u << 20, NULL, &q);
        cp_resource_stats(l, &st);
        ok(s1 == CP_OK && s2 == CP_ERR_OOM && st.failed == 1,
           "limit adaptor refuses past its limit");
        ok(st.reserved >= st.used && st.used == (2u << 20), "limit adaptor stats");
        cp_resource_free(l, p, 2u << 20, NULL);
        cp_resource_destroy(l);
    } else {
        ok(0, "limit adaptor");
    }
}

/* ---- a device that refuses: free-idle-and-retry ---- */

/* The fake backend's memory, capped at cap_limit bytes: what a GPU whose
 * memory is taken does (cudaMalloc refuses). */
static uint64_t cap_limit, cap_used;
static struct {
    void *p;
    size_t n;
} cap_live[64];

static cp_status capped_alloc(void **out, size_t bytes, cp_memkind kind)
{
    size_t i;
    cp_status st;
    if (cap_used + bytes > cap_limit)
        return cp_error_set(CP_ERR_OOM, "capped: out of memory");
    for (i = 0; i < 64 && cap_live[i].p; i++)
        ;
    if (i == 64)
        return cp_error_set(CP_ERR_OOM, "capped: too many blocks");
    st = fake_mem_alloc(out, bytes, kind);
    if (st == CP_OK) {
        cap_live[i].p = *out;
        cap_live[i].n = bytes;
        cap_used += bytes;
    }
    return st;
}

static cp_status capped_free(void *p, cp_memkind kind)
{
    size_t i;
    for (i = 0; i < 64; i++)
        if (cap_live[i].p == p) {
            cap_used -= cap_live[i].n;
            cap_live[i].p = NULL;
        }
    return fake_mem_free(p, kind);
}

/* A pool serving a framework (cp_pool_spec_serve: its idle chunks kept)
 * over a device of 100 MiB: two 40 MiB chunks, both freed and kept; a
 * 70 MiB request fits in neither and the device refuses it beside them, so
 * the pool returns both and retries: served, with the device's memory
 * given back first.  And the policy itself: which specs it changes. */
static void test_refusal_retry(void)
{
    static const char *const heaps[] = {"freelist", "tlsf", "caching"};
    const cp_backend *saved = cp_be;
    static cp_backend capped;
    size_t k;
    capped = fake_backend;
    capped.mem_alloc = capped_alloc;
    capped.mem_free = capped_free;
    cp_be = &capped;
    cap_limit = UINT64_C(100) << 20;
    for (k = 0; k < sizeof heaps / sizeof heaps[0]; k++) {
        cp_pool_opts o;
        char kind[16];
        cp_resource *r = NULL;
        cp_stats st;
        void *a = NULL, *b = NULL, *c = NULL;
        cp_status s;
        snprintf(tap_group, sizeof tap_group, "refusal %s", heaps[k]);
        cap_used = 0;
        memset(cap_live, 0, sizeof cap_live);
        if (cp_pool_spec_parse(heaps[k], &o, kind, sizeof kind) != CP_OK) {
            ok(0, "spec: %s", cp_error_msg());
            continue;
        }
        cp_pool_spec_serve(&o);
        ok(o.release_threshold == CP_SERVE_KEEP_ALL, "serving: every idle chunk kept");
        if (cp_pool_create(&r, &o) != CP_OK) {
            ok(0, "create: %s", cp_error_msg());
            continue;
        }
        cp_resource_alloc(r, 40u << 20, NULL, &a);
        cp_resource_alloc(r, 40u << 20, NULL, &b);
        cp_resource_free(r, a, 40u << 20, NULL);
        cp_resource_free(r, b, 40u << 20, NULL);
        cp_resource_stats(r, &st);
        ok(a && b && st.reserved == (80u << 20) && st.device_frees == 0,
           "two 40 MiB chunks freed and kept (reserved %llu, frees %llu)",
           (unsigned long long)st.reserved, (unsigned long long)st.device_frees);
        s = cp_resource_alloc(r, 70u << 20, NULL, &c);
        cp_resource_stats(r, &st);
        ok(s == CP_OK && st.reserved == (70u << 20) && st.device_frees == 2 &&
               st.device_allocs == 3 && st.failed == 0,
           "a refused growth frees the idle chunks and retries: served (%s; reserved %llu, "
           "allocs %llu, frees %llu)", s == CP_OK ? "ok" : cp_error_msg(),
           (unsigned long long)st.reserved, (unsigned long long)st.device_allocs,
           (unsigned long long)st.device_frees);
        if (s == CP_OK)
            cp_resource_free(r, c, 70u << 20, NULL);
        /* what cannot fit even then is still refused, the pool consistent
         * (its idle chunk given back in the attempt, as PyTorch's cache) */
        s = cp_resource_alloc(r, 120u << 20, NULL, &c);
        cp_resource_stats(r, &st);
        ok(s == CP_ERR_OOM && st.used == 0 && st.reserved <= cap_limit,
           "beyond the device: out of memory (reserved %llu)", (unsigned long long)st.reserved);
        cp_resource_destroy(r);
        ok(cap_used == 0, "everything back to the device");

        /* the same with the chunks freed on two streams whose work is
         * still queued: settled (the device synchronized) and returned */
        {
            cp_stream *s1 = NULL, *s2 = NULL;
            o.reuse = CP_REUSE_EVENT;
            capped.stream_create(&s1, 0, 0);
            capped.stream_create(&s2, 0, 0);
            if (cp_pool_create(&r, &o) == CP_OK) {
                a = b = c = NULL;
                cp_resource_alloc(r, 40u << 20, s1, &a);
                cp_resource_alloc(r, 40u << 20, s2, &b);
                capped.k_spin(10, s1);
                capped.k_spin(10, s2);
                cp_resource_free(r, a, 40u << 20, s1);
                cp_resource_free(r, b, 40u << 20, s2);
                s = cp_resource_alloc(r, 70u << 20, s1, &c);
                cp_resource_stats(r, &st);
                ok(s == CP_OK && st.reserved == (70u << 20) && st.device_frees == 2,
                   "two streams, work queued: served after the idle chunks went back (%s; "
                   "reserved %llu)", s == CP_OK ? "ok" : cp_error_msg(),
                   (unsigned long long)st.reserved);
                if (s == CP_OK)
                    cp_resource_free(r, c, 70u << 20, s1);
                cp_resource_destroy(r);
            } else {
                ok(0, "create: %s", cp_error_msg());
            }
            capped.stream_destroy(s1);
            capped.stream_destroy(s2);
        }
    }
    cp_be = saved;
    {
        /* the policy: only where release_threshold is not given, only the
         * kinds over the block heap */
        static const struct {
            const char *spec;
            uint64_t want;
        } cases[] = {
            {"tlsf", CP_SERVE_KEEP_ALL},      {"caching", CP_SERVE_KEEP_ALL},
            {"freelist", CP_SERVE_KEEP_ALL},  {"tlsf,release_threshold=0", 0},
            {"caching,release_threshold=1GiB", UINT64_C(1) << 30},
            {"vmm", 0},  {"arena", 0},  {"cub", 0},
        };
        int good = 1;
        snprintf(tap_group, sizeof tap_group, "serving policy");
        for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            cp_pool_opts o;
            char kind[16];
            if (cp_pool_spec_parse(cases[k].spec, &o, kind, sizeof kind) != CP_OK)
                good = 0;
            cp_pool_spec_serve(&o);
            if (o.release_threshold != cases[k].want) {
                good = 0;
                printf("# %s: release_threshold %llu\n", cases[k].spec,
                       (unsigned long long)o.release_threshold);
            }
            if (strcmp(cases[k].spec, "vmm") == 0 && o.release_threshold_set)
                good = 0; /* vmm keeps its policy by time */
        }
        ok(good, "cp_pool_spec_serve sets release_threshold only where the spec leaves it, "
           "for freelist, tlsf and caching");
    }
}

static void run_all(const char *backend, int real)
{
    size_t k;
    int u;
    for (k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        for (u = 0; u <= CP_UP_VIRTUAL; u++) {
            snprintf(tap_group, sizeof tap_group, "%s %s/%s", backend, kinds[k], upnames[u]);
            test_random(kinds[k], (cp_upstream_kind)u, CP_REUSE_WAIT);
            if (u == CP_UP_VIRTUAL || u == CP_UP_DEVICE) {
                test_random(kinds[k], (cp_upstream_kind)u, CP_REUSE_STREAM);
                test_random(kinds[k], (cp_upstream_kind)u, CP_REUSE_EVENT);
            }
            test_oom(kinds[k], (cp_upstream_kind)u);
            test_streams(kinds[k], (cp_upstream_kind)u, real, 64u << 10);
            /* big blocks (whole chunks of their own) follow the same rules */
            if (u == CP_UP_VIRTUAL || u == CP_UP_DEVICE)
                test_streams(kinds[k], (cp_upstream_kind)u, real, 80u << 20);
            if (u == CP_UP_DEVICE || u == CP_UP_VIRTUAL || u == CP_UP_PINNED) {
                test_threads(kinds[k], (cp_upstream_kind)u);
                test_misc(kinds[k], (cp_upstream_kind)u);
            }
        }
    }
}

/* kind "bfc" with a memory_limit near 2^64 (the C interface takes any):
 * a request past 2^63 once doubled the region size to 0 and looped for
 * ever; now it is refused (or served) at once. */
static void test_bfc_huge_limit(void)
{
    cp_pool_opts o;
    cp_resource *r = NULL;
    void *p = NULL;
    cp_status st;
    memset(&o, 0, sizeof o);
    o.kind = "bfc";
    o.upstream = CP_UP_VIRTUAL;
    o.grow = 1;
    o.alignment = 256;
    ((cp_bfc_opts *)cp_pool_own(&o))->memory_limit = UINT64_MAX - 255;
    ((cp_bfc_opts *)cp_pool_own(&o))->allow_growth = 1;
    st = cp_pool_create(&r, &o);
    ok(st == CP_OK, "bfc: a pool with memory_limit 2^64 - 256");
    if (st != CP_OK)
        return;
    st = cp_resource_alloc(r, ((size_t)1 << 63) + 1, NULL, &p);
    ok(st == CP_ERR_OOM || st == CP_OK, "bfc: a request past 2^63 ends (refused or served)");
    if (st == CP_OK)
        cp_resource_free(r, p, ((size_t)1 << 63) + 1, NULL);
    st = cp_resource_alloc(r, 4096, NULL, &p);
    ok(st == CP_OK, "bfc: and the pool still serves");
    if (st == CP_OK)
        cp_resource_free(r, p, 4096, NULL);
    cp_resource_destroy(r);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress shows even when piped */
    test_bfc_huge_limit();
    cp_be = &fake_backend;
    test_refusal_retry();
    test_streams_idle("tlsf");
    test_streams_idle("freelist");
    test_streams_idle("caching");
    run_all("fake", 0);
#ifndef TEST_NO_HOST
    cp_be = NULL;
    if (cp_backend_select("host") == CP_OK)
        run_all("host", 1);
    else
        ok(0, "host backend: %s", cp_error_msg());
    /* and on a GPU when there is one (the choice is per process: start over) */
    cp_be = NULL;
    if (cp_backend_select("cuda") == CP_OK)
        run_all("cuda", 1);
    else
        printf("# cuda backend skipped: %s\n", cp_error_msg());
#endif
    return tap_finish();
}
