/*
 * scale_trace.c: the trace of a prediction at another size (scale.h): the
 * base's events, in its order and on its streams, each allocation at its
 * fitted size, written through the row builder (builder.h) as a reader's
 * are, so it passes the same checks and gets the same figures.  It has no
 * addresses of its own (each allocation gets one that is never reused, so
 * nothing reads a placement into them) and no figures of PyTorch's; it keeps
 * the base's labels, PyTorch's operations (pending frees, empty_cache, the
 * refused requests at their recorded sizes), device calls and settings.
 */
#include "scale_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builder.h"

static cp_status nomem(void)
{
    return cp_error_set(CP_ERR_OOM, "out of host memory predicting a trace at another size");
}

/* Where a row comes from, for the builder's messages: "PATH@SIZE: event K". */
typedef struct event_at {
    const char *path;
    size_t k;
} event_at;

static void where(void *ud, char *buf, size_t n)
{
    const event_at *e = ud;
    snprintf(buf, n, "%s: event %zu", e->path, e->k);
}

/* The base's labels, copied for the trace to own (rows refer to them by
 * the base's indices). */
static cp_status labels(cp_trace_builder *b, const cp_trace *src)
{
    char **l;
    size_t i;
    if (!src->nlabels)
        return CP_OK;
    l = (char **)calloc(src->nlabels, sizeof *l);
    if (!l)
        return nomem();
    cp_tb_take_labels(b, l, src->nlabels);
    for (i = 0; i < src->nlabels; i++) {
        size_t len = strlen(src->labels[i]) + 1;
        if (!(l[i] = (char *)malloc(len)))
            return nomem();
        memcpy(l[i], src->labels[i], len);
    }
    return CP_OK;
}

/* The rows: src's, each allocation at its new size. */
static cp_status rows(cp_trace_builder *b, const cp_trace *src, const uint64_t *nsz)
{
    event_at at = {b->path, 0};
    cp_status st = CP_OK;
    size_t i;
    b->where = where;
    b->where_ud = &at;
    for (i = 0; i < src->n && st == CP_OK; i++) {
        uint32_t o = src->ord[i];
        cp_tb_row r;
        at.k = i + 1;
        r.is_free = src->is_free[i];
        r.ptr = ((uint64_t)o + 1) << 9;
        r.size = src->is_free[i] ? 0 : nsz[o];
        r.stream = src->streams[src->stream[i]];
        r.thread = src->thread[i];
        r.time_us = src->time[i];
        r.label = src->label ? src->label[i] : 0;
        r.device = src->device ? src->device[i] : 0;
        st = cp_tb_add(b, &r);
    }
    b->where = NULL;
    return st;
}

/* PyTorch's operations as the base has them (its operations' sizes the new
 * ones, its refused requests as recorded), its device calls and settings. */
static cp_status torch_parts(cp_trace_builder *b, const cp_trace *src)
{
    size_t i, k = 0;
    cp_status st = cp_tb_torch_begin(b, src->ntop);
    for (i = 0; i < src->ntop && st == CP_OK; i++) {
        const cp_trace_top *o = &src->top[i];
        cp_tb_top x;
        memset(&x, 0, sizeof x);
        x.kind = o->kind;
        x.flag = o->flag;
        x.ord = o->ord;
        x.stream = o->kind == CP_TOP_RELEASE ? 0 : src->streams[o->stream];
        x.row = src->top_row[i];
        if (o->kind == CP_TOP_OOM) {
            x.size = o->size;
            x.label = k < src->nooms && src->oom_label ? src->oom_label[k] : 0;
            x.before = k < src->nooms ? src->oom_row[k++] : src->n;
        }
        st = cp_tb_torch_op(b, &x);
    }
    /* refused requests the operations did not name (none in a snapshot) */
    for (; k < src->nooms && st == CP_OK; k++) {
        uint32_t sidx;
        if ((st = cp_tb_stream(b, src->streams[src->oom_stream[k]], &sidx)) == CP_OK)
            st = cp_tb_oom_entry(b, src->oom_row[k], src->oom_size[k], sidx,
                                 src->oom_label ? src->oom_label[k] : 0);
    }
    if (st != CP_OK)
        return st;
    if (src->nsegev) {
        cp_torch_segev *c = (cp_torch_segev *)malloc(src->nsegev * sizeof *c);
        if (!c)
            return nomem();
        memcpy(c, src->segev, src->nsegev * sizeof *c);
        cp_tb_take_torch_calls(b, c, src->nsegev);
    }
    if (src->has_settings)
        cp_tb_torch_settings(b, src->torch_env, src->torch_settings);
    return CP_OK;
}

/* How many of the bytes in use at the trace's peak (its first) came by rule
 * (flag 1) or by a steep line (flag 2). */
static void peak_parts(const cp_trace *t, const uint8_t *flag, cp_scale_info *in)
{
    uint64_t live = 0, rlive = 0, slive = 0, peak = 0;
    size_t i;
    in->by_rule_bytes = in->steeper_bytes = 0;
    for (i = 0; i < t->n; i++) {
        uint32_t o = t->ord[i];
        uint64_t sz = t->ops[i].size;
        if (t->is_free[i]) {
            live -= sz;
            rlive -= flag[o] & 1 ? sz : 0;
            slive -= flag[o] & 2 ? sz : 0;
            continue;
        }
        live += sz;
        rlive += flag[o] & 1 ? sz : 0;
        slive += flag[o] & 2 ? sz : 0;
        if (live > peak) {
            peak = live;
            in->by_rule_bytes = rlive;
            in->steeper_bytes = slive;
        }
    }
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

/* The trace, its fits attached (sc is the trace's from here on). */
static cp_status build(const cp_trace *src, struct cp_scale *sc, const uint64_t *nsz,
                       const char *path, cp_trace **out)
{
    cp_trace_builder b;
    cp_trace *t = (cp_trace *)calloc(1, sizeof *t);
    cp_status st;
    if (t)
        t->path = (char *)malloc(strlen(path) + 1);
    if (!t || !t->path) {
        free(t);
        cp_scale_free(sc);
        return nomem();
    }
    strcpy(t->path, path);
    t->format = src->format;
    if (cp_tb_init(&b, t) != CP_OK) {
        free(t->path);
        free(t);
        cp_scale_free(sc);
        return nomem();
    }
    cp_tb_scaled(&b, sc, cp_scale_free);
    st = labels(&b, src);
    if (st == CP_OK)
        st = rows(&b, src, nsz);
    if (st == CP_OK)
        st = torch_parts(&b, src);
    if (st == CP_OK)
        st = cp_tb_finish(&b);
    cp_tb_fini(&b);
    if (st != CP_OK) {
        cp_trace_free(t);
        return st;
    }
    t->info.devices = src->info.devices;
    *out = t;
    return CP_OK;
}

cp_status cp_scale_build(const cp_trace *src, struct cp_scale *sc, uint64_t at, cp_trace **out)
{
    uint64_t *nsz = (uint64_t *)malloc((sc->nallocs ? sc->nallocs : 1) * sizeof *nsz);
    uint8_t *flag = (uint8_t *)malloc((sc->nallocs ? sc->nallocs : 1) * sizeof *flag);
    const char *base = sc->path ? sc->path : "trace";
    char *path = (char *)malloc(strlen(base) + 24);
    cp_status st;

    *out = NULL;
    if (!nsz || !flag || !path || sc->nallocs != src->nallocs) {
        st = nsz && flag && path ? cp_error_set(CP_ERR_INVALID, "a scaled trace's fits do not "
                                                "fit its events")
                                 : nomem();
        cp_scale_free(sc);
    } else {
        sc->info.at = at;
        snprintf(path, strlen(base) + 24, "%s@%llu", base, (unsigned long long)at);
        st = sizes_at(sc, at, nsz, flag);
        if (st != CP_OK)
            cp_scale_free(sc);
        else if ((st = build(src, sc, nsz, path, out)) == CP_OK)
            peak_parts(*out, flag, &sc->info);
    }
    free(nsz);
    free(flag);
    free(path);
    return st;
}
