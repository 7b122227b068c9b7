/*
 * host_impl.h: what the files of the host backend share; internal to
 * backend/, never included by the binding.
 *
 * The backend (its policy and its table in host.c) is split by concern:
 *   host_sched.c    the scheduler: work items, the streams' registry and
 *                   workers, enqueueing, the drain at exit
 *   host_device.c   the emulated devices: count, current one, description,
 *                   synchronization, memory figures, peers, their pools
 *   host_stream.c   streams and events
 *   host_memory.c   raw memory (mem_alloc), registered by address
 *   host_ipc.c      the legacy IPC of mem_alloc memory
 *   host_kernels.c  copies, memsets, built-in kernels, host tasks
 *   host_vmm.c      virtual memory management
 * Below the scheduler, with no access to what is declared here: the
 * emulated native pools (host_mempool*.c, host_mempool.h), the devices'
 * memory accounts (host_account.c) and the device pools (host_devpool.c);
 * host.c hands them what they need of the streams as tables.
 *
 * Every function named *_locked expects G.mu held.
 */
#ifndef CUPOLA_HOST_IMPL_H
#define CUPOLA_HOST_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "backend.h"
#include "host_account.h"
#include "host_mempool.h"
#include "ptrmap.h"

#define HOST_ALIGN 256u
/* CUDA's range on current GPUs (lower is higher priority), so scripts that
 * set priorities run unchanged; the host ignores them. */
#define HOST_PRIO_LEAST 0
#define HOST_PRIO_GREATEST (-5)

typedef struct hdep {
    uint64_t sid, ticket;
} hdep;

typedef struct hwork hwork;
struct hwork {
    hwork *next;
    void (*run)(hwork *w);         /* the work itself, run without the lock */
    void (*done_locked)(hwork *w); /* bookkeeping under the lock, before completion */
    uint64_t ticket;
    /* 32-bit counts keep the item at 120 bytes, within malloc's 128-byte
     * chunks: the flag beside them would otherwise cost every item a larger
     * chunk (items are allocated and freed at the rate of the work). */
    uint32_t ndeps, capdeps;
    int always_run;                /* runs even on a stream in error (a host task, which
                                      then only releases its data) */
    hdep inline_deps[2];
    hdep *deps;
    union {
        struct { void *dst; const void *src; size_t n; } copy;
        struct { void *dst; int byte; size_t n; } set;
        struct { void *p; size_t count; cp_dtype t; cp_scalar v; } fill;
        struct { float *p; size_t count; } sqrt;
        struct { const void *p; size_t bytes; cp_dtype t; cp_scalar *out; } sum;
        struct { uint64_t us; } spin;
        struct { void *p; size_t bytes; uint64_t seed; uint64_t *bad; } pat;
        struct { cp_event *e; uint64_t gen; } mark;
        struct { int (*fn)(void *, char *, size_t); void *data; } task;
        struct { void (*fn)(void *); void *arg; } call; /* device pools (host_devpool.c) */
    } u;
};

struct cp_stream {
    uint64_t id; /* 0 for the legacy stream */
    int device;  /* -1 for the legacy stream: whichever is current */
    int blocking;
    int legacy;
    hwork *head, *tail;
    uint64_t enqueued, completed;
    pthread_t thread;
    pthread_cond_t work_cv; /* signalled when an item is queued or the worker must exit */
    int destroyed;          /* the owner gave it up: exit when drained, become a zombie */
    int stop;               /* process shutdown: exit when drained, stay registered */
    int joined;             /* worker joined at shutdown; only the struct remains */
    cp_stream *next, *prev; /* registry (or zombie list through next) */
    hdep *known;            /* per other stream: highest ticket this one has waited for */
    size_t nknown, capknown;
    /* A user kernel faulted on this stream (host_task returned 2): like a
     * CUDA context after a fault, the stream stays in error.  Set by its
     * worker under G.mu; read by the worker without it. */
    int fault_set;
    int fault_told; /* a device synchronization has reported it */
    char fault[512];
};

struct cp_event {
    int timing;
    int recorded;
    uint64_t sid, ticket; /* the most recent record */
    uint64_t gen;         /* bumped by each record; a marker of an older one stores nothing */
    struct timespec at;   /* when the marker of generation gen ran */
    int refs;             /* the owner and each pending marker */
};

typedef struct host_sched_state {
    pthread_mutex_t mu;
    pthread_cond_t done;   /* broadcast when any item completes or a worker exits */
    cp_stream *streams;    /* every stream whose worker has not exited, legacy included */
    cp_stream *zombies;    /* destroyed streams whose worker exited, waiting to be joined */
    cp_stream legacy;
    int legacy_started;
    int nworkers;
    int used;     /* any stream was ever started: the destructor has work */
    int kerr_set; /* a host task (user kernel) failed: the next sync reports it */
    char kerr[512];
    int shutdown; /* the destructor ran: no new workers */
    /* The registry by id (key id + 1), so that finding a stream
     * (every event query and synchronization does) does not walk every
     * stream: a replay of a trace of 20,000 streams spent a third of its
     * loop in that walk.  byid_ok is 0 until the map exists and for good
     * once an insertion failed (out of memory): the walk is then used. */
    cp_ptrmap byid;
    int byid_ok, byid_failed;
    /* Registered blocking streams other than the legacy one: work on the
     * legacy stream looks for them only when there are some (it walked
     * every stream for each item). */
    int nblocking;
    /* fork(): workers between taking an item and retiring it (running),
     * whether a fork is under way (no worker takes an item then), and
     * workers still starting, so that the fork happens with every worker
     * and kernel thread idle, holding no lock of anyone's (host_sched.c,
     * fork_prepare). */
    int running;
    int forking;
    int starting; /* workers created that have not yet taken mu once */
} host_sched_state;

/* What mem_alloc handed out: the mapping's length, its device and kind, and
 * the memfd behind it once exported (legacy IPC), or memory mapped from
 * another process (ipc_open_handle). */
typedef struct hmem {
    size_t len;
    int dev;
    cp_memkind kind;
    int fd;       /* -1 until exported */
    int imported; /* ipc_open_handle: not charged, unmapped by ipc_close_handle */
    uint64_t uid; /* names the export */
} hmem;

/* The scheduler's state (host_sched.c): G, as Lua calls its global state.
 * G.mu protects every stream, event and pool. */
extern host_sched_state cp_host_g;
#define G cp_host_g

/* The stream whose worker the calling thread is (NULL elsewhere). */
cp_stream *cp_host_worker_stream(void);
/* ---- host_sched.c ---- */
cp_status cp_host_fault_error_locked(const cp_stream *s);
void cp_host_sched_lock(void);
void cp_host_sched_unlock(void);
cp_status cp_host_take_kernel_error_locked(void);
void cp_host_work_free(hwork *w);
int cp_host_work_add_dep(hwork *w, uint64_t sid, uint64_t ticket);
cp_stream *cp_host_find_locked(uint64_t sid);
void cp_host_registry_add_locked(cp_stream *s);
void cp_host_registry_remove_locked(cp_stream *s);
int cp_host_sched_done_locked(uint64_t sid, uint64_t ticket);
void cp_host_sched_wait_done_locked(uint64_t sid, uint64_t ticket);
int cp_host_idle_locked(const cp_stream *s);
cp_status cp_host_start_worker_locked(cp_stream *s);
void cp_host_stream_free(cp_stream *s);
void cp_host_reap_zombies(void);
cp_stream *cp_host_resolve_locked(cp_stream *s);
cp_status cp_host_enqueue_locked(cp_stream *s, hwork *w, uint64_t *ticket);
cp_status cp_host_enqueue(cp_stream *s, hwork *w, uint64_t *sid, uint64_t *ticket);
cp_status cp_host_enqueue_and_wait(cp_stream *s, hwork *w);
hwork *cp_host_work_or_oom(void (*run)(hwork *));
void cp_host_known_note_locked(cp_stream *s, uint64_t sid, uint64_t ticket);
uint64_t cp_host_sched_known_locked(cp_stream *s, uint64_t sid);
cp_status cp_host_sched_enqueue_wait_locked(cp_stream *s, uint64_t sid, uint64_t ticket);
cp_status cp_host_sched_enqueue_mark_locked(cp_stream *s, uint64_t *sid, uint64_t *ticket);
int cp_host_sched_too_big(size_t bytes);

/* ---- host_device.c ---- */
int cp_host_device_count(void);
cp_status cp_host_check_device(int dev);
cp_status cp_host_set_device(int dev);
int cp_host_get_device(void);
int cp_host_stream_device(const cp_stream *s);
cp_stream *cp_host_stream_legacy(int dev);
cp_status cp_host_device_info_on(int dev, cp_device_info *out);
cp_status cp_host_device_info(cp_device_info *out);
cp_status cp_host_device_synchronize(void);
/* Waits for every stream.  report: return (and consume) a pending kernel
 * error and each stream's fault not yet reported; 0 for the waits cupola
 * makes on its own (mem_alloc, mem_free, IPC), which must leave them for the
 * user's next synchronization. */
cp_status cp_host_device_wait(int report);
cp_status cp_host_mem_get_info_on(int dev, size_t *free_bytes, size_t *total_bytes);
cp_status cp_host_mem_get_info(size_t *free_bytes, size_t *total_bytes);
cp_status cp_host_device_synchronize_on(int dev);
cp_status cp_host_can_access_peer(int dev, int peer, int *yes);
cp_status cp_host_enable_peer_access(int dev, int peer);
int cp_host_mempool_device(const cp_mempool *p);
cp_status cp_host_mempool_default_on(int dev, cp_mempool **out);
cp_status cp_host_mempool_get_current_on(int dev, cp_mempool **out);
cp_status cp_host_mempool_create(cp_mempool **out, const cp_mempool_props *props);
cp_status cp_host_mempool_import(int fd, int dev, cp_mempool **out);

/* ---- host_stream.c ---- */
cp_status cp_host_stream_create_on(cp_stream **out, int dev, int priority, int blocking);
cp_status cp_host_stream_create(cp_stream **out, int priority, int blocking);
cp_status cp_host_stream_wrap(cp_stream **out, void *native, int dev);
cp_status cp_host_stream_destroy(cp_stream *s);
cp_status cp_host_stream_synchronize(cp_stream *s);
cp_status cp_host_stream_query(cp_stream *s, int *idle);
cp_status cp_host_stream_wait_event(cp_stream *s, cp_event *e);
uint64_t cp_host_stream_id(const cp_stream *s);
cp_status cp_host_event_create(cp_event **out, int timing);
cp_status cp_host_event_destroy(cp_event *e);
cp_status cp_host_event_record(cp_event *e, cp_stream *s);
cp_status cp_host_event_synchronize(cp_event *e);
cp_status cp_host_event_query(cp_event *e, int *done);
cp_status cp_host_event_elapsed(cp_event *start, cp_event *end, float *ms);

/* ---- host_memory.c ---- */
/* mem_alloc's registry: the lock around its lookups that must stay atomic
 * with what follows them (an export), and the lookup under it. */
void cp_host_mem_lock(void);
void cp_host_mem_unlock(void);
hmem *cp_host_mem_get_locked(const void *p);
int cp_host_mem_register(void *p, hmem *m);
hmem *cp_host_mem_lookup(const void *p, int remove);
cp_status cp_host_mem_alloc_on(int dev, void **out, size_t bytes, cp_memkind kind);
cp_status cp_host_mem_alloc(void **out, size_t bytes, cp_memkind kind);
cp_status cp_host_mem_free(void *p, cp_memkind kind);
cp_status cp_host_mem_free_on(int dev, void *p, cp_memkind kind);

/* ---- host_ipc.c ---- */
cp_status cp_host_ipc_get_handle(void *ptr, size_t bytes, cp_ipc_data *out, int *fd);
cp_status cp_host_ipc_open_handle(int dev, const cp_ipc_data *data, int fd, size_t bytes,
                                  void **out);
cp_status cp_host_ipc_close_handle(void *ptr, size_t bytes);

/* ---- host_kernels.c ---- */
cp_status cp_host_memcpy_async(void *dst, const void *src, size_t bytes, cp_stream *s);
cp_status cp_host_memset_async(void *dst, int byte, size_t bytes, cp_stream *s);
cp_status cp_host_k_fill(void *p, size_t count, cp_dtype t, cp_scalar v, const cp_shape *sh,
                         cp_stream *s);
cp_status cp_host_k_sqrt_index(float *p, size_t count, const cp_shape *sh, cp_stream *s);
cp_status cp_host_k_checksum(const void *p, size_t bytes, cp_dtype t, const cp_shape *sh,
                             cp_stream *s, cp_scalar *out);
cp_status cp_host_k_spin(uint64_t microseconds, cp_stream *s);
cp_status cp_host_k_pattern(void *p, size_t bytes, uint64_t seed, cp_stream *s);
cp_status cp_host_k_verify(const void *p, size_t bytes, uint64_t seed, cp_stream *s, uint64_t *bad);
cp_status cp_host_task(cp_stream *s, int (*fn)(void *, char *, size_t), const void *data,
                       size_t len);
cp_status cp_host_memcpy_peer_async(void *dst, int dst_dev, const void *src, int src_dev,
                                    size_t bytes, cp_stream *s);

/* ---- host_vmm.c ---- */
cp_status cp_host_vm_granularity(int dev, size_t *out);
cp_status cp_host_vm_reserve(int dev, void **out, size_t bytes);
cp_status cp_host_vm_free_range(int dev, void *p, size_t bytes);
cp_status cp_host_vm_create(int dev, uint64_t *handle, size_t bytes);
cp_status cp_host_vm_release(int dev, uint64_t handle, size_t bytes);
cp_status cp_host_vm_map(int dev, void *p, size_t bytes, uint64_t handle);
cp_status cp_host_vm_unmap(int dev, void *p, size_t bytes);
cp_status cp_host_vm_set_access(int dev, void *p, size_t bytes);

#endif /* CUPOLA_HOST_IMPL_H */
