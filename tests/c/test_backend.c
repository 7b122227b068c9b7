/*
 * test_backend.c: exercises the whole backend table (backend.h) on the
 * backend that CUPOLA_BACKEND selects ("cuda", "host", or unset: the CUDA
 * one when a device is usable), with no Lua involved.
 *
 * Both backends must pass the same checks: that is what lets experiments
 * written on a laptop mean the same on the GPU.  Output is TAP ("ok N -
 * name"), ending with "# N passed, N failed"; the exit status is non-zero
 * when anything failed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "kernel_body.h"
#include "tap.h"

static const cp_backend *be;
static int on_cuda;

#define OK(cond, name) tap_ok_line((cond) != 0, __LINE__, "%s", (name))
#define OK_ST(call, name) tap_ok_line((call) == CP_OK, __LINE__, "%s", (name))

#define MIB ((size_t)1 << 20)

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* ---- device -------------------------------------------------------------- */

static void test_device(void)
{
    cp_device_info info;
    size_t free_b = 0, total_b = 0;

    OK_ST(be->device_info(&info), "device_info");
    OK(info.name[0] != '\0', "device_info: name");
    OK(info.memory > 0, "device_info: memory");
    OK(info.priority_greatest <= info.priority_least, "device_info: priority range ordered");
    printf("# device: %s, %llu bytes, %d SMs, cc %d.%d, mempools %d, driver %d, runtime %d, "
           "priorities %d..%d\n",
           info.name, (unsigned long long)info.memory, info.sms, info.cc_major, info.cc_minor,
           info.mempools, info.driver, info.runtime, info.priority_least, info.priority_greatest);
    if (on_cuda) {
        OK(info.cc_major >= 8, "device_info: cc >= 8.0 on cuda");
        OK(info.mempools == 1, "device_info: mempools supported on cuda");
        OK(info.runtime >= 13000, "device_info: runtime version");
    }
    OK_ST(be->mem_get_info(&free_b, &total_b), "mem_get_info");
    OK(total_b > 0 && free_b <= total_b, "mem_get_info: 0 < free <= total");
    OK_ST(be->device_synchronize(), "device_synchronize");
}

/* ---- streams and events ----------------------------------------------------- */

static void test_streams(void)
{
    cp_stream *s1 = NULL, *s2 = NULL, *s3 = NULL, *bad = NULL;
    cp_event *start = NULL, *end = NULL, *mark = NULL, *unrec = NULL;
    cp_device_info info;
    uint64_t id1, id2, id3;
    int idle = -1, done = -1;
    float ms = -1.0f;
    void *tiny = NULL;
    cp_status st;
    uint64_t spin_us = 20000;

    OK_ST(be->stream_create(&s1, 0, 0), "stream_create non-blocking");
    OK_ST(be->stream_create(&s2, 0, 1), "stream_create blocking");
    id1 = be->stream_id(s1);
    id2 = be->stream_id(s2);
    OK(id1 != 0 && id2 != 0 && id1 != id2, "stream_id: distinct and non-zero");
    OK(be->stream_id(NULL) == 0, "stream_id(NULL) == 0");
    OK_ST(be->stream_create(&s3, 0, 0), "stream_create third");
    id3 = be->stream_id(s3);
    OK_ST(be->stream_destroy(s3), "stream_destroy");
    s3 = NULL;
    OK_ST(be->stream_create(&s3, 0, 0), "stream_create after destroy");
    OK(be->stream_id(s3) != id3 && be->stream_id(s3) != id1 && be->stream_id(s3) != id2,
       "stream_id: never reused");
    OK_ST(be->stream_destroy(s3), "stream_destroy again");
    /* backend.h leaves destroying NULL open: a no-op or CP_ERR_INVALID */
    st = be->stream_destroy(NULL);
    OK(st == CP_OK || st == CP_ERR_INVALID, "stream_destroy(NULL) is harmless");

    if (be->device_info(&info) == CP_OK) {
        if (info.priority_greatest < info.priority_least) {
            OK_ST(be->stream_create(&s3, info.priority_greatest, 0),
                  "stream_create at the highest priority");
            OK_ST(be->stream_destroy(s3), "stream_destroy high priority");
        } else {
            tap_skip("stream_create at the highest priority", "one priority level only");
            tap_skip("stream_destroy high priority", "one priority level only");
        }
        st = be->stream_create(&bad, info.priority_least + 1000, 0);
        OK(st == CP_ERR_INVALID && !bad, "stream_create: out-of-range priority is CP_ERR_INVALID");
        OK(st == CP_ERR_INVALID && strstr(cp_error_msg(), "priority") != NULL,
           "  and the message names the priority");
        if (st == CP_OK)
            be->stream_destroy(bad);
    }

    OK_ST(be->event_create(&start, 1), "event_create timing");
    OK_ST(be->event_create(&end, 1), "event_create timing 2");
    OK_ST(be->event_create(&mark, 0), "event_create without timing");
    OK_ST(be->event_create(&unrec, 1), "event_create never recorded");
    OK_ST(be->mem_alloc_async(&tiny, 256, s2), "mem_alloc_async tiny on s2");
    OK_ST(be->stream_synchronize(s2), "stream_synchronize s2");

    /* s1: start, spin, end, mark.  s2 waits for mark, then memsets.  The
     * "not yet" checks count only when made before the spin could have
     * ended: a machine busy with other work can delay this thread past a
     * short spin, and they failed then by load alone.  Otherwise everything
     * is waited for and the spin is queued again, four times longer. */
    {
        cp_status st_rec[5], st_q1 = CP_OK, st_d = CP_OK, st_q2 = CP_OK, st_el = CP_OK;
        int idle1 = -1, idle2 = -1, tries;
        for (tries = 0; tries < 4; tries++, spin_us *= 4) {
            double t0 = now_ms();
            st_rec[0] = be->event_record(start, s1);
            st_rec[1] = be->k_spin(spin_us, s1);
            st_rec[2] = be->event_record(end, s1);
            st_rec[3] = be->event_record(mark, s1);
            st_rec[4] = be->stream_wait_event(s2, mark);
            st = be->memset_async(tiny, 0, 256, s2);
            st_q1 = be->stream_query(s1, &idle1);
            st_d = be->event_query(end, &done);
            st_q2 = be->stream_query(s2, &idle2);
            st_el = be->event_elapsed(start, end, &ms);
            if (now_ms() - t0 < 0.8 * (double)spin_us / 1000.0)
                break;
            be->device_synchronize();
        }
        if (tries == 4)
            spin_us /= 4;
        OK(tries < 4, "the checks ran before the spin ended (some try of 4)");
        OK(st_rec[0] == CP_OK, "event_record start");
        OK(st_rec[1] == CP_OK, "k_spin on s1");
        OK(st_rec[2] == CP_OK, "event_record end");
        OK(st_rec[3] == CP_OK, "event_record mark");
        OK(st_rec[4] == CP_OK, "stream_wait_event s2 on mark");
        OK(st == CP_OK, "memset_async on s2 after the wait");
        OK(st_q1 == CP_OK && idle1 == 0, "stream_query: s1 busy while spinning");
        OK(st_d == CP_OK && done == 0, "event_query: end not done yet");
        OK(st_q2 == CP_OK && idle2 == 0, "stream_query: s2 busy (waits on s1)");
        OK(st_el == CP_ERR_NOT_READY, "event_elapsed before completion is CP_ERR_NOT_READY");
    }

    OK_ST(be->stream_synchronize(s2), "stream_synchronize s2");
    OK(be->stream_query(s1, &idle) == CP_OK && idle == 1,
       "s1 idle once s2 is done: s2 waited for s1");
    OK(be->event_query(end, &done) == CP_OK && done == 1, "event_query: end done");
    OK(be->event_query(unrec, &done) == CP_OK && done == 1,
       "event_query: a never-recorded event is complete");
    OK_ST(be->event_synchronize(end), "event_synchronize");
    OK_ST(be->event_elapsed(start, end, &ms), "event_elapsed");
    printf("# spin %llu us measured %.3f ms\n", (unsigned long long)spin_us, (double)ms);
    /* (the upper bound only catches nonsense: a loaded machine stretches a spin) */
    OK(ms >= 0.95f * (float)spin_us / 1000.0f && ms < 30000.0f, "event_elapsed: a spin takes its time");
    OK(be->event_elapsed(start, mark, &ms) == CP_ERR_INVALID,
       "event_elapsed with a non-timing event is CP_ERR_INVALID");
    OK(strstr(cp_error_msg(), "timing") != NULL, "  and the message says timing");
    OK(be->event_elapsed(unrec, end, &ms) == CP_ERR_INVALID,
       "event_elapsed with an unrecorded event is CP_ERR_INVALID");
    OK(strstr(cp_error_msg(), "record") != NULL, "  and the message says recorded");

    /* The legacy default stream (NULL). */
    OK_ST(be->event_record(start, NULL), "event_record on the default stream");
    OK_ST(be->k_spin(100, NULL), "k_spin on the default stream");
    OK_ST(be->event_record(end, NULL), "event_record end on the default stream");
    OK_ST(be->stream_synchronize(NULL), "stream_synchronize(NULL)");
    OK(be->stream_query(NULL, &idle) == CP_OK && idle == 1, "stream_query(NULL) idle");
    OK(be->event_elapsed(start, end, &ms) == CP_OK && ms >= 0.09f, "elapsed on default stream");

    OK_ST(be->mem_free_async(tiny, s2), "mem_free_async tiny");
    OK_ST(be->stream_synchronize(s2), "stream_synchronize s2 after free");
    OK_ST(be->event_destroy(start), "event_destroy");
    OK_ST(be->event_destroy(end), "event_destroy 2");
    OK_ST(be->event_destroy(mark), "event_destroy 3");
    OK_ST(be->event_destroy(unrec), "event_destroy 4");
    st = be->event_destroy(NULL);
    OK(st == CP_OK || st == CP_ERR_INVALID, "event_destroy(NULL) is harmless");
    OK_ST(be->stream_destroy(s1), "stream_destroy s1");
    OK_ST(be->stream_destroy(s2), "stream_destroy s2");
}

/* ---- raw memory and copies ----------------------------------------------------- */

static void test_memory(void)
{
    static const struct {
        cp_memkind kind;
        const char *name;
    } kinds[] = {{CP_MEM_DEVICE, "device"}, {CP_MEM_MANAGED, "managed"}, {CP_MEM_PINNED, "pinned"}};
    const size_t bytes = MIB + 13;
    unsigned char *src = malloc(bytes), *back = malloc(bytes);
    char name[128];
    size_t i;

    if (!src || !back) {
        OK(0, "host buffers for the memory tests");
        free(src);
        free(back);
        return;
    }
    for (i = 0; i < bytes; i++)
        src[i] = (unsigned char)(i * 131u + 7u);

    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        void *p = NULL, *q = NULL;
        snprintf(name, sizeof name, "mem_alloc %s", kinds[i].name);
        OK(be->mem_alloc(&p, bytes, kinds[i].kind) == CP_OK && p, name);
        snprintf(name, sizeof name, "mem_alloc %s (copy target)", kinds[i].name);
        OK(be->mem_alloc(&q, bytes, kinds[i].kind) == CP_OK && q, name);
        if (p && q) {
            memset(back, 0, bytes);
            snprintf(name, sizeof name, "memcpy host -> %s -> %s -> host", kinds[i].name,
                     kinds[i].name);
            OK(be->memcpy_async(p, src, bytes, NULL) == CP_OK &&
                   be->memcpy_async(q, p, bytes, NULL) == CP_OK &&
                   be->memcpy_async(back, q, bytes, NULL) == CP_OK &&
                   be->stream_synchronize(NULL) == CP_OK && memcmp(src, back, bytes) == 0,
               name);
            snprintf(name, sizeof name, "memset_async %s", kinds[i].name);
            OK(be->memset_async(q, 0xab, bytes, NULL) == CP_OK &&
                   be->memset_async((char *)q + 100, 0x11, 7, NULL) == CP_OK &&
                   be->memcpy_async(back, q, bytes, NULL) == CP_OK &&
                   be->stream_synchronize(NULL) == CP_OK && back[0] == 0xab &&
                   back[99] == 0xab && back[100] == 0x11 && back[106] == 0x11 &&
                   back[107] == 0xab && back[bytes - 1] == 0xab,
               name);
        }
        snprintf(name, sizeof name, "mem_free %s", kinds[i].name);
        OK(be->mem_free(p, kinds[i].kind) == CP_OK && be->mem_free(q, kinds[i].kind) == CP_OK,
           name);
    }
    OK_ST(be->mem_free(NULL, CP_MEM_DEVICE), "mem_free(NULL) is a no-op");
    free(src);
    free(back);
}

static void test_oom(void)
{
    const size_t absurd = (size_t)1 << 50;
    void *p = NULL;
    cp_scalar sum;
    cp_stream *s = NULL;

    OK(be->mem_alloc(&p, absurd, CP_MEM_DEVICE) == CP_ERR_OOM && !p,
       "mem_alloc device 1 PiB is CP_ERR_OOM");
    OK(cp_error_msg()[0] != '\0', "  with a message");
    if (on_cuda)
        OK(strstr(cp_error_msg(), "cudaErrorMemoryAllocation") != NULL,
           "  naming cudaErrorMemoryAllocation");
    OK(be->mem_alloc(&p, absurd, CP_MEM_PINNED) == CP_ERR_OOM && !p,
       "mem_alloc pinned 1 PiB is CP_ERR_OOM");
    OK_ST(be->stream_create(&s, 0, 0), "stream_create for oom");
    OK(be->mem_alloc_async(&p, absurd, s) == CP_ERR_OOM && !p,
       "mem_alloc_async 1 PiB is CP_ERR_OOM");
    /* The failure must not poison what comes next (CUDA's last error). */
    OK(be->mem_alloc_async(&p, MIB, s) == CP_OK && p, "mem_alloc_async after an OOM");
    OK(be->k_fill(p, MIB / 4, CP_U32, (cp_scalar){.u = 3}, NULL, s) == CP_OK &&
           be->k_checksum(p, MIB, CP_U32, NULL, s, &sum) == CP_OK && sum.u == 3u * (MIB / 4),
       "kernels run after an OOM");
    OK_ST(be->mem_free_async(p, s), "mem_free_async after an OOM");
    OK_ST(be->stream_synchronize(s), "stream_synchronize after an OOM");
    OK_ST(be->stream_destroy(s), "stream_destroy after an OOM");
}

static void test_async_alloc(void)
{
    cp_stream *s = NULL;
    void *a = NULL, *b = NULL;
    cp_scalar sum;
    const size_t bytes = 4 * MIB;

    OK_ST(be->stream_create(&s, 0, 0), "stream_create for async alloc");
    OK(be->mem_alloc_async(&a, bytes, s) == CP_OK && a, "mem_alloc_async 4 MiB");
    OK(be->mem_alloc_async(&b, bytes, s) == CP_OK && b && b != a, "mem_alloc_async another");
    OK_ST(be->k_fill(a, bytes / 4, CP_U32, (cp_scalar){.u = 7}, NULL, s), "fill the first");
    OK_ST(be->memcpy_async(b, a, bytes, s), "copy to the second, stream-ordered");
    OK(be->k_checksum(b, bytes, CP_U32, NULL, s, &sum) == CP_OK && sum.u == 7u * (bytes / 4),
       "checksum of the copy");
    OK_ST(be->mem_free_async(a, s), "mem_free_async");
    OK_ST(be->mem_free_async(b, s), "mem_free_async 2");
    OK_ST(be->mem_free_async(NULL, s), "mem_free_async(NULL) is a no-op");
    OK_ST(be->stream_synchronize(s), "stream_synchronize after frees");
    OK_ST(be->stream_destroy(s), "stream_destroy");
}

/* ---- native pools --------------------------------------------------------------- */

static uint64_t attr(cp_mempool *p, cp_pool_attr a)
{
    uint64_t v = UINT64_MAX;
    if (be->mempool_get_attr(p, a, &v) != CP_OK)
        return UINT64_MAX;
    return v;
}

static void test_pools(void)
{
    cp_mempool *def = NULL, *cur = NULL, *pool = NULL, *limited = NULL, *hostp = NULL;
    cp_mempool_props props = {0, 0, 0, 0};
    cp_stream *s = NULL;
    void *p = NULL, *q = NULL;
    const size_t bytes = 8 * MIB;
    cp_scalar sum;
    cp_status st;

    OK(be->mempool_default(&def) == CP_OK && def, "mempool_default");
    OK(be->mempool_default(&cur) == CP_OK && cur == def, "mempool_default is a singleton");
    OK(be->mempool_get_current(&cur) == CP_OK && cur == def, "get_current is the default");
    OK(be->mempool_destroy(def) == CP_ERR_INVALID, "destroying the default pool is refused");

    OK_ST(be->stream_create(&s, 0, 0), "stream_create for pools");
    OK(be->mempool_create(&pool, &props) == CP_OK && pool, "mempool_create device");
    OK(attr(pool, CP_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES) == 1 &&
           attr(pool, CP_POOL_REUSE_ALLOW_OPPORTUNISTIC) == 1 &&
           attr(pool, CP_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES) == 1,
       "reuse attributes default to 1");
    OK(be->mempool_set_attr(pool, CP_POOL_REUSE_ALLOW_OPPORTUNISTIC, 0) == CP_OK &&
           attr(pool, CP_POOL_REUSE_ALLOW_OPPORTUNISTIC) == 0 &&
           be->mempool_set_attr(pool, CP_POOL_REUSE_ALLOW_OPPORTUNISTIC, 1) == CP_OK,
       "set/get reuse_allow_opportunistic");
    OK(attr(pool, CP_POOL_RELEASE_THRESHOLD) == 0, "release_threshold defaults to 0");
    OK(attr(pool, CP_POOL_USED_MEM_CURRENT) == 0 && attr(pool, CP_POOL_RESERVED_MEM_CURRENT) == 0,
       "a new pool is empty");

    /* threshold 0: what is freed goes back at the next synchronization */
    OK(be->mempool_alloc(pool, &p, bytes, s) == CP_OK && p, "mempool_alloc 8 MiB");
    OK_ST(be->stream_synchronize(s), "sync after alloc");
    OK(attr(pool, CP_POOL_USED_MEM_CURRENT) >= bytes, "used_current >= 8 MiB");
    OK(attr(pool, CP_POOL_RESERVED_MEM_CURRENT) >= attr(pool, CP_POOL_USED_MEM_CURRENT),
       "reserved_current >= used_current");
    OK(be->k_fill(p, bytes / 8, CP_F64, (cp_scalar){.f = 0.5}, NULL, s) == CP_OK &&
           be->k_checksum(p, bytes, CP_F64, NULL, s, &sum) == CP_OK &&
           sum.f == 0.5 * (double)(bytes / 8),
       "pool memory is usable by kernels");
    OK_ST(be->mem_free_async(p, s), "mem_free_async frees a pool block");
    OK_ST(be->stream_synchronize(s), "sync after free");
    OK(attr(pool, CP_POOL_USED_MEM_CURRENT) == 0, "used_current back to 0");
    OK(attr(pool, CP_POOL_USED_MEM_HIGH) >= bytes, "used_high remembers 8 MiB");
    OK(attr(pool, CP_POOL_RESERVED_MEM_HIGH) >= bytes, "reserved_high remembers 8 MiB");

    /* threshold max: the pool keeps its memory until trimmed */
    OK(be->mempool_set_attr(pool, CP_POOL_RELEASE_THRESHOLD, UINT64_MAX) == CP_OK &&
           attr(pool, CP_POOL_RELEASE_THRESHOLD) == UINT64_MAX,
       "set release_threshold to max");
    OK(be->mempool_alloc(pool, &p, bytes, s) == CP_OK && be->mem_free_async(p, s) == CP_OK &&
           be->stream_synchronize(s) == CP_OK,
       "alloc, free, sync with threshold max");
    OK(attr(pool, CP_POOL_RESERVED_MEM_CURRENT) >= bytes, "the pool keeps its reservation");
    OK_ST(be->mempool_trim(pool, 0), "mempool_trim to 0");
    OK_ST(be->stream_synchronize(s), "sync after trim");
    OK(attr(pool, CP_POOL_RESERVED_MEM_CURRENT) == 0, "reserved_current 0 after trim");

    OK(be->mempool_set_attr(pool, CP_POOL_USED_MEM_HIGH, 5) == CP_ERR_INVALID,
       "set used_high to non-zero is refused");
    OK(be->mempool_set_attr(pool, CP_POOL_USED_MEM_HIGH, 0) == CP_OK &&
           attr(pool, CP_POOL_USED_MEM_HIGH) == attr(pool, CP_POOL_USED_MEM_CURRENT),
       "reset used_high to the current value");
    OK(be->mempool_set_attr(pool, CP_POOL_RESERVED_MEM_HIGH, 0) == CP_OK &&
           attr(pool, CP_POOL_RESERVED_MEM_HIGH) == attr(pool, CP_POOL_RESERVED_MEM_CURRENT),
       "reset reserved_high to the current value");
    OK(be->mempool_set_attr(pool, CP_POOL_RESERVED_MEM_CURRENT, 0) == CP_ERR_INVALID &&
           be->mempool_set_attr(pool, CP_POOL_USED_MEM_CURRENT, 0) == CP_ERR_INVALID,
       "current values are read-only");
    OK(be->mempool_get_attr(pool, CP_POOL_ATTR_COUNT, &(uint64_t){0}) == CP_ERR_INVALID,
       "an unknown attribute is CP_ERR_INVALID");

    /* the current pool serves mem_alloc_async */
    OK_ST(be->mempool_set_current(pool), "mempool_set_current");
    OK(be->mempool_get_current(&cur) == CP_OK && cur == pool, "get_current returns that pool");
    OK(be->mem_alloc_async(&q, MIB, s) == CP_OK && be->stream_synchronize(s) == CP_OK &&
           attr(pool, CP_POOL_USED_MEM_CURRENT) >= MIB,
       "mem_alloc_async draws from the current pool");
    OK(be->mem_free_async(q, s) == CP_OK && be->stream_synchronize(s) == CP_OK &&
           attr(pool, CP_POOL_USED_MEM_CURRENT) == 0,
       "mem_free_async returns it");
    OK_ST(be->mempool_set_current(def), "set the default back");
    OK(be->mempool_get_current(&cur) == CP_OK && cur == def, "get_current is the default again");
    OK_ST(be->mempool_destroy(pool), "mempool_destroy");

    /* max_size */
    props.max_size = 32 * MIB;
    OK(be->mempool_create(&limited, &props) == CP_OK && limited, "mempool_create max 32 MiB");
    if (limited) {
        p = NULL;
        OK(be->mempool_alloc(limited, &p, 64 * MIB, s) == CP_ERR_OOM && !p,
           "64 MiB from a 32 MiB pool is CP_ERR_OOM");
        OK(be->mempool_alloc(limited, &p, 4 * MIB, s) == CP_OK && p,
           "4 MiB from it after the OOM");
        OK(be->mem_free_async(p, s) == CP_OK && be->stream_synchronize(s) == CP_OK,
           "free and sync");
        OK_ST(be->mempool_destroy(limited), "mempool_destroy limited");
    }

    /* host location */
    props.max_size = 0;
    props.location_host = 1;
    st = be->mempool_create(&hostp, &props);
    if (st == CP_ERR_UNSUPPORTED) {
        tap_skip("mempool_create host", cp_error_msg());
    } else {
        OK(st == CP_OK && hostp, "mempool_create host");
        if (hostp) {
            OK(be->mempool_alloc(hostp, &p, MIB, s) == CP_OK && p, "alloc from the host pool");
            OK(be->k_fill(p, MIB, CP_U8, (cp_scalar){.u = 2}, NULL, s) == CP_OK &&
                   be->k_checksum(p, MIB, CP_U8, NULL, s, &sum) == CP_OK && sum.u == 2u * MIB,
               "kernels on host-pool memory");
            OK(((unsigned char *)p)[MIB - 1] == 2, "host-pool memory is readable by the CPU");
            OK(be->mem_free_async(p, s) == CP_OK && be->stream_synchronize(s) == CP_OK,
               "free to the host pool");
            OK(be->mempool_set_current(hostp) == CP_ERR_INVALID,
               "a host pool cannot be the device's current pool");
            OK_ST(be->mempool_destroy(hostp), "mempool_destroy host");
        }
    }
    props.handle_posix_fd = 1;
    hostp = NULL;
    OK(be->mempool_create(&hostp, &props) == CP_ERR_INVALID && !hostp,
       "a host pool with posix fd handles is CP_ERR_INVALID");
    OK_ST(be->stream_destroy(s), "stream_destroy for pools");
}

/* ---- kernels -------------------------------------------------------------------- */

static void test_fill_checksum(void)
{
    const size_t count = 1000003; /* odd: not a multiple of any block */
    const cp_shape odd = {7, 100};
    cp_stream *s = NULL;
    void *p = NULL;
    cp_scalar sum, sum2;
    cp_shape bad = {0, 2000};

    OK_ST(be->stream_create(&s, 0, 0), "stream_create for kernels");
    OK(be->mem_alloc_async(&p, count * 8, s) == CP_OK && p, "mem_alloc_async for kernels");
    if (!p)
        return;

    OK(be->k_fill(p, count, CP_F32, (cp_scalar){.f = 1.5}, NULL, s) == CP_OK &&
           be->k_checksum(p, count * 4, CP_F32, NULL, s, &sum) == CP_OK &&
           sum.f == 1.5 * (double)count,
       "fill f32 1.5, checksum");
    OK(be->k_fill(p, count, CP_F64, (cp_scalar){.f = -0.25}, NULL, s) == CP_OK &&
           be->k_checksum(p, count * 8, CP_F64, NULL, s, &sum) == CP_OK &&
           sum.f == -0.25 * (double)count,
       "fill f64 -0.25, checksum");
    OK(be->k_fill(p, count, CP_I32, (cp_scalar){.i = -3}, NULL, s) == CP_OK &&
           be->k_checksum(p, count * 4, CP_I32, NULL, s, &sum) == CP_OK &&
           sum.i == -3 * (int64_t)count,
       "fill i32 -3, checksum (sign-extended)");
    OK(be->k_fill(p, count, CP_U32, (cp_scalar){.u = 0xffffffffu}, NULL, s) == CP_OK &&
           be->k_checksum(p, count * 4, CP_U32, NULL, s, &sum) == CP_OK &&
           sum.u == 0xffffffffull * count,
       "fill u32 0xffffffff, checksum");
    OK(be->k_fill(p, count, CP_U8, (cp_scalar){.u = 200}, NULL, s) == CP_OK &&
           be->k_checksum(p, count, CP_U8, NULL, s, &sum) == CP_OK &&
           sum.u == 200ull * count,
       "fill u8 200, checksum");
    /* a byte count that is not a multiple of the element size: the tail is
     * not an element */
    OK(be->k_fill(p, count, CP_U32, (cp_scalar){.u = 1}, NULL, s) == CP_OK &&
           be->k_checksum(p, 4 * 10 + 3, CP_U32, NULL, s, &sum) == CP_OK && sum.u == 10,
       "checksum counts whole elements only");
    OK(be->k_checksum(p, 0, CP_F64, NULL, s, &sum) == CP_OK && sum.f == 0.0,
       "checksum of 0 bytes is 0");

    OK(be->k_fill(p, count, CP_I32, (cp_scalar){.i = 5}, &odd, s) == CP_OK &&
           be->k_checksum(p, count * 4, CP_I32, &odd, s, &sum) == CP_OK &&
           sum.i == 5 * (int64_t)count,
       "fill and checksum with grid 7, block 100");
    OK(be->k_fill(p, count, CP_I32, (cp_scalar){.i = 1}, &bad, s) == CP_ERR_INVALID,
       "block 2000 is CP_ERR_INVALID");
    OK(strstr(cp_error_msg(), "block") != NULL, "  and the message says block");
    OK(be->k_checksum(p, 4, (cp_dtype)CP_DTYPE_COUNT, NULL, s, &sum) == CP_ERR_INVALID,
       "an unknown dtype is CP_ERR_INVALID");

    OK(be->k_sqrt_index(p, count, NULL, s) == CP_OK &&
           be->k_checksum(p, count * 4, CP_F32, NULL, s, &sum) == CP_OK &&
           be->k_checksum(p, count * 4, CP_F32, NULL, s, &sum2) == CP_OK &&
           memcmp(&sum.f, &sum2.f, sizeof sum.f) == 0,
       "float checksum is deterministic");

    OK_ST(be->mem_free_async(p, s), "mem_free_async kernels buffer");
    OK_ST(be->stream_synchronize(s), "stream_synchronize kernels");
    OK_ST(be->stream_destroy(s), "stream_destroy kernels");
}

static void test_sqrt_index(void)
{
    const size_t n = (size_t)1 << 20;
    float *d = NULL, *h = malloc(n * sizeof *h);
    double want = 0.0;
    cp_scalar sum;
    size_t i, wrong = 0;

    OK(h != NULL, "host buffer for sqrt_index");
    OK(be->mem_alloc((void **)&d, n * sizeof *d, CP_MEM_DEVICE) == CP_OK && d,
       "mem_alloc for sqrt_index");
    if (!h || !d) {
        free(h);
        return;
    }
    OK_ST(be->k_sqrt_index(d, n, NULL, NULL), "k_sqrt_index 1M");
    OK_ST(be->k_checksum(d, n * sizeof *d, CP_F32, NULL, NULL, &sum), "checksum f32");
    for (i = 0; i < n; i++)
        want += (double)cp_body_sqrt_index(i);
    printf("# sqrt_index checksum %.17g, CPU %.17g\n", sum.f, want);
    OK(fabs(sum.f - want) <= 1e-9 * want, "sqrt_index checksum matches the CPU sum");
    OK(be->memcpy_async(h, d, n * sizeof *d, NULL) == CP_OK &&
           be->stream_synchronize(NULL) == CP_OK,
       "copy sqrt_index back");
    for (i = 0; i < n; i++)
        if (memcmp(&h[i], &(float){cp_body_sqrt_index(i)}, sizeof(float)) != 0)
            wrong++;
    OK(wrong == 0, "sqrt_index bit-identical to the shared body");
    OK_ST(be->mem_free(d, CP_MEM_DEVICE), "mem_free sqrt_index");
    free(h);
}

static void test_pattern(void)
{
    const size_t bytes = MIB + 13;
    const uint64_t seed = 42;
    unsigned char *d = NULL, *h = malloc(bytes);
    cp_stream *s = NULL;
    uint64_t bad = UINT64_MAX;
    size_t i, wrong = 0;

    OK_ST(be->stream_create(&s, 0, 0), "stream_create for pattern");
    OK(h && be->mem_alloc_async((void **)&d, bytes, s) == CP_OK && d, "buffers for pattern");
    if (!h || !d) {
        free(h);
        return;
    }
    OK_ST(be->k_pattern(d, bytes, seed, s), "k_pattern");
    OK(be->k_verify(d, bytes, seed, s, &bad) == CP_OK && bad == 0, "verify: 0 bad bytes");
    OK(be->memcpy_async(h, d, bytes, s) == CP_OK && be->stream_synchronize(s) == CP_OK,
       "copy the pattern back");
    for (i = 0; i < bytes; i++)
        wrong += h[i] != cp_body_pattern_byte(seed, i);
    OK(wrong == 0, "pattern bytes match the shared body");
    OK(be->memset_async(d + 777, cp_body_pattern_byte(seed, 777) ^ 0xff, 1, s) == CP_OK &&
           be->k_verify(d, bytes, seed, s, &bad) == CP_OK && bad == 1,
       "one corrupted byte: verify says 1");
    OK(be->k_verify(d, bytes, seed + 1, s, &bad) == CP_OK && bad > bytes / 2,
       "another seed: most bytes differ");
    OK(be->k_verify(d, 0, seed, s, &bad) == CP_OK && bad == 0, "verify of 0 bytes is 0");
    OK_ST(be->mem_free_async(d, s), "mem_free_async pattern");
    OK_ST(be->stream_synchronize(s), "stream_synchronize pattern");
    OK_ST(be->stream_destroy(s), "stream_destroy pattern");
    free(h);
}

int main(void)
{
    const char *force = getenv("CUPOLA_BACKEND");
    cp_status st = cp_backend_select(force);

    OK(st == CP_OK && cp_be != NULL, "cp_backend_select");
    if (st != CP_OK || !cp_be) {
        printf("# %s\n", cp_error_msg());
        return tap_finish();
    }
    be = cp_be;
    on_cuda = strcmp(be->name, "cuda") == 0;
    printf("# backend: %s\n", be->name);

    test_device();
    test_streams();
    test_memory();
    test_oom();
    test_async_alloc();
    test_pools();
    test_fill_checksum();
    test_sqrt_index();
    test_pattern();
    OK_ST(be->device_synchronize(), "device_synchronize at the end");

    return tap_finish();
}
