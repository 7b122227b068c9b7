/*
 * cuda_impl.h: what the files of the CUDA backend share; internal to
 * backend/, never included by the binding.
 *
 * The backend (its policy, the probe and its table in cuda.c) is split by
 * concern:
 *   cuda_error.c    CUDA's errors as cp_status and messages
 *   cuda_device.c   devices: count, current one, description,
 *                   synchronization, memory figures, peers, legacy streams
 *   cuda_stream.c   streams and events
 *   cuda_memory.c   raw memory (cudaMalloc, cudaMallocAsync) and copies
 *   cuda_mempool.c  native pools (cudaMemPool_t) and their attributes, access
 *   cuda_ipc.c      pools and blocks across processes, the legacy IPC path
 *   cuda_kernels.c  the built-in kernels and the device pools' entry points
 *   cuda_vmm.c      virtual memory management (the driver's cuMem* calls)
 * The kernels themselves are in cuda/ (kernels.h, devpool_cuda.h).
 */
#ifndef CUPOLA_CUDA_IMPL_H
#define CUPOLA_CUDA_IMPL_H

#include <stdatomic.h>

#include <cuda_runtime_api.h>

#include "backend.h"

/* The calling thread's cupola device (cuda_device.c): what object-less
 * entry points and the NULL (legacy) stream act on. */
extern _Thread_local int cp_cuda_tl_device;
#define CP_DEVICE cp_cuda_tl_device

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

#define CHECK(call, op)                                                                            \
    do {                                                                                           \
        cudaError_t check_e_ = (call);                                                             \
        if (check_e_ != cudaSuccess)                                                               \
            return cp_cuda_fail(check_e_, op);                                                     \
    } while (0)

/* Every entry point acting on a stream starts here. */
#define ENTER_STREAM(s)                                                                            \
    do {                                                                                           \
        cp_status enter_st_ = cp_cuda_use_device(cp_cuda_stream_dev(s));                           \
        if (enter_st_ != CP_OK)                                                                    \
            return enter_st_;                                                                      \
    } while (0)
#define ENTER_DEVICE(d)                                                                            \
    do {                                                                                           \
        cp_status enter_st_ = cp_cuda_use_device(d);                                               \
        if (enter_st_ != CP_OK)                                                                    \
            return enter_st_;                                                                      \
    } while (0)

static inline cudaStream_t cp_cuda_stream_handle(const cp_stream *s)
{
    return s ? s->h : cudaStreamLegacy;
}

/* ---- cuda_error.c ---- */
cp_status cp_cuda_fail(cudaError_t e, const char *op);
cp_status cp_cuda_refuse(cudaError_t e, const char *fmt, ...) CP_PRINTF(2, 3);
cp_status cp_cuda_release_result(cudaError_t e, const char *op);

/* ---- cuda_device.c ---- */
int cp_cuda_device_count(void);
cp_status cp_cuda_check_device(int dev);
cp_status cp_cuda_use_device(int dev);
int cp_cuda_stream_dev(const cp_stream *s);
cp_status cp_cuda_device_info_on(int dev, cp_device_info *out);
cp_status cp_cuda_device_info(cp_device_info *out);
cp_status cp_cuda_device_synchronize_on(int dev);
cp_status cp_cuda_device_synchronize(void);
cp_status cp_cuda_mem_get_info_on(int dev, size_t *free_bytes, size_t *total_bytes);
cp_status cp_cuda_mem_get_info(size_t *free_bytes, size_t *total_bytes);
cp_status cp_cuda_set_device(int dev);
int cp_cuda_get_device(void);
int cp_cuda_stream_device(const cp_stream *s);
cp_stream *cp_cuda_stream_legacy(int dev);
cp_status cp_cuda_can_access_peer(int dev, int peer, int *yes);
cp_status cp_cuda_enable_peer_access(int dev, int peer);

/* ---- cuda_stream.c ---- */
cp_status cp_cuda_stream_create_on(cp_stream **out, int dev, int priority, int blocking);
cp_status cp_cuda_stream_create(cp_stream **out, int priority, int blocking);
cp_status cp_cuda_stream_wrap(cp_stream **out, void *native, int dev);
cp_status cp_cuda_stream_destroy(cp_stream *s);
cp_status cp_cuda_stream_synchronize(cp_stream *s);
cp_status cp_cuda_stream_query(cp_stream *s, int *idle);
cp_status cp_cuda_stream_wait_event(cp_stream *s, cp_event *ev);
uint64_t cp_cuda_stream_id(const cp_stream *s);
cp_status cp_cuda_event_create(cp_event **out, int timing);
cp_status cp_cuda_event_destroy(cp_event *ev);
cp_status cp_cuda_event_record(cp_event *ev, cp_stream *s);
cp_status cp_cuda_event_synchronize(cp_event *ev);
cp_status cp_cuda_event_query(cp_event *ev, int *done);
cp_status cp_cuda_event_elapsed(cp_event *start, cp_event *end, float *ms);
void *cp_cuda_stream_native(cp_stream *s);

/* ---- cuda_memory.c ---- */
cp_status cp_cuda_mem_alloc_on(int dev, void **out, size_t bytes, cp_memkind kind);
cp_status cp_cuda_mem_alloc(void **out, size_t bytes, cp_memkind kind);
cp_status cp_cuda_mem_free_on(int dev, void *p, cp_memkind kind);
cp_status cp_cuda_mem_free(void *p, cp_memkind kind);
cp_status cp_cuda_mem_alloc_async(void **out, size_t bytes, cp_stream *s);
cp_status cp_cuda_mem_free_async(void *p, cp_stream *s);
cp_status cp_cuda_memcpy_async(void *dst, const void *src, size_t bytes, cp_stream *s);
cp_status cp_cuda_memset_async(void *dst, int byte, size_t bytes, cp_stream *s);
cp_status cp_cuda_memcpy_peer_async(void *dst, int dst_dev, const void *src, int src_dev,
                                    size_t bytes, cp_stream *s);

/* ---- cuda_mempool.c ---- */
cp_status cp_cuda_mempool_default_on(int dev, cp_mempool **out);
cp_status cp_cuda_mempool_default(cp_mempool **out);
cp_status cp_cuda_mempool_create(cp_mempool **out, const cp_mempool_props *props);
cp_status cp_cuda_mempool_destroy(cp_mempool *p);
void cp_cuda_reap_retired_pools(int dev);
cp_status cp_cuda_mempool_alloc(cp_mempool *p, void **out, size_t bytes, cp_stream *s);
cp_status cp_cuda_mempool_get_attr(cp_mempool *p, cp_pool_attr a, uint64_t *v);
cp_status cp_cuda_mempool_set_attr(cp_mempool *p, cp_pool_attr a, uint64_t v);
cp_status cp_cuda_mempool_trim(cp_mempool *p, size_t keep_bytes);
cp_status cp_cuda_mempool_set_current(cp_mempool *p);
cp_status cp_cuda_mempool_get_current_on(int dev, cp_mempool **out);
cp_status cp_cuda_mempool_get_current(cp_mempool **out);
int cp_cuda_mempool_device(const cp_mempool *p);
cp_status cp_cuda_mempool_set_access(cp_mempool *p, int dev, cp_access a);
cp_status cp_cuda_mempool_get_access(cp_mempool *p, int dev, cp_access *a);
void cp_cuda_mempool_register(cp_mempool *p);

/* ---- cuda_ipc.c ---- */
cp_status cp_cuda_mempool_export(cp_mempool *p, int *fd);
cp_status cp_cuda_mempool_import(int fd, int dev, cp_mempool **out);
cp_status cp_cuda_mempool_export_ptr(void *ptr, cp_ipc_data *out);
cp_status cp_cuda_mempool_import_ptr(cp_mempool *p, const cp_ipc_data *data, size_t bytes,
                                     void **out);
cp_status cp_cuda_ipc_get_handle(void *ptr, size_t bytes, cp_ipc_data *out, int *fd);
cp_status cp_cuda_ipc_open_handle(int dev, const cp_ipc_data *data, int fd, size_t bytes,
                                  void **out);
cp_status cp_cuda_ipc_close_handle(void *ptr, size_t bytes);

/* ---- cuda_kernels.c ---- */
cp_status cp_cuda_k_fill(void *p, size_t count, cp_dtype t, cp_scalar v, const cp_shape *sh,
                         cp_stream *s);
cp_status cp_cuda_k_sqrt_index(float *p, size_t count, const cp_shape *sh, cp_stream *s);
cp_status cp_cuda_k_checksum(const void *p, size_t bytes, cp_dtype t, const cp_shape *sh,
                             cp_stream *s, cp_scalar *out);
cp_status cp_cuda_k_spin(uint64_t microseconds, cp_stream *s);
cp_status cp_cuda_k_pattern(void *p, size_t bytes, uint64_t seed, cp_stream *s);
cp_status cp_cuda_k_verify(const void *p, size_t bytes, uint64_t seed, cp_stream *s, uint64_t *bad);
cp_status cp_cuda_devpool_create(cp_devpool **out, cp_dp_kind kind, size_t capacity);
cp_status cp_cuda_devpool_destroy(cp_devpool *p);
cp_status cp_cuda_devpool_finish(cp_dp_run *r, cp_dp_run_result *out);
cp_status cp_cuda_devpool_stats(cp_devpool *p, cp_dp_stats *out);
cp_status cp_cuda_devpool_launch(cp_devpool *p, const cp_dp_run_args *a, cp_stream *s,
                                 cp_dp_run **out);
cp_status cp_cuda_devpool_reset(cp_devpool *p, cp_stream *s);

/* ---- cuda_vmm.c ---- */
cp_status cp_cuda_vm_granularity(int dev, size_t *out);
cp_status cp_cuda_vm_reserve(int dev, void **out, size_t bytes);
cp_status cp_cuda_vm_free_range(int dev, void *p, size_t bytes);
cp_status cp_cuda_vm_create(int dev, uint64_t *handle, size_t bytes);
cp_status cp_cuda_vm_release(int dev, uint64_t handle, size_t bytes);
cp_status cp_cuda_vm_map(int dev, void *p, size_t bytes, uint64_t handle);
cp_status cp_cuda_vm_unmap(int dev, void *p, size_t bytes);
cp_status cp_cuda_vm_set_access(int dev, void *p, size_t bytes);

#endif /* CUPOLA_CUDA_IMPL_H */
