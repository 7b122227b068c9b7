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

static int by_addr(const void *a, const void *b)
{
    const span *x = (const span *)a, *y = (const span *)b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

cp_status cp_timeline_build(const cp_trace *t, const uint64_t *addr_by_ord, size_t naddr,
                            cp_timeline *out)
{
    size_t n = cp_trace_events(t), i, nallocs = 0;
    cp_ptrmap live, smap, lmap;
    uint64_t cur = 0;
    uint64_t *baddr = NULL;
    span *sp = NULL;
    cp_status st = CP_OK;
    cp_trace_row row;
    void *stream_max = NULL; /* the stream value whose key would wrap to 0 */

    memset(out, 0, sizeof *out);
    if (n >= UINT32_MAX)
        return cp_error_set(CP_ERR_INVALID, "timeline: more than 2^32 events");
    if (cp_ptrmap_init(&live, 1024) != 0)
        return cp_error_set(CP_ERR_OOM, "out of host memory for the timeline");
    if (cp_ptrmap_init(&smap, 16) != 0) {
        cp_ptrmap_fini(&live);
        return cp_error_set(CP_ERR_OOM, "out of host memory for the timeline");
    }
    if (cp_ptrmap_init(&lmap, 64) != 0) {
        cp_ptrmap_fini(&live);
        cp_ptrmap_fini(&smap);
        return cp_error_set(CP_ERR_OOM, "out of host memory for the timeline");
    }
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
    baddr = malloc((n ? n : 1) * sizeof *baddr);
    if (!out->time || !out->live || !out->b_start || !out->b_end || !out->b_y || !out->b_size ||
        !out->b_addr || !out->b_stream || !out->b_label || !out->labels || !baddr) {
        st = cp_error_set(CP_ERR_OOM, "out of host memory for the timeline");
        goto done;
    }
    if (n && cp_trace_event(t, 0, &row) == CP_OK)
        out->t0_us = row.time_us;
    for (i = 0; i < n && st == CP_OK; i++) {
        void *v;
        cp_trace_event(t, i, &row);
        out->time[i] = (float)(row.time_us - out->t0_us);
        if (!row.is_free) {
            size_t ord = nallocs++;
            uint64_t a = addr_by_ord ? (ord < naddr ? addr_by_ord[ord] : 0) : row.pointer;
            uint32_t b = (uint32_t)out->nb;
            cur += row.size;
            if (cur > out->peak_live) {
                out->peak_live = cur;
                out->peak_index = i;
            }
            /* The trace's pointer finds the block again at its free. */
            if (cp_ptrmap_put(&live, row.pointer, (void *)(uintptr_t)(a ? b + 1 : 0)) != 0) {
                st = cp_error_set(CP_ERR_OOM, "out of host memory for the timeline");
                break;
            }
            if (!a)
                goto next; /* refused by the replayed pool: no band */
            out->b_start[b] = (uint32_t)i;
            out->b_end[b] = (uint32_t)n;
            out->b_size[b] = (double)row.size;
            out->b_addr[b] = (double)a;
            baddr[b] = a;
            v = row.stream == UINT64_MAX ? stream_max : cp_ptrmap_get(&smap, row.stream + 1);
            if (!v && out->nstreams >= UINT16_MAX) {
                v = (void *)(uintptr_t)out->nstreams; /* past 65535 streams: share the last */
            } else if (!v) {
                uint64_t *ns = realloc(out->streams, (out->nstreams + 1) * sizeof *ns);
                if (!ns) {
                    st = cp_error_set(CP_ERR_OOM, "out of host memory for the timeline");
                    break;
                }
                out->streams = ns;
                ns[out->nstreams++] = row.stream;
                v = (void *)(uintptr_t)out->nstreams;
                if (row.stream == UINT64_MAX)
                    stream_max = v;
                else if (cp_ptrmap_put(&smap, row.stream + 1, v) != 0) {
                    st = cp_error_set(CP_ERR_OOM, "out of host memory for the timeline");
                    break;
                }
            }
            out->b_stream[b] = (uint16_t)((uintptr_t)v - 1);
            out->b_label[b] = 0;
            if (row.label) {
                v = cp_ptrmap_get(&lmap, (uint64_t)(uintptr_t)row.label);
                if (!v) {
                    if (out->nlabels && (out->nlabels & (out->nlabels - 1)) == 0 &&
                        out->nlabels >= 64) {
                        const char **nl = realloc((void *)out->labels,
                                                  2 * out->nlabels * sizeof *nl);
                        if (!nl) {
                            st = cp_error_set(CP_ERR_OOM, "out of host memory for the timeline");
                            break;
                        }
                        out->labels = nl;
                    }
                    out->labels[out->nlabels++] = row.label;
                    v = (void *)(uintptr_t)out->nlabels;
                    if (cp_ptrmap_put(&lmap, (uint64_t)(uintptr_t)row.label, v) != 0) {
                        st = cp_error_set(CP_ERR_OOM, "out of host memory for the timeline");
                        break;
                    }
                }
                out->b_label[b] = (uint32_t)(uintptr_t)v;
            }
            out->nb++;
        } else {
            v = cp_ptrmap_del(&live, row.pointer);
            cur -= row.size <= cur ? row.size : cur;
            if (v)
                out->b_end[(uintptr_t)v - 1] = (uint32_t)i;
        }
    next:
        out->live[i] = (float)cur;
    }
    if (st != CP_OK)
        goto done;

    /* The compacted address axis: merge the blocks' ranges into regions. */
    sp = malloc((out->nb ? out->nb : 1) * sizeof *sp);
    if (!sp) {
        st = cp_error_set(CP_ERR_OOM, "out of host memory for the timeline");
        goto done;
    }
    for (i = 0; i < out->nb; i++) {
        uint64_t sz = (uint64_t)out->b_size[i];
        sp[i].addr = baddr[i];
        sp[i].end = baddr[i] + sz < baddr[i] ? UINT64_MAX : baddr[i] + sz;
        sp[i].block = (uint32_t)i;
    }
    qsort(sp, out->nb, sizeof *sp, by_addr);
    {
        double offset = 0;
        uint64_t rstart = 0, rend = 0;
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
    }
done:
    free(sp);
    free(baddr);
    cp_ptrmap_fini(&live);
    cp_ptrmap_fini(&smap);
    cp_ptrmap_fini(&lmap);
    if (st != CP_OK)
        cp_timeline_fini(out);
    return st;
}
