/*
 * trace.c: a loaded trace's accessors and its release (trace.h).  Loading
 * is load.c (the dispatcher over the readers, reader.h), the rows are the
 * builder's (builder.c), the replay is replay.c.
 */
#include "trace_impl.h"

#include <stdlib.h>
#include <string.h>

#include "reader.h"
#include "trace_cupy.h"
#include "trace_torch.h"

void cp_trace_free(cp_trace *t)
{
    if (!t)
        return;
    /* what the reader attached beyond the rows, first */
    if (t->reader && t->reader->free)
        t->reader->free(t);
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
    free(t->top);
    free(t->top_row);
    free(t->oom_row);
    free(t->oom_size);
    free(t->oom_stream);
    free(t->oom_label);
    free(t->segev);
    if (t->scaled)
        t->scaled_free(t->scaled);
    free(t);
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

const char *cp_trace_oom_label(const cp_trace *t, size_t k)
{
    uint32_t l = k < t->nooms && t->oom_label ? t->oom_label[k] : 0;
    return l && l <= t->nlabels ? t->labels[l - 1] : NULL;
}

const char *cp_trace_format(const cp_trace *t)
{
    return t->format;
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

/* (a JAX profile's reader is the one that keeps BFC's chunks) */
const char *cp_trace_allocator(const cp_trace *t)
{
    return t->jax_chunk ? t->allocator : NULL;
}

int cp_trace_jax_row(const cp_trace *t, size_t i, uint64_t *chunk, uint64_t *in_use)
{
    if (!t->jax_chunk || i >= t->n)
        return 0;
    *chunk = t->jax_chunk[t->ord[i]];
    *in_use = t->jax_in_use[i];
    return 1;
}

int cp_trace_cupy_info_get(const cp_trace *t, cp_trace_cupy_info *out)
{
    const cp_trace_cupy *c = t->cupy;
    size_t i;
    memset(out, 0, sizeof *out);
    if (!c)
        return 0;
    out->device_allocs = c->ndev - c->dev_refused;
    out->device_alloc_failures = c->dev_refused;
    out->zero_mallocs = c->zero_mallocs;
    for (i = 0; i < c->nop; i++) {
        out->gc_frees += c->op[i].kind == CP_CUPY_GCFREE;
        out->free_all_blocks += c->op[i].kind == CP_CUPY_FREE_ALL;
    }
    out->stream = c->has_stream;
    out->malloc_preprocess = c->has_preprocess;
    out->total_bytes = c->has_total;
    out->peak_total_bytes = c->peak_total;
    return 1;
}
