/*
 * record.c: the recorder's core (policy in record.h): events into a locked
 * array, a writer thread that formats and writes them per device, the live
 * allocations that give each free its size and kind.
 */
#include "record.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "ptrmap.h"

#define NOTES_MAX 2048

struct cp_rec {
    pthread_mutex_t lock;       /* the event array and the live map */
    cp_rec_event *ev, *spare;
    size_t n, cap, spare_cap;
    cp_ptrmap live;             /* address -> packed size, kind, device */
    cp_rec_stats st;

    pthread_mutex_t wlock;      /* the files, the notes */
    gzFile file[CP_REC_MAX_DEVICES];
    int file_failed[CP_REC_MAX_DEVICES];
    char *out;
    char *list_path;
    int gzip;
    char notes[NOTES_MAX];
    char head_note[512];
    uint64_t t0_ns, start_unix_ns;
    long pid;
    int flush_ms;
    int forked;
    int closed;                 /* files closed for good: never reopened (that would truncate) */

    pthread_mutex_t tlock;      /* the writer thread's stop flag */
    pthread_cond_t tcond;
    pthread_t thread;
    int running, stop;
};

uint64_t cp_rec_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

int cp_rec_path(const char *out, long pid, int dev, char *buf, unsigned long n)
{
    /* The longest known extension is kept after the process and device, so
     * the file still says what it is (trace.p12.d0.csv.gz). */
    static const char *const ext[] = {".csv.gz", ".csv", ".gz", NULL};
    size_t len = strlen(out), el = 0;
    int i, k;
    const char *slash = strrchr(out, '/');
    for (i = 0; ext[i]; i++) {
        if (ends_with(out, ext[i]) && len > strlen(ext[i]) &&
            (!slash || (size_t)(slash - out) + 1 < len - strlen(ext[i]))) {
            el = strlen(ext[i]);
            break;
        }
    }
    k = snprintf(buf, n, "%.*s.p%ld.d%d%s", (int)(len - el), out, pid, dev, out + len - el);
    return k < 0 || (unsigned long)k >= n ? -1 : 0;
}

static const char *action_name(int a)
{
    switch (a) {
    case CP_REC_ALLOC: return "allocate";
    case CP_REC_FREE: return "free";
    case CP_REC_ALLOC_FAIL: return "allocate failure";
    case CP_REC_MAP: return "map";
    case CP_REC_UNMAP: return "unmap";
    default: return "?";
    }
}

static const char *kind_name(int k)
{
    switch (k) {
    case CP_REC_DEVICE: return "device";
    case CP_REC_MANAGED: return "managed";
    case CP_REC_PINNED: return "pinned";
    case CP_REC_VMM: return "vmm";
    default: return "unknown";
    }
}

int cp_rec_format(const cp_rec_event *e, uint64_t t0_ns, char *buf, unsigned long n)
{
    /* An event stamped before the start (a clock read by the caller before
     * open) is at 0, so Time never goes negative. */
    uint64_t dt = e->t_ns > t0_ns ? e->t_ns - t0_ns : 0;
    int k = snprintf(buf, n, "%" PRIu32 ",%" PRIu64 ".%03u,%s,0x%" PRIx64 ",%" PRIu64 ",0x%" PRIx64
                     ",%d,%s,0x%" PRIx64 ",%s",
                     e->tid, dt / 1000u, (unsigned)(dt % 1000u), action_name(e->action), e->ptr,
                     e->size, e->stream, (int)e->device, kind_name(e->kind), e->pool,
                     e->call ? e->call : "");
    if (k < 0)
        k = 0;
    if ((unsigned long)k >= n)
        k = n ? (int)n - 1 : 0;
    return k;
}

static void *writer(void *ud);

cp_rec *cp_rec_open(const char *out, int flush_ms, const char *list_path, const char *note,
                    int start_thread)
{
    cp_rec *r = (cp_rec *)calloc(1, sizeof *r);
    struct timespec ts;
    if (!r)
        return NULL;
    if (!out || !*out)
        out = "cupola-record.csv.gz";
    r->out = strdup(out);
    r->list_path = list_path && *list_path ? strdup(list_path) : NULL;
    r->cap = 4096;
    r->ev = (cp_rec_event *)malloc(r->cap * sizeof *r->ev);
    if (!r->out || (list_path && *list_path && !r->list_path) || !r->ev ||
        cp_ptrmap_init(&r->live, 4096) != 0) {
        free(r->out);
        free(r->list_path);
        free(r->ev);
        free(r);
        return NULL;
    }
    r->gzip = ends_with(out, ".gz");
    r->flush_ms = flush_ms > 0 ? flush_ms : 50;
    r->pid = (long)getpid();
    r->t0_ns = cp_rec_now_ns();
    clock_gettime(CLOCK_REALTIME, &ts);
    r->start_unix_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    if (note)
        snprintf(r->head_note, sizeof r->head_note, "%s", note);
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->wlock, NULL);
    pthread_mutex_init(&r->tlock, NULL);
    pthread_cond_init(&r->tcond, NULL);
    if (start_thread && pthread_create(&r->thread, NULL, writer, r) == 0)
        r->running = 1;
    return r;
}

/* Appends under the lock; the array doubles when full (a failed growth
 * drops the event and counts it: the program goes on). */
static void push(cp_rec *r, const cp_rec_event *e)
{
    if (r->n == r->cap) {
        size_t cap = r->cap * 2;
        cp_rec_event *np = (cp_rec_event *)realloc(r->ev, cap * sizeof *np);
        if (!np) {
            r->st.dropped++;
            return;
        }
        r->ev = np;
        r->cap = cap;
    }
    r->ev[r->n++] = *e;
    r->st.events++;
}

/* size (48 bits), kind and device in one word: the map holds no memory of
 * its own per block. */
static void *pack(uint64_t size, int kind, int dev)
{
    if (size > (UINT64_C(1) << 47) - 1)
        size = (UINT64_C(1) << 47) - 1;
    return (void *)(uintptr_t)((size << 16) | ((uint64_t)(kind & 0xff) << 8) | (uint64_t)(dev & 0xff) |
                               (UINT64_C(1) << 63));
}

void cp_rec_add(cp_rec *r, cp_rec_event *e)
{
    if (!e->t_ns)
        e->t_ns = cp_rec_now_ns();
    if (e->device < 0 || e->device >= CP_REC_MAX_DEVICES)
        e->device = 0;
    if (r->forked) /* the child of a fork: its locks may be held forever */
        return;
    pthread_mutex_lock(&r->lock);
    {
        if (e->action == CP_REC_ALLOC) {
            r->st.allocs++;
            /* An address already live was freed by a path the recorder
             * does not see; the newer allocation replaces it. */
            if (e->ptr && !cp_ptrmap_get(&r->live, e->ptr))
                cp_ptrmap_put(&r->live, e->ptr, pack(e->size, e->kind, e->device));
            else if (e->ptr) {
                cp_ptrmap_del(&r->live, e->ptr);
                cp_ptrmap_put(&r->live, e->ptr, pack(e->size, e->kind, e->device));
            }
        }
        push(r, e);
    }
    pthread_mutex_unlock(&r->lock);
}

void cp_rec_free(cp_rec *r, cp_rec_event *e)
{
    void *v;
    if (!e->t_ns)
        e->t_ns = cp_rec_now_ns();
    e->action = CP_REC_FREE;
    if (r->forked)
        return;
    pthread_mutex_lock(&r->lock);
    {
        v = cp_ptrmap_del(&r->live, e->ptr);
        if (v) {
            uint64_t w = (uint64_t)(uintptr_t)v;
            e->size = (w >> 16) & ((UINT64_C(1) << 47) - 1);
            e->kind = (uint8_t)((w >> 8) & 0xff);
            e->device = (int16_t)(w & 0xff);
            r->st.frees++;
        } else {
            e->size = 0;
            e->kind = CP_REC_UNKNOWN;
            if (e->device < 0 || e->device >= CP_REC_MAX_DEVICES)
                e->device = 0;
            r->st.unknown_frees++;
        }
        push(r, e);
    }
    pthread_mutex_unlock(&r->lock);
}

/* The device's file, opened on first use with its comment and header lines
 * (wlock held).  NULL when it cannot be opened (said once on stderr). */
static gzFile file_of(cp_rec *r, int dev)
{
    char path[4096];
    if (r->file[dev] || r->file_failed[dev] || r->closed)
        return r->file[dev];
    if (cp_rec_path(r->out, r->pid, dev, path, sizeof path) != 0) {
        r->file_failed[dev] = 1;
        return NULL;
    }
    r->file[dev] = gzopen(path, r->gzip ? "wb6" : "wT");
    if (!r->file[dev]) {
        r->file_failed[dev] = 1;
        fprintf(stderr, "cupola record: cannot write %s: %s\n", path, strerror(errno));
        return NULL;
    }
    r->st.files++;
    gzprintf(r->file[dev], CP_RECORD_MAGIC CP_RECORD_VERSION ": pid %ld, device %d, start_unix_ns %" PRIu64
             ", flush_ms %d%s%s\n", r->pid, dev, r->start_unix_ns, r->flush_ms,
             r->head_note[0] ? ", " : "", r->head_note);
    if (r->notes[0])
        gzputs(r->file[dev], r->notes);
    gzputs(r->file[dev], CP_RECORD_HEADER "\n");
    if (r->list_path) {
        /* One short write with O_APPEND: lines of several processes never
         * mix. */
        FILE *l = fopen(r->list_path, "a");
        if (l) {
            fprintf(l, "%s\n", path);
            fclose(l);
        }
    }
    return r->file[dev];
}

void cp_rec_flush(cp_rec *r)
{
    cp_rec_event *batch;
    size_t n, i, cap;
    int dev, inplace = 0, touched[CP_REC_MAX_DEVICES] = {0};
    char line[512];

    if (r->forked)
        return;
    pthread_mutex_lock(&r->wlock);
    pthread_mutex_lock(&r->lock);
    /* Swap the arrays: the callers go on into the spare while this one is
     * written. */
    batch = r->ev;
    n = r->n;
    cap = r->cap;
    if (n == 0) {
        pthread_mutex_unlock(&r->lock);
        pthread_mutex_unlock(&r->wlock);
        return;
    }
    if (r->spare) {
        r->ev = r->spare;
        r->cap = r->spare_cap;
        r->spare = NULL;
    } else {
        cp_rec_event *fresh = (cp_rec_event *)malloc(cap * sizeof *fresh);
        if (fresh)
            r->ev = fresh;
        else
            inplace = 1; /* write in place, holding the lock (rare) */
    }
    if (!inplace) {
        r->n = 0;
        pthread_mutex_unlock(&r->lock);
    }
    for (i = 0; i < n; i++) {
        gzFile f;
        int len;
        dev = batch[i].device;
        f = file_of(r, dev);
        if (!f)
            continue;
        len = cp_rec_format(&batch[i], r->t0_ns, line, sizeof line - 1);
        line[len++] = '\n';
        gzwrite(f, line, (unsigned)len);
        touched[dev] = 1;
    }
    for (dev = 0; dev < CP_REC_MAX_DEVICES; dev++)
        if (touched[dev])
            gzflush(r->file[dev], Z_SYNC_FLUSH);
    if (inplace) {
        r->n = 0;
        pthread_mutex_unlock(&r->lock);
    } else {
        /* the written array is the next spare */
        pthread_mutex_lock(&r->lock);
        if (!r->spare) {
            r->spare = batch;
            r->spare_cap = cap;
        } else {
            free(batch);
        }
        pthread_mutex_unlock(&r->lock);
    }
    pthread_mutex_unlock(&r->wlock);
}

void cp_rec_note(cp_rec *r, const char *text)
{
    int dev;
    size_t used;
    if (r->forked)
        return;
    pthread_mutex_lock(&r->wlock);
    used = strlen(r->notes);
    if (used + strlen(text) + 4 < sizeof r->notes)
        snprintf(r->notes + used, sizeof r->notes - used, "# %s\n", text);
    for (dev = 0; dev < CP_REC_MAX_DEVICES; dev++)
        if (r->file[dev] && !r->forked) {
            gzprintf(r->file[dev], "# %s\n", text);
            gzflush(r->file[dev], Z_SYNC_FLUSH);
        }
    pthread_mutex_unlock(&r->wlock);
}

static void *writer(void *ud)
{
    cp_rec *r = (cp_rec *)ud;
    pthread_mutex_lock(&r->tlock);
    while (!r->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(r->flush_ms % 1000) * 1000000L;
        ts.tv_sec += r->flush_ms / 1000 + ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&r->tcond, &r->tlock, &ts);
        if (r->stop)
            break;
        pthread_mutex_unlock(&r->tlock);
        cp_rec_flush(r);
        pthread_mutex_lock(&r->tlock);
    }
    pthread_mutex_unlock(&r->tlock);
    return NULL;
}

void cp_rec_stats_get(cp_rec *r, cp_rec_stats *out)
{
    pthread_mutex_lock(&r->lock);
    *out = r->st;
    pthread_mutex_unlock(&r->lock);
}

void cp_rec_close(cp_rec *r)
{
    int dev;
    if (!r || r->forked)
        return; /* the parent's files: never touched here */
    if (r->running) {
        pthread_mutex_lock(&r->tlock);
        r->stop = 1;
        pthread_cond_signal(&r->tcond);
        pthread_mutex_unlock(&r->tlock);
        pthread_join(r->thread, NULL);
        r->running = 0;
    }
    cp_rec_flush(r);
    pthread_mutex_lock(&r->wlock);
    r->closed = 1;
    for (dev = 0; dev < CP_REC_MAX_DEVICES; dev++)
        if (r->file[dev]) {
            /* the mark of a whole file: one without it was cut */
            gzputs(r->file[dev], CP_RECORD_END "\n");
            gzclose(r->file[dev]);
            r->file[dev] = NULL;
        }
    pthread_mutex_unlock(&r->wlock);
}

void cp_rec_destroy(cp_rec *r)
{
    if (!r)
        return;
    cp_rec_close(r);
    if (r->forked)
        return;
    cp_ptrmap_fini(&r->live);
    free(r->ev);
    free(r->spare);
    free(r->out);
    free(r->list_path);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->wlock);
    pthread_mutex_destroy(&r->tlock);
    pthread_cond_destroy(&r->tcond);
    free(r);
}

void cp_rec_forked(cp_rec *r)
{
    /* Called in the child with every lock free (pthread_atfork's prepare
     * took them in the parent thread that forked; see inject.c).  The
     * writer thread does not exist here. */
    r->forked = 1;
    r->running = 0;
    r->n = 0;
}
