/*
 * backend.h: the one interface through which cupola's core talks to a device.
 *
 * Two implementations exist: backend/cuda.c (the CUDA runtime) and
 * backend/host.c (the CPU: memory from the OS, one worker thread per stream,
 * kernels run on the CPU), each with the files of its parts beside it
 * (cuda_*.c, host_*.c).  The binding and every allocator see only this
 * table, so an experiment behaves the same on either.
 *
 * Conventions
 *  - Every entry returns a cp_status.  On failure the backend has stored a
 *    message with cp_error_set() (error.h).  A failure that stands for a
 *    CUDA error starts with the CUDA error name on either backend
 *    ("cudaErrorInvalidValue: invalid argument (...)"; cp_cuda_error below).
 *  - CP_ERR_OOM is reserved for "the memory is not there": callers turn it
 *    into nil, msg, "out_of_memory" and everything stays consistent.
 *  - A NULL cp_stream means the default (legacy) stream.
 *  - Handles (streams, events, pools) are opaque and owned by whoever created
 *    them; destroy functions never synchronize the device, and tolerate being
 *    called while the process shuts down.
 *  - The functions are thread-safe in the sense CUDA's are: any host thread
 *    may call any of them.
 *
 * This header compiles as C and C++.
 */
#ifndef CUPOLA_BACKEND_H
#define CUPOLA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "devpool.h"
#include "dtype.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cp_stream cp_stream;   /* an in-order queue of device work */
typedef struct cp_event cp_event;     /* a marker recorded on a stream */
typedef struct cp_mempool cp_mempool; /* a native stream-ordered pool */

/* Where raw memory lives (cp_backend.mem_alloc). */
typedef enum cp_memkind {
    CP_MEM_DEVICE = 0, /* cudaMalloc */
    CP_MEM_MANAGED,    /* cudaMallocManaged */
    CP_MEM_PINNED      /* cudaMallocHost */
} cp_memkind;

/* Launch shape; 0 means "choose from the problem size". */
typedef struct cp_shape {
    unsigned grid;
    unsigned block;
} cp_shape;

/* Native pool attributes (cudaMemPoolAttr*).  The first four are writable. */
typedef enum cp_pool_attr {
    CP_POOL_RELEASE_THRESHOLD = 0,
    CP_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES,
    CP_POOL_REUSE_ALLOW_OPPORTUNISTIC,
    CP_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
    CP_POOL_RESERVED_MEM_CURRENT,
    CP_POOL_RESERVED_MEM_HIGH,
    CP_POOL_USED_MEM_CURRENT,
    CP_POOL_USED_MEM_HIGH,
    CP_POOL_ATTR_COUNT
} cp_pool_attr;

/* cudaMemPoolProps, the parts cupola exposes. */
typedef struct cp_mempool_props {
    int location_host;   /* 0: device memory, 1: pinned host memory */
    int handle_posix_fd; /* 1: exportable as a POSIX file descriptor */
    size_t max_size;     /* 0: no limit */
    int device;          /* the device whose memory it holds (multigpu) */
} cp_mempool_props;

/* ---- several devices and processes (multigpu) ---- */

/* How a device may touch a pool's memory (cudaMemAccessFlags). */
typedef enum cp_access {
    CP_ACCESS_NONE = 0,
    CP_ACCESS_READ,
    CP_ACCESS_READWRITE
} cp_access;

/* The opaque bytes CUDA hands a process to pass to another one
 * (cudaMemPoolPtrExportData, cudaIpcMemHandle_t: both 64 bytes); the host
 * backend puts its own description of the memory there. */
#define CP_IPC_DATA_BYTES 64
typedef struct cp_ipc_data {
    unsigned char bytes[CP_IPC_DATA_BYTES];
} cp_ipc_data;

/* At most this many devices are addressed (CUPOLA_HOST_DEVICES is clamped). */
#define CP_MAX_DEVICES 64

typedef struct cp_device_info {
    char name[256];
    int index;
    uint64_t memory; /* total bytes */
    int sms;
    int cc_major, cc_minor;
    int mempools; /* stream-ordered allocator supported */
    int driver;   /* CUDA versions as 1000*major + 10*minor; 0 on host */
    int runtime;
    int priority_least, priority_greatest; /* stream priority range */
} cp_device_info;

typedef struct cp_backend {
    const char *name; /* "cuda" or "host" */

    /* device */
    cp_status (*device_info)(cp_device_info *out);
    cp_status (*device_synchronize)(void);
    cp_status (*mem_get_info)(size_t *free_bytes, size_t *total_bytes);

    /* streams: blocking != 0 orders the stream with the legacy default stream */
    cp_status (*stream_create)(cp_stream **out, int priority, int blocking);
    cp_status (*stream_destroy)(cp_stream *s);
    cp_status (*stream_synchronize)(cp_stream *s);
    cp_status (*stream_query)(cp_stream *s, int *idle);
    cp_status (*stream_wait_event)(cp_stream *s, cp_event *e);
    /* a number that names s for the life of the process and is never reused
     * (a freed stream's address may come back for a new one); 0 for NULL */
    uint64_t (*stream_id)(const cp_stream *s);

    /* events; elapsed needs both created with timing and both completed */
    cp_status (*event_create)(cp_event **out, int timing);
    cp_status (*event_destroy)(cp_event *e);
    cp_status (*event_record)(cp_event *e, cp_stream *s);
    cp_status (*event_synchronize)(cp_event *e);
    cp_status (*event_query)(cp_event *e, int *done);
    cp_status (*event_elapsed)(cp_event *start, cp_event *end, float *ms);

    /* raw memory: synchronous (cudaMalloc: synchronizes the device) */
    cp_status (*mem_alloc)(void **out, size_t bytes, cp_memkind kind);
    cp_status (*mem_free)(void *p, cp_memkind kind);

    /* stream-ordered memory from the device's current pool
     * (cudaMallocAsync); mem_free_async also frees blocks of any mempool
     * (cudaFreeAsync does not need to be told the pool). */
    cp_status (*mem_alloc_async)(void **out, size_t bytes, cp_stream *s);
    cp_status (*mem_free_async)(void *p, cp_stream *s);

    /* native pools; the default pool belongs to the device, never destroy it */
    cp_status (*mempool_default)(cp_mempool **out);
    cp_status (*mempool_create)(cp_mempool **out, const cp_mempool_props *props);
    cp_status (*mempool_destroy)(cp_mempool *p);
    cp_status (*mempool_alloc)(cp_mempool *p, void **out, size_t bytes, cp_stream *s);
    cp_status (*mempool_get_attr)(cp_mempool *p, cp_pool_attr a, uint64_t *v);
    cp_status (*mempool_set_attr)(cp_mempool *p, cp_pool_attr a, uint64_t v);
    cp_status (*mempool_trim)(cp_mempool *p, size_t keep_bytes);
    cp_status (*mempool_set_current)(cp_mempool *p);
    cp_status (*mempool_get_current)(cp_mempool **out);

    /* copies and memset, ordered on s; host pointers may be pageable
     * (the copy then completes before the call returns, as in CUDA) */
    cp_status (*memcpy_async)(void *dst, const void *src, size_t bytes, cp_stream *s);
    cp_status (*memset_async)(void *dst, int byte, size_t bytes, cp_stream *s);

    /* built-in kernels (bodies in cuda/kernel_body.h, shared by both backends) */
    cp_status (*k_fill)(void *p, size_t count, cp_dtype t, cp_scalar v,
                        const cp_shape *sh, cp_stream *s);
    cp_status (*k_sqrt_index)(float *p, size_t count, const cp_shape *sh, cp_stream *s);
    /* checksum waits for s and returns the result (see kernel_body.h) */
    cp_status (*k_checksum)(const void *p, size_t bytes, cp_dtype t, const cp_shape *sh,
                            cp_stream *s, cp_scalar *out);
    cp_status (*k_spin)(uint64_t microseconds, cp_stream *s);
    /* pattern: fill with a pattern derived from seed; verify counts the
     * bytes that differ from it, waiting for s (data-integrity checks) */
    cp_status (*k_pattern)(void *p, size_t bytes, uint64_t seed, cp_stream *s);
    cp_status (*k_verify)(const void *p, size_t bytes, uint64_t seed, cp_stream *s,
                          uint64_t *bad);

    /* ---- run-time compiled kernels (kernel/module.c) ----------
     * host_task (host backend; NULL on CUDA): enqueues fn(data) on s, data
     * copied (len bytes, 8-byte aligned) into the work item.  A nonzero
     * return stores err as a pending kernel error, which the next device,
     * stream or event synchronization returns (CP_ERR_BACKEND, the message
     * starting "cupolaErrorHostKernel").  A return of 2 is a fault (err is
     * the whole message): the stream stays in error, as a CUDA context does
     * after one: its synchronizations (and the next device synchronization)
     * return err, new work on it is refused with err, and queued work does
     * not run; a task queued there is called as fn(data, NULL, 0), which
     * must release what data holds and run nothing.
     * stream_native (CUDA; NULL on host): the cudaStream_t of s (the legacy
     * stream's handle for NULL), for the driver API. */
    cp_status (*host_task)(cp_stream *s, int (*fn)(void *data, char *err, size_t errlen),
                           const void *data, size_t len);
    void *(*stream_native)(cp_stream *s);
    /* ---- several devices (multigpu) ---------------------------------------
     * Devices are 0 .. device_count()-1.  Streams, native pools and
     * allocations belong to one device: a stream to the device it was created
     * on, a pool to props.device, memory to the device it was allocated on.
     * Every entry point makes the device it needs the calling thread's CUDA
     * device from the object it acts on (a stream, a pool; cudaSetDevice only
     * when it differs) and never restores the previous one.  Entry points
     * without such an object (the ones above taking no device, and a NULL
     * stream, which is the legacy stream of that device) act on the calling
     * thread's current device, set_device/get_device, 0 until set.  So a
     * script's objects work wherever they are used from, and only the
     * object-less calls depend on the current device, which is visible. */
    int (*device_count)(void);
    cp_status (*set_device)(int dev);
    int (*get_device)(void);
    cp_status (*device_info_on)(int dev, cp_device_info *out);
    cp_status (*device_synchronize_on)(int dev);
    cp_status (*mem_get_info_on)(int dev, size_t *free_bytes, size_t *total_bytes);
    cp_status (*stream_create_on)(cp_stream **out, int dev, int priority, int blocking);
    /* the device of s; NULL: the current device */
    int (*stream_device)(const cp_stream *s);
    /* dev's legacy default stream as a stream of that device (NULL where one
     * legacy stream serves every device, as on the host); never destroyed */
    cp_stream *(*stream_legacy)(int dev);
    /* A stream made elsewhere as a stream of device dev: native is the
     * cudaStream_t another library created (PyTorch hands one to its
     * pluggable allocator).  It gets an id of its own, and stream_destroy
     * frees only the wrapper, never the foreign stream, whose owner keeps it
     * alive while cupola uses it.  NULL (and cudaStreamLegacy) is the legacy
     * stream: *out = NULL.  Host: there is no native stream to wrap; a new
     * stream of the emulated device stands for the handle, so code that maps
     * foreign handles runs on both backends. */
    cp_status (*stream_wrap)(cp_stream **out, void *native, int dev);
    cp_status (*mem_alloc_on)(int dev, void **out, size_t bytes, cp_memkind kind);
    /* frees memory of mem_alloc_on (or mem_alloc) of device dev */
    cp_status (*mem_free_on)(int dev, void *p, cp_memkind kind);
    cp_status (*mempool_default_on)(int dev, cp_mempool **out);
    cp_status (*mempool_get_current_on)(int dev, cp_mempool **out);
    int (*mempool_device)(const cp_mempool *p);
    /* peers: whether dev can map peer's memory; enabling lets kernels on dev
     * touch peer's cudaMalloc memory (enabling twice is not an error) */
    cp_status (*can_access_peer)(int dev, int peer, int *yes);
    cp_status (*enable_peer_access)(int dev, int peer);
    /* a device's access to a native pool's memory (cudaMemPoolSetAccess) */
    cp_status (*mempool_set_access)(cp_mempool *p, int dev, cp_access a);
    cp_status (*mempool_get_access)(cp_mempool *p, int dev, cp_access *a);
    /* a copy between the memory of two devices, ordered on s */
    cp_status (*memcpy_peer_async)(void *dst, int dst_dev, const void *src, int src_dev,
                                   size_t bytes, cp_stream *s);

    /* ---- several processes (multigpu) -----------------------------------
     * A pool created with handle_posix_fd exports a file descriptor (a new
     * one the caller closes) that another process imports after receiving
     * it (SCM_RIGHTS: see ipc.h); the import owns a dup of the fd it is given.
     * A block of such a pool exports CP_IPC_DATA_BYTES that the importing
     * process turns into its own pointer into the imported pool
     * (cudaMemPoolExportPointer / ImportPointer); free that pointer with
     * mem_free_async.  An imported pool is destroyed with mempool_destroy. */
    cp_status (*mempool_export)(cp_mempool *p, int *fd);
    cp_status (*mempool_import)(int fd, int dev, cp_mempool **out);
    cp_status (*mempool_export_ptr)(void *ptr, cp_ipc_data *out);
    cp_status (*mempool_import_ptr)(cp_mempool *p, const cp_ipc_data *d, size_t bytes,
                                    void **out);
    /* The legacy path for mem_alloc memory (cudaIpcGetMemHandle /
     * cudaIpcOpenMemHandle): get fills out and, where the memory travels as a
     * file descriptor (the host backend), *fd (owned by the backend, valid
     * while the memory is allocated; -1 when the data alone suffices, as
     * with CUDA).  open maps it in another process (fd: what was received, or
     * -1); close unmaps what open returned. */
    cp_status (*ipc_get_handle)(void *ptr, size_t bytes, cp_ipc_data *out, int *fd);
    cp_status (*ipc_open_handle)(int dev, const cp_ipc_data *d, int fd, size_t bytes,
                                 void **out);
    cp_status (*ipc_close_handle)(void *ptr, size_t bytes);

    /* ---- virtual memory management (the vmm pool) ----
     * Physical memory comes in handles whose size is a multiple of
     * vm_granularity; a handle is mapped into a reserved address range and
     * becomes accessible after vm_set_access over the range.  CUDA: the
     * driver's cuMemAddressReserve/Free, cuMemCreate/Release, cuMemMap/Unmap,
     * cuMemSetAccess (entry points looked up at run time, so the module
     * still loads without a driver); CP_ERR_UNSUPPORTED when the device or
     * driver has none.  Host: real pages: the range is an mmap(PROT_NONE)
     * reservation, access is mprotect(PROT_READ|PROT_WRITE), unmap is
     * madvise(MADV_DONTNEED) + PROT_NONE (the contents are gone, as on the
     * GPU); a handle is a number.  Unmap and release do not order
     * themselves after device work: callers make sure no queued work still
     * touches the range.  Every call names the device it acts for (never
     * the calling thread's current one): its physical memory, its access,
     * its context; the host backend charges the handles to that device's
     * memory account (CUPOLA_HOST_DEVICES). */
    cp_status (*vm_granularity)(int dev, size_t *out);
    cp_status (*vm_reserve)(int dev, void **out, size_t bytes);
    cp_status (*vm_free_range)(int dev, void *p, size_t bytes);
    cp_status (*vm_create)(int dev, uint64_t *handle, size_t bytes);
    cp_status (*vm_release)(int dev, uint64_t handle, size_t bytes);
    cp_status (*vm_map)(int dev, void *p, size_t bytes, uint64_t handle);
    cp_status (*vm_unmap)(int dev, void *p, size_t bytes);
    cp_status (*vm_set_access)(int dev, void *p, size_t bytes);
    /* ---- device-side (in-kernel) allocation pools (devpool.h) ----
     * dp_create: capacity bytes of pool memory and its device-side state
     * (a cupola_device_pool that kernels get a pointer to: dp_state).
     * dp_launch enqueues a run on s and returns at once; dp_finish waits for
     * it, fills the result and releases the run (also on failure).
     * dp_reset is ordered on s; dp_stats waits for the device.  dp_destroy
     * waits for the work still using the pool.  NULL entries: not
     * supported by this build. */
    cp_status (*dp_create)(cp_devpool **out, cp_dp_kind kind, size_t capacity);
    cp_status (*dp_destroy)(cp_devpool *p);
    void *(*dp_state)(cp_devpool *p);
    cp_status (*dp_launch)(cp_devpool *p, const cp_dp_run_args *a, cp_stream *s,
                           cp_dp_run **out);
    cp_status (*dp_finish)(cp_dp_run *r, cp_dp_run_result *out);
    cp_status (*dp_reset)(cp_devpool *p, cp_stream *s);
    cp_status (*dp_stats)(cp_devpool *p, cp_dp_stats *out);
} cp_backend;

/* The device-pool kinds' names, by cp_dp_kind (NULL past the last): the one
 * list the binding checks and prints. */
const char *cp_dp_kind_name(int kind);

/* The backends compiled into this module.  cp_backend_cuda_probe() tells
 * whether a usable device exists, without side effects beyond initialising
 * the runtime; it fills why with the reason when there is none. */
extern const cp_backend cp_backend_cuda;
extern const cp_backend cp_backend_host;
int cp_backend_cuda_probe(char *why, size_t whylen);

/* The backend in use, chosen once per process by cp_backend_select(). */
extern const cp_backend *cp_be;

/* Nonzero on a thread whose streams run no work: a replay with
 * idle_streams (trace.h; cupola.advise's, into pools of their own over the
 * virtual upstream), which sets it for the replay's length.  Every event recorded
 * there is complete, and the pools' queries say so at once: CUDA answers
 * "not ready" for a few microseconds after a record on an idle stream,
 * which is hundreds of a replay's events, so a block's reuse by another
 * stream (and the least memory) followed the GPU's timing from run to run;
 * the host backend completes such a marker as it is recorded (host.c). */
extern _Thread_local int cp_streams_idle;

/* cp_be->event_query, or done at once under cp_streams_idle: the query of
 * the pools' stream-ordered reuse. */
static inline cp_status cp_event_done(cp_event *e, int *done)
{
    if (cp_streams_idle) {
        *done = 1;
        return CP_OK;
    }
    return cp_be->event_query(e, done);
}

/* ---- a process that can no longer use the backend -----------
 * After fork() the child has no stream workers (host) and no usable CUDA
 * context, and a lock held by a thread that does not exist there would never
 * be released.  After a sticky CUDA error (an illegal address in a kernel,
 * ...) every later CUDA call of the process fails.  In both cases
 * cp_unusable is nonzero and every backend entry point that returns a status
 * fails at once (CP_GUARD, one load of a flag) with cp_unusable_error()'s
 * message instead of blocking or failing later in a confusing way.
 * cp_backend_select registers pthread_atfork handlers that set cp_forked
 * (and cp_unusable) in the child; destructors that would join or drain
 * threads of the parent do nothing there.  cp_mark_sticky records the first
 * sticky error's message (later ones keep it). */
extern int cp_forked;
extern int cp_unusable;
cp_status cp_unusable_error(void);
void cp_mark_sticky(const char *msg);
/* The message of a sticky error (CUDA's name and text, the operation). */
void cp_sticky_message(int code, const char *name, const char *what, const char *op, char *out,
                       size_t outlen);
#define CP_GUARD()                                                                                 \
    do {                                                                                           \
        if (__builtin_expect(cp_unusable, 0))                                                      \
            return cp_unusable_error();                                                            \
    } while (0)

/* ---- CUDA error names for failures that stand for CUDA's -----------------
 * A backend without the CUDA runtime (the host) reports a failure that the
 * CUDA backend would get from a CUDA call with the same message head as
 * cuda.c's: "cudaErrorInvalidValue: invalid argument (<what>)", the name and
 * cudaGetErrorString's text, then the backend's own explanation where cuda.c
 * names the call.  A script that matches on the name then behaves alike on
 * both backends.  cuda.c's own checks made before a CUDA call use the real
 * runtime for the same format. */
typedef enum cp_cuda_err {
    CP_CUDA_INVALID_VALUE = 0,   /* cudaErrorInvalidValue */
    CP_CUDA_NOT_READY,           /* cudaErrorNotReady */
    CP_CUDA_INVALID_HANDLE,      /* cudaErrorInvalidResourceHandle */
    CP_CUDA_INVALID_DEVICE,      /* cudaErrorInvalidDevice */
    CP_CUDA_INVALID_CONFIG,      /* cudaErrorInvalidConfiguration */
    CP_CUDA_ILLEGAL_ADDRESS,     /* cudaErrorIllegalAddress */
    CP_CUDA_ILLEGAL_INSTRUCTION, /* cudaErrorIllegalInstruction */
    CP_CUDA_ERR_COUNT
} cp_cuda_err;

/* cudaGetErrorName's and cudaGetErrorString's answers for e. */
const char *cp_cuda_err_name(cp_cuda_err e);
const char *cp_cuda_err_string(cp_cuda_err e);
/* Writes "<name>: <string> (<fmt...>)" to out (always terminated). */
void cp_cuda_err_format(char *out, size_t outlen, cp_cuda_err e, const char *fmt, ...)
    CP_PRINTF(4, 5);
/* Stores that message with cp_error_set and returns st. */
cp_status cp_cuda_error(cp_status st, cp_cuda_err e, const char *fmt, ...) CP_PRINTF(3, 4);

/* Chooses the backend: force is NULL/"" (auto), "cuda" or "host".  Returns
 * CP_OK, or an error (forced cuda without a device, unknown name) with the
 * message set.  Selecting again returns the backend already chosen, and fails
 * if force names another one. */
cp_status cp_backend_select(const char *force);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_BACKEND_H */
