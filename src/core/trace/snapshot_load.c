/*
 * snapshot_load.c: the readers of PyTorch's memory snapshots, the pickle
 * torch.cuda.memory._dump_snapshot writes and cupola's compact form of one
 * (both "torch_snapshot"): snapshot.c decodes the file into an event list
 * (snapshot.h says how), whose events become rows here, with PyTorch's
 * figures and the torch model's operations.
 *
 * A pickle is read as a stream, so memory follows the entries and not the
 * frames; the compact form, which has no frames, is read whole.
 */
#include "reader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pickle.h"
#include "snapshot.h"
#include "text.h"

/* Where a row comes from, for the builder's messages: the entry. */
typedef struct entry_at {
    const char *path;
    unsigned dev;
    size_t entry;
} entry_at;

static void where(void *ud, char *buf, size_t n)
{
    const entry_at *e = ud;
    snprintf(buf, n, "%s: device_traces[%u][%zu]", e->path, e->dev, e->entry);
}

/* The torch model's operations of a snapshot (snapshot.h), through the
 * builder: rows turned into allocation ordinals, each at the latest row of
 * an allocation or free so far, and where each refused request (`oom`)
 * stands among the rows; then the device calls and the settings. */
static cp_status torch_view(cp_trace_builder *b, cp_snapshot *snap)
{
    const cp_trace *t = b->t;
    size_t i, row = 0;
    uint32_t last = 0;
    cp_status st = cp_tb_torch_begin(b, snap->ntop);
    for (i = 0; i < snap->ntop && st == CP_OK; i++) {
        const cp_snap_top *o = &snap->top[i];
        cp_tb_top x;
        memset(&x, 0, sizeof x);
        x.kind = o->kind;
        x.flag = o->flag;
        if (o->kind == CP_TOP_ALLOC || o->kind == CP_TOP_FREE || o->kind == CP_TOP_DONE) {
            if (o->ref >= t->n)
                continue;
            x.ord = t->ord[o->ref];
            x.stream = snap->ev[o->ref].stream;
            if (o->kind != CP_TOP_DONE && (uint32_t)o->ref > last)
                last = (uint32_t)o->ref;
        } else if (o->kind == CP_TOP_OOM) {
            x.stream = o->stream;
            x.size = o->size;
            /* the first row after the oom entry */
            while (row < snap->n && snap->ev[row].device == snap->op_device &&
                   snap->ev[row].entry < o->entry)
                row++;
            x.before = row;
            x.label = o->label;
        }
        x.row = last;
        st = cp_tb_torch_op(b, &x);
    }
    if (st != CP_OK)
        return st;
    cp_tb_take_torch_calls(b, snap->segev, snap->nsegev);
    snap->segev = NULL;
    snap->nsegev = 0;
    if (snap->has_settings)
        cp_tb_torch_settings(b, snap->torch_env, snap->torch_settings);
    return CP_OK;
}

/* The decoded snapshot into rows and figures. */
static cp_status rows(cp_trace_builder *b, cp_snapshot *snap)
{
    cp_trace *t = b->t;
    entry_at at = {b->path, 0, 0};
    cp_status st = CP_OK;
    size_t i;

    cp_tb_take_labels(b, snap->labels, snap->nlabels);
    snap->labels = NULL;
    snap->nlabels = 0;
    b->where = where;
    b->where_ud = &at;
    for (i = 0; i < snap->n && st == CP_OK; i++) {
        const cp_snap_event *e = &snap->ev[i];
        cp_tb_row r;
        at.dev = e->device;
        at.entry = e->entry;
        memset(&r, 0, sizeof r);
        r.is_free = e->is_free;
        r.ptr = e->addr;
        r.size = e->size;
        r.stream = e->stream;
        r.thread = e->device; /* a snapshot's "threads" are its devices */
        r.time_us = e->time_us;
        r.label = e->label;
        r.device = e->device;
        st = cp_tb_add(b, &r);
    }
    b->where = NULL;
    if (st != CP_OK)
        return st;
    t->seg_time = snap->seg_time;
    t->seg_reserved = snap->seg_reserved;
    t->nseg = snap->nseg;
    snap->seg_time = NULL;
    snap->seg_reserved = NULL;
    t->info.devices = snap->devices;
    t->info.ignored = snap->ignored;
    t->info.unmatched = snap->unmatched;
    t->info.torch_reserved = snap->has_segments;
    t->info.torch_reserved_end = snap->reserved_end;
    t->info.torch_peak_reserved = snap->reserved_peak;
    return torch_view(b, snap);
}

static cp_status decoded(cp_trace_builder *b, cp_status st, cp_snapshot *snap)
{
    if (st != CP_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", cp_error_msg());
        return cp_error_set(st, "%s: PyTorch snapshot: %s", b->path, why);
    }
    st = rows(b, snap);
    cp_snapshot_fini(snap);
    return st;
}

/* ---- the pickle -------------------------------------------------------- */

typedef struct gz_src {
    gzFile gz;
    const char *path;
} gz_src;

/* The gzip stream as a pickle source (pickle.h). */
static long gz_source(void *ud, unsigned char *buf, size_t n)
{
    gz_src *g = (gz_src *)ud;
    int err, got = gzread(g->gz, buf, (unsigned)(n > (1u << 30) ? (1u << 30) : n));
    if (got < 0 || (got == 0 && (gzerror(g->gz, &err), err != Z_OK && err != Z_STREAM_END))) {
        const char *msg = cp_gz_reason(gzerror(g->gz, &err), g->path);
        cp_error_set(CP_ERR_INVALID, "truncated or corrupt gzip data (%s)", msg);
        return -1;
    }
    return got;
}

static cp_status load_pickle(cp_trace_builder *b, gzFile gz, const cp_trace_probe *p)
{
    gz_src g = {gz, b->path};
    cp_pk_source src;
    cp_snapshot snap;
    src.read = gz_source;
    src.ud = &g;
    return decoded(b, cp_snapshot_read_stream(&src, p->device, &snap), &snap);
}

static int named_pickle(const char *path)
{
    size_t n = strlen(path);
    return (n >= 7 && strcmp(path + n - 7, ".pickle") == 0) ||
           (n >= 4 && strcmp(path + n - 4, ".pkl") == 0);
}

/* Any file starting with PROTO's byte is bid on, so a pickle of a protocol
 * the reader does not read is called that (a CSV cannot start with 0x80; it
 * used to be read as a CSV with a bad header); and so is a file named
 * *.pickle or *.pkl whatever it holds, so one that is not a pickle is called
 * that (it used to be read as a CSV and refused for its header). */
static int bid_pickle(const cp_trace_probe *p)
{
    if (p->folder)
        return CP_BID_NONE;
    return (p->nhead >= 2 && (cp_pickle_sniff(p->head, 2) || p->head[0] == 0x80)) ||
                   named_pickle(p->path)
               ? CP_BID_PICKLE
               : CP_BID_NONE;
}

/* What the readers attach beyond the rows (the operations are the trace's). */
static void free_snapshot(cp_trace *t)
{
    free(t->seg_time);
    free(t->seg_reserved);
    t->seg_time = NULL;
    t->seg_reserved = NULL;
}

const cp_trace_reader cp_reader_torch_pickle = {
    .name = "torch_snapshot",
    .what = "a PyTorch memory snapshot (pickle)",
    .bid = bid_pickle,
    .load = load_pickle,
    .free = free_snapshot,
};

/* ---- the compact form ---------------------------------------------------- */

static cp_status load_compact(cp_trace_builder *b, gzFile gz, const cp_trace_probe *p)
{
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    cp_snapshot snap;
    cp_status st;
    const char *msg;
    int err;

    for (;;) {
        int got;
        if (cap - len < (1u << 16)) {
            size_t ncap = cap ? 2 * cap : (1u << 20);
            unsigned char *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                return cp_tb_nomem(b);
            }
            buf = nb;
            cap = ncap;
        }
        got = gzread(gz, buf + len, (unsigned)(cap - len > (1u << 30) ? (1u << 30) : cap - len));
        if (got < 0) {
            msg = cp_gz_reason(gzerror(gz, &err), b->path);
            st = cp_error_set(CP_ERR_INVALID, "%s: truncated or corrupt gzip data (%s)",
                              b->path, msg);
            free(buf);
            return st;
        }
        if (got == 0)
            break;
        len += (size_t)got;
    }
    msg = cp_gz_reason(gzerror(gz, &err), b->path);
    if (err != Z_OK && err != Z_STREAM_END) {
        free(buf);
        return cp_error_set(CP_ERR_INVALID, "%s: truncated or corrupt gzip data (%s)", b->path,
                            msg);
    }
    st = p->device >= 0 ? cp_snapshot_read_device(buf, len, p->device, &snap)
                        : cp_snapshot_read(buf, len, &snap);
    free(buf);
    return decoded(b, st, &snap);
}

static int bid_compact(const cp_trace_probe *p)
{
    return !p->folder && p->nhead == 8 && cp_snapshot_is_compact(p->head, 8) ? CP_BID_COMPACT
                                                                             : CP_BID_NONE;
}

const cp_trace_reader cp_reader_torch_compact = {
    .name = "torch_snapshot",
    .what = "a compact snapshot (CPSNAP1)",
    .bid = bid_compact,
    .load = load_compact,
    .free = free_snapshot,
};
