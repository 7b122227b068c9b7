/*
 * fake_backend.h: a cp_backend for allocator tests whose stream completion
 * the test controls.  Memory is host memory (malloc); a stream is a counter of
 * work items queued (k_spin) and completed (fake_complete); an event
 * recorded on a stream is done once the work queued before it has completed.
 * stream_wait_event is logged so tests can see who waited on what.
 * Assign &fake_backend to cp_be before creating pools.  Thread-safe enough
 * for the multi-threaded test (one mutex around all state).
 */
#ifndef CUPOLA_FAKE_BACKEND_H
#define CUPOLA_FAKE_BACKEND_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

struct cp_stream {
    uint64_t id;
    uint64_t queued, completed;
    uint64_t waits;           /* stream_wait_event calls on this stream */
    const cp_stream *waited_on; /* stream of the last event waited for */
};

struct cp_event {
    cp_stream *s;
    uint64_t sid;  /* e->s's id when recorded (stream memory may be reused) */
    uint64_t target;
    int recorded;
};

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t fake_next_id = 1;
static cp_stream fake_default; /* the NULL stream's state */
static cp_stream *fake_streams[64];
static int fake_nstreams;
static uint64_t fake_records, fake_queries, fake_syncs, fake_allocs;

static cp_stream *fake_s(cp_stream *s)
{
    return s ? s : &fake_default;
}

static cp_status fake_stream_create(cp_stream **out, int priority, int blocking)
{
    cp_stream *s = calloc(1, sizeof *s);
    (void)priority;
    (void)blocking;
    if (!s)
        return CP_ERR_OOM;
    pthread_mutex_lock(&fake_lock);
    s->id = fake_next_id++;
    if (fake_nstreams < 64)
        fake_streams[fake_nstreams++] = s;
    pthread_mutex_unlock(&fake_lock);
    *out = s;
    return CP_OK;
}

static cp_status fake_stream_destroy(cp_stream *s)
{
    int i;
    pthread_mutex_lock(&fake_lock);
    for (i = 0; i < fake_nstreams; i++)
        if (fake_streams[i] == s)
            fake_streams[i] = fake_streams[--fake_nstreams];
    pthread_mutex_unlock(&fake_lock);
    free(s);
    return CP_OK;
}

static uint64_t fake_stream_id(const cp_stream *s)
{
    return s ? s->id : 0;
}

static const cp_backend fake_backend;

/* Completes all work queued on s so far (a no-op unless the fake backend is
 * the one in use: s is then another backend's stream). */
static void fake_complete(cp_stream *s)
{
    if (cp_be != &fake_backend)
        return;
    pthread_mutex_lock(&fake_lock);
    fake_s(s)->completed = fake_s(s)->queued;
    pthread_mutex_unlock(&fake_lock);
}

static cp_status fake_device_synchronize(void)
{
    int i;
    pthread_mutex_lock(&fake_lock);
    fake_default.completed = fake_default.queued;
    for (i = 0; i < fake_nstreams; i++)
        fake_streams[i]->completed = fake_streams[i]->queued;
    fake_syncs++;
    pthread_mutex_unlock(&fake_lock);
    return CP_OK;
}

static cp_status fake_stream_synchronize(cp_stream *s)
{
    fake_complete(s);
    return CP_OK;
}

static cp_status fake_stream_query(cp_stream *s, int *idle)
{
    pthread_mutex_lock(&fake_lock);
    *idle = fake_s(s)->completed >= fake_s(s)->queued;
    pthread_mutex_unlock(&fake_lock);
    return CP_OK;
}

static cp_status fake_event_create(cp_event **out, int timing)
{
    (void)timing;
    *out = calloc(1, sizeof **out);
    return *out ? CP_OK : CP_ERR_OOM;
}

static cp_status fake_event_destroy(cp_event *e)
{
    free(e);
    return CP_OK;
}

static cp_status fake_event_record(cp_event *e, cp_stream *s)
{
    pthread_mutex_lock(&fake_lock);
    e->s = fake_s(s);
    e->sid = e->s->id;
    e->target = fake_s(s)->queued;
    e->recorded = 1;
    fake_records++;
    pthread_mutex_unlock(&fake_lock);
    return CP_OK;
}

/* The event's stream, or NULL once it was destroyed (its work then counts
 * as complete: the stream's memory is gone, so look it up, never follow
 * e->s blindly). */
static cp_stream *fake_event_stream(const cp_event *e)
{
    int i;
    if (e->s == &fake_default)
        return e->s;
    for (i = 0; i < fake_nstreams; i++)
        if (fake_streams[i] == e->s && fake_streams[i]->id == e->sid)
            return e->s;
    return NULL;
}

static cp_status fake_event_query(cp_event *e, int *done)
{
    cp_stream *es;
    pthread_mutex_lock(&fake_lock);
    es = fake_event_stream(e);
    *done = !e->recorded || !es || es->completed >= e->target;
    fake_queries++;
    pthread_mutex_unlock(&fake_lock);
    return CP_OK;
}

static cp_status fake_event_synchronize(cp_event *e)
{
    pthread_mutex_lock(&fake_lock);
    if (e->recorded && fake_event_stream(e) && e->s->completed < e->target)
        e->s->completed = e->target;
    pthread_mutex_unlock(&fake_lock);
    return CP_OK;
}

static cp_status fake_stream_wait_event(cp_stream *s, cp_event *e)
{
    pthread_mutex_lock(&fake_lock);
    fake_s(s)->waits++;
    fake_s(s)->waited_on = e->s;
    pthread_mutex_unlock(&fake_lock);
    return CP_OK;
}

static cp_status fake_mem_alloc(void **out, size_t bytes, cp_memkind kind)
{
    (void)kind;
    *out = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
    if (!*out)
        return cp_error_set(CP_ERR_OOM, "fake: out of memory");
    pthread_mutex_lock(&fake_lock);
    fake_allocs++;
    pthread_mutex_unlock(&fake_lock);
    return CP_OK;
}

static cp_status fake_device_synchronize(void);

/* cudaFree waits for the device; so does this (pools rely on it when they
 * return a chunk whose last use may still be queued). */
static cp_status fake_mem_free(void *p, cp_memkind kind)
{
    (void)kind;
    fake_device_synchronize();
    free(p);
    return CP_OK;
}

static cp_status fake_mem_alloc_async(void **out, size_t bytes, cp_stream *s)
{
    (void)s;
    return fake_mem_alloc(out, bytes, CP_MEM_DEVICE);
}

static cp_status fake_mem_free_async(void *p, cp_stream *s)
{
    (void)s;
    free(p);
    return CP_OK;
}

static cp_status fake_k_spin(uint64_t us, cp_stream *s)
{
    (void)us;
    pthread_mutex_lock(&fake_lock);
    fake_s(s)->queued++;
    pthread_mutex_unlock(&fake_lock);
    return CP_OK;
}

static const cp_backend fake_backend = {
    .name = "fake",
    .device_synchronize = fake_device_synchronize,
    .stream_create = fake_stream_create,
    .stream_destroy = fake_stream_destroy,
    .stream_synchronize = fake_stream_synchronize,
    .stream_query = fake_stream_query,
    .stream_wait_event = fake_stream_wait_event,
    .stream_id = fake_stream_id,
    .event_create = fake_event_create,
    .event_destroy = fake_event_destroy,
    .event_record = fake_event_record,
    .event_synchronize = fake_event_synchronize,
    .event_query = fake_event_query,
    .mem_alloc = fake_mem_alloc,
    .mem_free = fake_mem_free,
    .mem_alloc_async = fake_mem_alloc_async,
    .mem_free_async = fake_mem_free_async,
    .k_spin = fake_k_spin,
};

#endif /* CUPOLA_FAKE_BACKEND_H */
