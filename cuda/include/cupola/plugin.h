/*
 * cupola/plugin.h: your own in-kernel allocator as a cupola device pool
 * (cupola.device_pool{kind = "plugin", source = SRC or path = "mine.cu"}).
 *
 * A plugin's source includes this header and defines three device
 * functions, with these exact names and signatures:
 *
 *   __device__ void cupola_plugin_init(cupola_device_pool *pool,
 *                                      unsigned long long thread,
 *                                      unsigned long long threads);
 *       Called once by every thread of an init grid of `threads` threads
 *       (thread = 0 .. threads-1) when the pool is created and at each
 *       dp:reset, before any allocation.  The pool's memory is
 *       cupola_pool_base(pool) .. + cupola_pool_capacity(pool) (256-byte
 *       aligned, contents undefined); the allocator keeps everything it
 *       needs there, including its own metadata.
 *
 *   __device__ void *cupola_plugin_alloc(cupola_device_pool *pool,
 *                                        unsigned long long bytes);
 *       A block of at least `bytes` (>= 1) bytes inside the pool's memory,
 *       16-byte aligned and sharing no 16-byte granule with another live
 *       block, or NULL when it has none.  Called by any number of threads
 *       at once, from any kernel and stream.
 *
 *   __device__ void cupola_plugin_free(cupola_device_pool *pool, void *ptr);
 *       Gives back a block it returned (never NULL), from any thread.
 *
 * The same source is compiled into several modules (cupola's run and
 * verification kernels, the survey's, your own kernels): keep no state in
 * __device__ variables, only in the pool's memory.  It is compiled as a
 * user module is: NVRTC on the CUDA backend, the host's C++ compiler with
 * cupola's prelude on the host backend (the CUDA C subset of docs/API.md;
 * there a warp is one lane as far as the allocator headers go, while your
 * own warp intrinsics run on fibers).
 *
 * cupola checks a plugin as it checks its own pools: dp:run's claim map
 * (one bit per 16-byte granule of the pool: a block covering a granule of
 * another live block, or outside the pool, is an overlap), alignment, data
 * written by its owner intact until it is freed, and NULL when the pool is
 * exhausted (never a block that is not there); the survey
 * (cupola.survey) measures it beside cupola's pools and CUDA's malloc.
 *
 * In a kernel of your own: put the plugin's source before the kernel (so
 * that this header defines CUPOLA_PLUGIN before <cupola/device.h>), and
 * cupola_alloc / cupola_free on a plugin pool reach your allocator.
 */
#ifndef CUPOLA_PLUGIN_H
#define CUPOLA_PLUGIN_H

#ifndef CUPOLA_PLUGIN
#define CUPOLA_PLUGIN 1
#endif

#include "cupola/device.h"

#endif /* CUPOLA_PLUGIN_H */
