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
 * A plugin may instead be created and destroyed on the host, as allocators
 * that set themselves up with host code do (Gallatin, Ouroboros, the
 * managers of Winter et al.'s survey: bench/peers/).  It then defines,
 * inside #if CUPOLA_PLUGIN_HOST_PART (cupola defines it to 1 where host code
 * is compiled, and 0 elsewhere):
 *
 *   CUPOLA_PLUGIN_HOST int cupola_plugin_create(unsigned long long capacity,
 *                                               void **device_state,
 *                                               void **host_handle);
 *       Sets up an allocator of `capacity` bytes (the pool's capacity,
 *       handed to the peer, which takes its own memory), returns 0 and
 *       stores what the device functions need (a device pointer, reached
 *       there as cupola_pool_peer(pool)) and what destroy needs; nonzero
 *       when it cannot (out of memory: the pool is not made).
 *   CUPOLA_PLUGIN_HOST void cupola_plugin_destroy(void *device_state,
 *                                                  void *host_handle);
 *       Gives everything back (the device is idle).
 *
 * cupola calls create when the pool is made and destroy when it is closed;
 * dp:reset destroys and creates again (after the reset's stream is idle),
 * then runs cupola_plugin_init's grid as for any plugin.  The pool's own
 * bytes (cupola_pool_base) are then 256 for the plugin's use and
 * cupola_pool_capacity is the capacity handed to the peer.  dp:run is
 * refused (its claim map covers only cupola's bytes): the survey
 * (cupola.survey) measures such a pool.  On the CUDA backend the host part
 * is built by nvcc into a shared object of its own (with the CUDA runtime),
 * so it shares no __device__ variable with the kernels: keep the device
 * state behind the pointer.  On the host backend it is the module's own
 * code ("device" memory is host memory there).
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

#ifndef CUPOLA_PLUGIN_HOST_PART
#define CUPOLA_PLUGIN_HOST_PART 0
#endif

/* A host function cupola finds by name in the plugin's code. */
#define CUPOLA_PLUGIN_HOST extern "C" __attribute__((visibility("default")))

#include "cupola/device.h"

#endif /* CUPOLA_PLUGIN_H */
