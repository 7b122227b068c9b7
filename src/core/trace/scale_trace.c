/*
 * scale_trace.c: the trace of a prediction at another size (scale.h): the
 * base's events, in its order and on its streams, each allocation at its
 * fitted size.  It has no addresses of its own (each allocation gets one
 * that is never reused, so nothing reads a placement into them), no device
 * calls and no figures of PyTorch's.
 */
#include "scale_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot.h"
#include "trace_impl.h"

static cp_status nomem(void)
{
    return cp_error_set(CP_ERR_OOM, "out of host memory predicting a trace at another size");
}

#define COPY(dst, src, count)                                                   \
    do {                                                                        \
        (dst) = malloc(((count) ? (count) : 1) * sizeof *(dst));                \
        if (!(dst))                                                             \
            return nomem();                                                     \
        if (count)                                                              \
            memcpy((dst), (src), (count) * sizeof *(dst));                      \
    } while (0)

/* The rows: src's, with the new sizes; the figures a loader computes, and
 * how many of the bytes in use at the peak came by rule or by a steep line. */
static cp_status rows(cp_trace *t, const cp_trace *src, const uint64_t *nsz,
                      const uint8_t *flag, cp_scale_info *in)
{
    size_t i, n = src->n;
    uint64_t live = 0, rlive = 0, slive = 0;
    COPY(t->is_free, src->is_free, n);
    COPY(t->ord, src->ord, n);
    COPY(t->stream, src->stream, n);
    COPY(t->thread, src->thread, n);
    COPY(t->time, src->time, n);
    t->ptr = malloc((n ? n : 1) * sizeof *t->ptr);
    t->size = malloc((n ? n : 1) * sizeof *t->size);
    t->ops = malloc((n ? n : 1) * sizeof *t->ops);
    if (!t->ptr || !t->size || !t->ops)
        return nomem();
    if (src->label)
        COPY(t->label, src->label, n);
    if (src->device)
        COPY(t->device, src->device, n);
    t->n = t->cap = n;
    t->nallocs = src->nallocs;
    for (i = 0; i < n; i++) {
        uint32_t o = src->ord[i];
        uint64_t sz = nsz[o];
        t->ptr[i] = ((uint64_t)o + 1) << 9;
        t->size[i] = sz;
        t->ops[i].size = sz;
        t->ops[i].ord = o;
        t->ops[i].stream = (uint16_t)src->stream[i];
        t->ops[i].is_free = src->is_free[i];
        if (src->is_free[i]) {
            live -= sz;
            rlive -= flag[o] & 1 ? sz : 0;
            slive -= flag[o] & 2 ? sz : 0;
            continue;
        }
        if (sz > CP_TRACE_BYTES_MAX - t->info.total_bytes)
            return cp_error_set(CP_ERR_INVALID, "at size %llu the program would allocate more "
                                "than 2^63-1 bytes in all", (unsigned long long)in->at);
        t->info.total_bytes += sz;
        live += sz;
        rlive += flag[o] & 1 ? sz : 0;
        slive += flag[o] & 2 ? sz : 0;
        if (sz > t->info.max_size)
            t->info.max_size = sz;
        if (live > t->info.peak_live) {
            t->info.peak_live = live;
            in->by_rule_bytes = rlive;
            in->steeper_bytes = slive;
        }
    }
    return CP_OK;
}

/* Labels, streams, the torch model's operations and the refused requests:
 * src's, operations at the new sizes. */
static cp_status rest(cp_trace *t, const cp_trace *src, const uint64_t *nsz)
{
    size_t i;
    COPY(t->streams, src->streams, src->nstreams);
    t->nstreams = src->nstreams;
    if (src->nlabels) {
        t->labels = calloc(src->nlabels, sizeof *t->labels);
        if (!t->labels)
            return nomem();
        t->nlabels = src->nlabels;
        for (i = 0; i < src->nlabels; i++) {
            size_t len = strlen(src->labels[i]) + 1;
            t->labels[i] = malloc(len);
            if (!t->labels[i])
                return nomem();
            memcpy(t->labels[i], src->labels[i], len);
        }
    }
    COPY(t->top, src->top, src->ntop);
    COPY(t->top_row, src->top_row, src->ntop);
    t->ntop = src->ntop;
    for (i = 0; i < t->ntop; i++)
        if (t->top[i].kind == CP_TOP_ALLOC || t->top[i].kind == CP_TOP_FREE ||
            t->top[i].kind == CP_TOP_DONE)
            t->top[i].size = nsz[t->top[i].ord];
    /* the base's device calls: a replay may take the addresses CUDA gave
     * them while the model's calls are the same (a deterministic driver
     * places the same calls alike), then the address model */
    COPY(t->segev, src->segev, src->nsegev);
    t->nsegev = src->nsegev;
    COPY(t->oom_row, src->oom_row, src->nooms);
    COPY(t->oom_size, src->oom_size, src->nooms);
    COPY(t->oom_stream, src->oom_stream, src->nooms);
    t->nooms = src->nooms;
    t->has_settings = src->has_settings;
    memcpy(t->torch_env, src->torch_env, sizeof t->torch_env);
    memcpy(t->torch_settings, src->torch_settings, sizeof t->torch_settings);
    return CP_OK;
}

/* Every allocation's size at `at`, and its flags: 1 by rule, 2 a steep line. */
static cp_status sizes_at(struct cp_scale *sc, uint64_t at, uint64_t *nsz, uint8_t *flag)
{
    size_t o;
    sc->info.by_rule = 0;
    for (o = 0; o < sc->nallocs; o++) {
        int clamped;
        cp_status st = cp_scale_size_at(sc, o, at, &nsz[o], &clamped);
        if (st != CP_OK)
            return st;
        flag[o] = (uint8_t)(((sc->kind[o] & CP_FIT_KIND) == CP_FIT_RULE || clamped) |
                            (sc->kind[o] & CP_FIT_STEEPER ? 2 : 0));
        sc->info.by_rule += flag[o] & 1;
    }
    return CP_OK;
}

cp_status cp_scale_build(const cp_trace *src, struct cp_scale *sc, uint64_t at, cp_trace **out)
{
    cp_trace *t = (cp_trace *)calloc(1, sizeof *t);
    uint64_t *nsz = (uint64_t *)malloc((sc->nallocs ? sc->nallocs : 1) * sizeof *nsz);
    uint8_t *flag = (uint8_t *)malloc((sc->nallocs ? sc->nallocs : 1) * sizeof *flag);
    const char *base = sc->path ? sc->path : "trace";
    cp_status st = CP_OK;

    *out = NULL;
    if (!t || !nsz || !flag || sc->nallocs != src->nallocs) {
        free(t);
        free(nsz);
        free(flag);
        cp_scale_free(sc);
        return t && nsz && flag ? cp_error_set(CP_ERR_INVALID, "a scaled trace's fits do not "
                                               "fit its events")
                                : nomem();
    }
    t->scaled = sc;
    sc->info.at = at;
    sc->info.by_rule_bytes = sc->info.steeper_bytes = 0;
    t->path = malloc(strlen(base) + 24);
    if (!t->path)
        st = nomem();
    else
        snprintf(t->path, strlen(base) + 24, "%s@%llu", base, (unsigned long long)at);
    if (st == CP_OK)
        st = sizes_at(sc, at, nsz, flag);
    if (st == CP_OK)
        st = rows(t, src, nsz, flag, &sc->info);
    if (st == CP_OK)
        st = rest(t, src, nsz);
    free(nsz);
    free(flag);
    if (st != CP_OK) {
        cp_trace_free(t);
        return st;
    }
    t->format = src->format;
    t->info.events = t->n;
    t->info.allocs = src->nallocs;
    t->info.frees = src->info.frees;
    t->info.streams = src->nstreams;
    t->info.threads = src->info.threads;
    t->info.leaked = src->info.leaked;
    t->info.duration_us = src->info.duration_us;
    t->info.devices = src->info.devices;
    t->info.ooms = src->nooms;
    *out = t;
    return CP_OK;
}
