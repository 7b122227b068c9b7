/*
 * host_mempool.h: the seam between the host backend's streams (backend/host.c)
 * and its emulation of CUDA's stream-ordered memory pools (host_mempool*.c).
 *
 * Both halves share one lock, the host backend's global lock: a pool decides
 * whether a freed block may be reused by looking at stream tickets, and the
 * stream side must see pool state consistently when it releases memory at a
 * synchronization point.  Functions named *_locked expect that lock held.
 *
 * Stream positions are named by (sid, ticket): sid is the stream's
 * process-unique id (0 for the legacy default stream) and ticket the
 * 1-based index of an item enqueued on it; ticket 0 means "nothing", which
 * is always complete.  A stream that no longer exists has completed all its
 * tickets.
 *
 * Internal to the core; never included by the binding.
 */
#ifndef CUPOLA_HOST_POOL_H
#define CUPOLA_HOST_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- what the pools need of host.c's streams ----------------------------
 * host.c is the layer above: it owns the streams and the backend's table,
 * calls the pool functions below and hands its stream machinery down once,
 * through cp_host_pool_bind, so this file never calls back up. */
typedef struct cp_host_sched {
    void (*lock)(void);
    void (*unlock)(void);
    /* 1 when ticket of stream sid has completed (ran on its worker). */
    int (*done_locked)(uint64_t sid, uint64_t ticket);
    /* Blocks (releasing the lock meanwhile) until done_locked holds. */
    void (*wait_done_locked)(uint64_t sid, uint64_t ticket);
    /* The highest ticket of stream sid that work enqueued on s from now on
     * is known to follow, through stream_wait_event or inserted waits (0: none). */
    uint64_t (*known_locked)(cp_stream *s, uint64_t sid);
    /* Enqueues on s (NULL: legacy) an item that waits for (sid, ticket). */
    cp_status (*enqueue_wait_locked)(cp_stream *s, uint64_t sid, uint64_t ticket);
    /* Enqueues on s a no-op marker; returns the position it occupies. */
    cp_status (*enqueue_mark_locked)(cp_stream *s, uint64_t *sid, uint64_t *ticket);
    /* 1 when bytes exceed what the machine could ever back (RAM + swap): such
     * requests are refused as out of memory instead of trusting overcommit. */
    int (*too_big)(size_t bytes);
    /* The calling thread's current device, and a stream's (NULL: current). */
    int (*current_device)(void);
    int (*stream_device)(const cp_stream *s);
    /* A stream's process-unique id (0: the legacy stream, NULL). */
    uint64_t (*stream_id)(const cp_stream *s);
} cp_host_sched;

/* Called by host.c before any pool function (a constructor there). */
void cp_host_pool_bind(const cp_host_sched *sched);

/* ---- provided by host_mempool.c -------------------------------------------- */
cp_status cp_host_pool_default(cp_mempool **out);
cp_status cp_host_pool_create(cp_mempool **out, const cp_mempool_props *props);
cp_status cp_host_pool_destroy(cp_mempool *p);
cp_status cp_host_pool_alloc(cp_mempool *p, void **out, size_t bytes, cp_stream *s);
cp_status cp_host_pool_alloc_current(void **out, size_t bytes, cp_stream *s);
cp_status cp_host_pool_free(void *ptr, cp_stream *s);
cp_status cp_host_pool_get_attr(cp_mempool *p, cp_pool_attr a, uint64_t *v);
cp_status cp_host_pool_set_attr(cp_mempool *p, cp_pool_attr a, uint64_t v);
cp_status cp_host_pool_trim(cp_mempool *p, size_t keep_bytes);
cp_status cp_host_pool_set_current(cp_mempool *p);
cp_status cp_host_pool_get_current(cp_mempool **out);
/* ---- several devices and processes (multigpu) ---- */
cp_status cp_host_pool_default_on(int dev, cp_mempool **out);
cp_status cp_host_pool_get_current_on(int dev, cp_mempool **out);
int cp_host_pool_device(const cp_mempool *p);
cp_status cp_host_pool_set_access(cp_mempool *p, int dev, cp_access a);
cp_status cp_host_pool_get_access(cp_mempool *p, int dev, cp_access *a);
/* CP_ERR_INVALID when ptr starts a block of a pool that device dev may not
 * touch (write: needs read-write); any other pointer passes. */
cp_status cp_host_pool_check_access(const void *ptr, int dev, int write);
cp_status cp_host_pool_export(cp_mempool *p, int *fd);
cp_status cp_host_pool_import(int fd, int dev, cp_mempool **out);
cp_status cp_host_pool_export_ptr(void *ptr, cp_ipc_data *out);
cp_status cp_host_pool_import_ptr(cp_mempool *p, const cp_ipc_data *d, size_t bytes, void **out);

/* A synchronization point: every pool returns unused memory to the OS down
 * to its release threshold. */
void cp_host_pool_release_locked(void);
/* Process exit, after every worker has stopped: frees the default pool. */
void cp_host_pool_shutdown(void);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_HOST_POOL_H */
