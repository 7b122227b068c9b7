/*
 * host_devpool.h: the host backend's device pools (host_devpool.c) and what
 * they need of its streams (host.c hands it down through
 * cp_host_devpool_bind, so this file never calls back up).
 *
 * Internal to the core; never included by the binding.
 */
#ifndef CUPOLA_HOST_DEVPOOL_H
#define CUPOLA_HOST_DEVPOOL_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cp_host_exec {
    /* Enqueues fn(arg) on s (NULL: the legacy stream) as one work item;
     * (*sid, *ticket) name its place. */
    cp_status (*enqueue_call)(cp_stream *s, void (*fn)(void *), void *arg, uint64_t *sid,
                              uint64_t *ticket);
    /* Blocks until (sid, ticket) has run. */
    void (*wait)(uint64_t sid, uint64_t ticket);
    cp_status (*device_synchronize)(void);
    /* 1 when bytes exceed what the machine could ever back (RAM + swap). */
    int (*too_big)(size_t bytes);
} cp_host_exec;

void cp_host_devpool_bind(const cp_host_exec *x);

cp_status cp_host_dp_create(cp_devpool **out, cp_dp_kind kind, size_t capacity);
cp_status cp_host_dp_destroy(cp_devpool *p);
void *cp_host_dp_state(cp_devpool *p);
cp_status cp_host_dp_launch(cp_devpool *p, const cp_dp_run_args *a, cp_stream *s,
                            cp_dp_run **out);
cp_status cp_host_dp_finish(cp_dp_run *r, cp_dp_run_result *out);
cp_status cp_host_dp_reset(cp_devpool *p, cp_stream *s);
cp_status cp_host_dp_stats(cp_devpool *p, cp_dp_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_HOST_DEVPOOL_H */
