/*
 * backend/cuda.c: the backend table (backend.h) over the CUDA runtime: its
 * policy, the probe and the operations table (cuda_impl.h lists the files,
 * one per concern).
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
 * of the object it acts on the thread's CUDA device (cp_cuda_use_device:
 * cudaSetDevice only when cudaGetDevice says otherwise) and never restores
 * the previous one; object-less entry points and the NULL (legacy) stream use
 * the thread's cupola device (cp_cuda_tl_device, set_device), so what runs
 * where never depends on what an earlier call happened to leave current.  An event is created on
 * the device current at creation and re-created on a stream's device when it
 * is recorded there (CUDA requires event and stream to share a device).
 *
 * Error policy: every CUDA return code is checked; a failure stores
 * "cudaErrorX: text (operation)" and maps the error to a cp_status.  Destroy
 * and free functions never synchronize and treat the runtime's shutdown
 * errors as success, because finalizers run them at process exit.
 */
#include "cuda_impl.h"
#include "devpool_cuda.h"
#include "kernels.h"

#include <stdio.h>

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

const cp_backend cp_backend_cuda = {
    .name = "cuda",

    .device_info = cp_cuda_device_info,
    .device_synchronize = cp_cuda_device_synchronize,
    .mem_get_info = cp_cuda_mem_get_info,

    .stream_create = cp_cuda_stream_create,
    .stream_destroy = cp_cuda_stream_destroy,
    .stream_synchronize = cp_cuda_stream_synchronize,
    .stream_query = cp_cuda_stream_query,
    .stream_wait_event = cp_cuda_stream_wait_event,
    .stream_id = cp_cuda_stream_id,

    .event_create = cp_cuda_event_create,
    .event_destroy = cp_cuda_event_destroy,
    .event_record = cp_cuda_event_record,
    .event_synchronize = cp_cuda_event_synchronize,
    .event_query = cp_cuda_event_query,
    .event_elapsed = cp_cuda_event_elapsed,

    .mem_alloc = cp_cuda_mem_alloc,
    .mem_free = cp_cuda_mem_free,
    .mem_alloc_async = cp_cuda_mem_alloc_async,
    .mem_free_async = cp_cuda_mem_free_async,

    .mempool_default = cp_cuda_mempool_default,
    .mempool_create = cp_cuda_mempool_create,
    .mempool_destroy = cp_cuda_mempool_destroy,
    .mempool_alloc = cp_cuda_mempool_alloc,
    .mempool_get_attr = cp_cuda_mempool_get_attr,
    .mempool_set_attr = cp_cuda_mempool_set_attr,
    .mempool_trim = cp_cuda_mempool_trim,
    .mempool_set_current = cp_cuda_mempool_set_current,
    .mempool_get_current = cp_cuda_mempool_get_current,

    .memcpy_async = cp_cuda_memcpy_async,
    .memset_async = cp_cuda_memset_async,

    .k_fill = cp_cuda_k_fill,
    .k_sqrt_index = cp_cuda_k_sqrt_index,
    .k_checksum = cp_cuda_k_checksum,
    .k_spin = cp_cuda_k_spin,
    .k_pattern = cp_cuda_k_pattern,
    .k_verify = cp_cuda_k_verify,
    /* run-time compiled kernels */
    .host_task = NULL,
    .stream_native = cp_cuda_stream_native,

    /* several devices and processes (multigpu) */
    .device_count = cp_cuda_device_count,
    .set_device = cp_cuda_set_device,
    .get_device = cp_cuda_get_device,
    .device_info_on = cp_cuda_device_info_on,
    .device_synchronize_on = cp_cuda_device_synchronize_on,
    .mem_get_info_on = cp_cuda_mem_get_info_on,
    .stream_create_on = cp_cuda_stream_create_on,
    .stream_device = cp_cuda_stream_device,
    .stream_legacy = cp_cuda_stream_legacy,
    .stream_wrap = cp_cuda_stream_wrap,
    .mem_alloc_on = cp_cuda_mem_alloc_on,
    .mem_free_on = cp_cuda_mem_free_on,
    .mempool_default_on = cp_cuda_mempool_default_on,
    .mempool_get_current_on = cp_cuda_mempool_get_current_on,
    .mempool_device = cp_cuda_mempool_device,
    .can_access_peer = cp_cuda_can_access_peer,
    .enable_peer_access = cp_cuda_enable_peer_access,
    .mempool_set_access = cp_cuda_mempool_set_access,
    .mempool_get_access = cp_cuda_mempool_get_access,
    .memcpy_peer_async = cp_cuda_memcpy_peer_async,
    .mempool_export = cp_cuda_mempool_export,
    .mempool_import = cp_cuda_mempool_import,
    .mempool_export_ptr = cp_cuda_mempool_export_ptr,
    .mempool_import_ptr = cp_cuda_mempool_import_ptr,
    .ipc_get_handle = cp_cuda_ipc_get_handle,
    .ipc_open_handle = cp_cuda_ipc_open_handle,
    .ipc_close_handle = cp_cuda_ipc_close_handle,

    /* virtual memory management (the vmm pool) */
    .vm_granularity = cp_cuda_vm_granularity,
    .vm_reserve = cp_cuda_vm_reserve,
    .vm_free_range = cp_cuda_vm_free_range,
    .vm_create = cp_cuda_vm_create,
    .vm_release = cp_cuda_vm_release,
    .vm_map = cp_cuda_vm_map,
    .vm_unmap = cp_cuda_vm_unmap,
    .vm_set_access = cp_cuda_vm_set_access,
    /* ---- device-side (in-kernel) allocation pools ---- */
    .dp_create = cp_cuda_devpool_create,
    .dp_destroy = cp_cuda_devpool_destroy,
    .dp_state = cp_cuda_dp_state,
    .dp_launch = cp_cuda_devpool_launch,
    .dp_finish = cp_cuda_devpool_finish,
    .dp_reset = cp_cuda_devpool_reset,
    .dp_stats = cp_cuda_devpool_stats,
};
