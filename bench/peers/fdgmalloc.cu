/*
 * bench/peers/fdgmalloc.cu: FDGMalloc (Widmer et al., 2013), in the copy
 * GPUMemManSurvey (github.com/GPUPeople/GPUMemManSurvey, frameworks/fdg)
 * measured, as a cupola plugin from the user's checkout of the survey:
 *   cupola.device_pool { kind = "plugin", path = "bench/peers/fdgmalloc.cu",
 *       include = { "<survey>/frameworks/fdg" }, compiler = "nvcc", capacity = "8GiB" }
 *
 * The mapping, exactly (the survey's own): alloc(bytes) starts the calling
 * warp's FDGMalloc handle (FDG::Warp::start(), superblocks from CUDA's
 * in-kernel malloc, whose heap cupola's "malloc" pool sizes) and allocates
 * from it; free does nothing (FDGMalloc frees a warp's memory only all at
 * once, which the survey did not call either).  Its memory is CUDA's heap:
 * the pool's capacity is not handed to it (there is no host part).
 */
#include <cupola/plugin.h>
#include <FDGMalloc_def.cuh>
#include <FDGMalloc_impl.cuh>

__device__ void cupola_plugin_init(cupola_device_pool *pool, unsigned long long thread,
                                   unsigned long long threads)
{
    (void)pool;
    (void)thread;
    (void)threads;
}

__device__ void *cupola_plugin_alloc(cupola_device_pool *pool, unsigned long long bytes)
{
    (void)pool;
    FDG::Warp *warp = FDG::Warp::start();
    return warp ? warp->alloc((size_t)bytes) : nullptr;
}

__device__ void cupola_plugin_free(cupola_device_pool *pool, void *ptr)
{
    (void)pool;
    (void)ptr;
}
