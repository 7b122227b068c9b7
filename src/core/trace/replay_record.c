/*
 * replay_record.c: the replay's recorder (opts.record, replay.h): the pool's
 * reserved bytes after every event of the first repetition where they
 * changed, the first point before event 0, and the address each allocation
 * got.  A hook of the walk in replay.c.
 */
#include "replay.h"

#include <stdlib.h>

void cp_replay_result_fini(cp_replay_result *res)
{
    free(res->rec_event);
    free(res->rec_reserved);
    free(res->rec_addr);
    res->rec_addr = NULL;
    res->naddr = 0;
    res->rec_event = NULL;
    res->rec_reserved = NULL;
    res->nrec = 0;
}

/* Appends a (event, reserved) point when reserved changed. */
cp_status replay_record_point(cp_replay_result *out, size_t *cap, uint64_t ev, uint64_t reserved)
{
    if (out->nrec && out->rec_reserved[out->nrec - 1] == reserved)
        return CP_OK;
    if (out->nrec == *cap) {
        size_t nc = *cap ? 2 * *cap : 1024;
        uint64_t *a = realloc(out->rec_event, nc * sizeof *a);
        uint64_t *b;
        if (!a)
            goto oom;
        out->rec_event = a;
        b = realloc(out->rec_reserved, nc * sizeof *b);
        if (!b)
            goto oom;
        out->rec_reserved = b;
        *cap = nc;
    }
    out->rec_event[out->nrec] = ev;
    out->rec_reserved[out->nrec++] = reserved;
    return CP_OK;
oom:
    return cp_error_set(CP_ERR_OOM, "out of host memory recording the replay");
}

static cp_status rec_begin(void *self, const replay_walk *w, int *follow)
{
    replay_recorder *rec = self;
    if (w->rep != 0) {
        *follow = 0;
        return CP_OK;
    }
    return replay_record_point(w->out, &rec->cap, 0, cp_resource_reserved(w->r));
}

static cp_status rec_event(void *self, const replay_walk *w, size_t i, const replay_op *op,
                           void *addr)
{
    replay_recorder *rec = self;
    if (!op->is_free && addr)
        w->out->rec_addr[op->ord] = (uint64_t)(uintptr_t)addr;
    return replay_record_point(w->out, &rec->cap, i, cp_resource_reserved_locked(w->r));
}

cp_status replay_recorder_init(replay_recorder *rec, const cp_trace *t, cp_replay_result *out)
{
    rec->cap = 0;
    out->rec_addr = calloc(t->nallocs ? t->nallocs : 1, sizeof *out->rec_addr);
    if (!out->rec_addr)
        return cp_error_set(CP_ERR_OOM, "out of host memory for the replay");
    out->naddr = t->nallocs;
    return CP_OK;
}

replay_hook replay_recorder_hook(replay_recorder *rec)
{
    replay_hook h = {.self = rec, .begin = rec_begin, .event = rec_event};
    return h;
}
