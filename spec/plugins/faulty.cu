/*
 * spec/plugins/faulty.cu: a bump allocator that faults on purpose, for
 * spec/peers_drive_spec.lua (bench/device_peers.lua's driver): a request of
 * exactly 1024 bytes writes to address 16 (an illegal address), one of
 * exactly 4096 bytes never returns; every other request takes the next
 * bytes of the pool (nothing is freed).
 */
#include <cupola/plugin.h>

__device__ void cupola_plugin_init(cupola_device_pool *pool, unsigned long long thread,
                                   unsigned long long threads)
{
    if (thread == 0)
        *(unsigned long long *)cupola_pool_base(pool) = 0;
    (void)threads;
}

__device__ void *cupola_plugin_alloc(cupola_device_pool *pool, unsigned long long bytes)
{
    unsigned char *base = cupola_pool_base(pool);
    unsigned long long off;
    if (bytes == 1024) {
        volatile int *wild = (volatile int *)16;
        *wild = 1;
    }
    if (bytes == 4096) {
        volatile int *spin = (volatile int *)base;
        while (spin[2] == 0)
            ;
    }
    off = atomicAdd((unsigned long long *)base, (bytes + 15ull) & ~15ull);
    return off + bytes + 256 <= cupola_pool_capacity(pool) ? base + 256 + off : 0;
}

__device__ void cupola_plugin_free(cupola_device_pool *pool, void *ptr)
{
    (void)pool;
    (void)ptr;
}
