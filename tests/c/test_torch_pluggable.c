/*
 * test_torch_pluggable.c: the logic of libcupola_torch.so (src/torch/
 * pluggable.h) on the host backend, where foreign stream handles are stood
 * for by host streams: the pool spec (CUPOLA_TORCH_POOL) and its errors,
 * handles mapped to one stream each, frees held back in safe mode until the
 * other streams' work is done, out of memory, the stats JSON, several threads
 * (TAP output).  The C++ entry points (entry.cpp) only forward to these.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "hold.h"
#include "pluggable.h"
#include "pool/cub.h"
#include "pool/resource.h"
#include "tap.h"
#include "trace/trace.h"

#include <unistd.h>

#define ok tap_ok

#define A ((void *)0x1000)
#define B ((void *)0x2000)

static char js[8192];

static const char *stats(void)
{
    cpt_stats_json(js, sizeof js);
    return js;
}

/* The integer after "key": in the stats (first occurrence), or -1. */
static long long stat(const char *key)
{
    char pat[64];
    const char *p;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    p = strstr(stats(), pat);
    return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

static void config(const char *pool, const char *streams)
{
    cpt_reset();
    if (pool)
        setenv("CUPOLA_TORCH_POOL", pool, 1);
    else
        unsetenv("CUPOLA_TORCH_POOL");
    if (streams)
        setenv("CUPOLA_TORCH_STREAMS", streams, 1);
    else
        unsetenv("CUPOLA_TORCH_STREAMS");
}

static const cp_cub_opts *cub(const cp_pool_opts *o)
{
    return (const cp_cub_opts *)cp_pool_own_const(o);
}

static void test_spec(void)
{
    cp_pool_opts o;
    char kind[16];
    ok(cp_pool_spec_parse(" tlsf , initial = 1GiB,max=2GiB, reuse=wait,grow=false", &o, kind,
                          sizeof kind) == CP_OK &&
           strcmp(o.kind, "tlsf") == 0 && o.initial == (1ull << 30) && o.max == (2ull << 30) &&
           o.reuse == CP_REUSE_WAIT && !o.grow && o.alignment == 256 && o.upstream == CP_UP_DEVICE,
       "spec: kind, sizes with units, reuse, grow, blanks");
    ok(cp_pool_spec_parse("cub,bin_growth=4,min_bin=2,max_bin=9,max_cached_bytes=1.5MiB", &o, kind,
                          sizeof kind) == CP_OK &&
           cub(&o)->bin_growth == 4 && cub(&o)->min_bin == 2 && cub(&o)->max_bin == 9 &&
           cub(&o)->max_cached_bytes == 1572864,
       "spec: cub's four settings");
    ok(cp_pool_spec_parse("cub", &o, kind, sizeof kind) == CP_OK && cub(&o)->bin_growth == 8 &&
           cub(&o)->max_cached_bytes == 6291455,
       "spec: cub alone has CUB's defaults");
    ok(cp_pool_spec_parse("tlsf,foo=1", &o, kind, sizeof kind) == CP_ERR_INVALID &&
           strstr(cp_error_msg(), "unknown option 'foo'"),
       "spec: an unknown key is named (%s)", cp_error_msg());
    ok(cp_pool_spec_parse("tlsf,initial=lots", &o, kind, sizeof kind) == CP_ERR_INVALID &&
           strstr(cp_error_msg(), "option 'initial' must be a size") &&
           strstr(cp_error_msg(), "'lots'"),
       "spec: a bad size names the key and the value (%s)", cp_error_msg());
    ok(cp_pool_spec_parse("tlsf,max=1,max=2", &o, kind, sizeof kind) == CP_ERR_INVALID &&
           strstr(cp_error_msg(), "'max' is given twice"),
       "spec: a key given twice");
    ok(cp_pool_spec_parse("tlsf,bin_growth=2", &o, kind, sizeof kind) == CP_ERR_INVALID &&
           strstr(cp_error_msg(), "is for kind 'cub', not 'tlsf'"),
       "spec: cub's keys on another kind");
    ok(cp_pool_spec_parse("plugin", &o, kind, sizeof kind) == CP_ERR_INVALID &&
           strstr(cp_error_msg(), "kind 'plugin' needs a path"),
       "spec: plugin refused, saying why");
    ok(cp_pool_spec_parse("", &o, kind, sizeof kind) == CP_ERR_INVALID &&
           cp_pool_spec_parse("tlsf,reuse", &o, kind, sizeof kind) == CP_ERR_INVALID &&
           cp_pool_spec_parse("tlsf,alignment=3", &o, kind, sizeof kind) == CP_ERR_INVALID &&
           cp_pool_spec_parse("tlsf,min_bin=-1", &o, kind, sizeof kind) == CP_ERR_INVALID &&
           cp_pool_spec_parse("cub,max_bin=99999999999", &o, kind, sizeof kind) == CP_ERR_INVALID &&
           cp_pool_spec_parse("tlsf,grow=maybe", &o, kind, sizeof kind) == CP_ERR_INVALID,
       "spec: empty, no value, alignment 3, negative, too large, not a boolean");
}

static void test_basic(void)
{
    void *p = NULL, *q = NULL, *z = (void *)1;
    config(NULL, NULL);
    ok(cpt_check() == CPT_OK, "default configuration");
    ok(cpt_alloc(1000, 0, NULL, &p) == CPT_OK && p, "1000 bytes on the legacy stream");
    ok(strstr(stats(), "\"kind\":\"tlsf\"") && stat("used") == 1000 &&
           strstr(stats(), "\"streams_mode\":\"safe\"") && strstr(stats(), "\"error\":null"),
       "stats: kind tlsf by default, used 1000, safe (%s)", js);
    cpt_free(p, 1000, 0, NULL);
    ok(stat("used") == 0 && stat("frees") == 1, "freed");
    ok(cpt_alloc(0, 0, NULL, &z) == CPT_OK && z == NULL && stat("zero_size_allocs") == 1,
       "size 0: NULL, no pool involved");
    cpt_free(NULL, 0, 0, NULL);
    ok(cpt_alloc(64, 0, A, &p) == CPT_OK && cpt_alloc(64, 0, A, &q) == CPT_OK &&
           cpt_stream(A, 0) == cpt_stream(A, 0) && cpt_stream(A, 0) != cpt_stream(B, 0) &&
           cpt_stream(NULL, 0) == NULL && stat("foreign_streams") == 2,
       "each handle maps to one stream; 0 is the legacy stream");
    cpt_free(p, 64, 0, A);
    cpt_free(q, 64, 0, A);
    ok(cpt_alloc(64, 99, NULL, &p) == CPT_ERROR && strstr(cpt_last_error(), "device 99"),
       "a device out of range is an error (%s)", cpt_last_error());
}

/* The serving policy (src/core/pool/spec.c): a training step that needs a
 * 100 MiB and then a 70 MiB block (neither fits the other's chunk) makes
 * no upstream call once warm with tlsf and caching as CUPOLA_TORCH_POOL
 * names them; with release_threshold=0 (cupola.pool's default) each step
 * returns one chunk and takes the other back.  Trim still returns them. */
static long long step_calls(const char *pool, int steps)
{
    long long before = 0;
    int i;
    config(pool, NULL);
    for (i = 0; i < steps + 1; i++) {
        void *a = NULL, *b = NULL;
        if (i == 1)
            before = stat("device_allocs") + stat("device_frees");
        if (cpt_alloc(100u << 20, 0, NULL, &a) != CPT_OK)
            return -1;
        cpt_free(a, 100u << 20, 0, NULL);
        if (cpt_alloc(70u << 20, 0, NULL, &b) != CPT_OK)
            return -1;
        cpt_free(b, 70u << 20, 0, NULL);
    }
    return stat("device_allocs") + stat("device_frees") - before;
}

static void test_serving(void)
{
    long long n = step_calls("tlsf", 4);
    ok(n == 0, "tlsf serving PyTorch: no upstream call once warm (%lld)", n);
    ok(stat("release_threshold") == (long long)CP_SERVE_KEEP_ALL,
       "the stats say it keeps every idle chunk (%lld)", stat("release_threshold"));
    ok(stat("reserved") == (100 << 20),
       "the 70 MiB block takes the idle 100 MiB chunk rather than grow (reserved %lld)",
       stat("reserved"));
    cpt_trim(-1, 0);
    ok(stat("reserved") == 0, "cupola_torch_trim returns it");
    n = step_calls("caching", 4);
    ok(n == 0, "caching too (%lld)", n);
    n = step_calls("tlsf,release_threshold=0", 4);
    ok(stat("release_threshold") == 0, "a spec's release_threshold is kept");
    ok(n == 4 * 4, "tlsf,release_threshold=0: each step returns a chunk and takes one, twice "
       "(%lld calls in 4 steps)", n);
    ok(stat("reserved_peak") == (100 << 20), "within its peak (%lld)", stat("reserved_peak"));
}

static void test_safe(void)
{
    void *x = NULL, *y = NULL, *x2 = NULL;
    cp_stream *sa, *sb;
    config("tlsf,reuse=event", NULL);
    ok(cpt_alloc(4096, 0, A, &x) == CPT_OK && cpt_alloc(4096, 0, B, &y) == CPT_OK,
       "two streams seen");
    sa = cpt_stream(A, 0);
    sb = cpt_stream(B, 0);
    /* B still works on x (a record_stream PyTorch did not pass on), until
     * released (hold.h; on CUDA a spin, long enough for the checks below
     * under sanitizers, CUPOLA_SLOW) */
    ok(hold_stream(sb, getenv("CUPOLA_SLOW") ? 3000000 : 200000) == CP_OK, "B busy");
    cpt_free(x, 4096, 0, A);
    ok(stat("held_frees") == 1 && stat("held_now") == 1 && stat("used") == 8192,
       "the free is held back while B's work is pending (%s)", js);
    ok(cpt_alloc(4096, 0, A, &x2) == CPT_OK && x2 != x,
       "A does not get x back before B's work is done");
    cpt_free(x2, 4096, 0, A);
    hold_release();
    ok(cp_be->stream_synchronize(sb) == CP_OK && cp_be->stream_synchronize(sa) == CP_OK, "sync");
    ok(stat("held_now") == 0 && stat("used") == 4096, "released once B is done (%s)", js);
    cpt_free(y, 4096, 0, B);
    ok(cpt_trim(-1, 0) == CPT_OK && stat("held_now") == 0 && stat("used") == 0,
       "trim waits for what is held and trims");

    config("tlsf,reuse=event", "trust");
    ok(cpt_alloc(4096, 0, A, &x) == CPT_OK && cpt_alloc(4096, 0, B, &y) == CPT_OK, "trust");
    cpt_free(x, 4096, 0, A);
    ok(stat("held_frees") == 0 && stat("used") == 4096, "trust: frees reach the pool at once");
    ok(cpt_alloc(4096, 0, A, &x2) == CPT_OK && x2 == x, "trust: A reuses x at once");
    cpt_free(x2, 4096, 0, A);
    cpt_free(y, 4096, 0, B);
}

static void test_errors(void)
{
    void *p = NULL;
    config("tlsf,foo=1", NULL);
    ok(cpt_check() == CPT_CONFIG, "a bad spec fails the check");
    ok(cpt_alloc(100, 0, NULL, &p) == CPT_CONFIG && !p &&
           strstr(cpt_last_error(), "CUPOLA_TORCH_POOL") &&
           strstr(cpt_last_error(), "unknown option 'foo'"),
       "and every allocation, naming the variable and the key (%s)", cpt_last_error());
    ok(strstr(stats(), "\"error\":\"CUPOLA_TORCH_POOL") != NULL, "stats carry the error");
    config("cub,bin_growth=1", NULL);
    ok(cpt_alloc(100, 0, NULL, &p) == CPT_CONFIG && strstr(cpt_last_error(), "'bin_growth'"),
       "a kind's own range check is a configuration error too (%s)", cpt_last_error());
    config("nosuch", NULL);
    ok(cpt_alloc(100, 0, NULL, &p) == CPT_CONFIG && strstr(cpt_last_error(), "'nosuch'"),
       "an unknown kind");
    config("tlsf,upstream=virtual", NULL);
    ok(cpt_alloc(100, 0, NULL, &p) == CPT_CONFIG && strstr(cpt_last_error(), "upstream 'virtual'"),
       "an upstream without device memory is refused (%s)", cpt_last_error());
    config("tlsf", "maybe");
    ok(cpt_alloc(100, 0, NULL, &p) == CPT_CONFIG &&
           strstr(cpt_last_error(), "CUPOLA_TORCH_STREAMS must be safe or trust"),
       "a bad streams mode");
    config("tlsf,max=1MiB", NULL);
    ok(cpt_alloc(2 << 20, 0, NULL, &p) == CPT_OOM && strstr(cpt_last_error(), "Tried to allocate") &&
           stat("ooms") == 1,
       "out of memory with the pool's figures (%s)", cpt_last_error());
    ok(cpt_alloc(4096, 0, NULL, &p) == CPT_OK && p, "what fits is still served");
    cpt_free(p, 4096, 0, NULL);
    cpt_free((void *)0x12345, 16, 0, NULL);
    ok(stat("free_errors") == 1 && strstr(cpt_last_error(), "free of"),
       "a free of an unknown pointer is counted, not fatal");
    config("cub,max_cached_bytes=0", NULL);
    ok(cpt_alloc(100, 0, NULL, &p) == CPT_OK, "cub through a spec");
    cpt_free(p, 100, 0, NULL);
    ok(stat("device_frees") == 1 && stat("device_allocs") == 1 && strstr(stats(), "\"kind\":\"cub\""),
       "cub's figures in the stats (%s)", js);
    {
        char small[16];
        int n = cpt_stats_json(small, sizeof small);
        ok(n > (int)sizeof small && strlen(small) == sizeof small - 1,
           "a short buffer: cut, terminated, the whole length returned");
    }
}

/* CUPOLA_TORCH_LOG: the requests as made, loadable as a trace; the pool's
 * upstream calls in the stats (what the step-time benchmark counts). */
static void test_log(void)
{
    char path[] = "/tmp/cupola-torch-log-XXXXXX";
    void *p[6], *q = NULL;
    cp_trace *t = NULL;
    int fd = mkstemp(path), i;
    close(fd);
    setenv("CUPOLA_TORCH_LOG", path, 1);
    config("tlsf", NULL);
    for (i = 0; i < 6; i++)
        if (cpt_alloc((size_t)(512 + 3000 * i), 0, i % 2 ? A : NULL, &p[i]) != CPT_OK)
            p[i] = NULL;
    ok(stat("device_allocs") == 1 && stat("device_frees") == 0,
       "the stats count the pool's upstream calls (%s)", js);
    for (i = 0; i < 6; i++)
        cpt_free(p[i], (size_t)(512 + 3000 * i), 0, i % 2 ? A : NULL);
    (void)stats();
    if (cp_trace_load(path, &t) != CP_OK)
        t = NULL;
    ok(t && cp_trace_events(t) == 12, "the log loads as a trace: 6 allocations, 6 frees (%s)",
       t ? "" : cp_error_msg());
    if (t)
        cp_trace_free(t);
    setenv("CUPOLA_TORCH_LOG", "/nonexistent-dir/x.csv", 1);
    config("tlsf", NULL);
    ok(cpt_alloc(100, 0, NULL, &q) == CPT_CONFIG && strstr(cpt_last_error(), "CUPOLA_TORCH_LOG"),
       "a log that cannot be written is a configuration error (%s)", cpt_last_error());
    unsetenv("CUPOLA_TORCH_LOG");
    unlink(path);
}

static void *worker(void *arg)
{
    void *h = arg, *p[32];
    int i, r;
    for (r = 0; r < 200; r++) {
        for (i = 0; i < 32; i++)
            if (cpt_alloc((size_t)(64 + 97 * i + r), 0, h, &p[i]) != CPT_OK)
                p[i] = NULL;
        for (i = 0; i < 32; i++)
            cpt_free(p[i], (size_t)(64 + 97 * i + r), 0, h);
    }
    return NULL;
}

static void test_threads(void)
{
    pthread_t t[4];
    int i;
    config("tlsf", NULL);
    for (i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(0x10000 * (i + 1)));
    for (i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    cpt_trim(-1, 0);
    ok(stat("used") == 0 && stat("allocs") == 4 * 200 * 32 && stat("frees") == 4 * 200 * 32 &&
           stat("failed") == 0,
       "4 threads on 4 streams: every block back (%s)", js);
}

int main(void)
{
    /* a call that waited for held work (hold.h) would hang: fail instead */
    alarm(600);
    /* foreign handles here are made up: only the host backend can stand
     * streams in for them */
    setenv("CUPOLA_BACKEND", "host", 1);
    test_spec();
    test_basic();
    test_serving();
    test_safe();
    test_errors();
    test_log();
    test_threads();
    cpt_reset();
    return tap_finish();
}
