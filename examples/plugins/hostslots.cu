/*
 * examples/plugins/hostslots.cu: a plugin created and destroyed on the host
 * (cupola/plugin.h's cupola_plugin_create / cupola_plugin_destroy), the way
 * the adapters of bench/peers/ bring in allocators that set themselves up
 * with host code.  Small on purpose: it shows the interface, and the specs
 * run it on the host backend (spec/device_plugin_spec.lua, spec/survey_spec.lua):
 *   cupola.device_pool { kind = "plugin", path = "examples/plugins/hostslots.cu",
 *                        capacity = "64MiB" }
 *
 * Policy, exactly:
 *  - create takes its own memory (cudaMalloc on the GPU; on the host
 *    backend, where device memory is the process's, calloc): a header, one
 *    bit per slot, and capacity / HS_SLOT slots of HS_SLOT bytes (1 KiB
 *    unless -DHS_SLOT=<power of two >= 16>).  The device functions reach the
 *    header through cupola_pool_peer(pool).
 *  - alloc: a request of more than HS_SLOT bytes gets NULL.  Otherwise the
 *    thread starts at a word of the bitmap picked by a hash of its grid
 *    index, and walks the words from there (wrapping once), claiming the
 *    lowest clear bit of a word with atomicOr; NULL when every word was
 *    seen full.
 *  - free clears the block's bit with atomicAnd.
 *  - Slots are HS_SLOT-aligned from a 256-byte aligned start: blocks are
 *    16-byte aligned and never share a granule.
 *  - destroy frees what create took.
 */
#include <cupola/plugin.h>

#ifndef HS_SLOT
#define HS_SLOT 1024ull
#endif

struct hs_state {
    unsigned long long slots;  /* slots in the pool */
    unsigned long long words;  /* 32-bit words of the bitmap */
    unsigned int *bits;        /* bit set = slot in use */
    unsigned char *base;       /* slot 0 */
};

#if CUPOLA_PLUGIN_HOST_PART
#if !CUPOLA_ON_HOST
#include <cuda_runtime.h>
#else
#include <stdlib.h>
#endif

CUPOLA_PLUGIN_HOST int cupola_plugin_create(unsigned long long capacity, void **device_state,
                                            void **host_handle)
{
    hs_state h;
    unsigned long long bytes;
    unsigned char *mem = NULL;
    h.slots = capacity / HS_SLOT;
    if (h.slots == 0)
        return 1;
    h.words = (h.slots + 31) / 32;
    /* header | bitmap | slots, each 256-byte aligned */
    unsigned long long bits_off = 256, base_off = (bits_off + h.words * 4 + 255) / 256 * 256;
    bytes = base_off + h.slots * HS_SLOT;
#if CUPOLA_ON_HOST
    mem = (unsigned char *)aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!mem)
        return 2;
    memset(mem, 0, base_off);
#else
    if (cudaMalloc((void **)&mem, bytes) != cudaSuccess)
        return 2;
    if (cudaMemset(mem, 0, base_off) != cudaSuccess) {
        cudaFree(mem);
        return 3;
    }
#endif
    h.bits = (unsigned int *)(mem + bits_off);
    h.base = mem + base_off;
#if CUPOLA_ON_HOST
    memcpy(mem, &h, sizeof h);
#else
    if (cudaMemcpy(mem, &h, sizeof h, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
        cudaFree(mem);
        return 4;
    }
#endif
    *device_state = mem;
    *host_handle = mem;
    return 0;
}

CUPOLA_PLUGIN_HOST void cupola_plugin_destroy(void *device_state, void *host_handle)
{
    (void)device_state;
#if CUPOLA_ON_HOST
    free(host_handle);
#else
    cudaFree(host_handle);
#endif
}
#endif /* CUPOLA_PLUGIN_HOST_PART */

__device__ void cupola_plugin_init(cupola_device_pool *pool, unsigned long long thread,
                                   unsigned long long threads)
{
    /* create gave a fresh allocator: nothing to do on the device */
    (void)pool;
    (void)thread;
    (void)threads;
}

__device__ void *cupola_plugin_alloc(cupola_device_pool *pool, unsigned long long bytes)
{
    hs_state *h = (hs_state *)cupola_pool_peer(pool);
    if (!h || bytes > HS_SLOT)
        return NULL;
    unsigned long long w = (cupola_global_index() * 0x9e3779b97f4a7c15ull >> 20) % h->words;
    for (unsigned long long k = 0; k < h->words; k++, w = w + 1 == h->words ? 0 : w + 1) {
        unsigned int v = *(volatile unsigned int *)&h->bits[w];
        while (v != 0xffffffffu) {
            unsigned int bit = 0;
            while (v & (1u << bit))
                bit++;
            unsigned long long slot = w * 32 + bit;
            if (slot >= h->slots)
                break; /* the last word's bits past the end */
            unsigned int old = atomicOr(&h->bits[w], 1u << bit);
            if (!(old & (1u << bit)))
                return h->base + slot * HS_SLOT;
            v = old | (1u << bit);
        }
    }
    return NULL;
}

__device__ void cupola_plugin_free(cupola_device_pool *pool, void *ptr)
{
    hs_state *h = (hs_state *)cupola_pool_peer(pool);
    unsigned long long slot = (unsigned long long)((unsigned char *)ptr - h->base) / HS_SLOT;
    __threadfence();
    atomicAnd(&h->bits[slot / 32], ~(1u << (slot % 32)));
}
