/*
 * test_frag.c: fragmentation across streams and the cost of stream order,
 * on the fake backend (stream completion under the test's
 * control).  TAP output.
 *
 *  - idle memory next to a block freed on stream A (work pending) stays
 *    usable by stream B: the pool does not grow for B (it did when the
 *    freed block's merge gave the whole idle region A's tag);
 *  - on one stream the freed block still merges with the idle rest of its
 *    chunk (whole chunks come back);
 *  - before the pool grows, blocks kept apart merge once their frees are
 *    complete;
 *  - with reuse=stream a free records no event: a stream's frees share one
 *    event, recorded only when the pool asks about it;
 *  - the vmm pool over the virtual upstream, release_threshold 0: peak
 *    mapped bytes follow the pages live blocks touch.
 */
#include <stdio.h>
#include <string.h>

#include "fake_backend.h"
#include "pool/resource.h"
#include "tap.h"

#define ok tap_ok
#define MiB (UINT64_C(1) << 20)

static cp_resource *pool(const char *kind, cp_upstream_kind up, cp_reuse reuse)
{
    cp_pool_opts o;
    cp_resource *r = NULL;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.upstream = up;
    o.grow = 1;
    o.alignment = 256;
    o.reuse = reuse;
    /* release_threshold 0 given: the vmm pool keeps no idle page (its
     * policy by count, which these cases check; the others ignore it) */
    o.release_threshold_set = 1;
    if (cp_pool_create(&r, &o) != CP_OK)
        ok(0, "%s pool: %s", kind, cp_error_msg());
    return r;
}

static uint64_t reserved(cp_resource *r)
{
    cp_stats st;
    cp_resource_stats(r, &st);
    return st.reserved;
}

static void test_idle_stays_shared(const char *kind, cp_reuse reuse)
{
    cp_stream *a = NULL, *b = NULL;
    cp_resource *r = pool(kind, CP_UP_DEVICE, reuse);
    void *big = NULL, *x = NULL, *y = NULL;
    uint64_t before;
    if (!r)
        return;
    cp_be->stream_create(&a, 0, 0);
    cp_be->stream_create(&b, 0, 0);
    /* B is seen first, with a block in a chunk of its own */
    cp_resource_alloc(r, 4 * MiB, b, &big);
    /* x takes half of a new 2 MiB chunk; the other half is idle */
    cp_resource_alloc(r, 1 * MiB, a, &x);
    cp_be->k_spin(1000, a); /* A's work on x is pending */
    cp_resource_free(r, x, 1 * MiB, a);
    before = reserved(r);
    cp_resource_alloc(r, 1 * MiB, b, &y);
    ok(y != NULL && reserved(r) == before,
       "%s, reuse=%d: B is served from the idle half beside A's pending block "
       "(reserved %llu -> %llu)", kind, (int)reuse, (unsigned long long)before,
       (unsigned long long)reserved(r));
    ok((uintptr_t)y != (uintptr_t)x, "%s: not A's pending block itself", kind);
    cp_resource_free(r, y, 1 * MiB, b);
    cp_resource_free(r, big, 4 * MiB, b);
    fake_complete(a);
    cp_be->device_synchronize();
    cp_resource_destroy(r);
    cp_be->stream_destroy(a);
    cp_be->stream_destroy(b);
}

static void test_single_stream_merges(const char *kind)
{
    cp_resource *r = pool(kind, CP_UP_DEVICE, CP_REUSE_STREAM);
    void *x = NULL, *y = NULL;
    cp_stats st;
    if (!r)
        return;
    cp_resource_alloc(r, 1 * MiB, NULL, &x);
    cp_resource_free(r, x, 1 * MiB, NULL);
    cp_resource_stats(r, &st);
    ok(st.largest_free == st.reserved, "%s, one stream: the freed block merged with the idle "
       "rest of its chunk (largest free %llu of %llu)", kind,
       (unsigned long long)st.largest_free, (unsigned long long)st.reserved);
    cp_resource_alloc(r, 2 * MiB, NULL, &y);
    ok(y == x && reserved(r) == st.reserved, "%s, one stream: the whole chunk serves 2 MiB",
       kind);
    cp_resource_free(r, y, 2 * MiB, NULL);
    cp_resource_destroy(r);
}

/* Blocks kept apart merge before the pool grows, once their frees are
 * complete: a request as large as both parts is served without growth. */
static void test_apart_merged(const char *kind)
{
    cp_stream *a = NULL, *b = NULL;
    cp_resource *r = pool(kind, CP_UP_DEVICE, CP_REUSE_EVENT);
    void *big = NULL, *x = NULL, *y = NULL;
    uint64_t before;
    if (!r)
        return;
    cp_be->stream_create(&a, 0, 0);
    cp_be->stream_create(&b, 0, 0);
    cp_resource_alloc(r, 4 * MiB, b, &big);
    cp_resource_alloc(r, 1 * MiB, a, &x);
    cp_be->k_spin(1000, a);
    cp_resource_free(r, x, 1 * MiB, a);
    fake_complete(a); /* x's free is complete now */
    before = reserved(r);
    cp_resource_alloc(r, 2 * MiB, b, &y);
    ok(y == x && reserved(r) == before, "%s: the pending block and the idle half merged "
       "once the free completed, and serve 2 MiB on B (reserved %llu -> %llu)", kind,
       (unsigned long long)before, (unsigned long long)reserved(r));
    cp_resource_free(r, y, 2 * MiB, b);
    cp_resource_free(r, big, 4 * MiB, b);
    cp_be->device_synchronize();
    cp_resource_destroy(r);
    cp_be->stream_destroy(a);
    cp_be->stream_destroy(b);
}

static void test_no_event_per_free(void)
{
    cp_stream *a = NULL, *b = NULL;
    cp_resource *r = pool("tlsf", CP_UP_DEVICE, CP_REUSE_STREAM);
    void *p[64];
    uint64_t rec;
    int i;
    if (!r)
        return;
    cp_be->stream_create(&a, 0, 0);
    cp_be->stream_create(&b, 0, 0);
    for (i = 0; i < 64; i++)
        cp_resource_alloc(r, 4096, i & 1 ? b : a, &p[i]);
    rec = fake_records;
    for (i = 0; i < 64; i++)
        cp_resource_free(r, p[i], 4096, i & 1 ? b : a);
    ok(fake_records == rec, "reuse=stream: 64 frees on two streams recorded no event (%llu)",
       (unsigned long long)(fake_records - rec));
    /* trim must still know the frees complete: it synchronizes once */
    cp_be->k_spin(1000, a);
    cp_resource_trim(r, 0);
    ok(reserved(r) == 0, "reuse=stream: trim returns every chunk (reserved %llu)",
       (unsigned long long)reserved(r));
    cp_resource_destroy(r);
    cp_be->stream_destroy(a);
    cp_be->stream_destroy(b);
}

static void test_vmm_pages(void)
{
    cp_resource *r = pool("vmm", CP_UP_VIRTUAL, CP_REUSE_STREAM);
    void *a = NULL, *b = NULL, *c = NULL;
    cp_stats st;
    if (!r)
        return;
    cp_resource_alloc(r, 6 * MiB, NULL, &a);  /* pages 0-2 */
    cp_resource_alloc(r, 1024, NULL, &b);     /* page 3 */
    cp_resource_free(r, a, 6 * MiB, NULL);    /* pages 0-2 idle */
    cp_resource_alloc(r, 8 * MiB, NULL, &c);  /* page 3 + 4 more: 3 moved, 1 new */
    cp_resource_stats(r, &st);
    ok(st.page_bytes == 2 * MiB, "vmm over virtual: 2 MiB pages");
    ok(st.reserved == 5 * 2 * MiB && st.reserved_peak == 5 * 2 * MiB,
       "vmm: mapped bytes follow the pages live blocks touch (%llu)",
       (unsigned long long)st.reserved);
    ok(st.maps == 8 && st.unmaps == 3, "vmm: maps %llu, unmaps %llu",
       (unsigned long long)st.maps, (unsigned long long)st.unmaps);
    cp_resource_free(r, c, 8 * MiB, NULL);
    cp_resource_free(r, b, 1024, NULL);
    cp_resource_trim(r, 0);
    ok(reserved(r) == 0, "vmm: trim unmaps every idle page");
    cp_resource_destroy(r);
}

int main(void)
{
    static const char *kinds[] = {"freelist", "tlsf", "caching"};
    size_t k;
    setvbuf(stdout, NULL, _IOLBF, 0);
    cp_be = &fake_backend;
    for (k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        test_idle_stays_shared(kinds[k], CP_REUSE_STREAM);
        test_idle_stays_shared(kinds[k], CP_REUSE_EVENT);
        /* (caching serves 2 MiB from its large segments, never a small one) */
        if (strcmp(kinds[k], "caching") != 0) {
            test_single_stream_merges(kinds[k]);
            test_apart_merged(kinds[k]);
        }
    }
    test_no_event_per_free();
    test_vmm_pages();
    return tap_finish();
}
