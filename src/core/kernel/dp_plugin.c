/*
 * kernel/dp_plugin.c: plugin device pools (dp_plugin.h).
 *
 * Policy, exactly:
 *  - The module is the plugin's source with <cupola/plugin.h> in front and
 *    cupola's harness (<cupola/dp_harness.cuh>) after it; it is compiled and
 *    cached as any user module (the headers are part of the cache key).
 *  - One allocation of the backend's device memory holds the state, the
 *    claim map and the pool's capacity bytes (cuda/devpool_layout.h, laid
 *    out as a bump pool).  The plugin gets cupola_pool_base/capacity and
 *    keeps everything else there.
 *  - Creation runs the plugin's init grid on the legacy stream and waits
 *    for it; dp:reset runs it again on the reset's stream (and clears the
 *    claim map), ordered like any other work there.
 *  - A run takes its scratch (counters, the run's parameters, one record per
 *    thread when kept blocks are verified) with mem_alloc_async on the run's
 *    stream, records an event, launches the run kernel, records another,
 *    and, for free = false, launches the verification kernel.  Finishing
 *    waits for the stream, reads the counters and the time between the two
 *    events, and frees the scratch on the stream.  Kept blocks stay in the
 *    plugin until its dp:reset (cupola does not free them: the plugin's own
 *    reset decides what that means).
 *  - children (nested launches) and hold_us are refused: the harness has no
 *    parent kernel, and a hold needs the two-pass run the host backend's own
 *    pools have.
 *  - With nvcc set, the CUDA backend compiles with the toolkit's nvcc
 *    (-cubin) instead of NVRTC (module.h), so a peer's headers may include
 *    host headers.
 *  - A plugin whose source names cupola_plugin_create is created on the host
 *    (cupola/plugin.h): on the CUDA backend its source is built a second
 *    time, by nvcc, into a shared object (-DCUPOLA_PLUGIN_HOST_PART=1, the
 *    CUDA runtime linked in), loaded with dlopen and never closed (a CUDA
 *    runtime inside it may not be unloaded while the process runs); on the
 *    host backend the module itself is built with CUPOLA_PLUGIN_HOST_PART=1
 *    and the functions are its own.  cupola's allocation then holds the
 *    state and 256 bytes for the plugin, the peer gets the capacity, and the
 *    state's peer field what create returned for the device.  Reset waits
 *    for its stream, destroys, creates, and runs the init grid on it.
 */
#include "kernel/dp_plugin.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/compile.h"

#include "devpool_layout.h"
#include "cupola/dp_body.cuh"

enum { K_INIT, K_RUN, K_VERIFY, K_COUNT };

struct cp_dplugin {
    cp_kmodule *m;
    cp_kernel *k[K_COUNT];
    unsigned char *mem; /* device: state | claims | pool bytes */
    cpd_layout L;
    size_t capacity;
    uint64_t init_threads;
    /* created on the host (cupola/plugin.h) */
    int (*create)(unsigned long long, void **, void **);
    void (*destroy)(void *, void *);
    void *peer, *handle; /* what create gave */
};

/* The bytes of cupola's own for a plugin created on the host. */
#define HOSTED_BYTES 256u

typedef int (*create_fn)(unsigned long long, void **, void **);
typedef void (*destroy_fn)(void *, void *);

/* A function pointer from dlsym's object pointer (ISO C has no cast
 * between them; POSIX gives them one representation). */
static void fn_of(void *sym, void *fn, size_t n)
{
    memcpy(fn, &sym, n);
}

/* The host part of a hosted plugin on the CUDA backend: the plugin's source
 * built by nvcc into a shared object, loaded. */
static cp_status build_host_part(const cp_dplugin_desc *d, const char *src, size_t len,
                                 create_fn *cr, destroy_fn *de, char **log)
{
    enum { MAXI = 16 };
    const char *args[16 + MAXI];
    char archopt[48], incs[MAXI][4200];
    cp_device_info info;
    cp_cc_job job;
    cp_cc_result res;
    cp_status st;
    void *dl;
    int na = 0;

    if ((st = cp_be->device_info(&info)) != CP_OK)
        return st;
    snprintf(archopt, sizeof archopt, "-arch=sm_%d", info.cc_major * 10 + info.cc_minor);
    args[na++] = "-shared";
    args[na++] = "-Xcompiler";
    args[na++] = "-fPIC";
    args[na++] = archopt;
    /* C++17 unless the user names a standard (nvcc refuses two) */
    {
        int has = 0;
        for (const char *const *o = d->options; o && *o; o++)
            has |= strncmp(*o, "-std=", 5) == 0 || strncmp(*o, "--std=", 6) == 0;
        if (!has)
            args[na++] = "-std=c++17";
    }
    args[na++] = "-w";
    args[na++] = "--expt-relaxed-constexpr";
    args[na++] = "-DCUPOLA_PLUGIN_HOST_PART=1";
    for (int i = 0; d->include_dirs && d->include_dirs[i] && i < MAXI; i++) {
        snprintf(incs[i], sizeof incs[i], "-I%s", d->include_dirs[i]);
        args[na++] = incs[i];
    }
    args[na] = NULL;
    memset(&job, 0, sizeof job);
    job.lang = CP_CC_NVCC;
    job.name = d->name && *d->name ? d->name : "plugin.cu";
    job.source = src;
    job.source_len = len;
    job.options = d->options;
    job.args = args;
    job.salt = "cupola-plugin-host-part-1";
    st = cp_cc_shared_object(&job, &res);
    if (log && !*log) {
        *log = res.log;
        res.log = NULL;
    }
    free(res.log);
    if (st != CP_OK)
        return st;
    if (!(dl = dlopen(res.path, RTLD_NOW | RTLD_LOCAL))) {
        const char *e = dlerror();
        return cp_error_set(CP_ERR_BACKEND, "%s: cannot load the plugin's host part: %s", job.name,
                            e ? e : "dlopen failed");
    }
    fn_of(dlsym(dl, "cupola_plugin_create"), cr, sizeof *cr);
    fn_of(dlsym(dl, "cupola_plugin_destroy"), de, sizeof *de);
    return CP_OK;
}

/* create on the host, the device state's peer field set (synchronously). */
static cp_status hosted_create(cp_dplugin *p)
{
    int rc;
    p->peer = p->handle = NULL;
    if ((rc = p->create((unsigned long long)p->capacity, &p->peer, &p->handle)) != 0) {
        p->peer = p->handle = NULL;
        return cp_error_set(CP_ERR_OOM, "plugin device pool: the plugin's cupola_plugin_create(%zu) "
                            "failed (returned %d)", p->capacity, rc);
    }
    return CP_OK;
}

static void hosted_destroy(cp_dplugin *p)
{
    if (p->create && (p->peer || p->handle))
        p->destroy(p->peer, p->handle);
    p->peer = p->handle = NULL;
}

struct cp_dplugin_run {
    cp_stream *s;
    void *scratch; /* counters (64 bytes), parameters (128 bytes), records */
    cp_event *start, *stop;
};

#define SCRATCH_PARAMS 64u
#define SCRATCH_RECORDS 192u

static cp_status launch(cp_kernel *k, uint64_t threads, unsigned block, cp_stream *s,
                        void *const *args)
{
    cp_klaunch l;
    uint64_t g = (threads + block - 1) / block;
    memset(&l, 0, sizeof l);
    if (g == 0 || g > 0x7fffffffull)
        return cp_error_set(CP_ERR_INVALID, "device pool run: %llu threads need more than 2^31-1 blocks of %u",
                            (unsigned long long)threads, block);
    l.grid[0] = (unsigned)g;
    l.grid[1] = l.grid[2] = 1;
    l.block[0] = block;
    l.block[1] = l.block[2] = 1;
    l.stream = s;
    return cp_kernel_launch(k, &l, args);
}

/* The init grid, then the claim map cleared, on s. */
static cp_status enqueue_init(cp_dplugin *p, cp_stream *s)
{
    void *state = p->mem;
    uint64_t n = p->init_threads;
    void *args[2] = {&state, &n};
    cp_status st = cp_be->memset_async(p->mem + p->L.claims_off, 0, (size_t)p->L.claims_bytes, s);
    if (st != CP_OK)
        return st;
    return launch(p->k[K_INIT], n, 256u, s, args);
}

cp_status cp_dplugin_create(const cp_dplugin_desc *d, cp_dplugin **out, char **log)
{
    static const char *const names[K_COUNT] = {"cupola_dp_init", "cupola_dp_run", "cupola_dp_verify"};
    static const cp_ktype init_t[] = {CP_KT_DEVICE_POOL, CP_KT_U64};
    static const cp_ktype run_t[] = {CP_KT_DEVICE_POOL, CP_KT_PTR, CP_KT_PTR, CP_KT_PTR, CP_KT_PTR};
    static const char head[] = "#include <cupola/plugin.h>\n#line 1 \"";
    static const char head_hosted[] = "#define CUPOLA_PLUGIN_HOST_PART 1\n#include <cupola/plugin.h>\n#line 1 \"";
    static const char tail[] = "\n#include <cupola/dp_harness.cuh>\n";
    const char *name = d->name && *d->name ? d->name : "plugin.cu";
    cp_kmodule_desc md;
    cupola_device_pool state;
    cp_dplugin *p;
    char *src;
    size_t n, nlen = strlen(name);
    cp_status st;
    void *mem = NULL;
    int hosted, on_host = strcmp(cp_be->name, "host") == 0;
    const char *h;
    size_t hlen;
    create_fn cr = NULL;
    destroy_fn de = NULL;

    *out = NULL;
    if (log)
        *log = NULL;
    if (d->capacity == 0 || d->init_threads == 0)
        return cp_error_set(CP_ERR_INVALID, "plugin device pool: capacity and init_threads must be >= 1");
    if (strpbrk(name, "\"\\\n"))
        return cp_error_set(CP_ERR_INVALID, "plugin device pool: a name holds no quote, backslash or newline");
    /* a plugin set up by host code names its create function */
    hosted = memmem(d->source, d->len, "cupola_plugin_create", 20) != NULL;
    h = hosted && on_host ? head_hosted : head;
    hlen = strlen(h);
    if (!(p = calloc(1, sizeof *p)))
        return cp_error_set(CP_ERR_OOM, "plugin device pool: out of host memory");
    n = hlen + nlen + 2 + d->len + sizeof tail;
    if (!(src = malloc(n))) {
        free(p);
        return cp_error_set(CP_ERR_OOM, "plugin device pool: out of host memory");
    }
    memcpy(src, h, hlen);
    memcpy(src + hlen, name, nlen);
    memcpy(src + hlen + nlen, "\"\n", 2);
    memcpy(src + hlen + 2 + nlen, d->source, d->len);
    memcpy(src + hlen + 2 + nlen + d->len, tail, sizeof tail);
    if (hosted && !on_host &&
        (st = build_host_part(d, src, hlen + 2 + nlen + d->len, &cr, &de, log)) != CP_OK) {
        free(src);
        free(p);
        return st;
    }
    memset(&md, 0, sizeof md);
    md.kind = CP_KSRC_SOURCE;
    md.name = name;
    md.data = src;
    md.len = n - 1;
    md.options = d->options;
    md.include_dirs = d->include_dirs;
    md.nvcc = d->nvcc;
    if (log && *log) {
        free(*log);
        *log = NULL;
    }
    st = cp_kmodule_load(&md, &p->m, NULL, log);
    free(src);
    if (st != CP_OK) {
        free(p);
        return st;
    }
    for (int i = 0; i < K_COUNT && st == CP_OK; i++)
        st = cp_kernel_get(p->m, names[i], i == K_INIT ? init_t : run_t, i == K_INIT ? 2u : 5u, &p->k[i]);
    if (st != CP_OK) {
        cp_dplugin_destroy(p);
        return st;
    }
    if (hosted && on_host) {
        fn_of(cp_kmodule_symbol(p->m, "cupola_plugin_create"), &cr, sizeof cr);
        fn_of(cp_kmodule_symbol(p->m, "cupola_plugin_destroy"), &de, sizeof de);
    }
    if (hosted && (!cr || !de)) {
        cp_dplugin_destroy(p);
        if (log && *log) {
            /* the message is this, not the compiler's (clean) log */
            free(*log);
            *log = NULL;
        }
        return cp_error_set(CP_ERR_INVALID, "plugin device pool: %s names cupola_plugin_create but does not "
                            "define both cupola_plugin_create and cupola_plugin_destroy as CUPOLA_PLUGIN_HOST "
                            "functions inside #if CUPOLA_PLUGIN_HOST_PART (cupola/plugin.h)", name);
    }
    p->create = cr;
    p->destroy = de;
    p->capacity = d->capacity;
    p->init_threads = d->init_threads;
    cpd_layout_make(CPD_KIND_PLUGIN, hosted ? HOSTED_BYTES : d->capacity, &p->L);
    if (p->L.total < (hosted ? HOSTED_BYTES : d->capacity)) {
        cp_dplugin_destroy(p);
        return cp_error_set(CP_ERR_OOM, "plugin device pool: capacity too large");
    }
    if ((st = cp_be->mem_alloc(&mem, (size_t)p->L.total, CP_MEM_DEVICE)) != CP_OK) {
        cp_dplugin_destroy(p);
        return st;
    }
    p->mem = mem;
    cpd_state_init(&state, CPD_KIND_PLUGIN, d->capacity, &p->L, p->mem);
    if (p->create) {
        if ((st = hosted_create(p)) != CP_OK) {
            cp_dplugin_destroy(p);
            return st;
        }
        state.peer = p->peer;
    }
    if ((st = cp_be->memcpy_async(p->mem, &state, sizeof state, NULL)) != CP_OK ||
        (st = enqueue_init(p, NULL)) != CP_OK || (st = cp_be->stream_synchronize(NULL)) != CP_OK) {
        cp_dplugin_destroy(p);
        return st;
    }
    *out = p;
    return CP_OK;
}

cp_status cp_dplugin_destroy(cp_dplugin *p)
{
    cp_status st = CP_OK;
    if (!p)
        return CP_OK;
    if (p->mem) {
        /* no queued run may still use the memory */
        cp_be->device_synchronize();
        hosted_destroy(p);
        st = cp_be->mem_free(p->mem, CP_MEM_DEVICE);
    }
    for (int i = 0; i < K_COUNT; i++)
        cp_kernel_release(p->k[i]);
    cp_kmodule_release(p->m);
    free(p);
    return st;
}

void *cp_dplugin_state(cp_dplugin *p)
{
    return p->mem;
}

int cp_dplugin_hosted(const cp_dplugin *p)
{
    return p->create != NULL;
}

cp_status cp_dplugin_launch(cp_dplugin *p, const cp_dp_run_args *a, cp_stream *s,
                            cp_dplugin_run **out)
{
    cp_dplugin_run *r;
    cpd_run_params prm;
    int need_ptrs = !a->free_blocks && a->verify;
    size_t bytes = SCRATCH_RECORDS;
    unsigned char *scratch;
    void *state = p->mem, *claims = p->mem + p->L.claims_off, *prmp, *ptrs = NULL, *counters;
    void *args[5];
    cp_status st;

    *out = NULL;
    if (a->children)
        return cp_error_set(CP_ERR_UNSUPPORTED,
                            "plugin device pools run no nested launches (children=%u)", a->children);
    if (a->hold_us)
        return cp_error_set(CP_ERR_UNSUPPORTED, "plugin device pools take no hold_us");
    if (p->create)
        return cp_error_set(CP_ERR_UNSUPPORTED,
                            "dp:run checks blocks against the claim map of the pool's own bytes, and a "
                            "plugin created on the host keeps its blocks in its own memory: measure it "
                            "with cupola.survey");
    if (a->threads == 0 || a->min_bytes == 0 || a->min_bytes > a->max_bytes || a->block == 0 ||
        a->block > 1024)
        return cp_error_set(CP_ERR_INVALID, "device pool run: bad arguments");
    if (need_ptrs) {
        if (a->threads > (SIZE_MAX - SCRATCH_RECORDS) / 8)
            return cp_error_set(CP_ERR_OOM, "device pool run: too many threads");
        bytes += (size_t)a->threads * 8u;
    }
    memset(&prm, 0, sizeof prm);
    prm.threads = a->threads;
    prm.min_bytes = a->min_bytes;
    prm.max_bytes = a->max_bytes;
    prm.seed = a->seed;
    prm.free_blocks = a->free_blocks;
    prm.verify = a->verify;
    if (!(r = calloc(1, sizeof *r)))
        return cp_error_set(CP_ERR_OOM, "device pool run: out of host memory");
    r->s = s;
    if ((st = cp_be->mem_alloc_async(&r->scratch, bytes, s)) != CP_OK) {
        free(r);
        return st;
    }
    scratch = r->scratch;
    counters = scratch;
    prmp = scratch + SCRATCH_PARAMS;
    if (need_ptrs)
        ptrs = scratch + SCRATCH_RECORDS;
    args[0] = &state;
    args[1] = &prmp;
    args[2] = &ptrs;
    args[3] = &claims;
    args[4] = &counters;
    if ((st = cp_be->event_create(&r->start, 1)) != CP_OK)
        goto fail;
    if ((st = cp_be->event_create(&r->stop, 1)) != CP_OK)
        goto fail;
    if ((st = cp_be->memset_async(counters, 0, SCRATCH_PARAMS, s)) != CP_OK ||
        (st = cp_be->memcpy_async(prmp, &prm, sizeof prm, s)) != CP_OK)
        goto fail;
    if (a->reset_first && (st = enqueue_init(p, s)) != CP_OK)
        goto fail;
    if ((st = cp_be->event_record(r->start, s)) != CP_OK ||
        (st = launch(p->k[K_RUN], a->threads, a->block, s, args)) != CP_OK ||
        (st = cp_be->event_record(r->stop, s)) != CP_OK)
        goto fail;
    if (need_ptrs && (st = launch(p->k[K_VERIFY], a->threads, 256u, s, args)) != CP_OK)
        goto fail;
    *out = r;
    return CP_OK;

fail:
    {
        /* keep the first failure's message through the clean-up */
        char msg[512];
        strncpy(msg, cp_error_msg(), sizeof msg - 1);
        msg[sizeof msg - 1] = '\0';
        if (r->start)
            cp_be->event_destroy(r->start);
        if (r->stop)
            cp_be->event_destroy(r->stop);
        cp_be->mem_free_async(r->scratch, s);
        free(r);
        return cp_error_set(st, "%s", msg);
    }
}

cp_status cp_dplugin_finish(cp_dplugin_run *r, cp_dp_run_result *out)
{
    unsigned long long c[CPD_NCOUNTERS] = {0};
    float ms = 0;
    cp_status st;

    memset(out, 0, sizeof *out);
    if ((st = cp_be->stream_synchronize(r->s)) == CP_OK &&
        (st = cp_be->memcpy_async(c, r->scratch, sizeof c, r->s)) == CP_OK &&
        (st = cp_be->stream_synchronize(r->s)) == CP_OK)
        st = cp_be->event_elapsed(r->start, r->stop, &ms);
    {
        char msg[512];
        strncpy(msg, cp_error_msg(), sizeof msg - 1);
        msg[sizeof msg - 1] = '\0';
        cp_be->event_destroy(r->start);
        cp_be->event_destroy(r->stop);
        cp_be->mem_free_async(r->scratch, r->s);
        free(r);
        if (st != CP_OK)
            return cp_error_set(st, "%s", msg);
    }
    out->ok = c[0];
    out->failed = c[1];
    out->overlaps = c[2];
    out->misaligned = c[3];
    out->ms = ms;
    return CP_OK;
}

cp_status cp_dplugin_reset(cp_dplugin *p, cp_stream *s)
{
    cp_status st;
    if (p->create) {
        /* the peer is set up again from scratch, once nothing queued uses it */
        if ((st = cp_be->stream_synchronize(s)) != CP_OK || (st = cp_be->device_synchronize()) != CP_OK)
            return st;
        hosted_destroy(p);
        if ((st = hosted_create(p)) != CP_OK) {
            /* the pool gives NULL from now on (a plugin checks its peer) */
            char msg[512];
            strncpy(msg, cp_error_msg(), sizeof msg - 1);
            msg[sizeof msg - 1] = '\0';
            (void)cp_be->memcpy_async(p->mem + offsetof(cupola_device_pool, peer), &p->peer, sizeof p->peer, s);
            (void)cp_be->stream_synchronize(s);
            return cp_error_set(st, "%s", msg);
        }
        if ((st = cp_be->memcpy_async(p->mem + offsetof(cupola_device_pool, peer), &p->peer,
                                      sizeof p->peer, s)) != CP_OK)
            return st;
    }
    return enqueue_init(p, s);
}

cp_status cp_dplugin_stats(cp_dplugin *p, cp_dp_stats *out)
{
    cupola_device_pool st;
    cp_status rc;
    if ((rc = cp_be->device_synchronize()) != CP_OK ||
        (rc = cp_be->memcpy_async(&st, p->mem, sizeof st, NULL)) != CP_OK ||
        (rc = cp_be->stream_synchronize(NULL)) != CP_OK)
        return rc;
    out->capacity = p->capacity;
    out->failed = st.failed;
    out->used = UINT64_MAX;
    out->peak = UINT64_MAX;
    return CP_OK;
}
