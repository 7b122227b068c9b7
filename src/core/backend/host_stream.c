/*
 * host_stream.c: the host backend's streams and events (policy in host.c),
 * over the scheduler of host_sched.c.
 */
#include "host_impl.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic uint64_t next_sid = 1;

/* ---- streams ------------------------------------------------------------ */

cp_status cp_host_stream_create_on(cp_stream **out, int dev, int priority, int blocking)
{
    CP_GUARD();
    cp_stream *s;
    cp_status st;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "stream_create: out is NULL");
    *out = NULL;
    if ((st = cp_host_check_device(dev)) != CP_OK)
        return st;
    /* validated like the CUDA backend does, then ignored: one worker per
     * stream already gives each stream its own share of the CPU */
    if (priority > HOST_PRIO_LEAST || priority < HOST_PRIO_GREATEST)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "stream priority %d is outside the device's range "
                             "%d (least) .. %d (greatest)",
                             priority, HOST_PRIO_LEAST, HOST_PRIO_GREATEST);
    cp_host_reap_zombies();
    s = calloc(1, sizeof *s);
    if (!s)
        return cp_error_set(CP_ERR_OOM, "host backend: out of memory for a stream");
    s->id = atomic_fetch_add(&next_sid, 1);
    s->device = dev;
    s->blocking = blocking != 0;
    pthread_cond_init(&s->work_cv, NULL);
    pthread_mutex_lock(&G.mu);
    if (G.shutdown) {
        st = cp_error_set(CP_ERR_BACKEND, "host backend: the process is shutting down");
    } else {
        cp_host_registry_add_locked(s);
        st = cp_host_start_worker_locked(s);
        if (st != CP_OK)
            cp_host_registry_remove_locked(s);
    }
    pthread_mutex_unlock(&G.mu);
    if (st != CP_OK) {
        cp_host_stream_free(s);
        return st;
    }
    *out = s;
    return CP_OK;
}

cp_status cp_host_stream_create(cp_stream **out, int priority, int blocking)
{
    CP_GUARD();
    return cp_host_stream_create_on(out, cp_host_get_device(), priority, blocking);
}

/* No native streams on the host: a new stream stands for the handle (0 and
 * 1, the legacy stream's handles, are the legacy stream). */
cp_status cp_host_stream_wrap(cp_stream **out, void *native, int dev)
{
    CP_GUARD();
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "stream_wrap: out is NULL");
    *out = NULL;
    if ((uintptr_t)native <= 1)
        return cp_host_check_device(dev);
    return cp_host_stream_create_on(out, dev, 0, 0);
}

cp_status cp_host_stream_destroy(cp_stream *s)
{
    CP_GUARD();
    if (!s)
        return cp_error_set(CP_ERR_INVALID, "stream_destroy: the default stream cannot be destroyed");
    pthread_mutex_lock(&G.mu);
    if (s->joined) {
        /* its worker was stopped at process exit: only the struct is left */
        cp_host_registry_remove_locked(s);
        pthread_mutex_unlock(&G.mu);
        cp_host_stream_free(s);
        return CP_OK;
    }
    s->destroyed = 1;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&G.mu);
    cp_host_reap_zombies();
    return CP_OK;
}

/* Waits for what is enqueued on s now; for the legacy stream, also for the
 * blocking streams' work, which anything enqueued on it would wait for. */
cp_status cp_host_stream_synchronize(cp_stream *s)
{
    CP_GUARD();
    cp_status st;
    pthread_mutex_lock(&G.mu);
    if (s) {
        cp_host_sched_wait_done_locked(s->id, s->enqueued);
    } else {
        hwork probe;
        int complete = 1;
        memset(&probe, 0, sizeof probe);
        probe.deps = probe.inline_deps;
        probe.capdeps = sizeof probe.inline_deps / sizeof probe.inline_deps[0];
        for (cp_stream *o = G.streams; o && complete; o = o->next)
            if ((o->blocking || o->legacy) && !cp_host_idle_locked(o) &&
                !cp_host_work_add_dep(&probe, o->id, o->enqueued))
                complete = 0;
        for (size_t i = 0; i < probe.ndeps; i++)
            cp_host_sched_wait_done_locked(probe.deps[i].sid, probe.deps[i].ticket);
        if (probe.deps != probe.inline_deps)
            free(probe.deps);
        while (!complete) {
            /* no memory for the snapshot: wait until they are all idle */
            complete = 1;
            for (cp_stream *o = G.streams; o && complete; o = o->next)
                if ((o->blocking || o->legacy) && !cp_host_idle_locked(o))
                    complete = 0;
            if (!complete)
                pthread_cond_wait(&G.done, &G.mu);
        }
    }
    cp_host_pool_release_locked();
    st = cp_host_fault_error_locked(s ? s : (G.legacy_started ? &G.legacy : NULL));
    if (st != CP_OK) {
        if (s)
            s->fault_told = 1;
    } else {
        st = cp_host_take_kernel_error_locked();
    }
    pthread_mutex_unlock(&G.mu);
    return st;
}

cp_status cp_host_stream_query(cp_stream *s, int *idle)
{
    CP_GUARD();
    if (!idle)
        return cp_error_set(CP_ERR_INVALID, "stream_query: idle is NULL");
    pthread_mutex_lock(&G.mu);
    if (s) {
        *idle = cp_host_idle_locked(s);
    } else {
        *idle = 1;
        for (cp_stream *o = G.streams; o; o = o->next)
            if ((o->blocking || o->legacy) && !cp_host_idle_locked(o))
                *idle = 0;
    }
    pthread_mutex_unlock(&G.mu);
    return CP_OK;
}

cp_status cp_host_stream_wait_event(cp_stream *s, cp_event *e)
{
    CP_GUARD();
    cp_status st = CP_OK;
    cp_stream *hs;
    if (!e)
        return cp_error_set(CP_ERR_INVALID, "stream_wait_event: event is NULL");
    pthread_mutex_lock(&G.mu);
    if (e->recorded) {
        hs = cp_host_resolve_locked(s);
        if (!hs) {
            st = CP_ERR_BACKEND;
        } else {
            cp_host_known_note_locked(hs, e->sid, e->ticket);
            if (hs->id != e->sid && !cp_host_sched_done_locked(e->sid, e->ticket)) {
                hwork *w = cp_host_work_or_oom(NULL);
                if (!w)
                    st = CP_ERR_OOM;
                else if (!cp_host_work_add_dep(w, e->sid, e->ticket)) {
                    cp_host_work_free(w);
                    st = cp_error_set(CP_ERR_OOM, "host backend: out of memory for a work item");
                } else {
                    st = cp_host_enqueue_locked(hs, w, NULL);
                }
            }
        }
    }
    pthread_mutex_unlock(&G.mu);
    return st;
}

uint64_t cp_host_stream_id(const cp_stream *s)
{
    return s ? s->id : 0;
}

/* ---- events ------------------------------------------------------------- */

cp_status cp_host_event_create(cp_event **out, int timing)
{
    CP_GUARD();
    cp_event *e;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "event_create: out is NULL");
    e = calloc(1, sizeof *e);
    if (!e) {
        *out = NULL;
        return cp_error_set(CP_ERR_OOM, "host backend: out of memory for an event");
    }
    e->timing = timing != 0;
    e->refs = 1;
    *out = e;
    return CP_OK;
}

static void event_unref_locked(cp_event *e)
{
    if (--e->refs == 0)
        free(e);
}

/* As cudaEventDestroy: returns at once; a pending marker keeps the struct. */
cp_status cp_host_event_destroy(cp_event *e)
{
    CP_GUARD();
    if (!e)
        return cp_error_set(CP_ERR_INVALID, "event_destroy: event is NULL");
    pthread_mutex_lock(&G.mu);
    event_unref_locked(e);
    pthread_mutex_unlock(&G.mu);
    return CP_OK;
}

static void mark_done_locked(hwork *w)
{
    cp_event *e = w->u.mark.e;
    if (w->u.mark.gen == e->gen)
        clock_gettime(CLOCK_MONOTONIC, &e->at);
    event_unref_locked(e);
}

cp_status cp_host_event_record(cp_event *e, cp_stream *s)
{
    CP_GUARD();
    uint64_t ticket = 0;
    cp_stream *hs;
    hwork *w;
    cp_status st;
    if (!e)
        return cp_error_set(CP_ERR_INVALID, "event_record: event is NULL");
    w = cp_host_work_or_oom(NULL);
    if (!w)
        return CP_ERR_OOM;
    w->done_locked = mark_done_locked;
    pthread_mutex_lock(&G.mu);
    hs = cp_host_resolve_locked(s);
    if (!hs) {
        cp_host_work_free(w);
        pthread_mutex_unlock(&G.mu);
        return CP_ERR_BACKEND;
    }
    w->u.mark.e = e;
    w->u.mark.gen = e->gen + 1;
    /* The marker's reference and generation first: on an idle stream the
     * enqueue completes it at once (as a GPU whose stream has no work
     * does), before it returns. */
    e->refs++;
    e->gen++;
    st = cp_host_enqueue_locked(hs, w, &ticket);
    if (st == CP_OK) {
        e->recorded = 1;
        e->sid = hs->id;
        e->ticket = ticket;
    } else {
        /* the item was freed unrun */
        e->refs--;
        e->gen--;
    }
    pthread_mutex_unlock(&G.mu);
    return st;
}

cp_status cp_host_event_synchronize(cp_event *e)
{
    CP_GUARD();
    cp_status st;
    if (!e)
        return cp_error_set(CP_ERR_INVALID, "event_synchronize: event is NULL");
    pthread_mutex_lock(&G.mu);
    if (e->recorded)
        cp_host_sched_wait_done_locked(e->sid, e->ticket);
    cp_host_pool_release_locked();
    st = e->recorded ? cp_host_fault_error_locked(cp_host_find_locked(e->sid)) : CP_OK;
    if (st == CP_OK)
        st = cp_host_take_kernel_error_locked();
    pthread_mutex_unlock(&G.mu);
    return st;
}

cp_status cp_host_event_query(cp_event *e, int *done)
{
    CP_GUARD();
    if (!e || !done)
        return cp_error_set(CP_ERR_INVALID, "event_query: NULL argument");
    pthread_mutex_lock(&G.mu);
    *done = !e->recorded || cp_host_sched_done_locked(e->sid, e->ticket);
    pthread_mutex_unlock(&G.mu);
    return CP_OK;
}

cp_status cp_host_event_elapsed(cp_event *start, cp_event *end, float *ms)
{
    CP_GUARD();
    cp_status st = CP_OK;
    if (!start || !end || !ms)
        return cp_error_set(CP_ERR_INVALID, "event_elapsed: NULL argument");
    pthread_mutex_lock(&G.mu);
    if (!start->timing || !end->timing)
        st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_HANDLE,
                           "elapsed time needs timing events: the %s event was created without "
                           "timing (timing=false)",
                           !start->timing ? "start" : "end");
    else if (!start->recorded || !end->recorded)
        st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_HANDLE,
                           "elapsed time: the %s event was not recorded",
                           !start->recorded ? "start" : "end");
    else if (!cp_host_sched_done_locked(start->sid, start->ticket) ||
             !cp_host_sched_done_locked(end->sid, end->ticket))
        st = cp_cuda_error(CP_ERR_NOT_READY, CP_CUDA_NOT_READY,
                           "elapsed time: an event has not completed yet; synchronize on it "
                           "first");
    else
        *ms = (float)((double)(end->at.tv_sec - start->at.tv_sec) * 1e3 +
                      (double)(end->at.tv_nsec - start->at.tv_nsec) / 1e6);
    pthread_mutex_unlock(&G.mu);
    return st;
}
