/*
 * timeline.c: the data behind a timeline page (layout rules in timeline.h).
 */
#include "timeline.h"

#include <stdlib.h>
#include <string.h>

#include "ptrmap.h"

void cp_timeline_fini(cp_timeline *tl)
{
    free(tl->time);
    free(tl->live);
    free(tl->b_start);
    free(tl->b_end);
    free(tl->b_y);
    free(tl->b_size);
    free(tl->b_addr);
    free(tl->b_stream);
    free(tl->b_label);
    free(tl->streams);
    free((void *)tl->labels);
    memset(tl, 0, sizeof *tl);
}

typedef struct span {
    uint64_t addr, end;
    uint32_t block;
} span;

/* The live map's value of a request the replayed pool refused. */
#define REFUSED ((void *)UINTPTR_MAX)

static int by_addr(const void *a, const void *b)
{
    const span *x = (const span *)a, *y = (const span *)b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* What the build keeps beside the timeline. */
typedef struct build {
    cp_timeline *out;
    cp_ptrmap live;          /* the trace's pointer -> block + 1 (0: not drawn) */
    cp_ptrmap smap;          /* stream value + 1 -> index + 1 */
    cp_ptrmap lmap;          /* label (its address in the trace) -> index + 1 */
    void *stream_max;        /* the stream value whose key would wrap to 0 */
    uint64_t *baddr;         /* per block: its address */
} build;

static cp_status nomem(void)
{
    return cp_error_set(CP_ERR_OOM, "out of host memory for the timeline");
}

/* The index of a block's stream (past 65535 streams: the last, shared). */
static cp_status band_stream(build *bd, uint64_t stream, uint16_t *index)
{
    cp_timeline *out = bd->out;
    void *v = stream == UINT64_MAX ? bd->stream_max : cp_ptrmap_get(&bd->smap, stream + 1);
    if (!v && out->nstreams >= UINT16_MAX) {
        v = (void *)(uintptr_t)out->nstreams;
    } else if (!v) {
        uint64_t *ns = realloc(out->streams, (out->nstreams + 1) * sizeof *ns);
        if (!ns)
            return nomem();
        out->streams = ns;
        ns[out->nstreams++] = stream;
        v = (void *)(uintptr_t)out->nstreams;
        if (stream == UINT64_MAX)
            bd->stream_max = v;
        else if (cp_ptrmap_put(&bd->smap, stream + 1, v) != 0)
            return nomem();
    }
    *index = (uint16_t)((uintptr_t)v - 1);
    return CP_OK;
}

/* The index + 1 of a block's label among the timeline's (a trace stores
 * each label once, so its address names it). */
static cp_status band_label(build *bd, const char *label, uint32_t *index)
{
    cp_timeline *out = bd->out;
    void *v = cp_ptrmap_get(&bd->lmap, (uint64_t)(uintptr_t)label);
    if (!v) {
        if (out->nlabels && (out->nlabels & (out->nlabels - 1)) == 0 && out->nlabels >= 64) {
            const char **nl = realloc((void *)out->labels, 2 * out->nlabels * sizeof *nl);
            if (!nl)
                return nomem();
            out->labels = nl;
        }
        out->labels[out->nlabels++] = label;
        v = (void *)(uintptr_t)out->nlabels;
        if (cp_ptrmap_put(&bd->lmap, (uint64_t)(uintptr_t)label, v) != 0)
            return nomem();
    }
    *index = (uint32_t)(uintptr_t)v;
    return CP_OK;
}

/* An allocation (row i, address a; 0: no band: refused by the replayed
 * pool, which its free must know), its band from now to its free. */
static cp_status allocation(build *bd, size_t i, const cp_trace_row *row, uint64_t a, int refused)
{
    cp_timeline *out = bd->out;
    uint32_t b = (uint32_t)out->nb;
    cp_status st;
    /* The trace's pointer finds the block again at its free. */
    if (cp_ptrmap_put(&bd->live, row->pointer,
                      refused ? REFUSED : (void *)(uintptr_t)(a ? b + 1 : 0)) != 0)
        return nomem();
    if (!a)
        return CP_OK;
    out->b_start[b] = (uint32_t)i;
    out->b_end[b] = (uint32_t)out->n;
    out->b_size[b] = (double)row->size;
    out->b_addr[b] = (double)a;
    bd->baddr[b] = a;
    if ((st = band_stream(bd, row->stream, &out->b_stream[b])) != CP_OK)
        return st;
    out->b_label[b] = 0;
    if (row->label && (st = band_label(bd, row->label, &out->b_label[b])) != CP_OK)
        return st;
    out->nb++;
    return CP_OK;
}

/* The compacted address axis: the blocks' ranges merged into regions. */
static cp_status compact_axis(build *bd)
{
    cp_timeline *out = bd->out;
    span *sp = malloc((out->nb ? out->nb : 1) * sizeof *sp);
    double offset = 0;
    uint64_t rstart = 0, rend = 0;
    size_t i;
    if (!sp)
        return nomem();
    for (i = 0; i < out->nb; i++) {
        uint64_t sz = (uint64_t)out->b_size[i];
        sp[i].addr = bd->baddr[i];
        sp[i].end = bd->baddr[i] + sz < bd->baddr[i] ? UINT64_MAX : bd->baddr[i] + sz;
        sp[i].block = (uint32_t)i;
    }
    qsort(sp, out->nb, sizeof *sp, by_addr);
    for (i = 0; i < out->nb; i++) {
        if (i == 0 || sp[i].addr >= rend) {
            if (i)
                offset += (double)(rend - rstart);
            rstart = sp[i].addr;
            rend = sp[i].end;
            out->nregions++;
        } else if (sp[i].end > rend) {
            rend = sp[i].end;
        }
        out->b_y[sp[i].block] = (float)(offset + (double)(sp[i].addr - rstart));
    }
    if (out->nb)
        offset += (double)(rend - rstart);
    out->height = offset;
    free(sp);
    return CP_OK;
}

static cp_status arrays(cp_timeline *out, size_t n, uint64_t **baddr)
{
    out->n = n;
    out->time = malloc((n ? n : 1) * sizeof *out->time);
    out->live = malloc((n ? n : 1) * sizeof *out->live);
    out->b_start = malloc((n ? n : 1) * sizeof *out->b_start);
    out->b_end = malloc((n ? n : 1) * sizeof *out->b_end);
    out->b_y = malloc((n ? n : 1) * sizeof *out->b_y);
    out->b_size = malloc((n ? n : 1) * sizeof *out->b_size);
    out->b_addr = malloc((n ? n : 1) * sizeof *out->b_addr);
    out->b_stream = malloc((n ? n : 1) * sizeof *out->b_stream);
    out->b_label = malloc((n ? n : 1) * sizeof *out->b_label);
    out->labels = malloc(64 * sizeof *out->labels);
    *baddr = malloc((n ? n : 1) * sizeof **baddr);
    if (!out->time || !out->live || !out->b_start || !out->b_end || !out->b_y || !out->b_size ||
        !out->b_addr || !out->b_stream || !out->b_label || !out->labels || !*baddr)
        return nomem();
    return CP_OK;
}

cp_status cp_timeline_build(const cp_trace *t, const uint64_t *addr_by_ord, size_t naddr,
                            cp_timeline *out)
{
    size_t n = cp_trace_events(t), i, nallocs = 0;
    uint64_t cur = 0;
    cp_status st;
    cp_trace_row row;
    build bd;

    memset(out, 0, sizeof *out);
    memset(&bd, 0, sizeof bd);
    bd.out = out;
    if (n >= UINT32_MAX)
        return cp_error_set(CP_ERR_INVALID, "timeline: more than 2^32 events");
    if (cp_ptrmap_init(&bd.live, 1024) != 0)
        return nomem();
    if (cp_ptrmap_init(&bd.smap, 16) != 0) {
        cp_ptrmap_fini(&bd.live);
        return nomem();
    }
    if (cp_ptrmap_init(&bd.lmap, 64) != 0) {
        cp_ptrmap_fini(&bd.live);
        cp_ptrmap_fini(&bd.smap);
        return nomem();
    }
    st = arrays(out, n, &bd.baddr);
    if (st == CP_OK && n && cp_trace_event(t, 0, &row) == CP_OK)
        out->t0_us = row.time_us;
    for (i = 0; i < n && st == CP_OK; i++) {
        cp_trace_event(t, i, &row);
        out->time[i] = (float)(row.time_us - out->t0_us);
        if (!row.is_free) {
            size_t ord = nallocs++;
            uint64_t a = addr_by_ord ? (ord < naddr ? addr_by_ord[ord] : 0) : row.pointer;
            /* A request the replayed pool refused was never live: its free
             * (REFUSED in the map) takes nothing off either. */
            int refused = addr_by_ord && !a;
            if (!refused) {
                cur += row.size;
                if (cur > out->peak_live) {
                    out->peak_live = cur;
                    out->peak_index = i;
                }
            }
            st = allocation(&bd, i, &row, a, refused);
        } else {
            void *v = cp_ptrmap_del(&bd.live, row.pointer);
            if (v != REFUSED) {
                cur -= row.size <= cur ? row.size : cur;
                if (v)
                    out->b_end[(uintptr_t)v - 1] = (uint32_t)i;
            }
        }
        out->live[i] = (float)cur;
    }
    if (st == CP_OK)
        st = compact_axis(&bd);
    free(bd.baddr);
    cp_ptrmap_fini(&bd.live);
    cp_ptrmap_fini(&bd.smap);
    cp_ptrmap_fini(&bd.lmap);
    if (st != CP_OK)
        cp_timeline_fini(out);
    return st;
}
