/*
 * kernel/dp_plugin.h: device pools whose allocator is the user's own source
 * (cupola.device_pool{kind = "plugin"}; the contract is
 * cuda/include/cupola/plugin.h).
 *
 * The plugin's source is compiled as a user module is (module.h: NVRTC on
 * the CUDA backend, the host compiler and prelude on the host backend),
 * together with cupola's run and verification kernels
 * (cupola/dp_harness.cuh), so a plugin pool is run and checked by the same
 * bodies as cupola's own pools (cupola/dp_body.cuh).  The pool's memory is
 * laid out as a bump pool's (cuda/devpool_layout.h: state | claim map |
 * bytes) and comes from the backend's mem_alloc.
 *
 * Operations mirror the backends' dp_* (devpool.h); a run is launched
 * (enqueued on its stream) and finished (waited for) separately.
 *
 * This header compiles as C and C++.
 */
#ifndef CUPOLA_KERNEL_DP_PLUGIN_H
#define CUPOLA_KERNEL_DP_PLUGIN_H

#include "kernel/module.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cp_dplugin cp_dplugin;
typedef struct cp_dplugin_run cp_dplugin_run;

typedef struct cp_dplugin_desc {
    const char *name;                /* what compiler messages call the source */
    const char *source;              /* the plugin's CUDA C */
    size_t len;
    const char *const *options;      /* checked user options, NULL-terminated or NULL */
    const char *const *include_dirs; /* where cupola/plugin.h is */
    size_t capacity;                 /* bytes of pool memory, > 0 */
    uint64_t init_threads;           /* threads of the init grid, >= 1 */
    int nvcc;                        /* CUDA backend: compile with nvcc, not NVRTC */
} cp_dplugin_desc;

/* Compiles the plugin (or finds it in the cache), allocates and initializes
 * the pool.  A compile error is CP_ERR_INVALID with the compiler's whole
 * log in *log (malloc'd; the caller frees it in every case); memory that is
 * not there is CP_ERR_OOM; a fault in the plugin's init is the backend's
 * error for it. */
cp_status cp_dplugin_create(const cp_dplugin_desc *d, cp_dplugin **out, char **log);
/* Waits for the device, releases the memory and the kernels (NULL: nothing). */
cp_status cp_dplugin_destroy(cp_dplugin *p);
/* The device address of the pool's cupola_device_pool. */
void *cp_dplugin_state(cp_dplugin *p);

/* Whether the plugin is created on the host (it defines cupola_plugin_create). */
int cp_dplugin_hosted(const cp_dplugin *p);

/* children and hold_us are refused (CP_ERR_UNSUPPORTED), and so is any run
 * of a plugin created on the host (its blocks lie in its own memory, outside
 * the claim map). */
cp_status cp_dplugin_launch(cp_dplugin *p, const cp_dp_run_args *a, cp_stream *s,
                            cp_dplugin_run **out);
cp_status cp_dplugin_finish(cp_dplugin_run *r, cp_dp_run_result *out);
/* Runs the plugin's init again on s and clears the claim map. */
cp_status cp_dplugin_reset(cp_dplugin *p, cp_stream *s);
/* capacity and failed; used and peak are UINT64_MAX (cupola cannot know
 * what a plugin holds). */
cp_status cp_dplugin_stats(cp_dplugin *p, cp_dp_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_KERNEL_DP_PLUGIN_H */
