/*
 * test_trace.c: trace loading and replay (TAP output).
 *
 *  - the three shared traces (directory $CUPOLA_TRACES, default
 *    examples/traces from the repository root) load with the counts and
 *    peak live bytes their README gives, and replay on every pool kind;
 *  - malformed inputs, written to temporary files, fail with the file, the
 *    line number and the reason;
 *  - plain and gzip files read the same; a truncated gzip is an error;
 *  - the log adaptor's CSV loads back; failed allocations are counted;
 *  - a trace made from events in memory (cp_trace_from_events) has the
 *    figures and rows of the same events read from a CSV, and the builder's
 *    checks, naming the event.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "fake_backend.h"
#include "pool/resource.h"
#include "tap.h"
#include "trace/trace.h"

#define ok tap_ok

static char tmpdir[256];

static const char *write_tmp(const char *name, const char *text)
{
    static char path[512];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

#define HDR "Thread,Time,Action,Pointer,Size,Stream\n"

/* Loads text; expects failure with every needle in the message. */
static void expect_error(const char *name, const char *text, const char *n1, const char *n2)
{
    cp_trace *t = NULL;
    const char *path = write_tmp(name, text);
    cp_status st = cp_trace_load(path, &t);
    const char *msg = cp_error_msg();
    ok(st == CP_ERR_INVALID && t == NULL && strstr(msg, n1) && (!n2 || strstr(msg, n2)),
       "%s: %s", name, msg);
    cp_trace_free(t);
}

static cp_resource *pool(const char *kind, uint64_t max)
{
    cp_pool_opts o;
    cp_resource *r = NULL;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.upstream = CP_UP_VIRTUAL;
    o.grow = 1;
    o.alignment = 256;
    o.max = max;
    if (cp_pool_create(&r, &o) != CP_OK)
        printf("# pool: %s\n", cp_error_msg());
    return r;
}

static void shared_traces(void)
{
    static const struct {
        const char *name;
        size_t events, allocs, frees;
        uint64_t peak;
    } tr[] = {
        {"resnet50_train.csv.gz", 5073, 2538, 2535, 5830299792ull},
        {"gpt2_train.csv.gz", 9486, 4743, 4743, 8044901064ull},
        {"t5_train_varlen.csv.gz", 44356, 22179, 22177, 4854130272ull},
    };
    static const char *kinds[] = {"arena", "freelist", "tlsf", "caching"};
    const char *dir = getenv("CUPOLA_TRACES");
    size_t i, k;
    if (!dir || !*dir)
        dir = "examples/traces";
    for (i = 0; i < 3; i++) {
        char path[1024];
        cp_trace *t = NULL;
        cp_trace_info info;
        cp_trace_row row;
        snprintf(path, sizeof path, "%s/%s", dir, tr[i].name);
        if (cp_trace_load(path, &t) != CP_OK) {
            ok(0, "%s loads: %s", tr[i].name, cp_error_msg());
            continue;
        }
        cp_trace_info_get(t, &info);
        ok(cp_trace_events(t) == tr[i].events && info.allocs == tr[i].allocs &&
               info.frees == tr[i].frees,
           "%s: %zu events, %zu allocations, %zu frees", tr[i].name, cp_trace_events(t),
           info.allocs, info.frees);
        ok(info.peak_live == tr[i].peak, "%s: peak live %llu bytes (README: %llu)",
           tr[i].name, (unsigned long long)info.peak_live, (unsigned long long)tr[i].peak);
        ok(info.streams == 1 && info.threads == 1 && info.leaked == tr[i].allocs - tr[i].frees,
           "%s: one stream, one thread, %zu blocks never freed", tr[i].name, info.leaked);
        ok(cp_trace_event(t, 0, &row) == CP_OK && !row.is_free && row.size > 0 &&
               cp_trace_event(t, cp_trace_events(t), &row) == CP_ERR_INVALID,
           "%s: rows readable, out of range refused", tr[i].name);
        for (k = 0; k < 4; k++) {
            cp_resource *r = pool(kinds[k], 0);
            cp_replay_result res;
            cp_stats st;
            if (!r) {
                ok(0, "%s pool", kinds[k]);
                continue;
            }
            cp_status s = cp_trace_replay(t, r, NULL, &res);
            cp_resource_stats(r, &st);
            ok(s == CP_OK && res.failed == 0 && res.events == tr[i].events &&
                   res.peak_live == tr[i].peak && res.reserved_over_live >= 1.0 &&
                   st.used == 0 && st.allocs == st.frees,
               "%s on %s: replayed, reserved/live %.4f, %.1f ns/event, pool left empty",
               tr[i].name, kinds[k], res.reserved_over_live, res.ns_per_event);
            cp_resource_destroy(r);
        }
        /* A pool capped at half the peak refuses some requests; the replay
         * goes on and skips the frees of what it could not allocate. */
        {
            cp_resource *r = pool("tlsf", tr[i].peak / 2);
            cp_replay_result res;
            cp_status s = cp_trace_replay(t, r, NULL, &res);
            ok(s == CP_OK && res.failed > 0 && res.skipped_frees <= res.failed &&
                   res.peak_reserved <= tr[i].peak / 2,
               "%s capped at half its peak: %llu failed, replay completed", tr[i].name,
               (unsigned long long)res.failed);
            cp_resource_destroy(r);
        }
        cp_trace_free(t);
    }
}

static void malformed(void)
{
    char big[2048];
    expect_error("header.csv", "Thread,Time,Action,Pointer,Size\n0,1,allocate,0x10,5,0x0\n",
                 "header.csv:1:", "header");
    expect_error("empty.csv", "", "empty.csv:1:", "empty");
    expect_error("action.csv", HDR "0,1.0,allocate,0x100,16,0x0\n0,2.0,alloc,0x200,16,0x0\n",
                 "action.csv:3:", "action");
    expect_error("hex.csv", HDR "0,1.0,allocate,0xZZ10,16,0x0\n", "hex.csv:2:",
                 "pointer is not a hexadecimal");
    expect_error("stream.csv", HDR "0,1.0,allocate,0x10,16,0xq\n", "stream.csv:2:",
                 "stream is not a hexadecimal");
    expect_error("size.csv", HDR "0,1.0,allocate,0x10,sixteen,0x0\n", "size.csv:2:",
                 "size is not a number");
    expect_error("time.csv", HDR "0,1.0,allocate,0x10,16,0x0\n0,abc,free,0x10,16,0x0\n",
                 "time.csv:3:", "time is not a number");
    expect_error("columns.csv", HDR "0,1.0,allocate,0x10,16\n", "columns.csv:2:",
                 "expected 6 columns");
    expect_error("extra.csv", HDR "0,1.0,allocate,0x10,16,0x0,7\n", "extra.csv:2:",
                 "6 columns");
    expect_error("unknown.csv",
                 HDR "0,1.0,allocate,0x100,16,0x0\n0,2.0,free,0x100,16,0x0\n"
                     "0,3.0,free,0x100,16,0x0\n",
                 "unknown.csv:4:", "not live");
    expect_error("twice.csv", HDR "0,1.0,allocate,0x100,16,0x0\n0,2.0,allocate,0x100,8,0x0\n",
                 "twice.csv:3:", "already live");
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    {
        char *text = malloc(sizeof big + 64);
        snprintf(text, sizeof big + 64, HDR "%s\n", big);
        expect_error("long.csv", text, "long.csv:2:", "too long");
        free(text);
    }
    {
        cp_trace *t = NULL;
        cp_status st = cp_trace_load("/nonexistent/trace.csv", &t);
        ok(st == CP_ERR_BACKEND && strstr(cp_error_msg(), "/nonexistent/trace.csv"),
           "missing file: %s", cp_error_msg());
    }
}

static void gzip_files(void)
{
    char plain[512], gzp[512], trunc[512];
    gzFile g;
    FILE *f;
    int i;
    cp_trace *a = NULL, *b = NULL, *c = NULL;
    cp_trace_info ia, ib;
    char *buf;
    long n;

    snprintf(plain, sizeof plain, "%s/many.csv", tmpdir);
    snprintf(gzp, sizeof gzp, "%s/many.csv.gz", tmpdir);
    snprintf(trunc, sizeof trunc, "%s/trunc.csv.gz", tmpdir);
    f = fopen(plain, "w");
    g = gzopen(gzp, "wb");
    fputs(HDR, f);
    gzputs(g, HDR);
    for (i = 0; i < 20000; i++) {
        char line[128];
        snprintf(line, sizeof line, "0,%d.5,allocate,0x%x,%d,0x0\r\n0,%d.7,free,0x%x,%d,0x0\n",
                 i, 0x1000 + (i % 7) * 0x100, 256 * (1 + i % 5), i, 0x1000 + (i % 7) * 0x100,
                 256 * (1 + i % 5));
        fputs(line, f);
        gzputs(g, line);
    }
    fclose(f);
    gzclose(g);
    ok(cp_trace_load(plain, &a) == CP_OK && cp_trace_load(gzp, &b) == CP_OK,
       "plain and gzip (CRLF lines) load");
    if (a && b) {
        cp_trace_info_get(a, &ia);
        cp_trace_info_get(b, &ib);
        ok(ia.events == 40000 && ib.events == 40000 && ia.peak_live == ib.peak_live,
           "plain and gzip read the same (%zu events)", ib.events);
    }
    cp_trace_free(a);
    cp_trace_free(b);
    /* the first half of the gzip file */
    f = fopen(gzp, "rb");
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n)
        n = 0;
    fclose(f);
    f = fopen(trunc, "wb");
    fwrite(buf, 1, (size_t)n / 2, f);
    fclose(f);
    free(buf);
    ok(cp_trace_load(trunc, &c) == CP_ERR_INVALID && strstr(cp_error_msg(), "trunc.csv.gz:") &&
           strstr(cp_error_msg(), "gzip"),
       "truncated gzip: %s", cp_error_msg());
    cp_trace_free(c);
}

static void log_roundtrip(void)
{
    char path[512];
    cp_resource *r = pool("tlsf", 0), *l = NULL;
    void *p[100];
    int i;
    cp_trace *t = NULL;
    cp_trace_info info;
    snprintf(path, sizeof path, "%s/log.csv", tmpdir);
    if (!r || cp_log_adaptor(&l, r, path) != CP_OK) {
        ok(0, "log adaptor: %s", cp_error_msg());
        return;
    }
    for (i = 0; i < 100; i++)
        cp_resource_alloc(l, (size_t)(1000 + i * 100), NULL, &p[i]);
    for (i = 0; i < 100; i += 2)
        cp_resource_free(l, p[i], (size_t)(1000 + i * 100), NULL);
    cp_resource_destroy(l);
    ok(cp_trace_load(path, &t) == CP_OK, "log adaptor's CSV loads back");
    if (t) {
        cp_trace_info_get(t, &info);
        ok(info.allocs == 100 && info.frees == 50 && info.leaked == 50,
           "log adaptor: 100 allocations, 50 frees logged");
    }
    cp_trace_free(t);
}

static void streams_replay(void)
{
    cp_trace *t = NULL;
    cp_resource *r;
    cp_replay_result res;
    const char *path = write_tmp("streams.csv",
                                 HDR "0,1,allocate,0x1000,4096,0x0\n"
                                     "0,2,allocate,0x2000,4096,0x7f01\n"
                                     "1,3,allocate,0x3000,4096,0x7f02\n"
                                     "0,4,free,0x1000,4096,0x7f01\n"
                                     "1,5,free,0x3000,4096,0x7f02\n"
                                     "0,6,free,0x2000,4096,0x0\n");
    if (cp_trace_load(path, &t) != CP_OK) {
        ok(0, "streams trace: %s", cp_error_msg());
        return;
    }
    cp_be = &fake_backend;
    r = pool("tlsf", 0);
    ok(cp_trace_replay(t, r, NULL, &res) == CP_OK && res.events == 6 && res.failed == 0 &&
           res.peak_live == 3 * 4096,
       "three trace streams replayed on their own cp_streams");
    cp_resource_destroy(r);
    cp_trace_free(t);
    cp_be = NULL;
}

/* cp_trace_from_events: the same rows and figures as the CSV of the same
 * events (one builder), labels and devices kept, the checks named by event. */
static void from_events(void)
{
    static const cp_trace_event_in ev[] = {
        {0, 0x1000, 4096, 0, 1.0, "a.py:3 f\n\na.py:3 f", 0},
        {0, 0x3000, 100, 7, 2.5, NULL, 0},
        {1, 0x1000, 0, 0, 3.0, NULL, 0},
        {0, 0x1000, 512, 7, 4.0, "a.py:3 f\n\na.py:3 f", 1},
        {1, 0x3000, 0, 7, 5.0, NULL, 0},
    };
    const char *csv = write_tmp("events.csv", HDR "0,1.0,allocate,0x1000,4096,0x0\n"
                                              "0,2.5,allocate,0x3000,100,0x7\n"
                                              "0,3.0,free,0x1000,,0x0\n"
                                              "1,4.0,allocate,0x1000,512,0x7\n"
                                              "0,5.0,free,0x3000,,0x7\n");
    cp_trace *t = NULL, *c = NULL;
    cp_trace_info a, b;
    cp_trace_row r0, r3;
    cp_replay_result ra, rb;
    cp_resource *pa, *pb;
    int same = 1;
    size_t i;
    ok(cp_trace_from_events("predicted", "scaled", ev, 5, &t) == CP_OK && t, "events: built");
    ok(cp_trace_load(csv, &c) == CP_OK, "events: the CSV of them loads");
    if (!t || !c) {
        cp_trace_free(t);
        cp_trace_free(c);
        return;
    }
    cp_trace_info_get(t, &a);
    cp_trace_info_get(c, &b);
    ok(a.events == b.events && a.allocs == b.allocs && a.frees == b.frees &&
           a.streams == b.streams && a.leaked == b.leaked && a.peak_live == b.peak_live &&
           a.total_bytes == b.total_bytes && a.max_size == b.max_size &&
           a.duration_us == b.duration_us && a.devices == 2 && a.threads == 2,
       "events: the CSV's figures (devices %zu, threads %zu)", a.devices, a.threads);
    for (i = 0; i < 5; i++) {
        cp_trace_row x, y;
        cp_trace_event(t, i, &x);
        cp_trace_event(c, i, &y);
        same = same && x.is_free == y.is_free && x.pointer == y.pointer && x.size == y.size &&
               x.stream == y.stream && x.time_us == y.time_us;
    }
    ok(same, "events: the CSV's rows (free sizes taken from their allocations)");
    cp_trace_event(t, 0, &r0);
    cp_trace_event(t, 3, &r3);
    ok(r0.label && r3.label == r0.label && strcmp(r0.label, "a.py:3 f\n\na.py:3 f") == 0 &&
           r3.device == 1 && r0.device == 0,
       "events: labels interned once, devices kept");
    ok(strcmp(cp_trace_format(t), "scaled") == 0 && strcmp(cp_trace_path(t), "predicted") == 0,
       "events: the format and name given");
    pa = pool("tlsf", 0);
    pb = pool("tlsf", 0);
    ok(pa && pb && cp_trace_replay(t, pa, NULL, &ra) == CP_OK &&
           cp_trace_replay(c, pb, NULL, &rb) == CP_OK && ra.peak_reserved == rb.peak_reserved &&
           ra.peak_live == rb.peak_live && ra.events == 5,
       "events: replays as the CSV does");
    cp_resource_destroy(pa);
    cp_resource_destroy(pb);
    cp_trace_free(t);
    cp_trace_free(c);
    {
        static const cp_trace_event_in bad1[] = {{0, 0x10, 8, 0, 0, NULL, 0},
                                                 {1, 0x20, 0, 0, 1, NULL, 0}};
        static const cp_trace_event_in bad2[] = {{0, 0x10, 0, 0, 0, NULL, 0}};
        static const cp_trace_event_in bad3[] = {{0, 0x10, 8, 0, 0, NULL, 70000}};
        t = NULL;
        ok(cp_trace_from_events("p", "scaled", bad1, 2, &t) == CP_ERR_INVALID && !t &&
               strstr(cp_error_msg(), "p: event 2: free of 0x20, which is not live"),
           "events: a free of no allocation, named: %s", cp_error_msg());
        ok(cp_trace_from_events("p", "scaled", bad2, 1, &t) == CP_ERR_INVALID &&
               strstr(cp_error_msg(), "p: event 1: an allocate of size 0"),
           "events: an allocation of 0 bytes: %s", cp_error_msg());
        ok(cp_trace_from_events("p", "scaled", bad3, 1, &t) == CP_ERR_INVALID &&
               strstr(cp_error_msg(), "p: event 1: device above 65535"),
           "events: a device past 65535: %s", cp_error_msg());
        ok(cp_trace_from_events("empty", "scaled", NULL, 0, &t) == CP_OK && t &&
               cp_trace_events(t) == 0,
           "events: none is an empty trace");
        cp_trace_free(t);
    }
}

/* Labels by text, not by pointer: the same text from two pointers is one
 * label, texts that differ in their last byte past a word (the hash reads
 * eight bytes a step) are two, and a pointer given again keeps its label. */
static void event_labels(void)
{
    static const char *texts[] = {"a.py:1 f",  "a.py:1 g",
                                  "a.py:1 f2", "a.py:1 f3",
                                  "abcdefg",   "abcdefh",
                                  "a.py:10 long_enough_to_pass_16",
                                  "a.py:10 long_enough_to_pass_17"};
    enum { N = sizeof texts / sizeof *texts };
    char *copy[N];
    cp_trace_event_in ev[3 * N];
    cp_trace *t = NULL;
    size_t i;
    int ok1 = 1;
    memset(ev, 0, sizeof ev);
    for (i = 0; i < N; i++) {
        copy[i] = malloc(strlen(texts[i]) + 1);
        strcpy(copy[i], texts[i]);
        ev[i].pointer = i + 1;
        ev[i].size = 64;
        ev[i].label = texts[i];
        ev[N + i].pointer = N + i + 1;
        ev[N + i].size = 64;
        ev[N + i].label = copy[i];
        ev[2 * N + i].pointer = 2 * N + i + 1;
        ev[2 * N + i].size = 64;
        ev[2 * N + i].label = texts[i];
    }
    ok(cp_trace_from_events("labels", "test", ev, 3 * N, &t) == CP_OK, "labels: built");
    for (i = 0; t && i < N; i++) {
        cp_trace_row x, y, z, w;
        cp_trace_event(t, i, &x);
        cp_trace_event(t, N + i, &y);
        cp_trace_event(t, 2 * N + i, &z);
        cp_trace_event(t, (i + 1) % N, &w);
        ok1 = ok1 && x.label && x.label == y.label && x.label == z.label && x.label != w.label &&
              strcmp(x.label, texts[i]) == 0;
    }
    ok(t && ok1, "labels: one per text, whatever the pointer; texts a byte apart two");
    cp_trace_free(t);
    for (i = 0; i < N; i++)
        free(copy[i]);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress shows even when piped */
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cupola_trace_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("not ok 1 - mkdtemp\n# 0 passed, 1 failed\n");
        return 1;
    }
    shared_traces();
    malformed();
    gzip_files();
    log_roundtrip();
    streams_replay();
    from_events();
    event_labels();
    {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            printf("# could not remove %s\n", tmpdir);
    }
    return tap_finish();
}
