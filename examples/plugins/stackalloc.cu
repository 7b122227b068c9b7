/*
 * examples/plugins/stackalloc.cu: a small lock-free in-kernel allocator as a
 * cupola plugin pool (the contract: cupola/plugin.h):
 *   cupola.device_pool { kind = "plugin", path = "examples/plugins/stackalloc.cu",
 *                        capacity = "64MiB" }
 *
 * Policy, exactly:
 *  - The first 512 bytes of the pool hold the state: a bump offset and one
 *    free list per size class.  Every block carries a 16-byte header (its
 *    class) in front of what the caller gets, so a class-c block takes
 *    16 << c bytes in all: the smallest such that 16 << c >= bytes + 16.
 *  - alloc pops the class's free list (a Treiber stack: one 64-bit head,
 *    36 bits of offset / 16 and 28 bits of tag, replaced with
 *    compare-and-swap; the tag changes at every push and pop, so a head
 *    seen before another thread popped and pushed the same block does not
 *    match); an empty list bumps the offset with one atomicAdd.  A bump past
 *    the capacity returns NULL and is not undone: from then on only the
 *    free lists serve (a block freed in one class never serves another).
 *  - free pushes the block on its class's list (the link in the header's
 *    first word, written before a fence and the compare-and-swap that
 *    publishes it).
 *  - Blocks are 16-byte aligned and never share a 16-byte granule.
 */
#include <cupola/plugin.h>

#define SA_STATE_BYTES 512ull
#define SA_CLASSES 48
#define SA_OFF_BITS 36
#define SA_OFF_MASK ((1ull << SA_OFF_BITS) - 1ull)
#define SA_NIL SA_OFF_MASK /* an empty list */

struct sa_state {
    unsigned long long top;                /* bump offset from the pool's start */
    unsigned long long heads[SA_CLASSES]; /* tag << 36 | offset / 16 */
};

__device__ static sa_state *sa_of(cupola_device_pool *pool)
{
    return (sa_state *)cupola_pool_base(pool);
}

__device__ static volatile unsigned long long *sa_word(cupola_device_pool *pool, unsigned long long off)
{
    return (volatile unsigned long long *)(cupola_pool_base(pool) + off);
}

__device__ void cupola_plugin_init(cupola_device_pool *pool, unsigned long long thread,
                                   unsigned long long threads)
{
    (void)threads;
    if (thread == 0) {
        sa_state *s = sa_of(pool);
        s->top = SA_STATE_BYTES;
        for (int c = 0; c < SA_CLASSES; c++)
            s->heads[c] = SA_NIL;
    }
}

__device__ void *cupola_plugin_alloc(cupola_device_pool *pool, unsigned long long bytes)
{
    sa_state *s = sa_of(pool);
    unsigned long long cap = cupola_pool_capacity(pool), size = 16, head, off;
    int c = 0;
    while (size < bytes + 16 && c < SA_CLASSES - 1) {
        size <<= 1;
        c++;
    }
    if (size < bytes + 16 || cap < SA_STATE_BYTES)
        return 0;
    head = *(volatile unsigned long long *)&s->heads[c];
    while ((head & SA_OFF_MASK) != SA_NIL) {
        unsigned long long next, want, prev;
        off = (head & SA_OFF_MASK) << 4;
        next = *sa_word(pool, off);
        want = (((head >> SA_OFF_BITS) + 1ull) << SA_OFF_BITS) | (next & SA_OFF_MASK);
        prev = atomicCAS(&s->heads[c], head, want);
        if (prev == head) {
            *sa_word(pool, off) = (unsigned long long)c;
            return cupola_pool_base(pool) + off + 16;
        }
        head = prev;
    }
    off = atomicAdd(&s->top, size);
    if (off > cap || size > cap - off)
        return 0;
    *sa_word(pool, off) = (unsigned long long)c;
    return cupola_pool_base(pool) + off + 16;
}

__device__ void cupola_plugin_free(cupola_device_pool *pool, void *ptr)
{
    sa_state *s = sa_of(pool);
    unsigned long long off = (unsigned long long)((unsigned char *)ptr - cupola_pool_base(pool)) - 16;
    int c = (int)*sa_word(pool, off);
    unsigned long long head = *(volatile unsigned long long *)&s->heads[c];
    for (;;) {
        unsigned long long want = (((head >> SA_OFF_BITS) + 1ull) << SA_OFF_BITS) | (off >> 4), prev;
        *sa_word(pool, off) = head & SA_OFF_MASK;
        __threadfence();
        prev = atomicCAS(&s->heads[c], head, want);
        if (prev == head)
            return;
        head = prev;
    }
}
