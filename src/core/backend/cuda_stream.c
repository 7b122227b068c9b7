/*
 * cuda_stream.c: the CUDA backend's streams and events (policy in cuda.c),
 * small wrappers that remember what CUDA does not tell: a stream's
 * process-unique id and device, an event's timing and whether it was ever
 * recorded.
 */
#include "cuda_impl.h"

#include <stdlib.h>

/* ---- streams ------------------------------------------------------------------ */

/* Ids start at 1 (0 names the default stream) and are never reused. */
static atomic_uint_least64_t next_stream_id = 1;

cp_status cp_cuda_stream_create_on(cp_stream **out, int dev, int priority, int blocking)
{
    CP_GUARD();
    int least = 0, greatest = 0;
    cp_stream *s;
    cudaError_t e;
    cp_status st;

    if (!out)
        return cp_error_set(CP_ERR_INVALID, "stream_create: out is NULL");
    *out = NULL;
    if ((st = cp_cuda_check_device(dev)) != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    /* CUDA would clamp silently; an experiment asking for a priority the
     * device lacks should hear about it. */
    if (priority > least || priority < greatest)
        return cp_cuda_refuse(cudaErrorInvalidValue,
                              "stream priority %d is out of range: this device accepts %d (lowest) "
                              "to %d (highest); lower numbers mean higher priority",
                              priority, least, greatest);
    if (!(s = malloc(sizeof *s)))
        return cp_error_set(CP_ERR_OOM, "stream_create: out of host memory");
    e = cudaStreamCreateWithPriority(&s->h, blocking ? cudaStreamDefault : cudaStreamNonBlocking,
                                     priority);
    if (e != cudaSuccess) {
        free(s);
        return cp_cuda_fail(e, "cudaStreamCreateWithPriority");
    }
    s->id = atomic_fetch_add(&next_stream_id, 1);
    s->dev = dev;
    s->foreign = 0;
    *out = s;
    return CP_OK;
}

cp_status cp_cuda_stream_create(cp_stream **out, int priority, int blocking)
{
    CP_GUARD();
    return cp_cuda_stream_create_on(out, CP_DEVICE, priority, blocking);
}

/* Another library's stream (PyTorch's, handed to a pluggable allocator). */
cp_status cp_cuda_stream_wrap(cp_stream **out, void *native, int dev)
{
    CP_GUARD();
    cp_stream *s;
    cp_status st;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "stream_wrap: out is NULL");
    *out = NULL;
    if ((st = cp_cuda_check_device(dev)) != CP_OK)
        return st;
    if (!native || (cudaStream_t)native == cudaStreamLegacy)
        return CP_OK;
    if (!(s = malloc(sizeof *s)))
        return cp_error_set(CP_ERR_OOM, "stream_wrap: out of host memory");
    s->h = (cudaStream_t)native;
    s->id = atomic_fetch_add(&next_stream_id, 1);
    s->dev = dev;
    s->foreign = 1;
    *out = s;
    return CP_OK;
}

cp_status cp_cuda_stream_destroy(cp_stream *s)
{
    CP_GUARD();
    cudaError_t e;
    if (!s || s->id == 0) /* the default stream is not ours to destroy */
        return CP_OK;
    if (s->foreign) { /* its owner destroys the stream itself */
        free(s);
        return CP_OK;
    }
    /* Returns at once; work still queued completes first (no sync). */
    if (cp_cuda_use_device(s->dev) != CP_OK)
        (void)cudaGetLastError(); /* shutting down: destroy tolerates it */
    e = cudaStreamDestroy(s->h);
    free(s);
    return cp_cuda_release_result(e, "cudaStreamDestroy");
}

cp_status cp_cuda_stream_synchronize(cp_stream *s)
{
    CP_GUARD();
    ENTER_STREAM(s);
    CHECK(cudaStreamSynchronize(cp_cuda_stream_handle(s)), "cudaStreamSynchronize");
    return CP_OK;
}

cp_status cp_cuda_stream_query(cp_stream *s, int *idle)
{
    CP_GUARD();
    cudaError_t e;
    if (!idle)
        return cp_error_set(CP_ERR_INVALID, "stream_query: idle is NULL");
    ENTER_STREAM(s);
    e = cudaStreamQuery(cp_cuda_stream_handle(s));
    if (e == cudaSuccess || e == cudaErrorNotReady) {
        *idle = e == cudaSuccess;
        return CP_OK;
    }
    return cp_cuda_fail(e, "cudaStreamQuery");
}

cp_status cp_cuda_stream_wait_event(cp_stream *s, cp_event *ev)
{
    CP_GUARD();
    if (!ev)
        return cp_error_set(CP_ERR_INVALID, "stream_wait_event: event is NULL");
    ENTER_STREAM(s); /* the event may belong to another device: CUDA allows it */
    CHECK(cudaStreamWaitEvent(cp_cuda_stream_handle(s), ev->h, 0), "cudaStreamWaitEvent");
    return CP_OK;
}

uint64_t cp_cuda_stream_id(const cp_stream *s)
{
    return s ? s->id : 0;
}

/* ---- events --------------------------------------------------------------------- */

cp_status cp_cuda_event_create(cp_event **out, int timing)
{
    CP_GUARD();
    cp_event *ev;
    cudaError_t e;

    if (!out)
        return cp_error_set(CP_ERR_INVALID, "event_create: out is NULL");
    *out = NULL;
    if (!(ev = malloc(sizeof *ev)))
        return cp_error_set(CP_ERR_OOM, "event_create: out of host memory");
    if (cp_cuda_use_device(CP_DEVICE) != CP_OK) {
        free(ev);
        return CP_ERR_BACKEND;
    }
    e = cudaEventCreateWithFlags(&ev->h, timing ? cudaEventDefault : cudaEventDisableTiming);
    if (e != cudaSuccess) {
        free(ev);
        return cp_cuda_fail(e, "cudaEventCreateWithFlags");
    }
    ev->timing = timing != 0;
    ev->dev = CP_DEVICE;
    atomic_init(&ev->recorded, 0);
    *out = ev;
    return CP_OK;
}

cp_status cp_cuda_event_destroy(cp_event *ev)
{
    CP_GUARD();
    cudaError_t e;
    if (!ev)
        return CP_OK;
    e = cudaEventDestroy(ev->h);
    free(ev);
    return cp_cuda_release_result(e, "cudaEventDestroy");
}

cp_status cp_cuda_event_record(cp_event *ev, cp_stream *s)
{
    CP_GUARD();
    if (!ev)
        return cp_error_set(CP_ERR_INVALID, "event_record: event is NULL");
    ENTER_STREAM(s);
    if (ev->dev != cp_cuda_stream_dev(s)) {
        /* recording overwrites the event's state: a new one on the stream's
         * device stands for it */
        cudaEvent_t h;
        CHECK(cudaEventCreateWithFlags(&h, ev->timing ? cudaEventDefault
                                                      : cudaEventDisableTiming),
              "cudaEventCreateWithFlags (the event moves to the stream's device)");
        (void)cudaEventDestroy(ev->h);
        (void)cudaGetLastError();
        ev->h = h;
        ev->dev = cp_cuda_stream_dev(s);
    }
    CHECK(cudaEventRecord(ev->h, cp_cuda_stream_handle(s)), "cudaEventRecord");
    atomic_store(&ev->recorded, 1);
    return CP_OK;
}

cp_status cp_cuda_event_synchronize(cp_event *ev)
{
    CP_GUARD();
    if (!ev)
        return cp_error_set(CP_ERR_INVALID, "event_synchronize: event is NULL");
    CHECK(cudaEventSynchronize(ev->h), "cudaEventSynchronize");
    return CP_OK;
}

cp_status cp_cuda_event_query(cp_event *ev, int *done)
{
    CP_GUARD();
    cudaError_t e;
    if (!ev || !done)
        return cp_error_set(CP_ERR_INVALID, "event_query: event or done is NULL");
    e = cudaEventQuery(ev->h);
    if (e == cudaSuccess || e == cudaErrorNotReady) {
        *done = e == cudaSuccess;
        return CP_OK;
    }
    return cp_cuda_fail(e, "cudaEventQuery");
}

cp_status cp_cuda_event_elapsed(cp_event *start, cp_event *end, float *ms)
{
    CP_GUARD();
    cudaError_t e;

    if (!start || !end || !ms)
        return cp_error_set(CP_ERR_INVALID, "event_elapsed: start, end or ms is NULL");
    /* CUDA answers all of these with cudaErrorInvalidResourceHandle; say
     * which it is. */
    if (!start->timing || !end->timing)
        return cp_cuda_refuse(cudaErrorInvalidResourceHandle,
                              "elapsed time needs timing events: the %s event was created without "
                              "timing (timing=false)",
                              !start->timing ? "start" : "end");
    if (!atomic_load(&start->recorded) || !atomic_load(&end->recorded))
        return cp_cuda_refuse(cudaErrorInvalidResourceHandle,
                              "elapsed time: the %s event was not recorded",
                              !atomic_load(&start->recorded) ? "start" : "end");
    e = cudaEventElapsedTime(ms, start->h, end->h);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return cp_error_set(CP_ERR_NOT_READY,
                            "%s: %s (cudaEventElapsedTime: an event has not completed yet; "
                            "synchronize on it first)",
                            cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (e != cudaSuccess)
        return cp_cuda_fail(e, "cudaEventElapsedTime");
    return CP_OK;
}

/* ---- run-time compiled kernels ------------------------------------ */

void *cp_cuda_stream_native(cp_stream *s)
{
    return (void *)cp_cuda_stream_handle(s);
}
