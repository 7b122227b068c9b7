/*
 * events.c: cp_trace_from_events (trace.h), a trace made from events in
 * memory rather than read from a file (a program that is not a recorder,
 * a test): the same row builder as every reader (builder.h), so the same
 * checks and the same figures.
 */
#include "builder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct event_at {
    const char *name;
    size_t k; /* from 1 */
} event_at;

static void where(void *ud, char *buf, size_t n)
{
    const event_at *e = ud;
    snprintf(buf, n, "%s: event %zu", e->name, e->k);
}

/* An allocation's label: interned once per pointer (a producer hands the
 * same text by the same pointer, as a site's stack for each of its
 * allocations; long C++ stacks are hashed once, not per allocation). */
static cp_status label_of(cp_trace_builder *b, cp_ptrmap *seen, const char *s, uint32_t *label)
{
    uint64_t key = (uint64_t)(uintptr_t)s;
    void *v = cp_ptrmap_get(seen, key);
    cp_status st;
    if (v) {
        *label = (uint32_t)(uintptr_t)v;
        return CP_OK;
    }
    if ((st = cp_tb_label(b, s, label)) != CP_OK)
        return st;
    return cp_ptrmap_put(seen, key, (void *)(uintptr_t)*label) == 0 ? CP_OK : cp_tb_nomem(b);
}

static cp_status add_events(cp_trace_builder *b, const cp_trace_event_in *ev, size_t n)
{
    event_at at = {b->path, 0};
    cp_status st = CP_OK;
    uint32_t maxdev = 0;
    cp_ptrmap seen;
    size_t i;

    if (cp_ptrmap_init(&seen, 64) != 0)
        return cp_tb_nomem(b);
    b->where = where;
    b->where_ud = &at;
    for (i = 0; i < n && st == CP_OK; i++) {
        const cp_trace_event_in *e = &ev[i];
        cp_tb_row r;
        at.k = i + 1;
        memset(&r, 0, sizeof r);
        if (e->device > UINT16_MAX) {
            st = cp_tb_bad(b, "device above 65535", NULL);
            break;
        }
        if (!isfinite(e->time_us)) {
            st = cp_tb_bad(b, "time is not a finite number", NULL);
            break;
        }
        if (e->label && !e->is_free && (st = label_of(b, &seen, e->label, &r.label)) != CP_OK)
            break;
        r.is_free = e->is_free != 0;
        r.ptr = e->pointer;
        r.size = e->size;
        r.stream = e->stream;
        r.thread = e->device; /* as a snapshot's rows: their devices */
        r.time_us = e->time_us;
        r.device = (uint16_t)e->device;
        st = cp_tb_add(b, &r);
        if (e->device > maxdev)
            maxdev = e->device;
    }
    cp_ptrmap_fini(&seen);
    b->where = NULL;
    b->t->info.devices = (size_t)maxdev + 1;
    return st;
}

cp_status cp_trace_from_events(const char *name, const char *format,
                               const cp_trace_event_in *ev, size_t n, cp_trace **out)
{
    cp_trace_builder b;
    cp_trace *t;
    cp_status st;

    *out = NULL;
    t = calloc(1, sizeof *t);
    if (t)
        t->path = malloc(strlen(name) + 1);
    if (!t || !t->path) {
        free(t);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    strcpy(t->path, name);
    t->format = format;
    st = cp_tb_init(&b, t);
    if (st == CP_OK) {
        st = add_events(&b, ev, n);
        if (st == CP_OK)
            st = cp_tb_finish(&b);
        cp_tb_fini(&b);
    }
    if (st != CP_OK) {
        cp_trace_free(t);
        return st;
    }
    *out = t;
    return CP_OK;
}
