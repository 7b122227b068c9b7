/*
 * examples/plugins/stackalloc.cu: a small lock-free in-kernel allocator as a
 * cupola plugin pool (the contract: cupola/plugin.h):
 *   cupola.device_pool { kind = "plugin", path = "examples/plugins/stackalloc.cu",
 *                        capacity = "64MiB" }
 *
 * Policy, exactly:
 *  - The first SA_STATE_BYTES (192 KiB + 256 B) of the pool hold the state: a
 *    bump offset and, per size class, SA_LISTS free lists.  Every block
 *    carries a 16-byte header (its class) in front of what the caller gets,
 *    so a class-c block takes 16 << c bytes in all: the smallest such that
 *    16 << c >= bytes + 16.
 *  - A thread works with list (a hash of its index in the grid) mod
 *    SA_LISTS of a class.  The lists are spread so that a million threads
 *    do not all race for one word: one head per class would let one
 *    compare-and-swap in ~270,000 resident threads (an H100's) succeed at a
 *    time; here some 260 share a list.  Blocks of 16 << 23 bytes (128 MiB
 *    with the header) are the largest.
 *  - alloc pops the thread's list (a Treiber stack: one 64-bit head, 36 bits
 *    of offset / 16 and 28 bits of tag, replaced with compare-and-swap; the
 *    tag changes at every push and pop, so a head seen before another thread
 *    popped and pushed the same block does not match).  After a failed
 *    compare-and-swap the thread sleeps, twice as long each time up to about
 *    a microsecond, and reads the head again (backoff: the others get on
 *    instead of all retrying at once).  An empty list bumps the offset with
 *    one atomicAdd.  A bump past the capacity returns nothing and is not
 *    undone; the thread then pops from every list of its class in turn and
 *    returns NULL only if all are empty (a block freed in one class never
 *    serves another).
 *  - free pushes the block on the freeing thread's list of its class (the
 *    link in the header's first word, written before a fence and the
 *    compare-and-swap that publishes it; the same backoff).
 *  - Blocks are 16-byte aligned and never share a 16-byte granule.
 */
#include <cupola/plugin.h>

#define SA_CLASSES 24  /* 16 B .. 128 MiB with the header */
#define SA_LISTS 1024  /* free lists per class */
#define SA_STATE_BYTES (256ull + SA_CLASSES * SA_LISTS * 8ull)
#define SA_OFF_BITS 36
#define SA_OFF_MASK ((1ull << SA_OFF_BITS) - 1ull)
#define SA_NIL SA_OFF_MASK /* an empty list */

struct sa_state {
    unsigned long long top;                      /* bump offset from the pool's start */
    unsigned long long pad[31];                  /* keeps top off the heads' lines */
    unsigned long long heads[SA_CLASSES][SA_LISTS]; /* tag << 36 | offset / 16 */
};

__device__ static sa_state *sa_of(cupola_device_pool *pool)
{
    return (sa_state *)cupola_pool_base(pool);
}

__device__ static volatile unsigned long long *sa_word(cupola_device_pool *pool, unsigned long long off)
{
    return (volatile unsigned long long *)(cupola_pool_base(pool) + off);
}

/* The calling thread's list: its grid index, mixed (neighbours apart). */
__device__ static unsigned sa_list(void)
{
    unsigned long long x = cupola_global_index() * 0x9e3779b97f4a7c15ull;
    return (unsigned)(x >> 40) % SA_LISTS;
}

/* Sleeps *ns (on the GPU) and doubles it, up to 1024. */
__device__ static void sa_backoff(unsigned *ns)
{
#if defined(__CUDA_ARCH__)
    __nanosleep(*ns);
#endif
    if (*ns < 1024u)
        *ns *= 2u;
}

__device__ static unsigned long long sa_load(unsigned long long *p)
{
    return *(volatile unsigned long long *)p;
}

/* A block of class c popped from the list at head, or NULL when it is empty. */
__device__ static void *sa_pop(cupola_device_pool *pool, unsigned long long *head, int c)
{
    unsigned long long h = sa_load(head);
    unsigned ns = 32;
    while ((h & SA_OFF_MASK) != SA_NIL) {
        unsigned long long off = (h & SA_OFF_MASK) << 4;
        unsigned long long next = *sa_word(pool, off);
        unsigned long long want = (((h >> SA_OFF_BITS) + 1ull) << SA_OFF_BITS) | (next & SA_OFF_MASK);
        if (atomicCAS(head, h, want) == h) {
            *sa_word(pool, off) = (unsigned long long)c;
            return cupola_pool_base(pool) + off + 16;
        }
        sa_backoff(&ns);
        h = sa_load(head);
    }
    return 0;
}

__device__ void cupola_plugin_init(cupola_device_pool *pool, unsigned long long thread,
                                   unsigned long long threads)
{
    sa_state *s = sa_of(pool);
    if (cupola_pool_capacity(pool) < SA_STATE_BYTES)
        return;
    if (thread == 0)
        s->top = SA_STATE_BYTES;
    for (unsigned long long i = thread; i < SA_CLASSES * SA_LISTS; i += threads)
        s->heads[i / SA_LISTS][i % SA_LISTS] = SA_NIL;
}

__device__ void *cupola_plugin_alloc(cupola_device_pool *pool, unsigned long long bytes)
{
    sa_state *s = sa_of(pool);
    unsigned long long cap = cupola_pool_capacity(pool), size = 16, off;
    void *p;
    int c = 0;
    while (size < bytes + 16 && c < SA_CLASSES - 1) {
        size <<= 1;
        c++;
    }
    if (size < bytes + 16 || cap < SA_STATE_BYTES)
        return 0;
    if ((p = sa_pop(pool, &s->heads[c][sa_list()], c)) != 0)
        return p;
    off = atomicAdd(&s->top, size);
    if (off <= cap && size <= cap - off) {
        *sa_word(pool, off) = (unsigned long long)c;
        return cupola_pool_base(pool) + off + 16;
    }
    for (int k = 0; k < SA_LISTS; k++)
        if ((p = sa_pop(pool, &s->heads[c][k], c)) != 0)
            return p;
    return 0;
}

__device__ void cupola_plugin_free(cupola_device_pool *pool, void *ptr)
{
    sa_state *s = sa_of(pool);
    unsigned long long off = (unsigned long long)((unsigned char *)ptr - cupola_pool_base(pool)) - 16;
    int c = (int)*sa_word(pool, off);
    unsigned long long *head = &s->heads[c][sa_list()];
    unsigned long long h = sa_load(head);
    unsigned ns = 32;
    for (;;) {
        unsigned long long want = (((h >> SA_OFF_BITS) + 1ull) << SA_OFF_BITS) | (off >> 4);
        *sa_word(pool, off) = h & SA_OFF_MASK;
        __threadfence();
        if (atomicCAS(head, h, want) == h)
            return;
        sa_backoff(&ns);
        h = sa_load(head);
    }
}
