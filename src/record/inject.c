/*
 * inject.c: libcupola_record.so, the CUDA injection library behind
 * `cupola record` (CUDA_INJECTION64_PATH).  The driver calls
 * InitializeInjection once, at cuInit, in every process that initialises
 * CUDA; the environment carries the setting to children that exec.
 *
 * What it hooks, and why the callback API and not the activity API:
 * CUPTI's callback API on the allocation calls gives, at the call's exit,
 * the address, the size, the stream handle and the pool handle as the
 * program passed them, on the calling thread, in program order: each event
 * is handed to record.c at once, so a killed program keeps it.  The activity
 * API's MEMORY2 records carry the same fields (and the pool's settings) but
 * arrive in buffers CUPTI delivers when full or flushed, with CUPTI's stream
 * ids rather than the handles the program used; a killed program loses the
 * buffer in flight.  Only the callbacks named below are enabled (never a
 * whole domain), so kernel launches and copies pay nothing.
 *
 * Runtime and driver: a runtime call (cudaMalloc) is recorded at its own
 * exit, with the runtime's arguments; while it runs, the driver calls made
 * under it on that thread are not recorded again (a depth per thread).  A
 * driver call made by the program or a library (JAX/XLA, cuMemAlloc) is
 * recorded at the driver level.  Either way each allocation is one row.
 *
 * Seen: cudaMalloc, cudaMallocPitch, cudaMallocManaged, cudaMallocHost,
 * cudaHostAlloc, cudaMallocAsync, cudaMallocFromPoolAsync, cudaFree,
 * cudaFreeHost, cudaFreeAsync (and their _ptsz forms); cuMemAlloc(_v2),
 * cuMemAllocPitch, cuMemAllocManaged, cuMemAllocHost, cuMemHostAlloc,
 * cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemFree, cuMemFreeHost,
 * cuMemFreeAsync; the virtual memory calls cuMemCreate/cuMemRelease (rows of
 * kind "vmm" whose Pointer is the handle) and cuMemMap/cuMemUnmap (actions
 * "map"/"unmap", Pool the handle).  Not seen: allocations inside kernels
 * (malloc in device code), CUDA arrays (cudaMallocArray, textures),
 * cudaHostRegister (the program's own memory), memory a native pool keeps
 * reserved after cudaFreeAsync (the pool's own caching: a recording of the
 * requests, not of the pool's reservations), and graph-owned allocations
 * (cudaGraphAddMemAllocNode).
 *
 * CUPTI takes one subscriber per process.  This library subscribes at
 * cuInit, ahead of anything in the program; a profiler the program starts
 * later (torch.profiler, JAX's device tracer) gets
 * CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED from its own cuptiSubscribe
 * and handles it its own way (preload.c, which the launcher preloads, says so
 * on the terminal).  Where a tool holds CUPTI already (Nsight,
 * compute-sanitizer), the subscribe here fails: one line on stderr names the
 * holder, and the process runs unrecorded.
 *
 * Two diagnostics, off by default (they cost far more than the recording):
 *  - CUPOLA_RECORD_CENSUS=1: every callback of the driver and runtime
 *    domains is enabled and counted; at exit one note per function called
 *    ("# census driver cuLaunchKernel 1234"), so that a recording says which
 *    CUDA entry points a program used, allocation or not.
 *  - CUPOLA_RECORD_CALLERS=1: each row's Call names who called, from a
 *    backtrace at the callback: "cuMemAlloc_v2 < libcudart.so.13 <
 *    libtorch_cuda.so:SYMBOL", the first libraries outside CUDA's own
 *    (libcuda, libcupti and this one) and the symbol of the first frame.
 *
 * Built with -DCP_RECORD_FLOOR (build/libcupola_record_floor.so, for
 * bench/record_cost.sh only): the same subscription and callbacks with an
 * empty callback and no files, the floor any recorder over CUPTI's callbacks
 * pays.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h> /* brings generated_cuda_meta.h and generated_cuda_runtime_api_meta.h (the parameters) */

#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "record.h"

#define EXPORT __attribute__((visibility("default")))

static cp_rec *rec;
static CUpti_SubscriberHandle subscriber;
static _Atomic unsigned long long nested_driver; /* driver calls under a recorded runtime call */
static __thread int in_runtime;                  /* recorded runtime calls running on this thread */
static __thread uint32_t my_tid;

static uint32_t tid(void)
{
    if (!my_tid)
        my_tid = (uint32_t)syscall(SYS_gettid);
    return my_tid;
}

#ifndef CP_RECORD_FLOOR
#define CP_RECORD_FLOOR 0
#endif

/* ---- diagnostics: the census and the callers (off by default) ---- */

#define CENSUS_IDS 1024 /* above both domains' CBID_SIZE (checked below) */
_Static_assert(CUPTI_DRIVER_TRACE_CBID_SIZE <= CENSUS_IDS &&
               CUPTI_RUNTIME_TRACE_CBID_SIZE <= CENSUS_IDS, "census table too small");
static int census_on, callers_on;
static _Atomic unsigned long long census_n[2][CENSUS_IDS]; /* [driver, runtime][cbid] */
static const char *_Atomic census_name[2][CENSUS_IDS];     /* CUPTI's constant strings */
static unsigned char rt_recorded[CENSUS_IDS]; /* runtime ids recorded (CUPOLA_RECORD_LEVEL=runtime) */

static void census_count(CUpti_CallbackDomain domain, CUpti_CallbackId id, const char *name)
{
    int d = domain == CUPTI_CB_DOMAIN_DRIVER_API ? 0 : 1;
    if (id >= CENSUS_IDS)
        return;
    if (atomic_fetch_add_explicit(&census_n[d][id], 1, memory_order_relaxed) == 0)
        atomic_store_explicit(&census_name[d][id], name, memory_order_relaxed);
}

/* One note per function called, at exit (before the files close). */
static void census_notes(cp_rec *r)
{
    char note[160];
    int d;
    unsigned id;
    for (d = 0; d < 2; d++)
        for (id = 0; id < CENSUS_IDS; id++) {
            unsigned long long n = atomic_load(&census_n[d][id]);
            const char *name = atomic_load(&census_name[d][id]);
            if (!n)
                continue;
            snprintf(note, sizeof note, "census %s %s %llu", d ? "runtime" : "driver",
                     name ? name : "?", n);
            cp_rec_note(r, note);
        }
}

/* The callers' names, made once each and kept for the process's life (a
 * row's Call is a string that is never freed). */
#define CALLERS_MAX 4096
static pthread_mutex_t callers_mu = PTHREAD_MUTEX_INITIALIZER;
static char *callers[CALLERS_MAX];
static unsigned ncallers;
static const void *self_base, *cupti_base, *cuda_base;

static const char *base_name(const char *path)
{
    const char *s = path ? strrchr(path, '/') : NULL;
    return s ? s + 1 : path ? path : "?";
}

static const char *intern(const char *text, const char *fallback)
{
    unsigned i;
    const char *out = fallback;
    pthread_mutex_lock(&callers_mu);
    for (i = 0; i < ncallers; i++)
        if (strcmp(callers[i], text) == 0) {
            out = callers[i];
            goto done;
        }
    if (ncallers < CALLERS_MAX && (callers[ncallers] = strdup(text)) != NULL)
        out = callers[ncallers++];
done:
    pthread_mutex_unlock(&callers_mu);
    return out;
}

/* "CALL < lib < lib:SYMBOL": the first three libraries of the stack outside
 * libcuda, libcupti and this library, and the first frame's symbol (mangled:
 * no comma, no space).  CALL alone when the stack says nothing more. */
static const char *caller_of(const char *call)
{
    void *fr[32];
    char text[320];
    const char *libs[3] = {0}, *sym = NULL;
    int n = backtrace(fr, 32), i, nl = 0, k;
    size_t used;
    for (i = 1; i < n && nl < 3; i++) {
        Dl_info di;
        if (!dladdr(fr[i], &di) || di.dli_fbase == self_base || di.dli_fbase == cupti_base ||
            di.dli_fbase == cuda_base)
            continue;
        if (nl == 0 || strcmp(libs[nl - 1], base_name(di.dli_fname)) != 0) {
            libs[nl++] = base_name(di.dli_fname);
            if (!sym && di.dli_sname && !strstr(libs[nl - 1], "libcudart"))
                sym = di.dli_sname;
        }
    }
    if (!nl)
        return call;
    used = (size_t)snprintf(text, sizeof text, "%s", call);
    for (k = 0; k < nl && used < sizeof text; k++)
        used += (size_t)snprintf(text + used, sizeof text - used, " < %s", libs[k]);
    if (sym && used < sizeof text)
        snprintf(text + used, sizeof text - used, ":%.160s", sym);
    for (k = 0; text[k]; k++)
        if (text[k] == ',' || text[k] == '\n')
            text[k] = ';'; /* one column */
    return intern(text, call);
}

static void callers_init(void)
{
    Dl_info di;
    void *fr[2];
    /* the libraries' functions as this one is linked to them (a union:
     * ISO C has no cast from a function to an object pointer) */
    union { CUptiResult (*f)(uint32_t *); void *p; } cupti_fn = {.f = cuptiGetVersion};
    union { CUresult (*f)(CUdevice *); void *p; } cuda_fn = {.f = cuCtxGetDevice};
    if (dladdr(&callers_on, &di))
        self_base = di.dli_fbase;
    if (dladdr(cupti_fn.p, &di))
        cupti_base = di.dli_fbase;
    if (dladdr(cuda_fn.p, &di))
        cuda_base = di.dli_fbase;
    backtrace(fr, 2); /* loads the unwinder now, not inside a callback */
}

static const char *call_name(const CUpti_CallbackData *cb)
{
    return callers_on ? caller_of(cb->functionName) : cb->functionName;
}

static __thread CUcontext last_ctx;              /* the device of the context seen last */
static __thread int last_dev;

static int device_of(const CUpti_CallbackData *cb)
{
    uint32_t d;
    CUdevice dev;
    /* a context's device never changes: one lookup per thread and context
     * (a context destroyed and another made at its address on another
     * device would be misattributed until the thread sees a third) */
    if (cb->context && cb->context == last_ctx)
        return last_dev;
    if (cb->context && cuptiGetDeviceId(cb->context, &d) == CUPTI_SUCCESS) {
        last_ctx = cb->context;
        last_dev = (int)d;
        return (int)d;
    }
    if (cuCtxGetDevice(&dev) == CUDA_SUCCESS)
        return (int)dev;
    return 0;
}

static void add(const CUpti_CallbackData *cb, int ok, int kind, uint64_t ptr, uint64_t size,
                uint64_t stream, uint64_t pool)
{
    cp_rec_event e;
    memset(&e, 0, sizeof e);
    e.action = (uint8_t)(ok ? CP_REC_ALLOC : CP_REC_ALLOC_FAIL);
    e.kind = (uint8_t)kind;
    e.ptr = ok ? ptr : 0;
    e.size = size;
    e.stream = stream;
    e.pool = pool;
    e.call = call_name(cb);
    e.tid = tid();
    e.device = (int16_t)device_of(cb);
    if (ok && !ptr)
        return; /* a zero-byte request: nothing was allocated */
    cp_rec_add(rec, &e);
}

static void del(const CUpti_CallbackData *cb, uint64_t ptr, uint64_t stream)
{
    cp_rec_event e;
    if (!ptr)
        return; /* cudaFree(NULL) */
    memset(&e, 0, sizeof e);
    e.ptr = ptr;
    e.stream = stream;
    e.call = call_name(cb);
    e.tid = tid();
    e.device = -1;
    cp_rec_free(rec, &e);
}

static void vmm(const CUpti_CallbackData *cb, int action, uint64_t ptr, uint64_t size,
                uint64_t handle)
{
    cp_rec_event e;
    memset(&e, 0, sizeof e);
    e.action = (uint8_t)action;
    e.kind = CP_REC_VMM;
    e.ptr = ptr;
    e.size = size;
    e.pool = handle;
    e.call = call_name(cb);
    e.tid = tid();
    e.device = (int16_t)device_of(cb);
    cp_rec_add(rec, &e);
}

#define P(type) ((const type##_params *)cb->functionParams)
#define U(x) ((uint64_t)(uintptr_t)(x))

static void runtime_exit(CUpti_CallbackId id, const CUpti_CallbackData *cb)
{
    int ok = *(const cudaError_t *)cb->functionReturnValue == cudaSuccess;
    switch (id) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020:
        add(cb, ok, CP_REC_DEVICE, ok ? U(*P(cudaMalloc_v3020)->devPtr) : 0,
            P(cudaMalloc_v3020)->size, 0, 0);
        break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020:
        add(cb, ok, CP_REC_DEVICE, ok ? U(*P(cudaMallocPitch_v3020)->devPtr) : 0,
            ok ? (uint64_t)*P(cudaMallocPitch_v3020)->pitch * P(cudaMallocPitch_v3020)->height
               : (uint64_t)P(cudaMallocPitch_v3020)->width * P(cudaMallocPitch_v3020)->height,
            0, 0);
        break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000:
        add(cb, ok, CP_REC_MANAGED, ok ? U(*P(cudaMallocManaged_v6000)->devPtr) : 0,
            P(cudaMallocManaged_v6000)->size, 0, 0);
        break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020:
        add(cb, ok, CP_REC_PINNED, ok ? U(*P(cudaMallocHost_v3020)->ptr) : 0,
            P(cudaMallocHost_v3020)->size, 0, 0);
        break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020:
        add(cb, ok, CP_REC_PINNED, ok ? U(*P(cudaHostAlloc_v3020)->pHost) : 0,
            P(cudaHostAlloc_v3020)->size, 0, 0);
        break;
    /* The _ptsz forms have the same parameters as the plain ones. */
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020:
        add(cb, ok, CP_REC_DEVICE, ok ? U(*P(cudaMallocAsync_v11020)->devPtr) : 0,
            P(cudaMallocAsync_v11020)->size, U(P(cudaMallocAsync_v11020)->hStream), 0);
        break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020:
        add(cb, ok, CP_REC_DEVICE, ok ? U(*P(cudaMallocFromPoolAsync_v11020)->ptr) : 0,
            P(cudaMallocFromPoolAsync_v11020)->size, U(P(cudaMallocFromPoolAsync_v11020)->stream),
            U(P(cudaMallocFromPoolAsync_v11020)->memPool));
        break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020:
        if (ok)
            del(cb, U(P(cudaFree_v3020)->devPtr), 0);
        break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020:
        if (ok)
            del(cb, U(P(cudaFreeHost_v3020)->ptr), 0);
        break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020:
        if (ok)
            del(cb, U(P(cudaFreeAsync_v11020)->devPtr), U(P(cudaFreeAsync_v11020)->hStream));
        break;
    default:
        break;
    }
}

static void driver_exit(CUpti_CallbackId id, const CUpti_CallbackData *cb)
{
    int ok = *(const CUresult *)cb->functionReturnValue == CUDA_SUCCESS;
    switch (id) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2:
        add(cb, ok, CP_REC_DEVICE, ok ? *P(cuMemAlloc_v2)->dptr : 0, P(cuMemAlloc_v2)->bytesize,
            0, 0);
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2:
        add(cb, ok, CP_REC_DEVICE, ok ? *P(cuMemAllocPitch_v2)->dptr : 0,
            ok ? (uint64_t)*P(cuMemAllocPitch_v2)->pPitch * P(cuMemAllocPitch_v2)->Height
               : (uint64_t)P(cuMemAllocPitch_v2)->WidthInBytes * P(cuMemAllocPitch_v2)->Height,
            0, 0);
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged:
        add(cb, ok, CP_REC_MANAGED, ok ? *P(cuMemAllocManaged)->dptr : 0,
            P(cuMemAllocManaged)->bytesize, 0, 0);
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2:
        add(cb, ok, CP_REC_PINNED, ok ? U(*P(cuMemAllocHost_v2)->pp) : 0,
            P(cuMemAllocHost_v2)->bytesize, 0, 0);
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc:
        add(cb, ok, CP_REC_PINNED, ok ? U(*P(cuMemHostAlloc)->pp) : 0,
            P(cuMemHostAlloc)->bytesize, 0, 0);
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz:
        add(cb, ok, CP_REC_DEVICE, ok ? *P(cuMemAllocAsync)->dptr : 0,
            P(cuMemAllocAsync)->bytesize, U(P(cuMemAllocAsync)->hStream), 0);
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz:
        add(cb, ok, CP_REC_DEVICE, ok ? *P(cuMemAllocFromPoolAsync)->dptr : 0,
            P(cuMemAllocFromPoolAsync)->bytesize, U(P(cuMemAllocFromPoolAsync)->hStream),
            U(P(cuMemAllocFromPoolAsync)->pool));
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
        if (ok)
            del(cb, P(cuMemFree_v2)->dptr, 0);
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost:
        if (ok)
            del(cb, U(P(cuMemFreeHost)->p), 0);
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz:
        if (ok)
            del(cb, P(cuMemFreeAsync)->dptr, U(P(cuMemFreeAsync)->hStream));
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemCreate:
        if (ok) {
            const CUmemAllocationProp *prop = P(cuMemCreate)->prop;
            cp_rec_event e;
            memset(&e, 0, sizeof e);
            e.action = CP_REC_ALLOC;
            e.kind = CP_REC_VMM;
            e.ptr = (uint64_t)*P(cuMemCreate)->handle;
            e.size = P(cuMemCreate)->size;
            e.call = call_name(cb);
            e.tid = tid();
            /* the physical memory's device is the one the properties name */
            e.device = (int16_t)(prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE
                                     ? prop->location.id
                                     : device_of(cb));
            cp_rec_add(rec, &e);
        }
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemRelease:
        if (ok)
            del(cb, (uint64_t)P(cuMemRelease)->handle, 0);
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemMap:
        if (ok)
            vmm(cb, CP_REC_MAP, P(cuMemMap)->ptr, P(cuMemMap)->size,
                (uint64_t)P(cuMemMap)->handle);
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemUnmap:
        if (ok)
            vmm(cb, CP_REC_UNMAP, P(cuMemUnmap)->ptr, P(cuMemUnmap)->size, 0);
        break;
    default:
        break;
    }
}

static void CUPTIAPI callback(void *ud, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                              const void *data)
{
    const CUpti_CallbackData *cb = (const CUpti_CallbackData *)data;
    (void)ud;
    if (CP_RECORD_FLOOR)
        return;
    if (census_on && cb->callbackSite == CUPTI_API_EXIT)
        census_count(domain, id, cb->functionName);
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
        /* the census enables every runtime callback: only those recorded
         * hide the driver calls under them */
        if (id >= CENSUS_IDS || !rt_recorded[id])
            return;
        if (cb->callbackSite == CUPTI_API_ENTER) {
            in_runtime++;
        } else {
            in_runtime--;
            runtime_exit(id, cb);
        }
    } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && cb->callbackSite == CUPTI_API_EXIT) {
        if (in_runtime > 0)
            atomic_fetch_add_explicit(&nested_driver, 1, memory_order_relaxed);
        else
            driver_exit(id, cb);
    }
}

static const CUpti_CallbackId runtime_ids[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020,
};

static const CUpti_CallbackId driver_ids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemCreate,
    CUPTI_DRIVER_TRACE_CBID_cuMemRelease,
    CUPTI_DRIVER_TRACE_CBID_cuMemMap,
    CUPTI_DRIVER_TRACE_CBID_cuMemUnmap,
};

static void finish(void)
{
    char note[160];
    cp_rec_stats st;
    if (!rec)
        return;
    cp_rec_stats_get(rec, &st);
    snprintf(note, sizeof note, "totals: %llu events, %llu frees of addresses never allocated, "
             "%llu dropped, %llu driver calls under recorded runtime calls",
             (unsigned long long)st.events, (unsigned long long)st.unknown_frees,
             (unsigned long long)st.dropped,
             (unsigned long long)atomic_load(&nested_driver));
    cp_rec_flush(rec);
    if (census_on)
        census_notes(rec);
    cp_rec_note(rec, note);
    /* The files close here; later callbacks (libraries' teardown) are taken
     * into memory and never written. */
    cp_rec_close(rec);
}

static void child_after_fork(void)
{
    if (rec)
        cp_rec_forked(rec);
}

/* The callbacks: the driver's allocation calls, the runtime's too at
 * CUPOLA_RECORD_LEVEL=runtime, every one of both domains for the census.
 * Returns how many could not be enabled. */
static int enable_callbacks(int runtime_level)
{
    size_t i;
    int failed = 0;
    if (runtime_level)
        for (i = 0; i < sizeof runtime_ids / sizeof *runtime_ids; i++) {
            failed += cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API,
                                          runtime_ids[i]) != CUPTI_SUCCESS;
            rt_recorded[runtime_ids[i]] = 1;
        }
    for (i = 0; i < sizeof driver_ids / sizeof *driver_ids; i++)
        failed += cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                                      driver_ids[i]) != CUPTI_SUCCESS;
    if (census_on)
        failed += (cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API) != CUPTI_SUCCESS) +
                  (cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API) != CUPTI_SUCCESS);
    return failed;
}

static int env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

EXPORT int InitializeInjection(void);
EXPORT int InitializeInjection(void)
{
    static int done;
    char old[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 64];
    char note[160];
    CUpti_SubscriberParams sp;
    CUptiResult res;
    const char *fl = getenv("CUPOLA_RECORD_FLUSH_MS");
    const char *level = getenv("CUPOLA_RECORD_LEVEL");
    int runtime_level = level && strcmp(level, "runtime") == 0;
    uint32_t cupti_version = 0;
    int failed;

    if (done)
        return 1;
    done = 1;
    census_on = !CP_RECORD_FLOOR && env_on("CUPOLA_RECORD_CENSUS");
    callers_on = !CP_RECORD_FLOOR && env_on("CUPOLA_RECORD_CALLERS");
    cuptiGetVersion(&cupti_version);
    snprintf(note, sizeof note, "cupti %u, level %s%s%s", (unsigned)cupti_version,
             runtime_level ? "runtime+driver" : "driver", census_on ? ", census" : "",
             callers_on ? ", callers" : "");
    memset(&sp, 0, sizeof sp);
    memset(old, 0, sizeof old);
    sp.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    sp.subscriberName = "cupola record";
    sp.oldSubscriberName = old;
    sp.oldSubscriberSize = sizeof old;
    res = cuptiSubscribe_v2(&subscriber, callback, NULL, &sp);
    if (res != CUPTI_SUCCESS) {
        const char *why = NULL;
        cuptiGetResultString(res, &why);
        /* CUPTI writes "<not provided>" for a tool that gave no name */
        if (res == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
            fprintf(stderr, "cupola record: process %ld is not recorded: another CUPTI user holds "
                    "the process (%s)\n", (long)getpid(),
                    old[0] && !strstr(old, "not provided") ? old
                    : "a tool that gave no name: Nsight, compute-sanitizer, cuda-gdb or a profiler "
                      "the program started");
        else
            fprintf(stderr, "cupola record: process %ld is not recorded: CUPTI did not start (%s)\n",
                    (long)getpid(), why ? why : "unknown error");
        return 1; /* the program runs on, unrecorded */
    }
    if (!CP_RECORD_FLOOR) {
        rec = cp_rec_open(getenv("CUPOLA_RECORD_OUT"), fl ? atoi(fl) : 0,
                          getenv("CUPOLA_RECORD_LIST"), note, 1);
        if (!rec) {
            fprintf(stderr, "cupola record: process %ld is not recorded: out of host memory\n",
                    (long)getpid());
            cuptiUnsubscribe(subscriber);
            return 1;
        }
    }
    if (callers_on)
        callers_init();
    /* The driver's calls only, by default: the runtime's calls are seen
     * through the driver calls they make (on the H100 every event of
     * bench/record_known.cu was recorded so, equal in address, size, kind,
     * stream and pool), at half the callbacks of the runtime's and the
     * driver's together (CUPOLA_RECORD_LEVEL=runtime: then a runtime call is
     * recorded under its own name and the driver calls inside it are not;
     * bench/record_check.sh measures both). */
    failed = enable_callbacks(runtime_level);
    if (failed) {
        snprintf(note, sizeof note, "%d callbacks could not be enabled: some calls are not seen",
                 failed);
        if (rec)
            cp_rec_note(rec, note);
        fprintf(stderr, "cupola record: %s\n", note);
    }
    if (rec) {
        pthread_atfork(NULL, NULL, child_after_fork);
        atexit(finish);
    }
    return 1;
}
