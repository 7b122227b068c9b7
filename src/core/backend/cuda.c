/*
 * backend/cuda.c: the backend table (backend.h) over the CUDA runtime.
 *
 * Plain C11 calling cuda_runtime_api.h; the kernels live in cuda/kernels.cu
 * behind extern "C" launchers.  The runtime is linked statically, so the
 * probe below runs (and answers "no") on machines without a driver.
 *
 * Streams, events and pools are small malloc'd wrappers around the CUDA
 * handles, so that the backend can remember what CUDA will not tell it (a
 * stream's process-unique id and device, whether an event has timing or was
 * ever recorded, which cupola pool a raw cudaMemPool_t is).
 *
 * Devices (backend.h, "several devices"): every entry point makes the device
 * of the object it acts on the thread's CUDA device (use_device: cudaSetDevice
 * only when cudaGetDevice says otherwise) and never restores the previous
 * one; object-less entry points and the NULL (legacy) stream use the thread's
 * cupola device (tl_device, set_device), so what runs where never depends on
 * what an earlier call happened to leave current.  An event is created on
 * the device current at creation and re-created on a stream's device when it
 * is recorded there (CUDA requires event and stream to share a device).
 *
 * Error policy: every CUDA return code is checked; a failure stores
 * "cudaErrorX: text (operation)" and maps the error to a cp_status.  Destroy
 * and free functions never synchronize and treat the runtime's shutdown
 * errors as success, because finalizers run them at process exit.
 */
#include "backend.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h> /* types of the driver's VMM calls only: their entry points are looked up */
#include <cuda_runtime_api.h>

#include "devpool_cuda.h"
#include "kernels.h"

#define CP_DEVICE tl_device /* object-less entry points: the thread's device */

static _Thread_local int tl_device;

struct cp_stream {
    cudaStream_t h;
    uint64_t id;
    int dev;
    int foreign; /* stream_wrap: the handle is another library's */
};

struct cp_event {
    cudaEvent_t h;
    int timing;
    int dev; /* where h was created */
    atomic_int recorded; /* CUDA reports "never recorded" only as a bad handle */
};

struct cp_mempool {
    cudaMemPool_t h;
    int is_default;
    int location_host;
    int dev;
    int imported;
    struct cp_mempool *next; /* registry of live pools, for get_current */
};

/* ---- errors ---------------------------------------------------------------- */

static cp_status status_of(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return CP_OK;
    case cudaErrorMemoryAllocation: return CP_ERR_OOM;
    case cudaErrorNotReady: return CP_ERR_NOT_READY;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidResourceHandle: return CP_ERR_INVALID;
    case cudaErrorNotSupported: return CP_ERR_UNSUPPORTED;
    default: return CP_ERR_BACKEND;
    }
}

/* Stores the message for a failed CUDA call and returns its status.  The
 * message starts with the CUDA error name (backend.h's convention).  The
 * thread's last error is cleared so that a later launch's check reports
 * that launch, not this older failure (after an OOM above all, which
 * callers treat as data and carry on from). */
/* Errors after which the CUDA context is unusable: every later call of the
 * process fails with them. */
static int sticky(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorHardwareStackError:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
        return 1;
    default:
        return 0;
    }
}

static cp_status fail(cudaError_t e, const char *op)
{
    CP_GUARD();
    (void)cudaGetLastError();
    if (sticky(e)) {
        char msg[768];
        cp_sticky_message((int)e, cudaGetErrorName(e), cudaGetErrorString(e), op, msg,
                               sizeof msg);
        cp_mark_sticky(msg);
        return cp_unusable_error();
    }
    return cp_error_set(status_of(e), "%s: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e),
                        op);
}

/* A request cupola refuses before making the CUDA call that would fail (or,
 * for a stream priority, clamp it silently): worded as fail() words that
 * call's error, with cupola's explanation where fail() names the call, so
 * that both backends carry the same CUDA error name (backend.h).  Always
 * CP_ERR_INVALID: the request is what is wrong. */
static cp_status refuse(cudaError_t e, const char *fmt, ...) CP_PRINTF(2, 3);
static cp_status refuse(cudaError_t e, const char *fmt, ...)
{
    char what[448];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return cp_error_set(CP_ERR_INVALID, "%s: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e),
                        what);
}

#define CHECK(call, op)                                                                           \
    do {                                                                                          \
        cudaError_t check_e_ = (call);                                                            \
        if (check_e_ != cudaSuccess)                                                              \
            return fail(check_e_, op);                                                            \
    } while (0)

/* The runtime is being torn down (process exit): a handle or block is gone
 * with it, so releasing it has nothing left to do. */
static int shutting_down(cudaError_t e)
{
    return e == cudaErrorCudartUnloading || e == cudaErrorContextIsDestroyed;
}

static cp_status release_result(cudaError_t e, const char *op)
{
    CP_GUARD();
    if (e == cudaSuccess || shutting_down(e)) {
        (void)cudaGetLastError();
        return CP_OK;
    }
    return fail(e, op);
}

static cudaStream_t stream_handle(const cp_stream *s)
{
    return s ? s->h : cudaStreamLegacy;
}

static int device_count_cached = -1;

static int cuda_device_count(void)
{
    if (device_count_cached < 0) {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) {
            (void)cudaGetLastError();
            n = 0;
        }
        device_count_cached = n;
    }
    return device_count_cached;
}

static cp_status check_device(int dev)
{
    CP_GUARD();
    int n = cuda_device_count();
    if (dev < 0 || dev >= n)
        return cp_error_set(CP_ERR_INVALID,
                            "cudaErrorInvalidDevice: invalid device ordinal (device %d; this "
                            "machine has %d)",
                            dev, n);
    return CP_OK;
}

/* Makes dev the calling thread's CUDA device (only when it is not). */
static cp_status use_device(int dev)
{
    CP_GUARD();
    int cur = -1;
    cudaError_t e = cudaGetDevice(&cur);
    if (e != cudaSuccess)
        return fail(e, "cudaGetDevice");
    if (cur != dev)
        CHECK(cudaSetDevice(dev), "cudaSetDevice");
    return CP_OK;
}

static int stream_dev(const cp_stream *s)
{
    return s ? s->dev : tl_device;
}

/* Every entry point acting on a stream starts here. */
#define ENTER_STREAM(s)                                                                           \
    do {                                                                                          \
        cp_status enter_st_ = use_device(stream_dev(s));                                          \
        if (enter_st_ != CP_OK)                                                                   \
            return enter_st_;                                                                     \
    } while (0)
#define ENTER_DEVICE(d)                                                                           \
    do {                                                                                          \
        cp_status enter_st_ = use_device(d);                                                      \
        if (enter_st_ != CP_OK)                                                                   \
            return enter_st_;                                                                     \
    } while (0)

/* ---- probe ------------------------------------------------------------------ */

int cp_backend_cuda_probe(char *why, size_t whylen)
{
    char dummy[1];
    int n = 0;
    cudaError_t e;
    const char *op = NULL;

    if (!why || whylen == 0) {
        why = dummy;
        whylen = sizeof dummy;
    }
    why[0] = '\0';
    if ((e = cudaGetDeviceCount(&n)) != cudaSuccess) {
        op = "cudaGetDeviceCount";
    } else if (n < 1) {
        snprintf(why, whylen, "no CUDA device found");
        return 0;
    } else if ((e = cudaSetDevice(CP_DEVICE)) != cudaSuccess) {
        op = "cudaSetDevice";
    } else if ((e = cudaFree(NULL)) != cudaSuccess) { /* creates the context */
        op = "cudaFree(0), creating the context";
    } else if ((e = cp_cuda_kernels_check()) != cudaSuccess) {
        op = "cupola's kernels (built for sm_80 and sm_90) cannot run on this device";
    }
    if (op) {
        snprintf(why, whylen, "%s: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e), op);
        (void)cudaGetLastError();
        return 0;
    }
    return 1;
}

/* ---- device ----------------------------------------------------------------- */

static cp_status cuda_device_info_on(int dev, cp_device_info *out)
{
    CP_GUARD();
    struct cudaDeviceProp prop;
    int v = 0;
    cp_status st;

    if (!out)
        return cp_error_set(CP_ERR_INVALID, "device_info: out is NULL");
    if ((st = check_device(dev)) != CP_OK)
        return st;
    memset(out, 0, sizeof *out);
    CHECK(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    snprintf(out->name, sizeof out->name, "%s", prop.name);
    out->index = dev;
    out->memory = (uint64_t)prop.totalGlobalMem;
    out->sms = prop.multiProcessorCount;
    out->cc_major = prop.major;
    out->cc_minor = prop.minor;
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, dev),
          "cudaDeviceGetAttribute(cudaDevAttrMemoryPoolsSupported)");
    out->mempools = v != 0;
    CHECK(cudaDriverGetVersion(&out->driver), "cudaDriverGetVersion");
    CHECK(cudaRuntimeGetVersion(&out->runtime), "cudaRuntimeGetVersion");
    ENTER_DEVICE(dev);
    CHECK(cudaDeviceGetStreamPriorityRange(&out->priority_least, &out->priority_greatest),
          "cudaDeviceGetStreamPriorityRange");
    return CP_OK;
}

static cp_status cuda_device_info(cp_device_info *out)
{
    CP_GUARD();
    return cuda_device_info_on(CP_DEVICE, out);
}

static void reap_retired_pools(int dev);

static cp_status cuda_device_synchronize_on(int dev)
{
    CP_GUARD();
    cp_status st = check_device(dev);
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    CHECK(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    reap_retired_pools(dev); /* the device is idle: no free is queued on them */
    return CP_OK;
}

static cp_status cuda_device_synchronize(void)
{
    CP_GUARD();
    return cuda_device_synchronize_on(CP_DEVICE);
}

static cp_status cuda_mem_get_info_on(int dev, size_t *free_bytes, size_t *total_bytes)
{
    CP_GUARD();
    size_t f = 0, t = 0;
    cp_status st = check_device(dev);
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    CHECK(cudaMemGetInfo(&f, &t), "cudaMemGetInfo");
    if (free_bytes)
        *free_bytes = f;
    if (total_bytes)
        *total_bytes = t;
    return CP_OK;
}

static cp_status cuda_mem_get_info(size_t *free_bytes, size_t *total_bytes)
{
    CP_GUARD();
    return cuda_mem_get_info_on(CP_DEVICE, free_bytes, total_bytes);
}

static cp_status cuda_set_device(int dev)
{
    CP_GUARD();
    cp_status st = check_device(dev);
    if (st == CP_OK)
        tl_device = dev;
    return st;
}

static int cuda_get_device(void)
{
    return tl_device;
}

static int cuda_stream_device(const cp_stream *s)
{
    return stream_dev(s);
}

/* Per device, the legacy stream as an object that knows its device; id 0
 * like the NULL stream, and never destroyed (stream_destroy skips id 0). */
static cp_stream legacy_streams[CP_MAX_DEVICES];

static cp_stream *cuda_stream_legacy(int dev)
{
    if (dev < 0 || dev >= CP_MAX_DEVICES)
        return NULL;
    legacy_streams[dev].h = cudaStreamLegacy;
    legacy_streams[dev].id = 0;
    legacy_streams[dev].dev = dev;
    return &legacy_streams[dev];
}

/* ---- streams ------------------------------------------------------------------ */

/* Ids start at 1 (0 names the default stream) and are never reused. */
static atomic_uint_least64_t next_stream_id = 1;

static cp_status cuda_stream_create_on(cp_stream **out, int dev, int priority, int blocking)
{
    CP_GUARD();
    int least = 0, greatest = 0;
    cp_stream *s;
    cudaError_t e;
    cp_status st;

    if (!out)
        return cp_error_set(CP_ERR_INVALID, "stream_create: out is NULL");
    *out = NULL;
    if ((st = check_device(dev)) != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    /* CUDA would clamp silently; an experiment asking for a priority the
     * device lacks should hear about it. */
    if (priority > least || priority < greatest)
        return refuse(cudaErrorInvalidValue,
                      "stream priority %d is out of range: this device accepts %d (lowest) "
                      "to %d (highest); lower numbers mean higher priority",
                      priority, least, greatest);
    if (!(s = malloc(sizeof *s)))
        return cp_error_set(CP_ERR_OOM, "stream_create: out of host memory");
    e = cudaStreamCreateWithPriority(&s->h, blocking ? cudaStreamDefault : cudaStreamNonBlocking,
                                     priority);
    if (e != cudaSuccess) {
        free(s);
        return fail(e, "cudaStreamCreateWithPriority");
    }
    s->id = atomic_fetch_add(&next_stream_id, 1);
    s->dev = dev;
    s->foreign = 0;
    *out = s;
    return CP_OK;
}

static cp_status cuda_stream_create(cp_stream **out, int priority, int blocking)
{
    CP_GUARD();
    return cuda_stream_create_on(out, CP_DEVICE, priority, blocking);
}

/* Another library's stream (PyTorch's, handed to a pluggable allocator). */
static cp_status cuda_stream_wrap(cp_stream **out, void *native, int dev)
{
    CP_GUARD();
    cp_stream *s;
    cp_status st;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "stream_wrap: out is NULL");
    *out = NULL;
    if ((st = check_device(dev)) != CP_OK)
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

static cp_status cuda_stream_destroy(cp_stream *s)
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
    if (use_device(s->dev) != CP_OK)
        (void)cudaGetLastError(); /* shutting down: destroy tolerates it */
    e = cudaStreamDestroy(s->h);
    free(s);
    return release_result(e, "cudaStreamDestroy");
}

static cp_status cuda_stream_synchronize(cp_stream *s)
{
    CP_GUARD();
    ENTER_STREAM(s);
    CHECK(cudaStreamSynchronize(stream_handle(s)), "cudaStreamSynchronize");
    return CP_OK;
}

static cp_status cuda_stream_query(cp_stream *s, int *idle)
{
    CP_GUARD();
    cudaError_t e;
    if (!idle)
        return cp_error_set(CP_ERR_INVALID, "stream_query: idle is NULL");
    ENTER_STREAM(s);
    e = cudaStreamQuery(stream_handle(s));
    if (e == cudaSuccess || e == cudaErrorNotReady) {
        *idle = e == cudaSuccess;
        return CP_OK;
    }
    return fail(e, "cudaStreamQuery");
}

static cp_status cuda_stream_wait_event(cp_stream *s, cp_event *ev)
{
    CP_GUARD();
    if (!ev)
        return cp_error_set(CP_ERR_INVALID, "stream_wait_event: event is NULL");
    ENTER_STREAM(s); /* the event may belong to another device: CUDA allows it */
    CHECK(cudaStreamWaitEvent(stream_handle(s), ev->h, 0), "cudaStreamWaitEvent");
    return CP_OK;
}

static uint64_t cuda_stream_id(const cp_stream *s)
{
    return s ? s->id : 0;
}

/* ---- events --------------------------------------------------------------------- */

static cp_status cuda_event_create(cp_event **out, int timing)
{
    CP_GUARD();
    cp_event *ev;
    cudaError_t e;

    if (!out)
        return cp_error_set(CP_ERR_INVALID, "event_create: out is NULL");
    *out = NULL;
    if (!(ev = malloc(sizeof *ev)))
        return cp_error_set(CP_ERR_OOM, "event_create: out of host memory");
    if (use_device(CP_DEVICE) != CP_OK) {
        free(ev);
        return CP_ERR_BACKEND;
    }
    e = cudaEventCreateWithFlags(&ev->h, timing ? cudaEventDefault : cudaEventDisableTiming);
    if (e != cudaSuccess) {
        free(ev);
        return fail(e, "cudaEventCreateWithFlags");
    }
    ev->timing = timing != 0;
    ev->dev = CP_DEVICE;
    atomic_init(&ev->recorded, 0);
    *out = ev;
    return CP_OK;
}

static cp_status cuda_event_destroy(cp_event *ev)
{
    CP_GUARD();
    cudaError_t e;
    if (!ev)
        return CP_OK;
    e = cudaEventDestroy(ev->h);
    free(ev);
    return release_result(e, "cudaEventDestroy");
}

static cp_status cuda_event_record(cp_event *ev, cp_stream *s)
{
    CP_GUARD();
    if (!ev)
        return cp_error_set(CP_ERR_INVALID, "event_record: event is NULL");
    ENTER_STREAM(s);
    if (ev->dev != stream_dev(s)) {
        /* recording overwrites the event's state: a new one on the stream's
         * device stands for it */
        cudaEvent_t h;
        CHECK(cudaEventCreateWithFlags(&h, ev->timing ? cudaEventDefault
                                                      : cudaEventDisableTiming),
              "cudaEventCreateWithFlags (the event moves to the stream's device)");
        (void)cudaEventDestroy(ev->h);
        (void)cudaGetLastError();
        ev->h = h;
        ev->dev = stream_dev(s);
    }
    CHECK(cudaEventRecord(ev->h, stream_handle(s)), "cudaEventRecord");
    atomic_store(&ev->recorded, 1);
    return CP_OK;
}

static cp_status cuda_event_synchronize(cp_event *ev)
{
    CP_GUARD();
    if (!ev)
        return cp_error_set(CP_ERR_INVALID, "event_synchronize: event is NULL");
    CHECK(cudaEventSynchronize(ev->h), "cudaEventSynchronize");
    return CP_OK;
}

static cp_status cuda_event_query(cp_event *ev, int *done)
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
    return fail(e, "cudaEventQuery");
}

static cp_status cuda_event_elapsed(cp_event *start, cp_event *end, float *ms)
{
    CP_GUARD();
    cudaError_t e;

    if (!start || !end || !ms)
        return cp_error_set(CP_ERR_INVALID, "event_elapsed: start, end or ms is NULL");
    /* CUDA answers all of these with cudaErrorInvalidResourceHandle; say
     * which it is. */
    if (!start->timing || !end->timing)
        return refuse(cudaErrorInvalidResourceHandle,
                      "elapsed time needs timing events: the %s event was created without "
                      "timing (timing=false)",
                      !start->timing ? "start" : "end");
    if (!atomic_load(&start->recorded) || !atomic_load(&end->recorded))
        return refuse(cudaErrorInvalidResourceHandle, "elapsed time: the %s event was not recorded",
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
        return fail(e, "cudaEventElapsedTime");
    return CP_OK;
}

/* ---- raw memory --------------------------------------------------------------------- */

static cp_status cuda_mem_alloc_on(int dev, void **out, size_t bytes, cp_memkind kind)
{
    CP_GUARD();
    void *p = NULL;
    cp_status st;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mem_alloc: out is NULL");
    *out = NULL;
    if ((st = check_device(dev)) != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    switch (kind) {
    case CP_MEM_DEVICE: CHECK(cudaMalloc(&p, bytes), "cudaMalloc"); break;
    case CP_MEM_MANAGED:
        CHECK(cudaMallocManaged(&p, bytes, cudaMemAttachGlobal), "cudaMallocManaged");
        break;
    case CP_MEM_PINNED: CHECK(cudaMallocHost(&p, bytes), "cudaMallocHost"); break;
    default: return cp_error_set(CP_ERR_INVALID, "mem_alloc: unknown memory kind %d", (int)kind);
    }
    *out = p;
    return CP_OK;
}

static cp_status cuda_mem_alloc(void **out, size_t bytes, cp_memkind kind)
{
    CP_GUARD();
    return cuda_mem_alloc_on(CP_DEVICE, out, bytes, kind);
}

static cp_status cuda_mem_free_on(int dev, void *p, cp_memkind kind)
{
    CP_GUARD();
    if (!p)
        return CP_OK;
    if (dev >= 0 && dev < cuda_device_count() && use_device(dev) != CP_OK)
        (void)cudaGetLastError(); /* shutting down: the free tolerates it */
    switch (kind) {
    case CP_MEM_DEVICE:
    case CP_MEM_MANAGED: return release_result(cudaFree(p), "cudaFree");
    case CP_MEM_PINNED: return release_result(cudaFreeHost(p), "cudaFreeHost");
    default: return cp_error_set(CP_ERR_INVALID, "mem_free: unknown memory kind %d", (int)kind);
    }
}

/* Frees where the memory lives: cudaFree synchronizes that device. */
static cp_status cuda_mem_free(void *p, cp_memkind kind)
{
    CP_GUARD();
    struct cudaPointerAttributes a;
    int dev = CP_DEVICE;
    if (!p)
        return CP_OK;
    if (cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeDevice)
        dev = a.device;
    (void)cudaGetLastError();
    return cuda_mem_free_on(dev, p, kind);
}

static cp_status cuda_mem_alloc_async(void **out, size_t bytes, cp_stream *s)
{
    CP_GUARD();
    void *p = NULL;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mem_alloc_async: out is NULL");
    *out = NULL;
    ENTER_STREAM(s); /* the current pool of the stream's device */
    CHECK(cudaMallocAsync(&p, bytes, stream_handle(s)), "cudaMallocAsync");
    *out = p;
    return CP_OK;
}

static cp_status cuda_mem_free_async(void *p, cp_stream *s)
{
    CP_GUARD();
    if (!p)
        return CP_OK;
    if (use_device(stream_dev(s)) != CP_OK)
        (void)cudaGetLastError(); /* shutting down: the free tolerates it */
    return release_result(cudaFreeAsync(p, stream_handle(s)), "cudaFreeAsync");
}

/* ---- native pools --------------------------------------------------------------------- */

/* The default pool's wrapper (a singleton, never destroyed) and the list of
 * pools created here, so that get_current can hand back the very cp_mempool
 * that was made current.  One lock: pools are created rarely. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cp_mempool default_pool[CP_MAX_DEVICES];
static int default_pool_ready[CP_MAX_DEVICES];
static struct cp_mempool *live_pools;
/* Pools destroyed while frees on them may still be queued.  CUDA documents
 * that cudaMemPoolDestroy returns at once and releases the memory when the
 * outstanding frees are done, but with CUDA 13.0 / driver 580 it crashes
 * libcuda later (in a stream synchronize) when frees are still queued; the
 * reliability fuzz finds it.  So the handle is kept here and destroyed at the
 * next device synchronization, when nothing can be queued on it. */
static struct cp_mempool *retired_pools;

static const char *const pool_attr_names[CP_POOL_ATTR_COUNT] = {
    "release_threshold", "reuse_follow_event_dependencies", "reuse_allow_opportunistic",
    "reuse_allow_internal_dependencies", "reserved_current", "reserved_high", "used_current",
    "used_high",
};

static cp_status cuda_mempool_default_on(int dev, cp_mempool **out)
{
    CP_GUARD();
    cp_status st;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mempool_default: out is NULL");
    *out = NULL;
    if ((st = check_device(dev)) != CP_OK || dev >= CP_MAX_DEVICES)
        return st != CP_OK ? st : cp_error_set(CP_ERR_INVALID, "device %d: too many devices", dev);
    pthread_mutex_lock(&pool_lock);
    if (!default_pool_ready[dev]) {
        cudaMemPool_t h;
        cudaError_t e = cudaDeviceGetDefaultMemPool(&h, dev);
        if (e != cudaSuccess) {
            st = fail(e, "cudaDeviceGetDefaultMemPool");
        } else {
            default_pool[dev].h = h;
            default_pool[dev].is_default = 1;
            default_pool[dev].location_host = 0;
            default_pool[dev].dev = dev;
            default_pool[dev].imported = 0;
            default_pool[dev].next = NULL;
            default_pool_ready[dev] = 1;
        }
    }
    pthread_mutex_unlock(&pool_lock);
    *out = st == CP_OK ? &default_pool[dev] : NULL;
    return st;
}

static cp_status cuda_mempool_default(cp_mempool **out)
{
    CP_GUARD();
    return cuda_mempool_default_on(CP_DEVICE, out);
}

static cp_status device_attr_on(int dev, enum cudaDeviceAttr a, int *v, const char *what)
{
    CP_GUARD();
    CHECK(cudaDeviceGetAttribute(v, a, dev), what);
    return CP_OK;
}
#define device_attr(a, v, what) device_attr_on(props->device, a, v, what)

static cp_status cuda_mempool_create(cp_mempool **out, const cp_mempool_props *props)
{
    CP_GUARD();
    static const cp_mempool_props defaults = {0, 0, 0, 0};
    struct cudaMemPoolProps pp;
    cp_mempool *p;
    cudaError_t e;
    cp_status st;
    int v = 0;

    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mempool_create: out is NULL");
    *out = NULL;
    if (!props)
        props = &defaults;
    if ((st = check_device(props->device)) != CP_OK)
        return st;
    if (props->location_host && props->handle_posix_fd)
        return refuse(cudaErrorInvalidValue,
                      "a host-memory pool cannot be exported: CUDA allows no handle types "
                      "for location host");
    if (props->location_host) {
        if ((st = device_attr(cudaDevAttrHostMemoryPoolsSupported, &v,
                              "cudaDeviceGetAttribute(cudaDevAttrHostMemoryPoolsSupported)")))
            return st;
        if (!v)
            return cp_error_set(CP_ERR_UNSUPPORTED,
                                "this device or driver does not support host-memory pools "
                                "(cudaDevAttrHostMemoryPoolsSupported is 0)");
    }
    if (props->handle_posix_fd) {
        if ((st = device_attr(cudaDevAttrMemoryPoolSupportedHandleTypes, &v,
                              "cudaDeviceGetAttribute(cudaDevAttrMemoryPoolSupportedHandleTypes)")))
            return st;
        if (!(v & cudaMemHandleTypePosixFileDescriptor))
            return cp_error_set(CP_ERR_UNSUPPORTED,
                                "this device or driver cannot export pool memory as POSIX file "
                                "descriptors");
    }

    memset(&pp, 0, sizeof pp); /* every reserved field must be 0 */
    pp.allocType = cudaMemAllocationTypePinned;
    pp.handleTypes =
        props->handle_posix_fd ? cudaMemHandleTypePosixFileDescriptor : cudaMemHandleTypeNone;
    pp.location.type = props->location_host ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    pp.location.id = props->location_host ? 0 : props->device; /* ignored for host */
    pp.maxSize = props->max_size;

    if (!(p = malloc(sizeof *p)))
        return cp_error_set(CP_ERR_OOM, "mempool_create: out of host memory");
    if ((e = cudaMemPoolCreate(&p->h, &pp)) != cudaSuccess) {
        free(p);
        return fail(e, "cudaMemPoolCreate");
    }
    if (props->location_host) {
        /* A host pool is reachable only from the CPU until the device is
         * granted access; cupola's kernels and copies need the device. */
        struct cudaMemAccessDesc access;
        memset(&access, 0, sizeof access);
        access.location.type = cudaMemLocationTypeDevice;
        access.location.id = props->device;
        access.flags = cudaMemAccessFlagsProtReadWrite;
        if ((e = cudaMemPoolSetAccess(p->h, &access, 1)) != cudaSuccess) {
            st = fail(e, "cudaMemPoolSetAccess");
            (void)cudaMemPoolDestroy(p->h);
            (void)cudaGetLastError();
            free(p);
            return st;
        }
    }
    p->is_default = 0;
    p->location_host = props->location_host != 0;
    p->dev = props->device;
    p->imported = 0;
    pthread_mutex_lock(&pool_lock);
    p->next = live_pools;
    live_pools = p;
    pthread_mutex_unlock(&pool_lock);
    *out = p;
    return CP_OK;
}

static cp_status cuda_mempool_destroy(cp_mempool *p)
{
    CP_GUARD();
    cp_mempool **link;

    if (!p)
        return CP_OK;
    if (p->is_default)
        return refuse(cudaErrorInvalidValue, "the device's default pool cannot be destroyed");
    pthread_mutex_lock(&pool_lock);
    for (link = &live_pools; *link; link = &(*link)->next) {
        if (*link == p) {
            *link = p->next;
            break;
        }
    }
    /* Destroying never synchronizes (it may run in a finalizer): the pool
     * waits in retired_pools for the next device synchronization.  A pool
     * that is current must not stay current meanwhile. */
    {
        cudaMemPool_t cur = NULL, def = NULL;
        if (!p->location_host && !p->imported &&
            cudaDeviceGetMemPool(&cur, p->dev) == cudaSuccess && cur == p->h &&
            cudaDeviceGetDefaultMemPool(&def, p->dev) == cudaSuccess)
            (void)cudaDeviceSetMemPool(p->dev, def);
        (void)cudaGetLastError();
    }
    p->next = retired_pools;
    retired_pools = p;
    pthread_mutex_unlock(&pool_lock);
    return CP_OK;
}

/* Pools of dev whose frees are done once dev is idle; host pools (whose
 * frees may be queued on any device) wait for every device's sync... which
 * cupola never does at once, so they go with the device they were made on. */
static void reap_retired_pools(int dev)
{
    cp_mempool *p, *next, **pp, *mine = NULL;
    pthread_mutex_lock(&pool_lock);
    pp = &retired_pools;
    while ((p = *pp) != NULL) {
        if (p->dev == dev) {
            *pp = p->next;
            p->next = mine;
            mine = p;
        } else {
            pp = &p->next;
        }
    }
    pthread_mutex_unlock(&pool_lock);
    for (p = mine; p; p = next) {
        next = p->next;
        (void)release_result(cudaMemPoolDestroy(p->h), "cudaMemPoolDestroy");
        free(p);
    }
}

static cp_status cuda_mempool_alloc(cp_mempool *p, void **out, size_t bytes, cp_stream *s)
{
    CP_GUARD();
    void *ptr = NULL;
    if (!p || !out)
        return cp_error_set(CP_ERR_INVALID, "mempool_alloc: pool or out is NULL");
    *out = NULL;
    if (p->imported)
        return refuse(cudaErrorInvalidValue,
                      "an imported pool only maps the exporter's buffers (import them); it "
                      "cannot allocate");
    ENTER_STREAM(s);
    CHECK(cudaMallocFromPoolAsync(&ptr, bytes, p->h, stream_handle(s)), "cudaMallocFromPoolAsync");
    *out = ptr;
    return CP_OK;
}

/* CUDA's pool attributes come in two value types: the reuse flags are int,
 * the threshold and the byte counters cuuint64_t. */
static enum cudaMemPoolAttr pool_attr_cuda(cp_pool_attr a)
{
    switch (a) {
    case CP_POOL_RELEASE_THRESHOLD: return cudaMemPoolAttrReleaseThreshold;
    case CP_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES: return cudaMemPoolReuseFollowEventDependencies;
    case CP_POOL_REUSE_ALLOW_OPPORTUNISTIC: return cudaMemPoolReuseAllowOpportunistic;
    case CP_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        return cudaMemPoolReuseAllowInternalDependencies;
    case CP_POOL_RESERVED_MEM_CURRENT: return cudaMemPoolAttrReservedMemCurrent;
    case CP_POOL_RESERVED_MEM_HIGH: return cudaMemPoolAttrReservedMemHigh;
    case CP_POOL_USED_MEM_CURRENT: return cudaMemPoolAttrUsedMemCurrent;
    case CP_POOL_USED_MEM_HIGH: return cudaMemPoolAttrUsedMemHigh;
    default: return (enum cudaMemPoolAttr)0;
    }
}

static int pool_attr_is_int(cp_pool_attr a)
{
    return a == CP_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES || a == CP_POOL_REUSE_ALLOW_OPPORTUNISTIC ||
           a == CP_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

static cp_status cuda_mempool_get_attr(cp_mempool *p, cp_pool_attr a, uint64_t *v)
{
    CP_GUARD();
    if (!p || !v)
        return cp_error_set(CP_ERR_INVALID, "mempool_get_attr: pool or v is NULL");
    if ((unsigned)a >= CP_POOL_ATTR_COUNT)
        return refuse(cudaErrorInvalidValue, "unknown pool attribute %d", (int)a);
    if (pool_attr_is_int(a)) {
        int x = 0;
        CHECK(cudaMemPoolGetAttribute(p->h, pool_attr_cuda(a), &x), "cudaMemPoolGetAttribute");
        *v = x != 0;
    } else {
        uint64_t x = 0; /* cuuint64_t */
        CHECK(cudaMemPoolGetAttribute(p->h, pool_attr_cuda(a), &x), "cudaMemPoolGetAttribute");
        *v = x;
    }
    return CP_OK;
}

static cp_status cuda_mempool_set_attr(cp_mempool *p, cp_pool_attr a, uint64_t v)
{
    CP_GUARD();
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "mempool_set_attr: pool is NULL");
    switch (a) {
    case CP_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CP_POOL_REUSE_ALLOW_OPPORTUNISTIC:
    case CP_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES: {
        int x = v != 0;
        CHECK(cudaMemPoolSetAttribute(p->h, pool_attr_cuda(a), &x), "cudaMemPoolSetAttribute");
        return CP_OK;
    }
    case CP_POOL_RELEASE_THRESHOLD: {
        uint64_t x = v;
        CHECK(cudaMemPoolSetAttribute(p->h, pool_attr_cuda(a), &x), "cudaMemPoolSetAttribute");
        return CP_OK;
    }
    case CP_POOL_RESERVED_MEM_HIGH:
    case CP_POOL_USED_MEM_HIGH: {
        /* CUDA accepts only 0 here, meaning "reset the watermark to the
         * current value". */
        uint64_t x = 0;
        if (v != 0)
            return refuse(cudaErrorInvalidValue,
                          "pool attribute %s can only be reset: set it to 0 and it becomes "
                          "the current value",
                          pool_attr_names[a]);
        CHECK(cudaMemPoolSetAttribute(p->h, pool_attr_cuda(a), &x), "cudaMemPoolSetAttribute");
        return CP_OK;
    }
    case CP_POOL_RESERVED_MEM_CURRENT:
    case CP_POOL_USED_MEM_CURRENT:
        return refuse(cudaErrorInvalidValue, "pool attribute %s is read-only", pool_attr_names[a]);
    default: return refuse(cudaErrorInvalidValue, "unknown pool attribute %d", (int)a);
    }
}

static cp_status cuda_mempool_trim(cp_mempool *p, size_t keep_bytes)
{
    CP_GUARD();
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "mempool_trim: pool is NULL");
    CHECK(cudaMemPoolTrimTo(p->h, keep_bytes), "cudaMemPoolTrimTo");
    return CP_OK;
}

static cp_status cuda_mempool_set_current(cp_mempool *p)
{
    CP_GUARD();
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "mempool_set_current: pool is NULL");
    if (p->location_host)
        return refuse(cudaErrorInvalidValue,
                      "a host-memory pool cannot be the device's current pool");
    if (p->imported)
        return refuse(cudaErrorInvalidValue,
                      "an imported pool cannot be the device's current pool");
    CHECK(cudaDeviceSetMemPool(p->dev, p->h), "cudaDeviceSetMemPool");
    return CP_OK;
}

static cp_status cuda_mempool_get_current_on(int dev, cp_mempool **out)
{
    CP_GUARD();
    cudaMemPool_t h;
    cp_mempool *def, *p;
    cp_status st;

    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mempool_get_current: out is NULL");
    *out = NULL;
    if ((st = cuda_mempool_default_on(dev, &def)) != CP_OK)
        return st;
    CHECK(cudaDeviceGetMemPool(&h, dev), "cudaDeviceGetMemPool");
    if (h == def->h) {
        *out = def;
        return CP_OK;
    }
    pthread_mutex_lock(&pool_lock);
    for (p = live_pools; p && p->h != h; p = p->next)
        ;
    pthread_mutex_unlock(&pool_lock);
    if (!p)
        return cp_error_set(CP_ERR_UNSUPPORTED,
                            "the device's current pool was made current outside cupola");
    *out = p;
    return CP_OK;
}

static cp_status cuda_mempool_get_current(cp_mempool **out)
{
    CP_GUARD();
    return cuda_mempool_get_current_on(CP_DEVICE, out);
}

/* ---- copies ------------------------------------------------------------------------ */

static cp_status cuda_memcpy_async(void *dst, const void *src, size_t bytes, cp_stream *s)
{
    CP_GUARD();
    if (bytes == 0)
        return CP_OK;
    if (!dst || !src)
        return cp_error_set(CP_ERR_INVALID, "memcpy_async: dst or src is NULL");
    ENTER_STREAM(s);
    /* cudaMemcpyDefault: unified addressing tells the direction. */
    CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_handle(s)),
          "cudaMemcpyAsync");
    return CP_OK;
}

static cp_status cuda_memset_async(void *dst, int byte, size_t bytes, cp_stream *s)
{
    CP_GUARD();
    if (bytes == 0)
        return CP_OK;
    if (!dst)
        return cp_error_set(CP_ERR_INVALID, "memset_async: dst is NULL");
    ENTER_STREAM(s);
    CHECK(cudaMemsetAsync(dst, byte, bytes, stream_handle(s)), "cudaMemsetAsync");
    return CP_OK;
}

/* ---- kernels --------------------------------------------------------------------------- */

static const char *const dtype_names[CP_DTYPE_COUNT] = {"f32", "f64", "i32", "u32", "u8"};
static const size_t dtype_sizes[CP_DTYPE_COUNT] = {4, 8, 4, 4, 1};

/* Says which part of a user-given shape is wrong (the launchers only
 * answer cudaErrorInvalidValue), named as a launch of that shape fails and as
 * the host backend names it. */
static cp_status check_shape(const cp_shape *sh, unsigned max_grid, const char *kernel,
                             unsigned *grid, unsigned *block)
{
    CP_GUARD();
    *grid = sh ? sh->grid : 0;
    *block = sh ? sh->block : 0;
    if (*block > CP_CUDA_MAX_BLOCK)
        return refuse(cudaErrorInvalidConfiguration,
                      "%s: block %u is out of range (1 to %u threads, 0 to choose)", kernel, *block,
                      CP_CUDA_MAX_BLOCK);
    if (*grid > max_grid)
        return refuse(cudaErrorInvalidConfiguration,
                      "%s: grid %u is out of range (1 to %u blocks, 0 to choose)", kernel, *grid,
                      max_grid);
    return CP_OK;
}

static cp_status check_dtype(cp_dtype t, const char *kernel)
{
    CP_GUARD();
    if ((unsigned)t >= CP_DTYPE_COUNT)
        return cp_error_set(CP_ERR_INVALID, "%s: unknown element type %d", kernel, (int)t);
    return CP_OK;
}

static cp_status check_aligned(const void *p, size_t align, const char *kernel, const char *type)
{
    CP_GUARD();
    if ((uintptr_t)p % align != 0)
        return cp_error_set(CP_ERR_INVALID, "%s: address %p is not aligned for %s elements",
                            kernel, (void *)(uintptr_t)p, type);
    return CP_OK;
}

static cp_status cuda_k_fill(void *p, size_t count, cp_dtype t, cp_scalar v, const cp_shape *sh,
                             cp_stream *s)
{
    CP_GUARD();
    unsigned grid, block;
    cp_status st;
    if ((st = check_dtype(t, "fill")) ||
        (st = check_shape(sh, CP_CUDA_MAX_GRID, "fill", &grid, &block)) ||
        (st = check_aligned(p, dtype_sizes[t], "fill", dtype_names[t])))
        return st;
    if (!p && count > 0)
        return cp_error_set(CP_ERR_INVALID, "fill: pointer is NULL");
    ENTER_STREAM(s);
    CHECK(cp_cuda_fill(p, count, t, v, grid, block, stream_handle(s)), "fill kernel launch");
    return CP_OK;
}

static cp_status cuda_k_sqrt_index(float *p, size_t count, const cp_shape *sh, cp_stream *s)
{
    CP_GUARD();
    unsigned grid, block;
    cp_status st;
    if ((st = check_shape(sh, CP_CUDA_MAX_GRID, "sqrt_index", &grid, &block)) ||
        (st = check_aligned(p, sizeof(float), "sqrt_index", "f32")))
        return st;
    if (!p && count > 0)
        return cp_error_set(CP_ERR_INVALID, "sqrt_index: pointer is NULL");
    ENTER_STREAM(s);
    CHECK(cp_cuda_sqrt_index(p, count, grid, block, stream_handle(s)), "sqrt_index kernel launch");
    return CP_OK;
}

/* Scratch for the reductions comes from a private pool, so that a checksum
 * never shows up in the statistics of the user's current pool (used_high,
 * reserved) that experiments measure.  The pool keeps what it reserved
 * (threshold: max), so repeated checksums cost no mapping.  Without pool
 * support, scratch falls back to cudaMalloc. */
static pthread_mutex_t scratch_lock = PTHREAD_MUTEX_INITIALIZER;
/* per device: 0 not tried, 1 pool, -1 no pool support */
static int scratch_states[CP_MAX_DEVICES];
static cudaMemPool_t scratch_pools[CP_MAX_DEVICES];

/* The scratch of the thread's CUDA device (ENTER_STREAM made it the stream's). */
static cp_status scratch_init(int *state, cudaMemPool_t *pool)
{
    CP_GUARD();
    cp_status st = CP_OK;
    int dev = 0;
    CHECK(cudaGetDevice(&dev), "cudaGetDevice");
    if (dev < 0 || dev >= CP_MAX_DEVICES)
        return cp_error_set(CP_ERR_INVALID, "device %d: too many devices", dev);
    pthread_mutex_lock(&scratch_lock);
#define scratch_state scratch_states[dev]
#define scratch_pool scratch_pools[dev]
    if (scratch_state == 0) {
        struct cudaMemPoolProps pp;
        cudaError_t e;
        int v = 0;
        memset(&pp, 0, sizeof pp);
        pp.allocType = cudaMemAllocationTypePinned;
        pp.handleTypes = cudaMemHandleTypeNone;
        pp.location.type = cudaMemLocationTypeDevice;
        pp.location.id = dev;
        e = cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, dev);
        if (e != cudaSuccess) {
            st = fail(e, "cudaDeviceGetAttribute(cudaDevAttrMemoryPoolsSupported)");
        } else if (!v) {
            scratch_state = -1;
        } else if ((e = cudaMemPoolCreate(&scratch_pool, &pp)) != cudaSuccess) {
            st = fail(e, "cudaMemPoolCreate (checksum scratch)");
        } else {
            uint64_t keep = UINT64_MAX;
            e = cudaMemPoolSetAttribute(scratch_pool, cudaMemPoolAttrReleaseThreshold, &keep);
            if (e != cudaSuccess) {
                st = fail(e, "cudaMemPoolSetAttribute (checksum scratch)");
                (void)cudaMemPoolDestroy(scratch_pool);
                (void)cudaGetLastError();
            } else {
                scratch_state = 1;
            }
        }
    }
    *state = scratch_state;
    *pool = scratch_pool;
#undef scratch_state
#undef scratch_pool
    pthread_mutex_unlock(&scratch_lock);
    return st;
}

static cp_status scratch_get(void **out, size_t bytes, cudaStream_t s, int *pooled)
{
    CP_GUARD();
    cp_status st;
    int state = 0;
    cudaMemPool_t pool = NULL;
    *out = NULL;
    if ((st = scratch_init(&state, &pool)) != CP_OK)
        return st;
    *pooled = state == 1;
    if (*pooled)
        CHECK(cudaMallocFromPoolAsync(out, bytes, pool, s),
              "cudaMallocFromPoolAsync (kernel scratch)");
    else
        CHECK(cudaMalloc(out, bytes), "cudaMalloc (kernel scratch)");
    return CP_OK;
}

static cudaError_t scratch_put(void *p, cudaStream_t s, int pooled)
{
    return pooled ? cudaFreeAsync(p, s) : cudaFree(p);
}

/* Runs a reduction's tail: copies the 8-byte result at scratch to *bits,
 * waits for s, and releases scratch whatever happened.  launch_e is the
 * launcher's result; the first error wins. */
static cp_status finish_reduction(cudaError_t launch_e, const char *launch_op, void *scratch,
                                  int pooled, cudaStream_t s, uint64_t *bits)
{
    CP_GUARD();
    cudaError_t e = launch_e, e2;
    const char *op = launch_op;
    if (e == cudaSuccess) {
        /* Pageable destination: returns once the copy is done. */
        e = cudaMemcpyAsync(bits, scratch, sizeof *bits, cudaMemcpyDeviceToHost, s);
        op = "cudaMemcpyAsync (reduction result)";
    }
    if (e == cudaSuccess) {
        e = cudaStreamSynchronize(s);
        op = "cudaStreamSynchronize";
    }
    e2 = scratch_put(scratch, s, pooled);
    if (e != cudaSuccess)
        return fail(e, op);
    if (e2 != cudaSuccess)
        return fail(e2, pooled ? "cudaFreeAsync (kernel scratch)" : "cudaFree (kernel scratch)");
    return CP_OK;
}

static cp_status cuda_k_checksum(const void *p, size_t bytes, cp_dtype t, const cp_shape *sh,
                                 cp_stream *s, cp_scalar *out)
{
    CP_GUARD();
    unsigned grid, block;
    size_t scratch_bytes = 0;
    void *scratch = NULL;
    uint64_t bits = 0;
    int pooled = 0;
    cudaStream_t cs = stream_handle(s);
    cp_status st;

    if (!out)
        return cp_error_set(CP_ERR_INVALID, "checksum: out is NULL");
    if ((st = check_dtype(t, "checksum")) ||
        (st = check_shape(sh, CP_CUDA_MAX_REDUCE_GRID, "checksum", &grid, &block)) ||
        (st = check_aligned(p, dtype_sizes[t], "checksum", dtype_names[t])))
        return st;
    if (!p && bytes >= dtype_sizes[t])
        return cp_error_set(CP_ERR_INVALID, "checksum: pointer is NULL");
    CHECK(cp_cuda_checksum_scratch(bytes, t, grid, block, &scratch_bytes), "checksum shape");
    ENTER_STREAM(s);
    if ((st = scratch_get(&scratch, scratch_bytes, cs, &pooled)) != CP_OK)
        return st;
    st = finish_reduction(cp_cuda_checksum(p, bytes, t, grid, block, scratch, cs),
                          "checksum kernel launch", scratch, pooled, cs, &bits);
    if (st != CP_OK)
        return st;
    switch (t) {
    case CP_F32:
    case CP_F64: memcpy(&out->f, &bits, sizeof out->f); break;
    case CP_I32: memcpy(&out->i, &bits, sizeof out->i); break; /* two's complement */
    default: out->u = bits; break;
    }
    return CP_OK;
}

static cp_status cuda_k_spin(uint64_t microseconds, cp_stream *s)
{
    CP_GUARD();
    ENTER_STREAM(s);
    CHECK(cp_cuda_spin(microseconds, stream_handle(s)), "spin kernel launch");
    return CP_OK;
}

static cp_status cuda_k_pattern(void *p, size_t bytes, uint64_t seed, cp_stream *s)
{
    CP_GUARD();
    if (!p && bytes > 0)
        return cp_error_set(CP_ERR_INVALID, "pattern: pointer is NULL");
    ENTER_STREAM(s);
    CHECK(cp_cuda_pattern(p, bytes, seed, stream_handle(s)), "pattern kernel launch");
    return CP_OK;
}

static cp_status cuda_k_verify(const void *p, size_t bytes, uint64_t seed, cp_stream *s,
                               uint64_t *bad)
{
    CP_GUARD();
    void *scratch = NULL;
    uint64_t bits = 0;
    int pooled = 0;
    cudaStream_t cs = stream_handle(s);
    cp_status st;

    if (!bad)
        return cp_error_set(CP_ERR_INVALID, "verify: bad is NULL");
    if (!p && bytes > 0)
        return cp_error_set(CP_ERR_INVALID, "verify: pointer is NULL");
    ENTER_STREAM(s);
    if ((st = scratch_get(&scratch, sizeof(unsigned long long), cs, &pooled)) != CP_OK)
        return st;
    st = finish_reduction(cp_cuda_verify(p, bytes, seed, (unsigned long long *)scratch, cs),
                          "verify kernel launch", scratch, pooled, cs, &bits);
    if (st != CP_OK)
        return st;
    *bad = bits;
    return CP_OK;
}

/* ---- several devices and processes (multigpu) ------------------------------------------ */

static int cuda_mempool_device(const cp_mempool *p)
{
    return p ? p->dev : 0;
}

static cp_status cuda_can_access_peer(int dev, int peer, int *yes)
{
    CP_GUARD();
    cp_status st;
    if (!yes)
        return cp_error_set(CP_ERR_INVALID, "can_access_peer: yes is NULL");
    if ((st = check_device(dev)) != CP_OK || (st = check_device(peer)) != CP_OK)
        return st;
    if (dev == peer) {
        *yes = 0;
        return CP_OK;
    }
    CHECK(cudaDeviceCanAccessPeer(yes, dev, peer), "cudaDeviceCanAccessPeer");
    return CP_OK;
}

static cp_status cuda_enable_peer_access(int dev, int peer)
{
    CP_GUARD();
    cudaError_t e;
    cp_status st;
    if ((st = check_device(dev)) != CP_OK || (st = check_device(peer)) != CP_OK)
        return st;
    if (dev == peer)
        return refuse(cudaErrorInvalidDevice, "device %d cannot enable peer access to itself", dev);
    ENTER_DEVICE(dev);
    e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
        return CP_OK;
    }
    if (e != cudaSuccess)
        return fail(e, "cudaDeviceEnablePeerAccess");
    return CP_OK;
}

static cp_status cuda_mempool_set_access(cp_mempool *p, int dev, cp_access a)
{
    CP_GUARD();
    struct cudaMemAccessDesc d;
    cp_status st;
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "mempool_set_access: pool is NULL");
    if ((st = check_device(dev)) != CP_OK)
        return st;
    memset(&d, 0, sizeof d);
    d.location.type = cudaMemLocationTypeDevice;
    d.location.id = dev;
    d.flags = a == CP_ACCESS_READWRITE ? cudaMemAccessFlagsProtReadWrite
              : a == CP_ACCESS_READ    ? cudaMemAccessFlagsProtRead
                                       : cudaMemAccessFlagsProtNone;
    CHECK(cudaMemPoolSetAccess(p->h, &d, 1), "cudaMemPoolSetAccess");
    return CP_OK;
}

static cp_status cuda_mempool_get_access(cp_mempool *p, int dev, cp_access *a)
{
    CP_GUARD();
    struct cudaMemLocation loc;
    enum cudaMemAccessFlags f = cudaMemAccessFlagsProtNone;
    cp_status st;
    if (!p || !a)
        return cp_error_set(CP_ERR_INVALID, "mempool_get_access: NULL argument");
    if ((st = check_device(dev)) != CP_OK)
        return st;
    memset(&loc, 0, sizeof loc);
    loc.type = cudaMemLocationTypeDevice;
    loc.id = dev;
    CHECK(cudaMemPoolGetAccess(&f, p->h, &loc), "cudaMemPoolGetAccess");
    *a = f == cudaMemAccessFlagsProtReadWrite ? CP_ACCESS_READWRITE
         : f == cudaMemAccessFlagsProtRead    ? CP_ACCESS_READ
                                              : CP_ACCESS_NONE;
    return CP_OK;
}

static cp_status cuda_memcpy_peer_async(void *dst, int dst_dev, const void *src, int src_dev,
                                        size_t bytes, cp_stream *s)
{
    CP_GUARD();
    cp_status st;
    if ((st = check_device(dst_dev)) != CP_OK || (st = check_device(src_dev)) != CP_OK)
        return st;
    if (bytes == 0)
        return CP_OK;
    if (!dst || !src)
        return cp_error_set(CP_ERR_INVALID, "memcpy_peer_async: dst or src is NULL");
    ENTER_STREAM(s);
    CHECK(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, stream_handle(s)),
          "cudaMemcpyPeerAsync");
    return CP_OK;
}

static cp_status cuda_mempool_export(cp_mempool *p, int *fd)
{
    CP_GUARD();
    int h = -1;
    if (!p || !fd)
        return cp_error_set(CP_ERR_INVALID, "mempool_export: NULL argument");
    *fd = -1;
    if (p->imported)
        return refuse(cudaErrorInvalidValue, "an imported pool cannot be exported again");
    CHECK(cudaMemPoolExportToShareableHandle(&h, p->h, cudaMemHandleTypePosixFileDescriptor, 0),
          "cudaMemPoolExportToShareableHandle");
    *fd = h;
    return CP_OK;
}

static cp_status cuda_mempool_import(int fd, int dev, cp_mempool **out)
{
    CP_GUARD();
    struct cudaMemAccessDesc d;
    struct cudaMemLocation loc;
    enum cudaMemAccessFlags f = cudaMemAccessFlagsProtNone;
    cp_mempool *p;
    cudaError_t e;
    cp_status st;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mempool_import: out is NULL");
    *out = NULL;
    if ((st = check_device(dev)) != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    if (!(p = calloc(1, sizeof *p)))
        return cp_error_set(CP_ERR_OOM, "mempool_import: out of host memory");
    e = cudaMemPoolImportFromShareableHandle(&p->h, (void *)(intptr_t)fd,
                                             cudaMemHandleTypePosixFileDescriptor, 0);
    if (e != cudaSuccess) {
        free(p);
        return fail(e, "cudaMemPoolImportFromShareableHandle");
    }
    /* as CUDA's IPC sample: the importing device needs read-write access */
    memset(&loc, 0, sizeof loc);
    loc.type = cudaMemLocationTypeDevice;
    loc.id = dev;
    e = cudaMemPoolGetAccess(&f, p->h, &loc);
    if (e == cudaSuccess && f != cudaMemAccessFlagsProtReadWrite) {
        memset(&d, 0, sizeof d);
        d.location = loc;
        d.flags = cudaMemAccessFlagsProtReadWrite;
        e = cudaMemPoolSetAccess(p->h, &d, 1);
    }
    if (e != cudaSuccess) {
        st = fail(e, "cudaMemPoolSetAccess (imported pool)");
        (void)cudaMemPoolDestroy(p->h);
        (void)cudaGetLastError();
        free(p);
        return st;
    }
    p->dev = dev;
    p->imported = 1;
    pthread_mutex_lock(&pool_lock);
    p->next = live_pools;
    live_pools = p;
    pthread_mutex_unlock(&pool_lock);
    *out = p;
    return CP_OK;
}

static cp_status cuda_mempool_export_ptr(void *ptr, cp_ipc_data *out)
{
    CP_GUARD();
    struct cudaMemPoolPtrExportData d;
    if (!ptr || !out)
        return cp_error_set(CP_ERR_INVALID, "mempool_export_ptr: NULL argument");
    memset(&d, 0, sizeof d);
    CHECK(cudaMemPoolExportPointer(&d, ptr), "cudaMemPoolExportPointer");
    memset(out, 0, sizeof *out);
    memcpy(out->bytes, &d, sizeof d < sizeof out->bytes ? sizeof d : sizeof out->bytes);
    return CP_OK;
}

static cp_status cuda_mempool_import_ptr(cp_mempool *p, const cp_ipc_data *data, size_t bytes,
                                         void **out)
{
    CP_GUARD();
    struct cudaMemPoolPtrExportData d;
    void *ptr = NULL;
    (void)bytes;
    if (!p || !data || !out)
        return cp_error_set(CP_ERR_INVALID, "mempool_import_ptr: NULL argument");
    *out = NULL;
    if (!p->imported)
        return refuse(cudaErrorInvalidValue,
                      "buffers are imported into a pool imported with cupola.mempool.import");
    memset(&d, 0, sizeof d);
    memcpy(&d, data->bytes, sizeof d < sizeof data->bytes ? sizeof d : sizeof data->bytes);
    ENTER_DEVICE(p->dev);
    CHECK(cudaMemPoolImportPointer(&ptr, p->h, &d), "cudaMemPoolImportPointer");
    *out = ptr;
    return CP_OK;
}

static cp_status cuda_ipc_get_handle(void *ptr, size_t bytes, cp_ipc_data *out, int *fd)
{
    CP_GUARD();
    cudaIpcMemHandle_t h;
    (void)bytes;
    if (!ptr || !out || !fd)
        return cp_error_set(CP_ERR_INVALID, "ipc_get_handle: NULL argument");
    *fd = -1;
    CHECK(cudaIpcGetMemHandle(&h, ptr), "cudaIpcGetMemHandle");
    memset(out, 0, sizeof *out);
    memcpy(out->bytes, &h, sizeof h < sizeof out->bytes ? sizeof h : sizeof out->bytes);
    return CP_OK;
}

static cp_status cuda_ipc_open_handle(int dev, const cp_ipc_data *data, int fd, size_t bytes,
                                      void **out)
{
    CP_GUARD();
    cudaIpcMemHandle_t h;
    void *p = NULL;
    cp_status st;
    (void)fd;
    (void)bytes;
    if (!data || !out)
        return cp_error_set(CP_ERR_INVALID, "ipc_open_handle: NULL argument");
    *out = NULL;
    if ((st = check_device(dev)) != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    memcpy(&h, data->bytes, sizeof h < sizeof data->bytes ? sizeof h : sizeof data->bytes);
    CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
    *out = p;
    return CP_OK;
}

static cp_status cuda_ipc_close_handle(void *ptr, size_t bytes)
{
    CP_GUARD();
    (void)bytes;
    if (!ptr)
        return CP_OK;
    return release_result(cudaIpcCloseMemHandle(ptr), "cudaIpcCloseMemHandle");
}

/* ---- device pools (cuda/devpool.cu; issue 17) ------------------------------------------ */

/* The device pools' own entry points (cuda/devpool.cu) refuse to run once
 * the context is unusable or the process is a fork's child, like every
 * other entry point here. */
static cp_status cuda_dp_create(cp_devpool **out, cp_dp_kind kind, size_t capacity)
{
    CP_GUARD();
    return cp_cuda_dp_create(out, kind, capacity);
}

static cp_status cuda_dp_destroy(cp_devpool *p)
{
    CP_GUARD();
    return cp_cuda_dp_destroy(p);
}

static cp_status cuda_dp_finish(cp_dp_run *r, cp_dp_run_result *out)
{
    CP_GUARD();
    return cp_cuda_dp_finish(r, out);
}

static cp_status cuda_dp_stats(cp_devpool *p, cp_dp_stats *out)
{
    CP_GUARD();
    return cp_cuda_dp_stats(p, out);
}

static cp_status cuda_dp_launch(cp_devpool *p, const cp_dp_run_args *a, cp_stream *s,
                                cp_dp_run **out)
{
    CP_GUARD();
    ENTER_STREAM(s);
    return cp_cuda_dp_launch(p, a, stream_handle(s), out);
}

static cp_status cuda_dp_reset(cp_devpool *p, cp_stream *s)
{
    CP_GUARD();
    ENTER_STREAM(s);
    return cp_cuda_dp_reset(p, stream_handle(s));
}

/* ---- the table ------------------------------------------------------------------------ */

/* ---- run-time compiled kernels (issue 10) ------------------------------------ */

static void *cuda_stream_native(cp_stream *s)
{
    return (void *)stream_handle(s);
}

/* ---- virtual memory management (the vmm pool) ---------------------------- */

/* The driver's VMM calls, found through the runtime (cudaGetDriverEntryPoint
 * ByVersion) so that the module never links libcuda and still loads on a
 * machine without a driver. */
typedef CUresult (*pfn_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*pfn_addr_free)(CUdeviceptr, size_t);
typedef CUresult (*pfn_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                               unsigned long long);
typedef CUresult (*pfn_release)(CUmemGenericAllocationHandle);
typedef CUresult (*pfn_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                            unsigned long long);
typedef CUresult (*pfn_unmap)(CUdeviceptr, size_t);
typedef CUresult (*pfn_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*pfn_gran)(size_t *, const CUmemAllocationProp *,
                             CUmemAllocationGranularity_flags);
typedef CUresult (*pfn_errname)(CUresult, const char **);

static struct {
    pthread_once_t once;
    cp_status st;
    char why[256];
    pfn_reserve reserve;
    pfn_addr_free addr_free;
    pfn_create create;
    pfn_release release;
    pfn_map map;
    pfn_unmap unmap;
    pfn_access access;
    pfn_gran gran;
    pfn_errname errname;
    size_t granularity;
} VM = {PTHREAD_ONCE_INIT, CP_OK, "", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

static void vm_prop(CUmemAllocationProp *prop, int dev)
{
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = dev;
}

static int vm_sym(const char *name, void **fn)
{
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !*fn) {
        (void)cudaGetLastError();
        snprintf(VM.why, sizeof VM.why, "cudaErrorNotSupported: the driver has no %s", name);
        return 0;
    }
    return 1;
}

static void vm_load(void)
{
    CUmemAllocationProp prop;
    int ok = vm_sym("cuMemAddressReserve", (void **)&VM.reserve) &&
             vm_sym("cuMemAddressFree", (void **)&VM.addr_free) &&
             vm_sym("cuMemCreate", (void **)&VM.create) &&
             vm_sym("cuMemRelease", (void **)&VM.release) &&
             vm_sym("cuMemMap", (void **)&VM.map) && vm_sym("cuMemUnmap", (void **)&VM.unmap) &&
             vm_sym("cuMemSetAccess", (void **)&VM.access) &&
             vm_sym("cuMemGetAllocationGranularity", (void **)&VM.gran) &&
             vm_sym("cuGetErrorName", (void **)&VM.errname);
    (void)cudaGetLastError();
    if (ok) {
        vm_prop(&prop, CP_DEVICE);
        if (VM.gran(&VM.granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) !=
                CUDA_SUCCESS || !VM.granularity) {
            snprintf(VM.why, sizeof VM.why, "cuMemGetAllocationGranularity failed");
            ok = 0;
        }
    }
    VM.st = ok ? CP_OK : CP_ERR_UNSUPPORTED;
}

static cp_status vm_ready(void)
{
    CP_GUARD();
    pthread_once(&VM.once, vm_load);
    if (VM.st != CP_OK)
        return cp_error_set(VM.st, "%s", VM.why);
    return CP_OK;
}

static cp_status vm_fail(CUresult r, const char *op)
{
    CP_GUARD();
    const char *name = NULL;
    if (VM.errname)
        VM.errname(r, &name);
    return cp_error_set(r == CUDA_ERROR_OUT_OF_MEMORY ? CP_ERR_OOM
                        : r == CUDA_ERROR_INVALID_VALUE ? CP_ERR_INVALID : CP_ERR_BACKEND,
                        "%s (%s)", name ? name : "CUDA_ERROR_UNKNOWN", op);
}

#define VM_CHECK(call, op)                                                                        \
    do {                                                                                          \
        CUresult vm_r_ = (call);                                                                  \
        if (vm_r_ != CUDA_SUCCESS)                                                                \
            return vm_fail(vm_r_, op);                                                            \
    } while (0)

static cp_status cuda_vm_granularity(int dev, size_t *out)
{
    CP_GUARD();
    cp_status st = vm_ready();
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    {
        CUmemAllocationProp prop;
        size_t g = 0;
        vm_prop(&prop, dev);
        VM_CHECK(VM.gran(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
                 "cuMemGetAllocationGranularity");
        *out = g ? g : VM.granularity;
    }
    return CP_OK;
}

static cp_status cuda_vm_reserve(int dev, void **out, size_t bytes)
{
    CP_GUARD();
    CUdeviceptr p = 0;
    cp_status st = vm_ready();
    *out = NULL;
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    VM_CHECK(VM.reserve(&p, bytes, VM.granularity, 0, 0), "cuMemAddressReserve");
    *out = (void *)(uintptr_t)p;
    return CP_OK;
}

static cp_status cuda_vm_free_range(int dev, void *p, size_t bytes)
{
    CP_GUARD();
    cp_status st = vm_ready();
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    VM_CHECK(VM.addr_free((CUdeviceptr)(uintptr_t)p, bytes), "cuMemAddressFree");
    return CP_OK;
}

static cp_status cuda_vm_create(int dev, uint64_t *handle, size_t bytes)
{
    CP_GUARD();
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle h = 0;
    cp_status st = vm_ready();
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    vm_prop(&prop, dev);
    VM_CHECK(VM.create(&h, bytes, &prop, 0), "cuMemCreate");
    *handle = (uint64_t)h;
    return CP_OK;
}

static cp_status cuda_vm_release(int dev, uint64_t handle, size_t bytes)
{
    CP_GUARD();
    cp_status st = vm_ready();
    CUresult r;
    (void)bytes;
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    r = VM.release((CUmemGenericAllocationHandle)handle);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED)
        return vm_fail(r, "cuMemRelease");
    return CP_OK;
}

static cp_status cuda_vm_map(int dev, void *p, size_t bytes, uint64_t handle)
{
    CP_GUARD();
    cp_status st = vm_ready();
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    VM_CHECK(VM.map((CUdeviceptr)(uintptr_t)p, bytes, 0, (CUmemGenericAllocationHandle)handle, 0),
             "cuMemMap");
    return CP_OK;
}

static cp_status cuda_vm_unmap(int dev, void *p, size_t bytes)
{
    CP_GUARD();
    cp_status st = vm_ready();
    CUresult r;
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    r = VM.unmap((CUdeviceptr)(uintptr_t)p, bytes);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED)
        return vm_fail(r, "cuMemUnmap");
    return CP_OK;
}

static cp_status cuda_vm_set_access(int dev, void *p, size_t bytes)
{
    CP_GUARD();
    CUmemAccessDesc d;
    cp_status st = vm_ready();
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = dev;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    VM_CHECK(VM.access((CUdeviceptr)(uintptr_t)p, bytes, &d, 1), "cuMemSetAccess");
    return CP_OK;
}

const cp_backend cp_backend_cuda = {
    .name = "cuda",

    .device_info = cuda_device_info,
    .device_synchronize = cuda_device_synchronize,
    .mem_get_info = cuda_mem_get_info,

    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_synchronize = cuda_stream_synchronize,
    .stream_query = cuda_stream_query,
    .stream_wait_event = cuda_stream_wait_event,
    .stream_id = cuda_stream_id,

    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_synchronize = cuda_event_synchronize,
    .event_query = cuda_event_query,
    .event_elapsed = cuda_event_elapsed,

    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .mem_alloc_async = cuda_mem_alloc_async,
    .mem_free_async = cuda_mem_free_async,

    .mempool_default = cuda_mempool_default,
    .mempool_create = cuda_mempool_create,
    .mempool_destroy = cuda_mempool_destroy,
    .mempool_alloc = cuda_mempool_alloc,
    .mempool_get_attr = cuda_mempool_get_attr,
    .mempool_set_attr = cuda_mempool_set_attr,
    .mempool_trim = cuda_mempool_trim,
    .mempool_set_current = cuda_mempool_set_current,
    .mempool_get_current = cuda_mempool_get_current,

    .memcpy_async = cuda_memcpy_async,
    .memset_async = cuda_memset_async,

    .k_fill = cuda_k_fill,
    .k_sqrt_index = cuda_k_sqrt_index,
    .k_checksum = cuda_k_checksum,
    .k_spin = cuda_k_spin,
    .k_pattern = cuda_k_pattern,
    .k_verify = cuda_k_verify,
    /* run-time compiled kernels (issue 10) */
    .host_task = NULL,
    .stream_native = cuda_stream_native,

    /* several devices and processes (multigpu) */
    .device_count = cuda_device_count,
    .set_device = cuda_set_device,
    .get_device = cuda_get_device,
    .device_info_on = cuda_device_info_on,
    .device_synchronize_on = cuda_device_synchronize_on,
    .mem_get_info_on = cuda_mem_get_info_on,
    .stream_create_on = cuda_stream_create_on,
    .stream_device = cuda_stream_device,
    .stream_legacy = cuda_stream_legacy,
    .stream_wrap = cuda_stream_wrap,
    .mem_alloc_on = cuda_mem_alloc_on,
    .mem_free_on = cuda_mem_free_on,
    .mempool_default_on = cuda_mempool_default_on,
    .mempool_get_current_on = cuda_mempool_get_current_on,
    .mempool_device = cuda_mempool_device,
    .can_access_peer = cuda_can_access_peer,
    .enable_peer_access = cuda_enable_peer_access,
    .mempool_set_access = cuda_mempool_set_access,
    .mempool_get_access = cuda_mempool_get_access,
    .memcpy_peer_async = cuda_memcpy_peer_async,
    .mempool_export = cuda_mempool_export,
    .mempool_import = cuda_mempool_import,
    .mempool_export_ptr = cuda_mempool_export_ptr,
    .mempool_import_ptr = cuda_mempool_import_ptr,
    .ipc_get_handle = cuda_ipc_get_handle,
    .ipc_open_handle = cuda_ipc_open_handle,
    .ipc_close_handle = cuda_ipc_close_handle,

    /* virtual memory management (the vmm pool) */
    .vm_granularity = cuda_vm_granularity,
    .vm_reserve = cuda_vm_reserve,
    .vm_free_range = cuda_vm_free_range,
    .vm_create = cuda_vm_create,
    .vm_release = cuda_vm_release,
    .vm_map = cuda_vm_map,
    .vm_unmap = cuda_vm_unmap,
    .vm_set_access = cuda_vm_set_access,
    /* ---- device-side (in-kernel) allocation pools (issue 17) ---- */
    .dp_create = cuda_dp_create,
    .dp_destroy = cuda_dp_destroy,
    .dp_state = cp_cuda_dp_state,
    .dp_launch = cuda_dp_launch,
    .dp_finish = cuda_dp_finish,
    .dp_reset = cuda_dp_reset,
    .dp_stats = cuda_dp_stats,
};
