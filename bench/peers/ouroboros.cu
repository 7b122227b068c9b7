/*
 * bench/peers/ouroboros.cu: Ouroboros (Winter, Mlakar, Parger, Steinberger,
 * ICS 2020, github.com/GPUPeople/Ouroboros) as a cupola plugin created on
 * the host (cupola/plugin.h), from the user's own checkout:
 *   cupola.device_pool { kind = "plugin", path = "bench/peers/ouroboros.cu",
 *       include = { "<checkout>/include" }, compiler = "nvcc", capacity = "8GiB" }
 * The page variant by default; options = { "-DOURO_CHUNKS" } gives the chunk
 * variant.
 *
 * The mapping, exactly:
 *  - create: (out of memory when the capacity cannot hold Ouroboros's own
 *    queues and two chunks) a host object of Ouroboros's OuroPQ (pages) or
 *    OuroCQ (chunks) type, as its InstanceDefinitions.cuh defines them (standard
 *    queues, its Parameters.h: 8 KiB chunks, 10 queues from 16 B), and its
 *    initialize(capacity); the pool's peer is its getDeviceMemoryManager().
 *    These are the types GPUMemManSurvey measured as Ouroboros-P and -C.
 *  - alloc(bytes) is the manager's malloc(bytes), free(ptr) its free(ptr):
 *    requests above its largest page (8 KiB) go to CUDA's in-kernel malloc,
 *    as Ouroboros itself does, and are freed there.
 *  - destroy deletes the host object (which frees its memory).
 */
#include <cupola/plugin.h>
/* What Ouroboros's headers need and do not include or no longer find in
 * CUDA 13 (fixed here, the checkout untouched): <iostream> for its
 * statistics printer (Statistics.h uses std::cout without including it),
 * and cudaDeviceProp's clockRate, which CUDA 13 removed: the printer, never
 * called here, reads another int field of the same struct instead.  The
 * device code needs --expt-relaxed-constexpr (a constexpr host function in a
 * static_assert of a device function), which cupola passes to nvcc. */
#include <cuda_runtime.h>
#include <iostream>
#define clockRate memoryBusWidth
#include <device/Ouroboros_impl.cuh>
#include <device/MemoryInitialization.cuh>
#include <InstanceDefinitions.cuh>
#undef clockRate

#ifdef OURO_CHUNKS
using cupola_ouro = OuroCQ;
#else
using cupola_ouro = OuroPQ;
#endif

#if CUPOLA_PLUGIN_HOST_PART
CUPOLA_PLUGIN_HOST int cupola_plugin_create(unsigned long long capacity, void **device_state,
                                            void **host_handle)
{
    cupola_ouro *m = new cupola_ouro();
    /* Ouroboros carves its queues (OuroPQ: 10 x 8 Mi page entries, some 320
     * MiB) out of the capacity before any chunk and does not check that
     * they fit (the difference underflows): a capacity that cannot hold
     * them and two chunks is out of memory here */
    size_t need = m->totalMemoryManagerSize() + cupola_ouro::size_() + 2 * cupola_ouro::ChunkBase::size();
    if (capacity <= need) {
        delete m;
        return 2;
    }
    m->initialize(capacity);
    if (cudaDeviceSynchronize() != cudaSuccess || !m->getDeviceMemoryManager()) {
        delete m;
        return 1;
    }
    *device_state = m->getDeviceMemoryManager();
    *host_handle = m;
    return 0;
}

CUPOLA_PLUGIN_HOST void cupola_plugin_destroy(void *device_state, void *host_handle)
{
    (void)device_state;
    delete (cupola_ouro *)host_handle;
    cudaDeviceSynchronize();
}
#endif

__device__ void cupola_plugin_init(cupola_device_pool *pool, unsigned long long thread,
                                   unsigned long long threads)
{
    /* initialize made it ready */
    (void)pool;
    (void)thread;
    (void)threads;
}

__device__ void *cupola_plugin_alloc(cupola_device_pool *pool, unsigned long long bytes)
{
    cupola_ouro *m = (cupola_ouro *)cupola_pool_peer(pool);
    return m ? m->malloc((size_t)bytes) : nullptr;
}

__device__ void cupola_plugin_free(cupola_device_pool *pool, void *ptr)
{
    ((cupola_ouro *)cupola_pool_peer(pool))->free(ptr);
}
