/*
 * trace.c: loading RMM logging-adaptor CSV traces and PyTorch snapshots into
 * the rows a replay walks (format and rules in trace.h; the replay is in
 * replay.c).
 *
 * The loader pairs every free with its allocate once, through a hash map
 * keyed by pointer, and stores the allocate's ordinal in the free row; the
 * replay then finds the block handed out for that allocate by indexing an
 * array, with no hashing inside the timed loop.  Rows are kept as parallel
 * arrays (structure of arrays), 26 bytes a row.
 */
#include "trace_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "ptrmap.h"
#include "pickle.h"
#include "record.h"
#include "snapshot.h"
#include "trace_torch.h"
#include "jax.h"
#include <sys/stat.h>
#include "trace_cupy.h"


#define HEADER "Thread,Time,Action,Pointer,Size,Stream"

int cp_trace_grow_rows(cp_trace *t)
{
    size_t cap = t->cap ? 2 * t->cap : 4096;
#define RE(f)                                                   \
    do {                                                        \
        void *np = realloc(t->f, cap * sizeof *t->f);           \
        if (!np)                                                \
            return -1;                                          \
        t->f = np;                                              \
    } while (0)
    RE(is_free);
    RE(ord);
    RE(ptr);
    RE(size);
    RE(stream);
    RE(thread);
    RE(time);
#undef RE
    t->cap = cap;
    return 0;
}

void cp_trace_free(cp_trace *t)
{
    if (!t)
        return;
    free(t->path);
    free(t->ops);
    free(t->is_free);
    free(t->ord);
    free(t->ptr);
    free(t->size);
    free(t->stream);
    free(t->thread);
    free(t->time);
    free(t->streams);
    free(t->label);
    free(t->device);
    if (t->labels) {
        size_t i;
        for (i = 0; i < t->nlabels; i++)
            free(t->labels[i]);
        free(t->labels);
    }
    free(t->seg_time);
    free(t->seg_reserved);
    free(t->top);
    free(t->top_row);
    free(t->segev);
    free(t->oom_row);
    free(t->oom_size);
    free(t->oom_stream);
    free(t->jax_chunk);
    free(t->jax_in_use);
    cp_cupy_hook_free(t->cupy);
    free(t);
}

int cp_trace_parse_hex(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    int n = 0;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        s += 2;
    for (; *s; s++, n++) {
        unsigned d;
        if (*s >= '0' && *s <= '9')
            d = (unsigned)(*s - '0');
        else if (*s >= 'a' && *s <= 'f')
            d = (unsigned)(*s - 'a' + 10);
        else if (*s >= 'A' && *s <= 'F')
            d = (unsigned)(*s - 'A' + 10);
        else
            return -1;
        if (n >= 16)
            return -1;
        v = v * 16 + d;
    }
    if (n == 0)
        return -1;
    *out = v;
    return 0;
}

/* -1: not a decimal number; -2: one above UINT64_MAX. */
static int parse_dec(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    int big = 0;
    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        if (v > (UINT64_MAX - 9) / 10)
            big = 1; /* go on: "99...9x" is not a number at all */
        else
            v = v * 10 + (uint64_t)(*s - '0');
    }
    if (big)
        return -2;
    *out = v;
    return 0;
}

typedef struct loader {
    cp_trace *t;
    gzFile gz;
    const char *path;
    size_t line;
    cp_ptrmap live;     /* pointer -> allocate ordinal + 1 */
    cp_ptrmap streams;  /* stream value + 1 -> index + 1 */
    void *stream_max;   /* the same for the stream value UINT64_MAX */
    cp_ptrmap threads;  /* thread value + 1 -> 1 */
    uint64_t live_bytes;
    uint64_t *osize;    /* size of each allocate, by ordinal */
    size_t ocap;
    uint64_t offset;    /* CSV: bytes of the complete lines read so far */
    int snap;           /* rows come from a snapshot: messages name the entry */
    unsigned sdev;      /* ... device_traces[sdev][sentry] */
    size_t sentry;
    int device;         /* snapshots: the one device to read (-1: all) */
    int record_header;  /* `cupola record` files: the column line was read */
    int record_end;     /* ... and the end line (record.h) */
    const char *allocator; /* JAX: the allocator to read (NULL: the first GPU_<n>_bfc) */
} loader;

/* Where the current row came from: "path:line" (CSV) or
 * "path: device_traces[d][k]" (the snapshot entry it was made from). */
static const char *where(const loader *ld, char *buf, size_t n)
{
    if (ld->snap)
        snprintf(buf, n, "%s: device_traces[%u][%zu]", ld->path, ld->sdev, ld->sentry);
    else
        snprintf(buf, n, "%s:%zu", ld->path, ld->line);
    return buf;
}

static cp_status bad(loader *ld, const char *why, const char *detail)
{
    char w[512];
    return cp_error_set(CP_ERR_INVALID, "%s: %s%s%s%s", where(ld, w, sizeof w), why,
                        detail ? " ('" : "", detail ? detail : "", detail ? "')" : "");
}

/* A sum of sizes that would pass CP_TRACE_BYTES_MAX. */
static cp_status too_big(loader *ld, const char *what, uint64_t have, uint64_t size)
{
    char w[512];
    return cp_error_set(CP_ERR_INVALID, "%s: %s (%llu bytes) plus this size (%llu) passes "
                        "2^63-1, the largest byte count a trace holds", where(ld, w, sizeof w),
                        what, (unsigned long long)have, (unsigned long long)size);
}

/* The index of a stream value in the trace's table, added when new (+1). */
static void *stream_slot(loader *ld, uint64_t stream)
{
    cp_trace *t = ld->t;
    /* Keys are value + 1 (0 marks an empty slot); the one value that would
     * wrap to 0 has its own slot. */
    void *v = stream == UINT64_MAX ? ld->stream_max : cp_ptrmap_get(&ld->streams, stream + 1);
    if (!v) {
        uint64_t *np = realloc(t->streams, (t->nstreams + 1) * sizeof *np);
        if (!np)
            return NULL;
        t->streams = np;
        t->streams[t->nstreams++] = stream;
        v = (void *)(uintptr_t)t->nstreams;
        if (stream == UINT64_MAX)
            ld->stream_max = v;
        else if (cp_ptrmap_put(&ld->streams, stream + 1, v) != 0)
            return NULL;
    }
    return v;
}

/* Appends one checked row; shared by the CSV and the snapshot loaders. */
static cp_status add_row(loader *ld, int is_free, uint64_t ptr, uint64_t size, uint64_t stream,
                         uint64_t thread, double time)
{
    cp_trace *t = ld->t;
    void *v;
    size_t i = t->n;
    char w[512];

    if (t->n == t->cap && cp_trace_grow_rows(t) != 0)
        return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", ld->path);
    if (size > CP_TRACE_BYTES_MAX)
        return cp_error_set(CP_ERR_INVALID, "%s: size %llu is above 2^63-1, the largest byte "
                            "count a trace holds", where(ld, w, sizeof w),
                            (unsigned long long)size);
    if (!is_free) {
        if (size == 0)
            return bad(ld, "an allocate of size 0 (sizes must be positive)", NULL);
        if (cp_ptrmap_get(&ld->live, ptr))
            return cp_error_set(CP_ERR_INVALID, "%s: allocate of 0x%llx, which is already "
                                "live", where(ld, w, sizeof w), (unsigned long long)ptr);
        /* Live bytes never exceed the total, but both are checked: each is
         * a figure of its own (peak_live, total_bytes). */
        if (size > CP_TRACE_BYTES_MAX - ld->live_bytes)
            return too_big(ld, "the live bytes", ld->live_bytes, size);
        if (size > CP_TRACE_BYTES_MAX - t->info.total_bytes)
            return too_big(ld, "the total of the allocation sizes", t->info.total_bytes, size);
        if (t->nallocs == ld->ocap) {
            size_t cap = ld->ocap ? 2 * ld->ocap : 4096;
            uint64_t *np = realloc(ld->osize, cap * sizeof *np);
            if (!np)
                return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", ld->path);
            ld->osize = np;
            ld->ocap = cap;
        }
        ld->osize[t->nallocs] = size;
        if (cp_ptrmap_put(&ld->live, ptr, (void *)(uintptr_t)(t->nallocs + 1)) != 0)
            return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", ld->path);
        t->ord[i] = (uint32_t)t->nallocs++;
        ld->live_bytes += size;
        if (ld->live_bytes > t->info.peak_live)
            t->info.peak_live = ld->live_bytes;
        t->info.allocs++;
        t->info.total_bytes += size;
        if (size > t->info.max_size)
            t->info.max_size = size;
    } else {
        v = cp_ptrmap_del(&ld->live, ptr);
        if (!v)
            return cp_error_set(CP_ERR_INVALID, "%s: free of 0x%llx, which is not live "
                                "(never allocated in this trace, or freed twice)",
                                where(ld, w, sizeof w), (unsigned long long)ptr);
        t->ord[i] = (uint32_t)((uintptr_t)v - 1);
        ld->live_bytes -= ld->osize[t->ord[i]];
        t->info.frees++;
        if (size == 0) /* 0 or missing: the allocation's, as the row reads */
            size = ld->osize[t->ord[i]];
    }
    v = stream_slot(ld, stream);
    if (!v)
        return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", ld->path);
    if (!cp_ptrmap_get(&ld->threads, thread + 1)) {
        if (cp_ptrmap_put(&ld->threads, thread + 1, (void *)1) != 0)
            return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", ld->path);
        t->info.threads++;
    }
    t->is_free[i] = (uint8_t)is_free;
    t->ptr[i] = ptr;
    t->size[i] = size;
    t->stream[i] = (uint32_t)((uintptr_t)v - 1);
    t->thread[i] = (uint32_t)thread;
    t->time[i] = time;
    t->n++;
    return CP_OK;
}

static cp_status parse_row(loader *ld, char *line)
{
    char *col[7];
    int ncol = 0;
    char *p = line;
    uint64_t thread, ptr, size, stream;
    double time;
    char *end;
    int is_free, rc;

    col[ncol++] = p;
    for (; *p; p++) {
        if (*p == ',') {
            *p = '\0';
            if (ncol == 7)
                break;
            col[ncol++] = p + 1;
        }
    }
    if (ncol != 6)
        return ncol < 6 ? cp_error_set(CP_ERR_INVALID, "%s:%zu: expected 6 columns "
                                       "(Thread,Time,Action,Pointer,Size,Stream), found %d",
                                       ld->path, ld->line, ncol)
                        : cp_error_set(CP_ERR_INVALID, "%s:%zu: expected 6 columns, found more",
                                       ld->path, ld->line);
    if ((rc = parse_dec(col[0], &thread)) == -1)
        return bad(ld, "thread is not a decimal number", col[0]);
    /* Rows keep the thread in 32 bits (an OS thread id fits); a larger one
     * was cut, and 2^64-1 wrapped the thread table's key to its empty mark
     * (counted as a new thread on every row). */
    if (rc == -2 || thread > UINT32_MAX)
        return bad(ld, "thread is above 2^32-1", col[0]);
    errno = 0;
    time = strtod(col[1], &end);
    if (end == col[1] || *end || errno)
        return bad(ld, "time is not a number", col[1]);
    if (!isfinite(time)) /* strtod takes "nan" and "inf" */
        return bad(ld, "time is not a finite number", col[1]);
    if (strcmp(col[2], "allocate") == 0)
        is_free = 0;
    else if (strcmp(col[2], "free") == 0)
        is_free = 1;
    else if (strcmp(col[2], "allocate failure") == 0 || strcmp(col[2], "free failure") == 0)
        return CP_OK; /* RMM logs refused requests; they did not change the heap */
    else
        return bad(ld, "action must be 'allocate' or 'free'", col[2]);
    if (cp_trace_parse_hex(col[3], &ptr) != 0)
        return bad(ld, "pointer is not a hexadecimal number", col[3]);
    if (ptr == 0)
        return bad(ld, "pointer is 0", NULL);
    /* An empty Size is a missing one: allowed on a free (it takes its
     * allocation's size, like 0), refused on an allocate. */
    if (!*col[4] && is_free)
        size = 0;
    else if (!*col[4])
        return bad(ld, "size is missing", NULL);
    else if ((rc = parse_dec(col[4], &size)) != 0)
        return rc == -2 ? cp_error_set(CP_ERR_INVALID, "%s:%zu: size %s is above 2^63-1, the "
                                       "largest byte count a trace holds", ld->path, ld->line,
                                       col[4])
                        : bad(ld, "size is not a number", col[4]);
    if (cp_trace_parse_hex(col[5], &stream) != 0)
        return bad(ld, "stream is not a hexadecimal number", col[5]);

    return add_row(ld, is_free, ptr, size, stream, thread, time);
}

/* The torch model's operations of a snapshot (snapshot.h), with rows
 * turned into allocation ordinals and stream values into indices, and where
 * each refused request (`oom`) stands among the rows. */
static cp_status torch_view(loader *ld, cp_snapshot *snap)
{
    cp_trace *t = ld->t;
    size_t i, row = 0;
    uint32_t last = 0;
    t->top = malloc((snap->ntop ? snap->ntop : 1) * sizeof *t->top);
    t->top_row = malloc((snap->ntop ? snap->ntop : 1) * sizeof *t->top_row);
    t->oom_row = malloc((snap->ooms ? snap->ooms : 1) * sizeof *t->oom_row);
    t->oom_size = malloc((snap->ooms ? snap->ooms : 1) * sizeof *t->oom_size);
    t->oom_stream = malloc((snap->ooms ? snap->ooms : 1) * sizeof *t->oom_stream);
    if (!t->top || !t->top_row || !t->oom_row || !t->oom_size || !t->oom_stream)
        return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", ld->path);
    for (i = 0; i < snap->ntop; i++) {
        const cp_snap_top *o = &snap->top[i];
        cp_trace_top *x = &t->top[t->ntop];
        memset(x, 0, sizeof *x);
        x->kind = o->kind;
        x->flag = o->flag;
        if (o->kind == CP_TOP_ALLOC || o->kind == CP_TOP_FREE || o->kind == CP_TOP_DONE) {
            if (o->ref >= t->n)
                continue;
            x->ord = t->ord[o->ref];
            x->stream = (uint16_t)t->stream[o->ref];
            x->size = t->size[o->ref];
            if (o->kind != CP_TOP_DONE && (uint32_t)o->ref > last)
                last = (uint32_t)o->ref;
        } else if (o->kind == CP_TOP_OOM) {
            void *v = stream_slot(ld, o->stream);
            if (!v)
                return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", ld->path);
            if (t->nstreams > UINT16_MAX)
                return cp_error_set(CP_ERR_INVALID, "%s: more than 65535 distinct streams",
                                    ld->path);
            x->stream = (uint16_t)((uintptr_t)v - 1);
            x->size = o->size;
            /* the first row after the oom entry */
            while (row < snap->n && snap->ev[row].device == snap->op_device &&
                   snap->ev[row].entry < o->entry)
                row++;
            t->oom_row[t->nooms] = row;
            t->oom_size[t->nooms] = o->size;
            t->oom_stream[t->nooms] = x->stream;
            t->nooms++;
        }
        t->top_row[t->ntop] = last;
        t->ntop++;
    }
    t->segev = snap->segev;
    t->nsegev = snap->nsegev;
    snap->segev = NULL;
    snap->nsegev = 0;
    t->has_settings = snap->has_settings;
    memcpy(t->torch_env, snap->torch_env, sizeof t->torch_env);
    memcpy(t->torch_settings, snap->torch_settings, sizeof t->torch_settings);
    return CP_OK;
}

/* The gzip stream as a pickle source (pickle.h). */
static long gz_source(void *ud, unsigned char *buf, size_t n)
{
    loader *ld = (loader *)ud;
    int err, got = gzread(ld->gz, buf, (unsigned)(n > (1u << 30) ? (1u << 30) : n));
    if (got < 0 || (got == 0 && (gzerror(ld->gz, &err), err != Z_OK && err != Z_STREAM_END))) {
        const char *msg = cp_gz_reason(gzerror(ld->gz, &err), ld->path);
        cp_error_set(CP_ERR_INVALID, "truncated or corrupt gzip data (%s)", msg);
        return -1;
    }
    return got;
}

/* A PyTorch snapshot, read by snapshot.c (a pickle as a stream, so memory
 * follows the entries and not the frames; cupola's compact form, which has
 * no frames, in memory), then its events appended like CSV rows. */
static cp_status load_snapshot(loader *ld, int compact)
{
    cp_trace *t = ld->t;
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    cp_snapshot snap;
    cp_status st = CP_OK;
    size_t i;
    int err;

    if (!compact) {
        cp_pk_source src;
        src.read = gz_source;
        src.ud = ld;
        st = cp_snapshot_read_stream(&src, ld->device, &snap);
        goto decoded;
    }
    for (;;) {
        int got;
        if (cap - len < (1u << 16)) {
            size_t ncap = cap ? 2 * cap : (1u << 20);
            unsigned char *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", ld->path);
            }
            buf = nb;
            cap = ncap;
        }
        got = gzread(ld->gz, buf + len, (unsigned)(cap - len > (1u << 30) ? (1u << 30) : cap - len));
        if (got < 0) {
            const char *msg = cp_gz_reason(gzerror(ld->gz, &err), ld->path);
            st = cp_error_set(CP_ERR_INVALID, "%s: truncated or corrupt gzip data (%s)",
                              ld->path, msg);
            free(buf);
            return st;
        }
        if (got == 0)
            break;
        len += (size_t)got;
    }
    {
        const char *msg = cp_gz_reason(gzerror(ld->gz, &err), ld->path);
        if (err != Z_OK && err != Z_STREAM_END) {
            free(buf);
            return cp_error_set(CP_ERR_INVALID, "%s: truncated or corrupt gzip data (%s)",
                                ld->path, msg);
        }
    }
    st = ld->device >= 0 ? cp_snapshot_read_device(buf, len, ld->device, &snap)
                         : cp_snapshot_read(buf, len, &snap);
    free(buf);
decoded:
    if (st != CP_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", cp_error_msg());
        return cp_error_set(st, "%s: PyTorch snapshot: %s", ld->path, why);
    }
    t->format = TRACE_SNAPSHOT;
    t->label = malloc((snap.n ? snap.n : 1) * sizeof *t->label);
    t->device = malloc((snap.n ? snap.n : 1) * sizeof *t->device);
    if (!t->label || !t->device)
        st = cp_error_set(CP_ERR_OOM, "out of host memory loading %s", ld->path);
    for (i = 0; i < snap.n && st == CP_OK; i++) {
        const cp_snap_event *e = &snap.ev[i];
        ld->line = i + 1;
        ld->snap = 1;
        ld->sdev = e->device;
        ld->sentry = e->entry;
        st = add_row(ld, e->is_free, e->addr, e->size, e->stream, e->device, e->time_us);
        if (st == CP_OK) {
            t->label[t->n - 1] = e->label;
            t->device[t->n - 1] = e->device;
        }
        if (st == CP_OK && t->nallocs >= UINT32_MAX)
            st = bad(ld, "too many allocations (more than 2^32)", NULL);
    }
    if (st == CP_OK) {
        t->labels = snap.labels;
        t->nlabels = snap.nlabels;
        snap.labels = NULL;
        snap.nlabels = 0;
        t->seg_time = snap.seg_time;
        t->seg_reserved = snap.seg_reserved;
        t->nseg = snap.nseg;
        snap.seg_time = NULL;
        snap.seg_reserved = NULL;
        t->info.devices = snap.devices;
        t->info.ignored = snap.ignored;
        t->info.unmatched = snap.unmatched;
        t->info.torch_reserved = snap.has_segments;
        t->info.torch_reserved_end = snap.reserved_end;
        t->info.torch_peak_reserved = snap.reserved_peak;
        st = torch_view(ld, &snap);
    }
    cp_snapshot_fini(&snap);
    return st;
}

/* A `cupola record` file ends early (record.h): what came before loads,
 * with a warning; a file cut before its column line is refused. */
static cp_status record_cut(loader *ld, const char *gzmsg)
{
    cp_trace *t = ld->t;
    if (!ld->record_header)
        return cp_error_set(CP_ERR_INVALID, "%s:%zu: a cupola record file cut before its "
                            "column line", ld->path, ld->line);
    t->cut = 1;
    snprintf(t->warning, sizeof t->warning, "%s:%zu: the recording is cut here (%s; the "
             "program was stopped while recording?): the %zu events before it were loaded",
             ld->path, ld->line, gzmsg ? gzmsg : "a last line without its newline",
             t->n);
    return CP_OK;
}

/* One line of a `cupola record` file after its first (record.h). */
static cp_status record_line(loader *ld, char *buf)
{
    cp_record_row row;
    const char *why, *detail;
    if (strcmp(buf, CP_RECORD_END) == 0)
        ld->record_end = 1;
    if (buf[0] == '#' || buf[0] == '\0')
        return CP_OK;
    if (!ld->record_header) {
        if (strcmp(buf, CP_RECORD_HEADER) != 0)
            return cp_error_set(CP_ERR_INVALID, "%s:%zu: expected the column line '"
                                CP_RECORD_HEADER "', found '%.80s'", ld->path, ld->line, buf);
        ld->record_header = 1;
        return CP_OK;
    }
    if (cp_record_parse(buf, &row, &why, &detail) != 0)
        return bad(ld, why, detail);
    if (!row.replayed) {
        ld->t->info.ignored++;
        return CP_OK;
    }
    {
        cp_status st = add_row(ld, row.is_free, row.ptr, row.size, row.stream, row.thread,
                               row.time_us);
        if (st == CP_OK && ld->t->nallocs >= UINT32_MAX)
            return bad(ld, "too many allocations (more than 2^32)", NULL);
        return st;
    }
}

static cp_status load(loader *ld)
{
    char buf[1024];
    int err;
    for (;;) {
        size_t len;
        cp_status st;
        if (!gzgets(ld->gz, buf, sizeof buf))
            break;
        ld->line++;
        len = strlen(buf);
        if (len && buf[len - 1] != '\n' && ld->t->record) {
            /* A recording cut by a killed program: the line is a prefix of
             * one the recorder wrote whole, so it is dropped (record.h). */
            const char *msg = cp_gz_reason(gzerror(ld->gz, &err), ld->path);
            if ((err != Z_OK && err != Z_STREAM_END) || gzeof(ld->gz))
                return record_cut(ld, err != Z_OK && err != Z_STREAM_END ? msg : NULL);
        }
        if (len && buf[len - 1] != '\n') {
            /* A last line without its newline: complete only if the stream
             * ended cleanly (a truncated gzip member hands out its partial
             * last line before reporting the error). */
            const char *msg = cp_gz_reason(gzerror(ld->gz, &err), ld->path);
            if (err != Z_OK && err != Z_STREAM_END)
                return cp_error_set(CP_ERR_INVALID, "%s:%zu: truncated or corrupt gzip data "
                                    "(%s)", ld->path, ld->line, msg);
            /* gzgets stops only at a newline, a full buffer or the end, so
             * a shorter string than it read means a NUL byte cut it: known
             * from the bytes read (the offset of the lines before). */
            if ((uint64_t)gztell(ld->gz) - ld->offset != len)
                return bad(ld, "a NUL byte in the line", NULL);
            if (!gzeof(ld->gz))
                return bad(ld, "line too long", NULL);
        }
        ld->offset += len;
        while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            buf[--len] = '\0';
        if (ld->line == 1 && cp_record_is_magic(buf)) {
            ld->t->record = 1;
            continue;
        }
        if (ld->t->record) {
            cp_status st2 = record_line(ld, buf);
            if (st2 != CP_OK)
                return st2;
            continue;
        }
        if (ld->line == 1) {
            if (strcmp(buf, HEADER) != 0)
                return cp_error_set(CP_ERR_INVALID, "%s:1: header must be '" HEADER "', "
                                    "found '%.80s'", ld->path, buf);
            continue;
        }
        if (len == 0)
            continue; /* a blank line (the end of a file often has one) */
        st = parse_row(ld, buf);
        if (st != CP_OK)
            return st;
        if (ld->t->nallocs >= UINT32_MAX)
            return bad(ld, "too many allocations (more than 2^32)", NULL);
    }
    {
        const char *msg = cp_gz_reason(gzerror(ld->gz, &err), ld->path);
        if (err != Z_OK && err != Z_STREAM_END && ld->t->record)
            return record_cut(ld, msg);
        if (err != Z_OK && err != Z_STREAM_END)
            return cp_error_set(CP_ERR_INVALID, "%s:%zu: truncated or corrupt gzip data (%s)",
                                ld->path, ld->line + 1, msg);
    }
    if (ld->t->record && !ld->record_header)
        return cp_error_set(CP_ERR_INVALID, "%s: a cupola record file without its column "
                            "line ('" CP_RECORD_HEADER "')", ld->path);
    if (ld->t->record && !ld->record_end) {
        ld->t->cut = 1;
        snprintf(ld->t->warning, sizeof ld->t->warning, "%s: no '" CP_RECORD_END "' line: the "
                 "recording stopped before its process ended (killed, or still running): the "
                 "%zu events in it were loaded", ld->path, ld->t->n);
    }
    if (ld->line == 0)
        return cp_error_set(CP_ERR_INVALID, "%s:1: empty file (expected the header '" HEADER
                            "')", ld->path);
    return CP_OK;
}

/* A file named *.pickle or *.pkl is read as a pickle whatever it holds, so
 * one that is not a pickle is called that (it used to be read as a CSV and
 * refused for its header). */
/* A JAX memory profile (jax.h): kind 1 JSON lines, 2 an XSpace.  Events
 * in time order (stable: the file's order among equal times); a free of a
 * chunk not live is of a block allocated before the profile began, skipped
 * (counted in unmatched); an allocation at an address still live means
 * the free of the old chunk reached the profile late (another thread):
 * that free is done before it and its own event skipped (reordered). */
static int cmp_jax(const void *a, const void *b)
{
    const cp_jax_event *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* BFC's own order, where times tie or come from several threads' clocks:
 * each event's bytes_allocated is BFC's bytes_in_use after it, taken under
 * BFC's lock, so in BFC's order each is the one before it plus or minus the
 * event's chunk.  An event that breaks that chain is followed, within the
 * next RESEQ_WINDOW events, by the one that continues it: that one is moved
 * up (counted in *moved).  Recordings without the two stats stay as they
 * are. */
#define RESEQ_WINDOW 16
static void resequence(cp_jax_events *e, size_t *moved)
{
    size_t i, j;
    uint64_t run;
    for (i = 0; i < e->n; i++)
        if (e->ev[i].in_use == CP_JAX_NONE || e->ev[i].chunk == CP_JAX_NONE)
            return;
    if (e->n < 2)
        return;
    run = e->ev[0].in_use;
    for (i = 1; i < e->n; i++) {
        for (j = i; j < e->n && j <= i + RESEQ_WINDOW; j++) {
            const cp_jax_event *x = &e->ev[j];
            uint64_t want = x->is_free ? run - x->chunk : run + x->chunk;
            if (x->in_use == want)
                break;
        }
        if (j > i && j < e->n && j <= i + RESEQ_WINDOW) {
            cp_jax_event x = e->ev[j];
            memmove(&e->ev[i + 1], &e->ev[i], (j - i) * sizeof *e->ev);
            e->ev[i] = x;
            (*moved)++;
        }
        run = e->ev[i].in_use;
    }
}

static cp_status load_jax(loader *ld, int kind)
{
    cp_trace *t = ld->t;
    cp_jax_events e;
    cp_ptrmap late;
    cp_status st;
    size_t i;

    st = kind == 1 ? cp_jax_read_jsonl(ld->gz, ld->path, ld->allocator, &e)
                   : cp_jax_read_xplane(ld->gz, ld->path, ld->allocator, &e);
    if (st != CP_OK)
        return st;
    t->format = TRACE_JAX;
    snprintf(t->allocator, sizeof t->allocator, "%s", e.allocator);
    if (e.has_ts)
        qsort(e.ev, e.n, sizeof *e.ev, cmp_jax);
    resequence(&e, &t->info.reordered);
    /* rows: at most two an event (a free moved early, whose own event never
     * comes, adds one) */
    t->jax_chunk = malloc((e.n ? e.n : 1) * sizeof *t->jax_chunk);
    t->jax_in_use = malloc((e.n ? 2 * e.n : 1) * sizeof *t->jax_in_use);
    if (!t->jax_chunk || !t->jax_in_use || cp_ptrmap_init(&late, 64) != 0) {
        cp_jax_events_free(&e);
        return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", ld->path);
    }
    for (i = 0; i < e.n && st == CP_OK; i++) {
        const cp_jax_event *ev = &e.ev[i];
        /* microseconds from the first event (relative, so no precision is lost) */
        double us = e.has_ts ? (double)((ev->ts - e.ev[0].ts) / 1000.0L) : (double)i;
        uint64_t addr = ev->addr;
        ld->line = i + 1;
        if (addr == 0) {
            st = cp_error_set(CP_ERR_INVALID, "%s: event %zu: address 0 (BFC never hands out "
                              "a null chunk)", ld->path, i + 1);
            break;
        }
        if (ev->peak != CP_JAX_NONE && ev->peak > t->info.bfc_peak_bytes_in_use)
            t->info.bfc_peak_bytes_in_use = ev->peak;
        if (ev->is_free) {
            uintptr_t n = (uintptr_t)cp_ptrmap_get(&late, addr);
            if (n) {
                /* done already, before the allocation that reused it */
                if (n == 1)
                    (void)cp_ptrmap_del(&late, addr);
                else
                    (void)cp_ptrmap_put(&late, addr, (void *)(n - 1));
                continue;
            }
            if (!cp_ptrmap_get(&ld->live, addr)) {
                t->info.unmatched++;
                continue;
            }
            st = add_row(ld, 1, addr, 0, 0, 0, us);
            if (st == CP_OK)
                t->jax_in_use[t->n - 1] = ev->in_use;
            continue;
        }
        if (cp_ptrmap_get(&ld->live, addr)) {
            uintptr_t n = (uintptr_t)cp_ptrmap_get(&late, addr);
            st = add_row(ld, 1, addr, 0, 0, 0, us);
            if (st != CP_OK)
                break;
            t->jax_in_use[t->n - 1] = CP_JAX_NONE;
            if (cp_ptrmap_put(&late, addr, (void *)(n + 1)) != 0)
                st = cp_error_set(CP_ERR_OOM, "out of host memory loading %s", ld->path);
            t->info.reordered++;
        }
        if (st == CP_OK && ev->requested == 0)
            st = cp_error_set(CP_ERR_INVALID, "%s: event %zu: an allocation of 0 bytes (BFC "
                              "records none)", ld->path, i + 1);
        if (st == CP_OK)
            st = add_row(ld, 0, addr, ev->requested, 0, 0, us);
        if (st == CP_OK) {
            t->jax_in_use[t->n - 1] = ev->in_use;
            t->jax_chunk[t->ord[t->n - 1]] = ev->chunk;
        }
    }
    cp_ptrmap_fini(&late);
    cp_jax_events_free(&e);
    if (st == CP_OK && t->n == 0)
        st = cp_error_set(CP_ERR_INVALID, "%s: no memory events of %s left once frees of blocks "
                          "allocated before the profile are skipped", ld->path, t->allocator);
    return st;
}

static int named_pickle(const char *path)
{
    size_t n = strlen(path);
    return (n >= 7 && strcmp(path + n - 7, ".pickle") == 0) ||
           (n >= 4 && strcmp(path + n - 4, ".pkl") == 0);
}

cp_status cp_trace_load(const char *path, cp_trace **out)
{
    return cp_trace_load_device(path, -1, out);
}

cp_status cp_trace_load_device(const char *path, int device, cp_trace **out)
{
    return cp_trace_load_opts(path, device, NULL, out);
}

/* JSON lines are JAX's memory events (jax.c) or CuPy's hook lines
 * (cupy_hook.c): which, by the keys of the first line ("event" or "hook"
 * followed by a colon), read from the start and rewound after. */
enum { JSONL_NONE, JSONL_UNKNOWN, JSONL_JAX, JSONL_CUPY };
static int has_key(const char *line, const char *key)
{
    const char *p = line;
    size_t k = strlen(key);
    while ((p = strstr(p, key)) != NULL) {
        p += k;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == ':')
            return 1;
    }
    return 0;
}

static int json_lines_kind(gzFile gz, const char *path)
{
    char line[65536];
    int kind = JSONL_UNKNOWN;
    (void)path;
    if (gzgets(gz, line, (int)sizeof line) != NULL) {
        if (has_key(line, "\"hook\""))
            kind = JSONL_CUPY;
        else if (has_key(line, "\"event\"") || has_key(line, "\"allocator_name\""))
            kind = JSONL_JAX;
    }
    gzrewind(gz);
    return kind;
}

cp_status cp_trace_load_opts(const char *path, int device, const char *allocator,
                             cp_trace **out)
{
    loader ld;
    cp_trace *t;
    cp_status st;
    char *found = NULL;
    struct stat sb;

    *out = NULL;
    memset(&ld, 0, sizeof ld);
    ld.device = device;
    ld.allocator = allocator;
    /* the directory jax.profiler.trace wrote: its profile */
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        found = cp_jax_find_profile(path);
        if (!found)
            return cp_error_set(CP_ERR_INVALID, "%s: cannot read: Is a directory, and no JAX "
                                "profile in it (*.xplane.pb, or plugins/profile/<run>/"
                                "*.xplane.pb)", path);
        path = found;
    }
    t = calloc(1, sizeof *t);
    if (t)
        t->path = malloc(strlen(path) + 1);
    if (!t || !t->path) {
        free(t);
        free(found);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    strcpy(t->path, path);
    free(found);
    /* path may have been found's: from here on the trace's own copy, which
     * lives until the messages below are made (cp_trace_free comes after) */
    path = t->path;
    ld.t = t;
    ld.path = path;
    ld.gz = gzopen(path, "rb");
    if (!ld.gz) {
        st = cp_error_set(CP_ERR_BACKEND, "%s: cannot open: %s", path,
                          errno ? strerror(errno) : "out of memory");
        cp_trace_free(t);
        return st;
    }
    gzbuffer(ld.gz, 1 << 17);
    if (cp_ptrmap_init(&ld.live, 4096) != 0 || cp_ptrmap_init(&ld.streams, 16) != 0 ||
        cp_ptrmap_init(&ld.threads, 16) != 0) {
        st = cp_error_set(CP_ERR_OOM, "out of host memory");
    } else {
        /* A pickle starts with PROTO (0x80, version); a CSV with its header. */
        unsigned char head[8];
        int jl = JSONL_NONE;
        int got;
        int is_pickle;
        errno = 0;
        got = gzread(ld.gz, head, 8);
        /* Any file starting with PROTO's byte goes to the pickle reader, so
         * a pickle of a protocol it does not read is called that (a CSV
         * cannot start with 0x80; it used to be read as a CSV with a bad
         * header). */
        is_pickle = (got >= 2 && (cp_pickle_sniff(head, 2) || head[0] == 0x80)) ||
                    (got == 8 && cp_snapshot_is_compact(head, 8)) || named_pickle(path);
        t->info.devices = 1;
        if (got < 0) /* a directory opens but cannot be read ("cannot rewind" before) */
            st = cp_error_set(CP_ERR_INVALID, "%s: cannot read: %s", path,
                              errno ? strerror(errno) : "read error");
        else if (gzrewind(ld.gz) != 0)
            st = cp_error_set(CP_ERR_BACKEND, "%s: cannot rewind", path);
        else if (!is_pickle && got > 0 && cp_cupy_hook_sniff(head, (size_t)got) &&
                 (jl = json_lines_kind(ld.gz, path)) == JSONL_UNKNOWN)
            st = cp_error_set(CP_ERR_INVALID, "%s:1: JSON lines, but neither a JAX memory event "
                              "(key \"event\") nor a CuPy hook line (key \"hook\")", path);
        else if (!is_pickle && got > 0 && (jl == JSONL_JAX || cp_jax_sniff(head, (size_t)got, path) == 2))
            st = device > 0 ? cp_error_set(CP_ERR_INVALID, "%s: device %d: a JAX profile is "
                                           "read by allocator (option 'allocator')", path, device)
                            : load_jax(&ld, jl == JSONL_JAX ? 1 : 2);
        else if (!is_pickle && got > 0 && jl == JSONL_CUPY)
            st = cp_cupy_hook_load(ld.gz, path, device, t); /* JSON lines */
        else if (!is_pickle && device > 0)
            /* after the JAX and CuPy files, which say what they hold instead */
            st = cp_error_set(CP_ERR_INVALID, "%s: device %d: an RMM log holds one device", path,
                              device);
        else
            st = is_pickle ? load_snapshot(&ld, got == 8 && cp_snapshot_is_compact(head, 8))
                           : load(&ld);
    }
    gzclose(ld.gz);
    if (st == CP_OK && ld.t->nstreams > UINT16_MAX)
        st = cp_error_set(CP_ERR_INVALID, "%s: more than 65535 distinct streams", path);
    if (st == CP_OK && !t->ops) {
        size_t i;
        t->ops = malloc((t->n ? t->n : 1) * sizeof *t->ops);
        if (!t->ops)
            st = cp_error_set(CP_ERR_OOM, "out of host memory loading %s", path);
        for (i = 0; st == CP_OK && i < t->n; i++) {
            t->ops[i].size = ld.osize[t->ord[i]];
            t->ops[i].ord = t->ord[i];
            t->ops[i].stream = (uint16_t)t->stream[i];
            t->ops[i].is_free = t->is_free[i];
        }
    }
    if (st == CP_OK && t->format != TRACE_SNAPSHOT) {
        /* CSV and JAX: the torch model allocates and frees as the rows do */
        /* CSV, CuPy logs: the torch model allocates and frees as the rows do */
        size_t i;
        t->top = malloc((t->n ? t->n : 1) * sizeof *t->top);
        t->top_row = malloc((t->n ? t->n : 1) * sizeof *t->top_row);
        if (!t->top || !t->top_row)
            st = cp_error_set(CP_ERR_OOM, "out of host memory loading %s", path);
        for (i = 0; st == CP_OK && i < t->n; i++) {
            cp_trace_top *x = &t->top[i];
            t->top_row[i] = (uint32_t)i;
            x->kind = t->is_free[i] ? CP_TOP_FREE : CP_TOP_ALLOC;
            x->flag = 0;
            x->ord = t->ord[i];
            x->stream = (uint16_t)t->stream[i];
            x->size = t->ops[i].size;
        }
        if (st == CP_OK)
            t->ntop = t->n;
    }
    if (st == CP_OK && t->format != TRACE_CUPY) { /* a CuPy log's loader sets them */
        t->info.ooms = t->nooms;
        t->info.events = t->n;
        t->info.streams = t->nstreams;
        t->info.leaked = (size_t)ld.live.count;
        t->info.duration_us = t->n ? t->time[t->n - 1] - t->time[0] : 0.0;
    }
    cp_ptrmap_fini(&ld.live);
    cp_ptrmap_fini(&ld.streams);
    cp_ptrmap_fini(&ld.threads);
    free(ld.osize);
    if (st != CP_OK) {
        cp_trace_free(t);
        return st;
    }
    *out = t;
    return CP_OK;
}

size_t cp_trace_events(const cp_trace *t)
{
    return t->n;
}

void cp_trace_info_get(const cp_trace *t, cp_trace_info *out)
{
    *out = t->info;
}

const char *cp_trace_path(const cp_trace *t)
{
    return t->path;
}

cp_status cp_trace_event(const cp_trace *t, size_t i, cp_trace_row *out)
{
    if (i >= t->n)
        return cp_error_set(CP_ERR_INVALID, "event %zu out of range (the trace has %zu)", i,
                            t->n);
    out->is_free = t->is_free[i];
    out->pointer = t->ptr[i];
    out->size = t->size[i];
    out->stream = t->streams[t->stream[i]];
    out->thread = t->thread[i];
    out->time_us = t->time[i];
    out->device = t->device ? t->device[i] : 0;
    out->label = t->label && t->label[i] ? t->labels[t->label[i] - 1] : NULL;
    return CP_OK;
}

size_t cp_trace_torch_calls(const cp_trace *t)
{
    return t->nsegev;
}

cp_status cp_trace_oom_entry(const cp_trace *t, size_t k, size_t *row, uint64_t *size,
                             uint64_t *stream)
{
    if (k >= t->nooms)
        return cp_error_set(CP_ERR_INVALID, "oom entry %zu out of range (the trace has %zu)", k,
                            t->nooms);
    *row = t->oom_row[k];
    *size = t->oom_size[k];
    *stream = t->streams[t->oom_stream[k]];
    return CP_OK;
}

const char *cp_trace_format(const cp_trace *t)
{
    switch (t->format) {
    case TRACE_SNAPSHOT: return "torch_snapshot";
    case TRACE_JAX: return "jax_memory";
    case TRACE_CUPY: return "cupy_hook";
    default: return t->record ? "cupola_record" : "rmm_csv";
    }
}

void cp_trace_torch_view_get(const cp_trace *t, cp_trace_torch_view *v)
{
    /* the operations' stream index 0 where the trace has no stream (a
     * snapshot of segment entries alone): the replay reads streams[0] for
     * every operation */
    static const uint64_t no_stream[1] = {0};
    v->top = t->top;
    v->top_row = t->top_row;
    v->time = t->time;
    v->ntop = t->ntop;
    v->streams = t->streams ? t->streams : no_stream;
    v->nstreams = t->nstreams;
    v->nallocs = t->nallocs;
    v->segev = t->segev;
    v->nsegev = t->nsegev;
    v->entries = t->n;
}

const char *cp_trace_torch_conf(const cp_trace *t, int settings)
{
    if (!t->has_settings)
        return NULL;
    return settings ? t->torch_settings : t->torch_env;
}

size_t cp_trace_torch_reserved(const cp_trace *t, const double **time, const uint64_t **reserved)
{
    *time = t->seg_time;
    *reserved = t->seg_reserved;
    return t->nseg;
}

const char *cp_trace_warning(const cp_trace *t)
{
    return t->cut ? t->warning : NULL;
}

const char *cp_trace_allocator(const cp_trace *t)
{
    return t->format == TRACE_JAX ? t->allocator : NULL;
}

int cp_trace_jax_row(const cp_trace *t, size_t i, uint64_t *chunk, uint64_t *in_use)
{
    if (t->format != TRACE_JAX || i >= t->n)
        return 0;
    *chunk = t->jax_chunk[t->ord[i]];
    *in_use = t->jax_in_use[i];
    return 1;
}
