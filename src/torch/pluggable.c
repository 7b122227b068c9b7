/*
 * pluggable.c: the logic of libcupola_torch.so (pluggable.h states what it
 * does and why).
 */
#include "pluggable.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "pool/resource.h"
#include "ptrmap.h"

#define MAX_STREAMS 64 /* streams remembered per device for held-back frees */

/* A free held back until the other streams' events complete (safe mode). */
typedef struct held {
    struct held *next;
    void *ptr;
    size_t size;
    int dev;
    cp_stream *s;
    int nev;
    cp_event *ev[MAX_STREAMS];
} held;

typedef struct dev_state {
    cp_resource *pool;
    cp_stream *streams[MAX_STREAMS]; /* seen on this device; NULL: legacy */
    int nstreams;
    int seen_legacy;
} dev_state;

/* PyTorch's names; libcupola_cupy.so sets its own (cpt_set_frontend). */
static const cpt_frontend torch_frontend = {
    "CUPOLA_TORCH_POOL", "CUPOLA_TORCH_STREAMS", "CUPOLA_TORCH_LOG", "cupola torch allocator", 0, 1,
};

static struct {
    pthread_mutex_t mu;
    const cpt_frontend *fe; /* NULL: torch_frontend */
    int configured;       /* the environment was read */
    cpt_status config_st; /* CPT_OK or why every allocation fails */
    char config_msg[512];
    int printed;
    char spec[256];
    char kind[256];       /* the spec's kind, then its string values (cp_pool_spec_parse) */
    cp_pool_opts opts;
    int safe;
    dev_state dev[CP_MAX_DEVICES];
    cp_ptrmap streams;    /* native handle -> cp_stream (wrapped) */
    cp_ptrmap live_size;  /* fe->track: live pointer -> its size */
    cp_ptrmap live_stream; /*   and the native stream it was allocated on */
    FILE *log;            /* fe->log_env: every request, RMM's CSV */
    struct timespec t0;
    held *held_head, *held_tail;
    uint64_t nheld;
    cp_event *spare_ev[256];
    int nspare_ev;
    uint64_t zero_allocs, held_total, free_errors, ooms, retried;
} G = {.mu = PTHREAD_MUTEX_INITIALIZER};

static const cpt_frontend *fe(void)
{
    return G.fe ? G.fe : &torch_frontend;
}

void cpt_set_frontend(const cpt_frontend *f)
{
    pthread_mutex_lock(&G.mu);
    G.fe = f;
    pthread_mutex_unlock(&G.mu);
}

static _Thread_local char last_error[640];

const char *cpt_last_error(void)
{
    return last_error;
}

static cpt_status fail(cpt_status st, const char *fmt, ...) CP_PRINTF(2, 3);
static cpt_status fail(cpt_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

/* Once: the message of a wrong configuration on stderr, since PyTorch shows
 * an allocation's failure far from the environment that caused it. */
static void print_config_error(void)
{
    if (!G.printed) {
        G.printed = 1;
        fprintf(stderr, "%s: %s\n", fe()->who, G.config_msg);
    }
}

static cpt_status configure_locked(void)
{
    const char *spec, *mode, *be;
    cp_status st;

    if (G.configured)
        return G.config_st;
    G.configured = 1;
    spec = getenv(fe()->pool_env);
    if (!spec || !*spec)
        spec = "tlsf";
    snprintf(G.spec, sizeof G.spec, "%s", spec);
    mode = getenv(fe()->streams_env);
    if (!mode || !*mode) {
        G.safe = fe()->safe_default;
    } else if (strcmp(mode, "safe") == 0) {
        G.safe = 1;
    } else if (strcmp(mode, "trust") == 0) {
        G.safe = 0;
    } else {
        snprintf(G.config_msg, sizeof G.config_msg,
                 "%s must be safe or trust, not \"%.100s\"; every allocation "
                 "fails until it is fixed", fe()->streams_env, mode);
        G.config_st = CPT_CONFIG;
        return CPT_CONFIG;
    }
    if (strlen(spec) >= sizeof G.spec) {
        snprintf(G.config_msg, sizeof G.config_msg, "%s is longer than %zu "
                 "bytes; every allocation fails until it is fixed", fe()->pool_env, sizeof G.spec - 1);
        G.config_st = CPT_CONFIG;
        return CPT_CONFIG;
    }
    st = cp_pool_spec_parse(G.spec, &G.opts, G.kind, sizeof G.kind);
    if (st != CP_OK) {
        snprintf(G.config_msg, sizeof G.config_msg, "%s: %s; every allocation "
                 "fails until it is fixed", fe()->pool_env, cp_error_msg());
        G.config_st = CPT_CONFIG;
        return CPT_CONFIG;
    }
    /* memory once taken is kept for the framework's next steps (pool/spec.c) */
    cp_pool_spec_serve(&G.opts);
    if (G.opts.upstream == CP_UP_PINNED || G.opts.upstream == CP_UP_VIRTUAL) {
        snprintf(G.config_msg, sizeof G.config_msg, "%s=\"%s\": upstream '%s' "
                 "cannot serve device arrays (device, async or managed); every "
                 "allocation fails until it is fixed", fe()->pool_env, G.spec,
                 cp_upstream_name(G.opts.upstream));
        G.config_st = CPT_CONFIG;
        return CPT_CONFIG;
    }
    be = getenv("CUPOLA_BACKEND");
    st = cp_backend_select(be && *be ? be : NULL);
    if (st == CP_OK && !cp_be->stream_wrap)
        st = cp_error_set(CP_ERR_UNSUPPORTED, "the %s backend cannot wrap streams", cp_be->name);
    if (st != CP_OK) {
        snprintf(G.config_msg, sizeof G.config_msg, "no backend: %s", cp_error_msg());
        G.config_st = CPT_ERROR;
        return CPT_ERROR;
    }
    if (cp_ptrmap_init(&G.streams, 16) != 0 ||
        (fe()->track && (cp_ptrmap_init(&G.live_size, 1024) != 0 ||
                         cp_ptrmap_init(&G.live_stream, 1024) != 0))) {
        snprintf(G.config_msg, sizeof G.config_msg, "out of host memory");
        G.config_st = CPT_ERROR;
        return CPT_ERROR;
    }
    clock_gettime(CLOCK_MONOTONIC, &G.t0);
    if (fe()->log_env && (be = getenv(fe()->log_env)) != NULL && *be) {
        G.log = fopen(be, "w");
        if (!G.log) {
            snprintf(G.config_msg, sizeof G.config_msg, "%s: cannot write \"%.200s\"; every "
                     "allocation fails until it is fixed", fe()->log_env, be);
            G.config_st = CPT_CONFIG;
            return CPT_CONFIG;
        }
        fputs("Thread,Time,Action,Pointer,Size,Stream\n", G.log);
    }
    G.config_st = CPT_OK;
    return CPT_OK;
}

cpt_status cpt_check(void)
{
    cpt_status st;
    pthread_mutex_lock(&G.mu);
    st = configure_locked();
    if (st != CPT_OK) {
        print_config_error();
        fail(st, "%s", G.config_msg);
    }
    pthread_mutex_unlock(&G.mu);
    return st;
}

/* The device's pool, made at its first use (a pool's memory is one device's). */
static cpt_status pool_locked(int dev, cp_resource **out)
{
    cp_pool_opts o;
    cp_status st;
    if (dev < 0 || dev >= CP_MAX_DEVICES)
        return fail(CPT_ERROR, "device %d is out of range", dev);
    if (G.dev[dev].pool) {
        *out = G.dev[dev].pool;
        return CPT_OK;
    }
    o = G.opts;
    o.device = dev;
    st = cp_pool_create(&G.dev[dev].pool, &o);
    if (st == CP_ERR_INVALID) {
        /* a kind's own range check (cub's bins): the configuration */
        snprintf(G.config_msg, sizeof G.config_msg, "%s=\"%s\": %s; every "
                 "allocation fails until it is fixed", fe()->pool_env, G.spec, cp_error_msg());
        G.config_st = CPT_CONFIG;
        print_config_error();
        return fail(CPT_CONFIG, "%s", G.config_msg);
    }
    if (st != CP_OK)
        return fail(st == CP_ERR_OOM ? CPT_OOM : CPT_ERROR, "creating the %s pool on device %d: "
                    "%s", G.kind, dev, cp_error_msg());
    *out = G.dev[dev].pool;
    return CPT_OK;
}

/* The cp_stream of a native handle on device dev, wrapped once. */
static cpt_status stream_locked(void *native, int dev, cp_stream **out)
{
    dev_state *d = &G.dev[dev];
    cp_stream *s = NULL;
    int i;
    if ((uintptr_t)native > 1) {
        s = cp_ptrmap_get(&G.streams, (uint64_t)(uintptr_t)native);
        if (!s) {
            if (cp_be->stream_wrap(&s, native, dev) != CP_OK)
                return fail(CPT_ERROR, "wrapping stream %p: %s", native, cp_error_msg());
            if (cp_ptrmap_put(&G.streams, (uint64_t)(uintptr_t)native, s) != 0) {
                cp_be->stream_destroy(s);
                return fail(CPT_ERROR, "out of host memory");
            }
        }
    }
    *out = s;
    /* the device's streams, for held-back frees */
    if (!s) {
        if (!d->seen_legacy && d->nstreams < MAX_STREAMS) {
            d->seen_legacy = 1;
            d->streams[d->nstreams++] = NULL;
        }
        return CPT_OK;
    }
    for (i = 0; i < d->nstreams; i++)
        if (d->streams[i] == s)
            return CPT_OK;
    if (d->nstreams < MAX_STREAMS)
        d->streams[d->nstreams++] = s;
    return CPT_OK;
}

static cp_event *event_get(void)
{
    cp_event *e = NULL;
    if (G.nspare_ev)
        return G.spare_ev[--G.nspare_ev];
    if (cp_be->event_create(&e, 0) != CP_OK)
        return NULL;
    return e;
}

static void event_put(cp_event *e)
{
    if (G.nspare_ev < (int)(sizeof G.spare_ev / sizeof G.spare_ev[0]))
        G.spare_ev[G.nspare_ev++] = e;
    else
        cp_be->event_destroy(e);
}

static void report_free_error(void *ptr, cp_status st)
{
    (void)st;
    G.free_errors++;
    if (strstr(cp_error_msg(), "free of"))
        fail(CPT_ERROR, "%s", cp_error_msg());
    else
        fail(CPT_ERROR, "free of %p: %s", ptr, cp_error_msg());
    fprintf(stderr, "%s: %s\n", fe()->who, last_error);
}

/* A held-back free reaches its pool. */
static void release_held(held *h)
{
    int i;
    cp_status st = cp_resource_free(G.dev[h->dev].pool, h->ptr, h->size, h->s);
    if (st != CP_OK)
        report_free_error(h->ptr, st);
    for (i = 0; i < h->nev; i++)
        event_put(h->ev[i]);
    free(h);
}

/* Releases the held frees whose events have all completed (wait: wait for
 * them first; dev >= 0: only that device's). */
static void poll_held(int wait, int dev)
{
    held **pp = &G.held_head, *h;
    G.held_tail = NULL;
    while ((h = *pp) != NULL) {
        int i, done = 1;
        if (dev < 0 || h->dev == dev) {
            for (i = 0; i < h->nev && done; i++) {
                int d = 0;
                if (wait)
                    (void)cp_be->event_synchronize(h->ev[i]);
                else if (cp_be->event_query(h->ev[i], &d) == CP_OK && !d)
                    done = 0;
            }
        } else {
            done = 0;
        }
        if (done) {
            *pp = h->next;
            G.nheld--;
            release_held(h);
        } else {
            G.held_tail = h;
            pp = &h->next;
        }
    }
}

/* One request in the log, in RMM's logging adaptor's CSV (cupola.trace.load
 * reads it): the stream column is the native handle, so that a replay gives
 * each handle a stream of its own.  Written under the lock, in the order the
 * library saw the requests. */
static void log_row(const char *action, void *ptr, size_t size, void *stream)
{
    struct timespec t;
    double us;
    if (!G.log)
        return;
    clock_gettime(CLOCK_MONOTONIC, &t);
    us = (double)(t.tv_sec - G.t0.tv_sec) * 1e6 + (double)(t.tv_nsec - G.t0.tv_nsec) / 1e3;
    fprintf(G.log, "0,%.3f,%s,0x%" PRIxPTR ",%zu,0x%" PRIxPTR "\n", us, action, (uintptr_t)ptr,
            size, (uintptr_t)stream);
}

cpt_status cpt_alloc(size_t size, int device, void *stream, void **out)
{
    cp_resource *pool = NULL;
    cp_stream *s = NULL;
    cp_status st;
    cpt_status r;

    *out = NULL;
    pthread_mutex_lock(&G.mu);
    r = configure_locked();
    if (r != CPT_OK) {
        print_config_error();
        fail(r, "%s", G.config_msg);
        goto out;
    }
    if (size == 0) {
        G.zero_allocs++;
        goto out;
    }
    if ((r = pool_locked(device, &pool)) != CPT_OK || (r = stream_locked(stream, device, &s)) != CPT_OK)
        goto out;
    if (G.nheld)
        poll_held(0, -1);
    st = cp_resource_alloc(pool, size, s, out);
    if (st == CP_ERR_OOM && G.nheld) {
        /* the held-back frees first, as PyTorch waits for its events
         * before it gives up */
        G.retried++;
        poll_held(1, device);
        st = cp_resource_alloc(pool, size, s, out);
    }
    if (st == CP_ERR_OOM) {
        G.ooms++;
        r = fail(CPT_OOM, "Tried to allocate %zu bytes from cupola's %s pool on device %d: %s",
                 size, G.kind, device, cp_error_msg());
    } else if (st != CP_OK) {
        r = fail(CPT_ERROR, "%s", cp_error_msg());
    } else if (fe()->track &&
               (cp_ptrmap_put(&G.live_size, (uint64_t)(uintptr_t)*out, (void *)(uintptr_t)size) ||
                cp_ptrmap_put(&G.live_stream, (uint64_t)(uintptr_t)*out, stream))) {
        /* the block could not be remembered: its free would be refused */
        (void)cp_ptrmap_del(&G.live_size, (uint64_t)(uintptr_t)*out);
        (void)cp_resource_free(pool, *out, size, s);
        *out = NULL;
        G.ooms++;
        r = fail(CPT_OOM, "Tried to allocate %zu bytes on device %d: out of host memory for the "
                 "map of live blocks", size, device);
    }
    log_row(r == CPT_OK ? "allocate" : "allocate failure", *out, size, stream);
out:
    pthread_mutex_unlock(&G.mu);
    return r;
}

static void free_locked(void *ptr, size_t size, int device, void *stream)
{
    cp_stream *s;
    dev_state *d;
    cp_status st;
    held *h;
    int i;

    if (G.config_st != CPT_OK || device < 0 || device >= CP_MAX_DEVICES || !G.dev[device].pool) {
        G.free_errors++;
        fail(CPT_ERROR, "free of %p on device %d, which has no cupola pool", ptr, device);
        fprintf(stderr, "%s: %s\n", fe()->who, last_error);
        return;
    }
    d = &G.dev[device];
    if (stream_locked(stream, device, &s) != CPT_OK) {
        G.free_errors++;
        fprintf(stderr, "%s: %s\n", fe()->who, last_error);
        return;
    }
    log_row("free", ptr, size, stream);
    if (G.nheld)
        poll_held(0, -1);
    if (!G.safe || d->nstreams < 2) {
        st = cp_resource_free(d->pool, ptr, size, s);
        if (st != CP_OK)
            report_free_error(ptr, st);
        return;
    }
    /* safe: after every other stream's work queued so far */
    h = malloc(sizeof *h);
    if (!h) {
        (void)cp_be->device_synchronize_on(device); /* no room to wait: wait now */
        st = cp_resource_free(d->pool, ptr, size, s);
        if (st != CP_OK)
            report_free_error(ptr, st);
        return;
    }
    h->next = NULL;
    h->ptr = ptr;
    h->size = size;
    h->dev = device;
    h->s = s;
    h->nev = 0;
    for (i = 0; i < d->nstreams; i++) {
        cp_event *e;
        if (d->streams[i] == s)
            continue;
        e = event_get();
        if (!e || cp_be->event_record(e, d->streams[i]) != CP_OK) {
            /* cannot mark that stream: wait for the device instead */
            if (e)
                event_put(e);
            (void)cp_be->device_synchronize_on(device);
            continue;
        }
        h->ev[h->nev++] = e;
    }
    G.held_total++;
    G.nheld++;
    if (G.held_tail)
        G.held_tail->next = h;
    else
        G.held_head = h;
    G.held_tail = h;
}

void cpt_free(void *ptr, size_t size, int device, void *stream)
{
    if (!ptr)
        return;
    pthread_mutex_lock(&G.mu);
    free_locked(ptr, size, device, stream);
    pthread_mutex_unlock(&G.mu);
}

void cpt_free_tracked(void *ptr, int device)
{
    uint64_t key = (uint64_t)(uintptr_t)ptr;
    void *size;
    if (!ptr)
        return;
    pthread_mutex_lock(&G.mu);
    if (!fe()->track || G.config_st != CPT_OK || !G.live_size.slots ||
        !(size = cp_ptrmap_del(&G.live_size, key))) {
        G.free_errors++;
        fail(CPT_ERROR, "free of %p on device %d: not a live block of this allocator (double "
             "free, or a pointer it did not hand out)", ptr, device);
        fprintf(stderr, "%s: %s\n", fe()->who, last_error);
    } else {
        void *stream = cp_ptrmap_del(&G.live_stream, key);
        free_locked(ptr, (size_t)(uintptr_t)size, device, stream);
    }
    pthread_mutex_unlock(&G.mu);
}

cpt_status cpt_trim(int device, size_t keep)
{
    cpt_status r = CPT_OK;
    int i;
    pthread_mutex_lock(&G.mu);
    if (G.config_st == CPT_OK && G.configured) {
        poll_held(1, device);
        if (G.log)
            fflush(G.log);
        for (i = 0; i < CP_MAX_DEVICES; i++) {
            if (G.dev[i].pool && (device < 0 || device == i) &&
                cp_resource_trim(G.dev[i].pool, keep) != CP_OK)
                r = fail(CPT_ERROR, "trim of device %d: %s", i, cp_error_msg());
        }
    }
    pthread_mutex_unlock(&G.mu);
    return r;
}

/* Appends to the JSON text (as snprintf: counts what does not fit). */
typedef struct jbuf {
    char *p;
    size_t len, n;
} jbuf;

static void jput(jbuf *j, const char *fmt, ...) CP_PRINTF(2, 3);
static void jput(jbuf *j, const char *fmt, ...)
{
    va_list ap;
    int k;
    va_start(ap, fmt);
    k = vsnprintf(j->n < j->len ? j->p + j->n : NULL, j->n < j->len ? j->len - j->n : 0, fmt, ap);
    va_end(ap);
    if (k > 0)
        j->n += (size_t)k;
}

/* A JSON string (the spec and messages are the user's: quotes, controls). */
static void jstr(jbuf *j, const char *s)
{
    jput(j, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            jput(j, "\\%c", c);
        else if (c < 0x20)
            jput(j, "\\u%04x", c);
        else
            jput(j, "%c", c);
    }
    jput(j, "\"");
}

int cpt_stats_json(char *buf, size_t len)
{
    jbuf j = {buf, len, 0};
    int i, first = 1, k;
    if (buf && len)
        buf[0] = '\0';
    pthread_mutex_lock(&G.mu);
    (void)configure_locked();
    if (G.config_st == CPT_OK && G.nheld)
        poll_held(0, -1);
    if (G.log)
        fflush(G.log); /* a reader of the stats may read the log next */
    jput(&j, "{\"spec\":");
    jstr(&j, G.spec);
    jput(&j, ",\"kind\":");
    jstr(&j, G.config_st == CPT_CONFIG && !*G.kind ? "" : G.kind);
    jput(&j, ",\"backend\":");
    jstr(&j, cp_be ? cp_be->name : "");
    /* the pool's release_threshold as it serves (cp_pool_spec_serve) */
    jput(&j, ",\"release_threshold\":%" PRIu64, G.opts.release_threshold);
    jput(&j, ",\"streams_mode\":\"%s\",\"error\":", G.safe ? "safe" : "trust");
    if (G.config_st == CPT_OK)
        jput(&j, "null");
    else
        jstr(&j, G.config_msg);
    jput(&j, ",\"foreign_streams\":%" PRIu64 ",\"held_frees\":%" PRIu64
             ",\"held_now\":%" PRIu64 ",\"held_waited\":%" PRIu64 ",\"zero_size_allocs\":%" PRIu64
             ",\"ooms\":%" PRIu64 ",\"free_errors\":%" PRIu64 ",\"devices\":[",
         (uint64_t)G.streams.count, G.held_total, G.nheld, G.retried, G.zero_allocs, G.ooms,
         G.free_errors);
    for (i = 0; i < CP_MAX_DEVICES; i++) {
        cp_stats s;
        if (!G.dev[i].pool)
            continue;
        cp_resource_stats(G.dev[i].pool, &s);
        jput(&j, "%s{\"device\":%d,\"streams\":%d,\"used\":%" PRIu64 ",\"used_peak\":%" PRIu64
                 ",\"reserved\":%" PRIu64 ",\"reserved_peak\":%" PRIu64 ",\"allocs\":%" PRIu64
                 ",\"frees\":%" PRIu64 ",\"failed\":%" PRIu64 ",\"largest_free\":%" PRIu64
                 ",\"free_bytes\":%" PRIu64 ",\"fragmentation\":%.6f,\"device_allocs\":%" PRIu64
                 ",\"device_frees\":%" PRIu64,
             first ? "" : ",", i, G.dev[i].nstreams, s.used, s.used_peak, s.reserved,
             s.reserved_peak, s.allocs, s.frees, s.failed, s.largest_free, s.free_bytes,
             s.fragmentation, s.device_allocs, s.device_frees);
        if (s.page_bytes)
            jput(&j, ",\"page_bytes\":%" PRIu64 ",\"pages_mapped\":%" PRIu64 ",\"maps\":%" PRIu64
                     ",\"unmaps\":%" PRIu64, s.page_bytes, s.pages_mapped, s.maps, s.unmaps);
        for (k = 0; k < s.nextra; k++)
            jput(&j, ",\"%s\":%" PRIu64, s.extra[k].name, s.extra[k].value);
        jput(&j, "}");
        first = 0;
    }
    jput(&j, "]}");
    pthread_mutex_unlock(&G.mu);
    return j.n > INT32_MAX ? INT32_MAX : (int)j.n;
}

void *cpt_stream(void *native, int device)
{
    cp_stream *s = NULL;
    pthread_mutex_lock(&G.mu);
    if (configure_locked() != CPT_OK || device < 0 || device >= CP_MAX_DEVICES ||
        stream_locked(native, device, &s) != CPT_OK)
        s = NULL;
    pthread_mutex_unlock(&G.mu);
    return s;
}

void cpt_reset(void)
{
    int i;
    uint64_t k;
    pthread_mutex_lock(&G.mu);
    if (G.config_st == CPT_OK && G.configured)
        poll_held(1, -1);
    for (i = 0; i < CP_MAX_DEVICES; i++) {
        if (G.dev[i].pool)
            cp_resource_destroy(G.dev[i].pool);
        memset(&G.dev[i], 0, sizeof G.dev[i]);
    }
    for (k = 0; G.streams.slots && k <= G.streams.mask; k++)
        if (G.streams.slots[k].key)
            cp_be->stream_destroy(G.streams.slots[k].val);
    cp_ptrmap_fini(&G.streams);
    memset(&G.streams, 0, sizeof G.streams);
    cp_ptrmap_fini(&G.live_size);
    cp_ptrmap_fini(&G.live_stream);
    memset(&G.live_size, 0, sizeof G.live_size);
    memset(&G.live_stream, 0, sizeof G.live_stream);
    if (G.log)
        fclose(G.log);
    G.log = NULL;
    while (G.nspare_ev)
        cp_be->event_destroy(G.spare_ev[--G.nspare_ev]);
    G.configured = G.printed = 0;
    G.config_st = CPT_OK;
    G.config_msg[0] = G.spec[0] = G.kind[0] = '\0';
    G.zero_allocs = G.held_total = G.free_errors = G.ooms = G.retried = 0;
    pthread_mutex_unlock(&G.mu);
}
