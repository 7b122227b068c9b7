/*
 * bench/peers/gallatin.cu: Gallatin (McCoy and Pandey, PPoPP 2024,
 * github.com/saltsystemslab/gallatin) as a cupola plugin created on the host
 * (cupola/plugin.h), from the user's own checkout:
 *   cupola.device_pool { kind = "plugin", path = "bench/peers/gallatin.cu",
 *       include = { "<checkout>/include" }, compiler = "nvcc", capacity = "8GiB" }
 *
 * The mapping, exactly:
 *  - create (out of memory below what Gallatin pins when it boots, and a
 *    few segments more: its boot takes, for each of its 9 trees t, max(128
 *    >> t, 4) blocks of 4096 slices of 16 << t bytes, 13 segments of 16 MiB
 *    in all, and traps when they are not there): Gallatin<16 MiB segments,
 *    16 B smallest, 4 KiB largest slab size> (the configuration of
 *    Gallatin's own global allocator and benchmarks) over the pool's
 *    capacity, made by its host-side
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
    /* the segments Gallatin's boot pins (boot_shared_block_container:
     * tree t boots max(128 >> t, 4) blocks of 4096 slices of 16 << t bytes,
     * each tree in segments of its own), and 4 more to allocate from */
    unsigned long long seg = 16ull * 1024 * 1024, need = 4;
    for (int t = 0; t < 9; t++) {
        unsigned long long blocks = (128ull >> t) > 4 ? (128ull >> t) : 4, bytes = blocks * 4096ull * (16ull << t);
        need += (bytes + seg - 1) / seg;
    }
    if (capacity < need * seg)
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
