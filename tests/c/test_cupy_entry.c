/*
 * test_cupy_entry.c: libcupola_cupy.so's entry points (src/torch/
 * cupy_entry.c over pluggable.c) on the host backend, called as CuPy's
 * CFunctionAllocator calls them: malloc(param, size, device) and
 * free(param, ptr, device).  The variables are CuPy's (CUPOLA_CUPY_POOL,
 * not PyTorch's); a refusal is NULL with a status and a message, never a
 * crash; frees by pointer alone go back on the allocation stream; frees
 * held back once two streams are seen; the request log replays (TAP output).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "hold.h"
#include "pluggable.h"
#include "trace/trace.h"
#include "tap.h"

#define ok tap_ok

void *cupola_cupy_malloc(void *param, size_t size, int device);
void cupola_cupy_free(void *param, void *ptr, int device);
int cupola_cupy_status(void);
int cupola_cupy_error(char *buf, size_t len);
int cupola_cupy_stats(char *buf, size_t len);
int cupola_cupy_check(void);
int cupola_cupy_trim(int device, size_t keep);
size_t cupola_cupy_param_size(void);
uint64_t cupola_cupy_param_magic(void);

/* The wrapper's ctypes structure: magic, then the stream. */
typedef struct param {
    uint64_t magic;
    uintptr_t stream;
} param;

static char js[8192], msg[1024];

static const char *stats(void)
{
    cupola_cupy_stats(js, sizeof js);
    return js;
}

static long long stat(const char *key)
{
    char pat[64];
    const char *p;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    p = strstr(stats(), pat);
    return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

static const char *error(void)
{
    cupola_cupy_error(msg, sizeof msg);
    return msg;
}

static void config(const char *pool, const char *streams, const char *log)
{
    cpt_reset();
    if (pool)
        setenv("CUPOLA_CUPY_POOL", pool, 1);
    else
        unsetenv("CUPOLA_CUPY_POOL");
    if (streams)
        setenv("CUPOLA_CUPY_STREAMS", streams, 1);
    else
        unsetenv("CUPOLA_CUPY_STREAMS");
    if (log)
        setenv("CUPOLA_CUPY_LOG", log, 1);
    else
        unsetenv("CUPOLA_CUPY_LOG");
}

static void test_basic(void)
{
    param pa = {0, 0};
    void *p, *q;
    ok(cupola_cupy_param_size() == sizeof(param) && cupola_cupy_param_magic() != 0,
       "the param is the wrapper's structure");
    pa.magic = cupola_cupy_param_magic();
    /* PyTorch's variable must not configure CuPy's library */
    setenv("CUPOLA_TORCH_POOL", "tlsf,bogus=1", 1);
    config(NULL, NULL, NULL);
    ok(cupola_cupy_check() == 0, "default configuration (CUPOLA_TORCH_POOL is not read)");
    p = cupola_cupy_malloc(&pa, 1000, 0);
    ok(p && cupola_cupy_status() == 0 && stat("used") == 1000 &&
           strstr(stats(), "\"kind\":\"tlsf\""),
       "1000 bytes, default tlsf (%s)", js);
    q = cupola_cupy_malloc(NULL, 3000, 0);
    ok(q && q != p && stat("used") == 4000, "a NULL param allocates on the legacy stream");
    cupola_cupy_free(&pa, p, 0);
    ok(stat("used") == 3000 && stat("frees") == 1, "free by pointer: the size is the library's");
    cupola_cupy_free(NULL, q, 0);
    ok(stat("used") == 0 && stat("free_errors") == 0, "every block back");
    cupola_cupy_free(&pa, q, 0);
    ok(stat("free_errors") == 1 && strstr(error(), "not a live block"),
       "a double free is counted, not fatal (%s)", msg);
    cupola_cupy_free(&pa, (void *)0x12345, 0);
    ok(stat("free_errors") == 2, "so is a pointer it never handed out");
    cupola_cupy_free(&pa, NULL, 0);
    ok(stat("free_errors") == 2, "a NULL free does nothing");
    unsetenv("CUPOLA_TORCH_POOL");
}

static void test_refusals(void)
{
    param pa = {0, 0};
    void *p;
    pa.magic = cupola_cupy_param_magic();
    config("tlsf,bogus=1", NULL, NULL);
    ok(cupola_cupy_check() != 0, "a bad spec fails the check");
    p = cupola_cupy_malloc(&pa, 100, 0);
    ok(!p && cupola_cupy_status() == 2 && strstr(error(), "CUPOLA_CUPY_POOL") &&
           strstr(msg, "unknown option 'bogus'"),
       "and every allocation: NULL, status 2, naming CUPOLA_CUPY_POOL (%s)", msg);
    config("tlsf", "sometimes", NULL);
    p = cupola_cupy_malloc(&pa, 100, 0);
    ok(!p && cupola_cupy_status() == 2 && strstr(error(), "CUPOLA_CUPY_STREAMS must be"),
       "a bad streams mode names CUPOLA_CUPY_STREAMS (%s)", msg);
    config("tlsf,max=1MiB", NULL, NULL);
    p = cupola_cupy_malloc(&pa, 2 << 20, 0);
    ok(!p && cupola_cupy_status() == 1 && strstr(error(), "Tried to allocate"),
       "an exhausted pool: NULL, status 1, the pool's figures (%s)", msg);
    p = cupola_cupy_malloc(&pa, 4096, 0);
    ok(p && cupola_cupy_status() == 0, "what fits is still served, status 0 again");
    cupola_cupy_free(&pa, p, 0);
    p = cupola_cupy_malloc(&pa, 100, 4096);
    ok(!p && cupola_cupy_status() == 3 && strstr(error(), "device 4096"),
       "a device out of range: status 3 (%s)", msg);
}

static void test_streams(void)
{
    param pa, pb;
    void *x, *y, *x2;
    cp_stream *sb;
    pa.magic = pb.magic = cupola_cupy_param_magic();
    pa.stream = 0x1000;
    pb.stream = 0x2000;
    /* unset, the mode is trust: CuPy destroys a Stream when Python drops it,
     * and safe mode records events on every stream it has seen */
    config("tlsf,reuse=event", NULL, NULL);
    x = cupola_cupy_malloc(&pa, 4096, 0);
    ok(x && strstr(stats(), "\"streams_mode\":\"trust\""), "CuPy's default streams mode is trust (%s)", js);
    cupola_cupy_free(&pa, x, 0);
    config("tlsf,reuse=event", "safe", NULL);
    x = cupola_cupy_malloc(&pa, 4096, 0);
    y = cupola_cupy_malloc(&pb, 4096, 0);
    ok(x && y && stat("foreign_streams") == 2, "two streams from the params");
    sb = cpt_stream((void *)0x2000, 0);
    /* B busy until released (hold.h; on CUDA a spin, long enough for the
     * checks below under sanitizers, CUPOLA_SLOW) */
    ok(sb && hold_stream(sb, getenv("CUPOLA_SLOW") ? 3000000 : 200000) == CP_OK, "B busy");
    /* freed through B's param: the block still goes back on A, its own */
    cupola_cupy_free(&pb, x, 0);
    ok(stat("held_frees") == 1 && stat("held_now") == 1,
       "safe: the free is held back while B's work is pending (%s)", js);
    x2 = cupola_cupy_malloc(&pa, 4096, 0);
    ok(x2 && x2 != x, "A does not get x back before B is done");
    cupola_cupy_free(&pa, x2, 0);
    hold_release();
    cupola_cupy_free(&pb, y, 0);
    ok(cupola_cupy_trim(-1, 0) == 0 && stat("held_now") == 0 && stat("used") == 0,
       "trim waits for what is held");

    config("tlsf,reuse=event", "trust", NULL);
    x = cupola_cupy_malloc(&pa, 4096, 0);
    y = cupola_cupy_malloc(&pb, 4096, 0);
    cupola_cupy_free(&pb, x, 0); /* param B, block of A */
    x2 = cupola_cupy_malloc(&pa, 4096, 0);
    ok(stat("held_frees") == 0 && x2 == x,
       "trust: the block went back on A (its allocation stream) and A reuses it at once");
    cupola_cupy_free(&pa, x2, 0);
    cupola_cupy_free(&pa, y, 0);
    ok(stat("used") == 0 && stat("free_errors") == 0, "every block back");
}

static void test_log(void)
{
    char path[] = "/tmp/cupola-cupy-log-XXXXXX";
    param pa = {0, 0x1000};
    void *p[8];
    cp_trace *t = NULL;
    int fd = mkstemp(path), i;
    pa.magic = cupola_cupy_param_magic();
    ok(fd >= 0, "a temporary log");
    close(fd);
    config("vmm,max=1GiB", NULL, path);
    for (i = 0; i < 8; i++)
        p[i] = cupola_cupy_malloc(i % 2 ? &pa : NULL, (size_t)(1000 + 4096 * i), 0);
    ok(!cupola_cupy_malloc(NULL, (size_t)4 << 30, 0), "a refusal (logged as RMM does)");
    for (i = 0; i < 8; i++)
        cupola_cupy_free(NULL, p[i], 0);
    (void)stats(); /* flushes the log */
    if (cp_trace_load(path, &t) != CP_OK)
        t = NULL;
    ok(t && cp_trace_events(t) == 16, "the log loads as a trace: 8 allocations and their frees (%s)",
       t ? "" : cp_error_msg());
    if (t)
        cp_trace_free(t);
    config(NULL, NULL, "/nonexistent-dir/log.csv");
    ok(!cupola_cupy_malloc(NULL, 100, 0) && cupola_cupy_status() == 2 &&
           strstr(error(), "CUPOLA_CUPY_LOG"),
       "a log that cannot be written is a configuration error (%s)", msg);
    unlink(path);
}

/* The serving policy holds for CuPy as for PyTorch (one configure path):
 * tlsf keeps its idle chunks, so steps of a 100 MiB then a 70 MiB array
 * make no upstream call once warm; a spec's release_threshold=0 does. */
static void test_serving(void)
{
    long long warm[2];
    int k, i;
    for (k = 0; k < 2; k++) {
        config(k ? "tlsf,release_threshold=0" : "tlsf", NULL, NULL);
        for (i = 0; i < 4; i++) {
            void *a, *b;
            if (i == 1)
                warm[k] = stat("device_allocs") + stat("device_frees");
            a = cupola_cupy_malloc(NULL, 100u << 20, 0);
            cupola_cupy_free(NULL, a, 0);
            b = cupola_cupy_malloc(NULL, 70u << 20, 0);
            cupola_cupy_free(NULL, b, 0);
        }
        warm[k] = stat("device_allocs") + stat("device_frees") - warm[k];
    }
    ok(warm[0] == 0 && warm[1] == 3 * 4,
       "CUPOLA_CUPY_POOL=tlsf: no upstream call once warm (%lld); release_threshold=0: %lld",
       warm[0], warm[1]);
    cupola_cupy_trim(-1, 0);
}

int main(void)
{
    setenv("CUPOLA_BACKEND", "host", 1);
    /* a call that waited for held work (hold.h) would hang: fail instead */
    alarm(600);
    test_basic();
    test_refusals();
    test_streams();
    test_log();
    test_serving();
    cpt_reset();
    return tap_finish();
}
