/*
 * backend/host.c: the device emulated on the CPU (cp_backend_host): its
 * policy, the operations table, and the wiring of its parts (host_impl.h
 * lists the files, one per concern).
 *
 * Every script, example and spec runs on a machine without a GPU with the
 * semantics of CUDA; the work is really asynchronous, timings are the host's.
 *
 * Policy, exactly:
 *  - Memory comes from the OS (posix_memalign, 256-byte aligned, sizes
 *    rounded up to 256).  Device, managed and pinned memory are all host
 *    memory.  A request larger than RAM + swap is refused with CP_ERR_OOM
 *    rather than trusted to overcommit.  mem_alloc and mem_free of any kind
 *    first synchronize the device, as cudaMalloc/cudaFree do implicitly (for
 *    mem_free that is also what keeps queued work off freed memory).
 *  - Streams: each stream is an in-order FIFO of work items run by its own
 *    worker thread.  Item k enqueued on a stream has ticket k; the stream's
 *    `completed` is the ticket of its last finished item.  An item may carry
 *    dependencies (sid, ticket) that its worker waits for before running it.
 *  - The legacy default stream (NULL) is a stream with its own worker and
 *    sid 0.  As in CUDA: an item enqueued on it depends on everything already
 *    enqueued on every blocking stream, and an item enqueued on a blocking
 *    stream depends on everything already enqueued on the legacy stream;
 *    non-blocking streams never wait for it.  Synchronizing or querying the
 *    legacy stream covers the blocking streams' work enqueued before the call.
 *    Dependencies are captured at enqueue time, so they never form a cycle.
 *  - stream_destroy returns at once; the queued work still runs, then the
 *    worker exits and is joined (and the stream freed) by the next
 *    stream_create, stream_destroy or device_synchronize, or at exit.
 *  - Events: record enqueues a marker; when the marker runs it stores the
 *    host's CLOCK_MONOTONIC time.  On a stream with nothing queued the
 *    marker (like any item with nothing to run and nothing to wait for)
 *    completes inside the record, so a query right after it is true, as on
 *    a GPU whose stream is idle, whatever the host's load (a replay's
 *    cross-stream reuse depends on that answer).  query/synchronize/stream_wait_event refer
 *    to the most recent record at the time of the call; an event never
 *    recorded is complete and waiting on it is a no-op; elapsed needs both
 *    events created with timing, recorded and complete.
 *  - Copies: memcpy_async enqueues the copy and waits for it, because the
 *    binding passes pageable memory (Lua strings), for which CUDA's copy is
 *    synchronous with the host; the copy is still ordered on the stream.
 *    memset_async is asynchronous.
 *  - Kernels run on the worker with the bodies of cuda/kernel_body.h; launch
 *    shapes are validated as CUDA would (block 1..1024, grid 1..2^31-1, 0 =
 *    choose) and otherwise ignored.  spin sleeps the worker.  Checksums sum
 *    in element order (integers: wrapping 64-bit, i32 sign-extended; floats:
 *    in double), so float checksums agree with the CUDA backend only up to
 *    rounding, since the GPU sums in another order.
 *  - Priorities: the range reported is CUDA's 0 (least) .. -5 (greatest);
 *    one outside it is CP_ERR_INVALID, one inside is accepted and ignored.
 *  - Synchronization points (device, stream and event synchronize) let the
 *    native pools (host_mempool.c) return memory above their release threshold.
 *  - Thread safety: one global mutex protects every stream, event and pool;
 *    workers hold it only to take and retire items, never while running one.
 *  - Process exit (or dlclose of the module): a destructor drains and joins
 *    every worker, so no thread runs the module's code once it is unmapped,
 *    and frees what the backend itself owns.
 *  - Several devices: CUPOLA_HOST_DEVICES=N (1..64, default 1; anything
 *    else counts as 1) emulated devices share the CPU and the workers.  Each
 *    has its own memory account (device memory of mem_alloc and the chunks of
 *    its pools; with N > 1 each device gets 1/N of the host's memory and
 *    refuses more as out of memory), its own default and current pool, and
 *    its streams.  The legacy stream is shared by all of them (CUDA has one
 *    per device; the emulation orders more, never less).  The current device
 *    is per thread, as in CUDA.  Every device can access every other one
 *    (can_access_peer is 1 for i != j); enabling is recorded.  Synchronizing
 *    one device waits for all of them.
 *  - A host task that returns 2 (a user kernel's hardware fault, see
 *    kernel/host_fault.h) leaves its stream in error, as a fault leaves a
 *    CUDA context: the stream's synchronizations and events recorded on it
 *    return the message, new work on it is refused with it, queued work is
 *    skipped (queued tasks are cancelled), and the first device
 *    synchronization after the fault returns it once.  Other streams live on.
 *  - Errors: a refusal that stands for a CUDA error (an invalid value,
 *    handle or device ordinal, an event not ready, a kernel's illegal
 *    address) carries the CUDA error name and text, as the CUDA backend's
 *    does, with the host's explanation after it (cp_cuda_error, backend.h).
 *    Misuse of the C interface (NULL arguments), out of memory and the
 *    host's own conditions (the process shutting down, OS failures) do not.
 *  - fork(): before the fork, the items running finish (at most 10 s) and
 *    no worker takes a new one; the scheduler's lock is held across it
 *    (pthread_atfork), so the child inherits no lock a worker or kernel
 *    thread held (host_sched.c); in the child every entry point fails at
 *    once (CP_GUARD, backend.h) and the exit destructors do nothing.
 *  - mem_alloc memory is mapped from the OS (mmap, whole pages), so that the
 *    legacy IPC path can later turn it into a shared file mapping at the same
 *    address (ipc_get_handle: the bytes are copied into a memfd which is
 *    mapped over them, MAP_FIXED); the fd then travels to another process.
 */
#include "host_impl.h"
#include "host_devpool.h"

/* The emulated mempools (host_mempool.c) sit below this file: they get the
 * stream machinery they need as a table, before any backend call can reach
 * them. */
__attribute__((constructor)) static void host_bind_pools(void)
{
    static const cp_host_sched sched = {
        .lock = cp_host_sched_lock,
        .unlock = cp_host_sched_unlock,
        .done_locked = cp_host_sched_done_locked,
        .wait_done_locked = cp_host_sched_wait_done_locked,
        .known_locked = cp_host_sched_known_locked,
        .enqueue_wait_locked = cp_host_sched_enqueue_wait_locked,
        .enqueue_mark_locked = cp_host_sched_enqueue_mark_locked,
        .too_big = cp_host_sched_too_big,
        .current_device = cp_host_get_device,
        .stream_device = cp_host_stream_device,
        .stream_id = cp_host_stream_id,
    };
    (void)cp_host_device_count(); /* the emulated devices exist before any pool */
    cp_host_pool_bind(&sched);
}

/* ---- device pools (host_devpool.c): work items that call a function ---- */

static void run_call(hwork *w)
{
    w->u.call.fn(w->u.call.arg);
}

static cp_status exec_enqueue_call(cp_stream *s, void (*fn)(void *), void *arg, uint64_t *sid,
                                   uint64_t *ticket)
{
    hwork *w = cp_host_work_or_oom(run_call);
    if (!w)
        return CP_ERR_OOM;
    w->u.call.fn = fn;
    w->u.call.arg = arg;
    return cp_host_enqueue(s, w, sid, ticket);
}

static void exec_wait(uint64_t sid, uint64_t ticket)
{
    pthread_mutex_lock(&G.mu);
    cp_host_sched_wait_done_locked(sid, ticket);
    pthread_mutex_unlock(&G.mu);
}

__attribute__((constructor)) static void host_bind_devpools(void)
{
    static const cp_host_exec exec = {
        .enqueue_call = exec_enqueue_call,
        .wait = exec_wait,
        .device_synchronize = cp_host_device_synchronize,
        .too_big = cp_host_sched_too_big,
    };
    cp_host_devpool_bind(&exec);
}

const cp_backend cp_backend_host = {
    .name = "host",
    .device_info = cp_host_device_info,
    .device_synchronize = cp_host_device_synchronize,
    .mem_get_info = cp_host_mem_get_info,
    .stream_create = cp_host_stream_create,
    .stream_destroy = cp_host_stream_destroy,
    .stream_synchronize = cp_host_stream_synchronize,
    .stream_query = cp_host_stream_query,
    .stream_wait_event = cp_host_stream_wait_event,
    .stream_id = cp_host_stream_id,
    .event_create = cp_host_event_create,
    .event_destroy = cp_host_event_destroy,
    .event_record = cp_host_event_record,
    .event_synchronize = cp_host_event_synchronize,
    .event_query = cp_host_event_query,
    .event_elapsed = cp_host_event_elapsed,
    .mem_alloc = cp_host_mem_alloc,
    .mem_free = cp_host_mem_free,
    .mem_alloc_async = cp_host_pool_alloc_current,
    .mem_free_async = cp_host_pool_free,
    .mempool_default = cp_host_pool_default,
    .mempool_create = cp_host_mempool_create,
    .mempool_destroy = cp_host_pool_destroy,
    .mempool_alloc = cp_host_pool_alloc,
    .mempool_get_attr = cp_host_pool_get_attr,
    .mempool_set_attr = cp_host_pool_set_attr,
    .mempool_trim = cp_host_pool_trim,
    .mempool_set_current = cp_host_pool_set_current,
    .mempool_get_current = cp_host_pool_get_current,
    .memcpy_async = cp_host_memcpy_async,
    .memset_async = cp_host_memset_async,
    .k_fill = cp_host_k_fill,
    .k_sqrt_index = cp_host_k_sqrt_index,
    .k_checksum = cp_host_k_checksum,
    .k_spin = cp_host_k_spin,
    .k_pattern = cp_host_k_pattern,
    .k_verify = cp_host_k_verify,
    /* run-time compiled kernels */
    .host_task = cp_host_task,
    .stream_native = NULL,

    /* several devices and processes (multigpu) */
    .device_count = cp_host_device_count,
    .set_device = cp_host_set_device,
    .get_device = cp_host_get_device,
    .device_info_on = cp_host_device_info_on,
    .device_synchronize_on = cp_host_device_synchronize_on,
    .mem_get_info_on = cp_host_mem_get_info_on,
    .stream_create_on = cp_host_stream_create_on,
    .stream_device = cp_host_stream_device,
    .stream_legacy = cp_host_stream_legacy,
    .stream_wrap = cp_host_stream_wrap,
    .mem_alloc_on = cp_host_mem_alloc_on,
    .mem_free_on = cp_host_mem_free_on,
    .mempool_default_on = cp_host_mempool_default_on,
    .mempool_get_current_on = cp_host_mempool_get_current_on,
    .mempool_device = cp_host_mempool_device,
    .can_access_peer = cp_host_can_access_peer,
    .enable_peer_access = cp_host_enable_peer_access,
    .mempool_set_access = cp_host_pool_set_access,
    .mempool_get_access = cp_host_pool_get_access,
    .memcpy_peer_async = cp_host_memcpy_peer_async,
    .mempool_export = cp_host_pool_export,
    .mempool_import = cp_host_mempool_import,
    .mempool_export_ptr = cp_host_pool_export_ptr,
    .mempool_import_ptr = cp_host_pool_import_ptr,
    .ipc_get_handle = cp_host_ipc_get_handle,
    .ipc_open_handle = cp_host_ipc_open_handle,
    .ipc_close_handle = cp_host_ipc_close_handle,
    /* virtual memory management (the vmm pool) */
    .vm_granularity = cp_host_vm_granularity,
    .vm_reserve = cp_host_vm_reserve,
    .vm_free_range = cp_host_vm_free_range,
    .vm_create = cp_host_vm_create,
    .vm_release = cp_host_vm_release,
    .vm_map = cp_host_vm_map,
    .vm_unmap = cp_host_vm_unmap,
    .vm_set_access = cp_host_vm_set_access,
    /* ---- device-side (in-kernel) allocation pools ---- */
    .dp_create = cp_host_dp_create,
    .dp_destroy = cp_host_dp_destroy,
    .dp_state = cp_host_dp_state,
    .dp_launch = cp_host_dp_launch,
    .dp_finish = cp_host_dp_finish,
    .dp_reset = cp_host_dp_reset,
    .dp_stats = cp_host_dp_stats,
};
