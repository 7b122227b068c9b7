/*
 * builder.c: the row builder (builder.h).
 *
 * Rows are kept as parallel arrays (structure of arrays, 26 bytes a row,
 * more where the trace has labels or devices); each free is paired with its
 * allocate once, through a hash map keyed by pointer, and carries the
 * allocate's ordinal, so the replay indexes an array where it would hash.
 */
#include "builder.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cp_status cp_tb_init(cp_trace_builder *b, cp_trace *t)
{
    memset(b, 0, sizeof *b);
    b->t = t;
    b->path = t->path;
    t->info.devices = 1;
    if (cp_ptrmap_init(&b->live, 4096) != 0 || cp_ptrmap_init(&b->streams, 16) != 0 ||
        cp_ptrmap_init(&b->threads, 16) != 0 || cp_ptrmap_init(&b->labelmap, 16) != 0) {
        cp_tb_fini(b);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    return CP_OK;
}

void cp_tb_fini(cp_trace_builder *b)
{
    cp_ptrmap_fini(&b->live);
    cp_ptrmap_fini(&b->streams);
    cp_ptrmap_fini(&b->threads);
    cp_ptrmap_fini(&b->labelmap);
    free(b->osize);
    b->osize = NULL;
}

static const char *where(const cp_trace_builder *b, char *buf, size_t n)
{
    if (b->where)
        b->where(b->where_ud, buf, n);
    else
        snprintf(buf, n, "%s:%zu", b->path, b->line);
    return buf;
}

cp_status cp_tb_bad(cp_trace_builder *b, const char *why, const char *detail)
{
    char w[512];
    return cp_error_set(CP_ERR_INVALID, "%s: %s%s%s%s", where(b, w, sizeof w), why,
                        detail ? " ('" : "", detail ? detail : "", detail ? "')" : "");
}

cp_status cp_tb_nomem(cp_trace_builder *b)
{
    return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", b->path);
}

/* A sum of sizes that would pass CP_TRACE_BYTES_MAX. */
static cp_status too_big(cp_trace_builder *b, const char *what, uint64_t have, uint64_t size)
{
    char w[512];
    return cp_error_set(CP_ERR_INVALID, "%s: %s (%llu bytes) plus this size (%llu) passes "
                        "2^63-1, the largest byte count a trace holds", where(b, w, sizeof w),
                        what, (unsigned long long)have, (unsigned long long)size);
}

/* Room for one more row in every per-row array (cap doubles, from 4096). */
static int grow_rows(cp_trace *t)
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
    if (t->label)
        RE(label);
    if (t->device)
        RE(device);
#undef RE
    t->cap = cap;
    return 0;
}

uint32_t cp_tb_live(const cp_trace_builder *b, uint64_t ptr)
{
    return (uint32_t)(uintptr_t)cp_ptrmap_get(&b->live, ptr);
}

int cp_tb_stream_known(const cp_trace_builder *b, uint64_t stream)
{
    return stream == UINT64_MAX ? b->stream_max != NULL
                                : cp_ptrmap_get(&b->streams, stream + 1) != NULL;
}

cp_status cp_tb_stream(cp_trace_builder *b, uint64_t stream, uint32_t *index)
{
    cp_trace *t = b->t;
    /* Keys are value + 1 (0 marks an empty slot); the one value that would
     * wrap to 0 has its own slot. */
    void *v = stream == UINT64_MAX ? b->stream_max : cp_ptrmap_get(&b->streams, stream + 1);
    if (!v) {
        uint64_t *np = realloc(t->streams, (t->nstreams + 1) * sizeof *np);
        if (!np)
            return cp_tb_nomem(b);
        t->streams = np;
        t->streams[t->nstreams++] = stream;
        v = (void *)(uintptr_t)t->nstreams;
        if (stream == UINT64_MAX)
            b->stream_max = v;
        else if (cp_ptrmap_put(&b->streams, stream + 1, v) != 0)
            return cp_tb_nomem(b);
    }
    *index = (uint32_t)((uintptr_t)v - 1);
    return CP_OK;
}

/* An allocate's own checks and figures; its ordinal into t->ord[i]. */
static cp_status allocate(cp_trace_builder *b, size_t i, uint64_t ptr, uint64_t size)
{
    cp_trace *t = b->t;
    char w[512];
    if (size == 0)
        return cp_tb_bad(b, "an allocate of size 0 (sizes must be positive)", NULL);
    if (cp_ptrmap_get(&b->live, ptr))
        return cp_error_set(CP_ERR_INVALID, "%s: allocate of 0x%llx, which is already live",
                            where(b, w, sizeof w), (unsigned long long)ptr);
    /* Live bytes never exceed the total, but both are checked: each is a
     * figure of its own (peak_live, total_bytes). */
    if (size > CP_TRACE_BYTES_MAX - b->live_bytes)
        return too_big(b, "the live bytes", b->live_bytes, size);
    if (size > CP_TRACE_BYTES_MAX - t->info.total_bytes)
        return too_big(b, "the total of the allocation sizes", t->info.total_bytes, size);
    if (t->nallocs == b->ocap) {
        size_t cap = b->ocap ? 2 * b->ocap : 4096;
        uint64_t *np = realloc(b->osize, cap * sizeof *np);
        if (!np)
            return cp_tb_nomem(b);
        b->osize = np;
        b->ocap = cap;
    }
    b->osize[t->nallocs] = size;
    if (cp_ptrmap_put(&b->live, ptr, (void *)(uintptr_t)(t->nallocs + 1)) != 0)
        return cp_tb_nomem(b);
    t->ord[i] = (uint32_t)t->nallocs++;
    b->live_bytes += size;
    if (b->live_bytes > t->info.peak_live)
        t->info.peak_live = b->live_bytes;
    t->info.allocs++;
    t->info.total_bytes += size;
    if (size > t->info.max_size)
        t->info.max_size = size;
    return CP_OK;
}

/* A per-row array the trace had none of so far: zeros for the rows before. */
static void *lazy_column(cp_trace *t, size_t elem)
{
    return calloc(t->cap, elem);
}

cp_status cp_tb_add(cp_trace_builder *b, const cp_tb_row *r)
{
    cp_trace *t = b->t;
    size_t i = t->n;
    uint64_t size = r->size;
    uint32_t sidx;
    cp_status st;
    char w[512];

    if (t->n == t->cap && grow_rows(t) != 0)
        return cp_tb_nomem(b);
    if (size > CP_TRACE_BYTES_MAX)
        return cp_error_set(CP_ERR_INVALID, "%s: size %llu is above 2^63-1, the largest byte "
                            "count a trace holds", where(b, w, sizeof w),
                            (unsigned long long)size);
    if (!r->is_free) {
        if ((st = allocate(b, i, r->ptr, size)) != CP_OK)
            return st;
    } else {
        void *v = cp_ptrmap_del(&b->live, r->ptr);
        if (!v)
            return cp_error_set(CP_ERR_INVALID, "%s: free of 0x%llx, which is not live "
                                "(never allocated in this trace, or freed twice)",
                                where(b, w, sizeof w), (unsigned long long)r->ptr);
        t->ord[i] = (uint32_t)((uintptr_t)v - 1);
        b->live_bytes -= b->osize[t->ord[i]];
        t->info.frees++;
        if (size == 0) /* 0 or missing: the allocation's, as the row reads */
            size = b->osize[t->ord[i]];
    }
    if ((st = cp_tb_stream(b, r->stream, &sidx)) != CP_OK)
        return st;
    if (!cp_ptrmap_get(&b->threads, r->thread + 1)) {
        if (cp_ptrmap_put(&b->threads, r->thread + 1, (void *)1) != 0)
            return cp_tb_nomem(b);
        t->info.threads++;
    }
    if ((r->label && !t->label && !(t->label = lazy_column(t, sizeof *t->label))) ||
        (r->device && !t->device && !(t->device = lazy_column(t, sizeof *t->device))))
        return cp_tb_nomem(b);
    t->is_free[i] = (uint8_t)r->is_free;
    t->ptr[i] = r->ptr;
    t->size[i] = size;
    t->stream[i] = sidx;
    t->thread[i] = (uint32_t)r->thread;
    t->time[i] = r->time_us;
    if (t->label)
        t->label[i] = r->label;
    if (t->device)
        t->device[i] = r->device;
    t->n++;
    /* ordinals are 32-bit (replay_op) */
    if (t->nallocs >= UINT32_MAX)
        return cp_tb_bad(b, "too many allocations (more than 2^32)", NULL);
    return CP_OK;
}

/* A label's hash, eight bytes a step (stacks with C++ frames run to
 * kilobytes): FNV-1a's constants over words, the tail zero-padded. */
static uint64_t label_hash(const char *s, size_t len)
{
    uint64_t h = UINT64_C(14695981039346656037) ^ len, w;
    size_t i;
    for (i = 0; i + 8 <= len; i += 8) {
        memcpy(&w, s + i, 8);
        h = (h ^ w) * UINT64_C(1099511628211);
        h ^= h >> 29;
    }
    if (i < len) {
        w = 0;
        memcpy(&w, s + i, len - i);
        h = (h ^ w) * UINT64_C(1099511628211);
        h ^= h >> 29;
    }
    return h | 1;
}

cp_status cp_tb_label(cp_trace_builder *b, const char *s, uint32_t *label)
{
    cp_trace *t = b->t;
    size_t len = strlen(s);
    uint64_t h = label_hash(s, len);
    void *v;
    char *copy;
    v = cp_ptrmap_get(&b->labelmap, h);
    if (v && strcmp(t->labels[(uintptr_t)v - 1], s) == 0) {
        *label = (uint32_t)(uintptr_t)v;
        return CP_OK;
    }
    if (t->nlabels >= UINT32_MAX - 2)
        return cp_tb_bad(b, "too many distinct labels", NULL);
    if (t->nlabels == b->labelcap) {
        size_t cap = b->labelcap ? 2 * b->labelcap : 64;
        char **nl = realloc(t->labels, cap * sizeof *nl);
        if (!nl)
            return cp_tb_nomem(b);
        t->labels = nl;
        b->labelcap = cap;
    }
    copy = malloc(len + 1);
    if (!copy)
        return cp_tb_nomem(b);
    memcpy(copy, s, len + 1);
    t->labels[t->nlabels++] = copy;
    *label = (uint32_t)t->nlabels;
    /* a hash taken by another label keeps pointing at that one */
    if (!v && cp_ptrmap_put(&b->labelmap, h, (void *)(uintptr_t)*label) != 0)
        return cp_tb_nomem(b);
    return CP_OK;
}

void cp_tb_take_labels(cp_trace_builder *b, char **labels, size_t n)
{
    b->t->labels = labels;
    b->t->nlabels = n;
    b->labelcap = n;
}

cp_status cp_tb_device_all(cp_trace_builder *b, uint16_t d)
{
    cp_trace *t = b->t;
    size_t i;
    if (!t->device && !(t->device = malloc((t->cap ? t->cap : 1) * sizeof *t->device)))
        return cp_tb_nomem(b);
    for (i = 0; i < t->n; i++)
        t->device[i] = d;
    return CP_OK;
}

cp_status cp_tb_oom_entry(cp_trace_builder *b, size_t row, uint64_t size, uint32_t stream,
                          uint32_t label)
{
    cp_trace *t = b->t;
    if (t->nooms == t->oomcap) {
        size_t cap = t->oomcap ? 2 * t->oomcap : 16;
        size_t *nr = realloc(t->oom_row, cap * sizeof *nr);
        uint64_t *ns;
        uint32_t *nst, *nl;
        if (!nr)
            return cp_tb_nomem(b);
        t->oom_row = nr;
        if (!(ns = realloc(t->oom_size, cap * sizeof *ns)))
            return cp_tb_nomem(b);
        t->oom_size = ns;
        if (!(nst = realloc(t->oom_stream, cap * sizeof *nst)))
            return cp_tb_nomem(b);
        t->oom_stream = nst;
        if (!(nl = realloc(t->oom_label, cap * sizeof *nl)))
            return cp_tb_nomem(b);
        t->oom_label = nl;
        t->oomcap = cap;
    }
    t->oom_row[t->nooms] = row;
    t->oom_size[t->nooms] = size;
    t->oom_stream[t->nooms] = stream;
    t->oom_label[t->nooms] = label;
    t->nooms++;
    return CP_OK;
}

cp_status cp_tb_torch_begin(cp_trace_builder *b, size_t n)
{
    cp_trace *t = b->t;
    if (t->top)
        return CP_OK;
    t->top = malloc((n ? n : 1) * sizeof *t->top);
    t->top_row = malloc((n ? n : 1) * sizeof *t->top_row);
    if (!t->top || !t->top_row)
        return cp_tb_nomem(b);
    b->topcap = n ? n : 1;
    return CP_OK;
}

cp_status cp_tb_torch_op(cp_trace_builder *b, const cp_tb_top *op)
{
    cp_trace *t = b->t;
    cp_trace_top *x;
    uint32_t sidx = 0;
    cp_status st;

    if (!t->top && (st = cp_tb_torch_begin(b, 0)) != CP_OK)
        return st;
    if (op->row >= (t->n ? t->n : 1) ||
        ((op->kind == CP_TOP_ALLOC || op->kind == CP_TOP_FREE || op->kind == CP_TOP_DONE) &&
         op->ord >= t->nallocs))
        return cp_error_set(CP_ERR_INVALID, "%s: PyTorch's operation %zu names a row or an "
                            "allocation the trace does not have", b->path, t->ntop + 1);
    if (t->ntop == b->topcap) {
        size_t cap = 2 * b->topcap;
        cp_trace_top *nt = realloc(t->top, cap * sizeof *nt);
        uint32_t *nr;
        if (!nt)
            return cp_tb_nomem(b);
        t->top = nt;
        if (!(nr = realloc(t->top_row, cap * sizeof *nr)))
            return cp_tb_nomem(b);
        t->top_row = nr;
        b->topcap = cap;
    }
    if (op->kind != CP_TOP_RELEASE) {
        if ((st = cp_tb_stream(b, op->stream, &sidx)) != CP_OK)
            return st;
        if (t->nstreams > UINT16_MAX)
            return cp_error_set(CP_ERR_INVALID, "%s: more than 65535 distinct streams", b->path);
    }
    x = &t->top[t->ntop];
    memset(x, 0, sizeof *x);
    x->kind = op->kind;
    x->flag = op->flag;
    if (op->kind == CP_TOP_ALLOC || op->kind == CP_TOP_FREE || op->kind == CP_TOP_DONE) {
        x->ord = op->ord;
        x->stream = (uint16_t)sidx;
        x->size = b->osize[op->ord];
    } else if (op->kind == CP_TOP_OOM) {
        x->stream = (uint16_t)sidx;
        x->size = op->size;
        if ((st = cp_tb_oom_entry(b, op->before, op->size, sidx, op->label)) != CP_OK)
            return st;
    }
    t->top_row[t->ntop++] = (uint32_t)op->row;
    return CP_OK;
}

void cp_tb_take_torch_calls(cp_trace_builder *b, cp_torch_segev *calls, size_t n)
{
    free(b->t->segev);
    b->t->segev = calls;
    b->t->nsegev = n;
}

void cp_tb_torch_settings(cp_trace_builder *b, const char *env, const char *settings)
{
    cp_trace *t = b->t;
    t->has_settings = 1;
    snprintf(t->torch_env, sizeof t->torch_env, "%s", env);
    snprintf(t->torch_settings, sizeof t->torch_settings, "%s", settings);
}

void cp_tb_scaled(cp_trace_builder *b, struct cp_scale *fits, void (*free_fits)(struct cp_scale *))
{
    b->t->scaled = fits;
    b->t->scaled_free = free_fits;
}

void cp_tb_cut(cp_trace_builder *b, const char *fmt, ...)
{
    va_list ap;
    b->t->cut = 1;
    va_start(ap, fmt);
    vsnprintf(b->t->warning, sizeof b->t->warning, fmt, ap);
    va_end(ap);
}

cp_status cp_tb_finish(cp_trace_builder *b)
{
    cp_trace *t = b->t;
    size_t i;
    if (t->nstreams > UINT16_MAX)
        return cp_error_set(CP_ERR_INVALID, "%s: more than 65535 distinct streams", b->path);
    t->ops = malloc((t->n ? t->n : 1) * sizeof *t->ops);
    if (!t->ops)
        return cp_tb_nomem(b);
    for (i = 0; i < t->n; i++) {
        t->ops[i].size = b->osize[t->ord[i]];
        t->ops[i].ord = t->ord[i];
        t->ops[i].stream = (uint16_t)t->stream[i];
        t->ops[i].is_free = t->is_free[i];
    }
    if (!t->top) {
        /* the torch model allocates and frees as the rows do */
        t->top = malloc((t->n ? t->n : 1) * sizeof *t->top);
        t->top_row = malloc((t->n ? t->n : 1) * sizeof *t->top_row);
        if (!t->top || !t->top_row)
            return cp_tb_nomem(b);
        for (i = 0; i < t->n; i++) {
            cp_trace_top *x = &t->top[i];
            t->top_row[i] = (uint32_t)i;
            x->kind = t->is_free[i] ? CP_TOP_FREE : CP_TOP_ALLOC;
            x->flag = 0;
            x->ord = t->ord[i];
            x->stream = (uint16_t)t->stream[i];
            x->size = t->ops[i].size;
        }
        t->ntop = t->n;
    }
    t->info.ooms = t->nooms;
    t->info.events = t->n;
    t->info.streams = t->nstreams;
    t->info.leaked = (size_t)b->live.count;
    t->info.duration_us = t->n ? t->time[t->n - 1] - t->time[0] : 0.0;
    return CP_OK;
}
