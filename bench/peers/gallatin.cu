/*
 * bench/peers/gallatin.cu: Gallatin (McCoy and Pandey, PPoPP 2024,
 * github.com/saltsystemslab/gallatin) as a cupola plugin created on the host
 * (cupola/plugin.h), from the user's own checkout:
 *   cupola.device_pool { kind = "plugin", path = "bench/peers/gallatin.cu",
 *       include = { "<checkout>/include" }, compiler = "nvcc", capacity = "8GiB" }
 *
 * The mapping, exactly:
 *  - create (out of memory below four segments, 64 MiB): Gallatin<16 MiB segments, 16 B smallest, 4 KiB largest slab
 *    size> (the configuration of Gallatin's own global allocator and
 *    benchmarks) over the pool's capacity, made by its host-side
 *    generate_on_device (seed 42, as its tests use, no printing, no calloc
 *    support); the device pointer it returns is the pool's peer.  Nothing of
 *    Gallatin's global_allocator.cuh (its __device__ pointer) is used.
 *  - alloc(bytes) is Gallatin's malloc(bytes) and free(ptr) its free(ptr)
 *    on that pointer; Gallatin returns NULL when it has no memory.
 *  - destroy: Gallatin's free_on_device.
 */
#include <cupola/plugin.h>
#include <gallatin/allocators/gallatin.cuh>

using cupola_gallatin = gallatin::allocators::Gallatin<16ULL * 1024 * 1024, 16ULL, 4096ULL>;

#if CUPOLA_PLUGIN_HOST_PART
CUPOLA_PLUGIN_HOST int cupola_plugin_create(unsigned long long capacity, void **device_state,
                                            void **host_handle)
{
    /* Gallatin hands out whole 16 MiB segments: a pool needs a few */
    if (capacity < 4ull * 16 * 1024 * 1024)
        return 2;
    cupola_gallatin *a = cupola_gallatin::generate_on_device(capacity, 42, false, false);
    if (!a || cudaDeviceSynchronize() != cudaSuccess)
        return 1;
    *device_state = a;
    *host_handle = a;
    return 0;
}

CUPOLA_PLUGIN_HOST void cupola_plugin_destroy(void *device_state, void *host_handle)
{
    (void)host_handle;
    cupola_gallatin::free_on_device((cupola_gallatin *)device_state);
    cudaDeviceSynchronize();
}
#endif

__device__ void cupola_plugin_init(cupola_device_pool *pool, unsigned long long thread,
                                   unsigned long long threads)
{
    /* generate_on_device made it ready */
    (void)pool;
    (void)thread;
    (void)threads;
}

__device__ void *cupola_plugin_alloc(cupola_device_pool *pool, unsigned long long bytes)
{
    cupola_gallatin *a = (cupola_gallatin *)cupola_pool_peer(pool);
    return a ? a->malloc(bytes) : nullptr;
}

__device__ void cupola_plugin_free(cupola_device_pool *pool, void *ptr)
{
    ((cupola_gallatin *)cupola_pool_peer(pool))->free(ptr);
}
