/*
 * <cupola/allocator.h>: the interface of an allocator plugged into cupola
 * (cupola.pool{kind = "plugin", path = ..., symbol = ...}).
 *
 * A plugin is a shared object that exports one `const cupola_allocator`
 * object under the name given as `symbol`.  It links against nothing of
 * cupola's: the memory it sub-allocates comes from the pool's upstream
 * (device, async, managed, pinned or virtual), handed to create() as a
 * struct of function pointers.  This header is plain C and compiles as C++.
 *
 * What cupola does around the plugin:
 *   - calls into it with the pool's lock held, so a plugin need not be
 *     thread-safe;
 *   - holds every free until it is safe under the pool's `reuse` policy (its
 *     stream-order layer), so the plugin sees plain allocate/deallocate, unless
 *     the plugin sets CUPOLA_ALLOCATOR_STREAM_ORDERED in `flags`;
 *   - checks every block the plugin returns (no overlap with a block still
 *     live, inside a block the plugin holds from its upstream) and refuses it
 *     with an error rather than hand it out;
 *   - aligns every block to the pool's `alignment`: a plugin whose block is
 *     not aligned is asked again for the bytes plus the alignment it lacks,
 *     and cupola hands out the aligned address inside (the plugin still gets
 *     its own pointer and size back at deallocate);
 *   - counts used, allocs, frees and reserved (what went through the
 *     upstream) itself; largest_free and free_bytes come from `stats` when the
 *     plugin has one.
 *
 * Version 1.  Fields are only ever added at the end; cupola reads a trailing
 * field only when the exported object is large enough to hold it, so a
 * plugin built against an older copy of this header keeps working.
 */
#ifndef CUPOLA_ALLOCATOR_H
#define CUPOLA_ALLOCATOR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUPOLA_ALLOCATOR_VERSION 1

/* flags: the plugin orders frees against the streams' work itself (it
 * queues them, records events, ...), so cupola passes each deallocate on at
 * once with the stream the block was last used on. */
#define CUPOLA_ALLOCATOR_STREAM_ORDERED 1u

/* The pool's upstream, given to create and valid until destroy returns. */
typedef struct cupola_upstream {
    /* bytes from the upstream; NULL: out of memory (or past the pool's max) */
    void *(*allocate)(struct cupola_upstream *self, size_t bytes, void *stream);
    /* gives back a block of allocate, with the same bytes */
    void (*deallocate)(struct cupola_upstream *self, void *ptr, size_t bytes, void *stream);
} cupola_upstream;

typedef struct cupola_allocator {
    int version; /* CUPOLA_ALLOCATOR_VERSION */
    /* The allocator's state; NULL fails the pool's creation.  options is the
     * pool's `options` string ("" when none); up outlives the state. */
    void *(*create)(cupola_upstream *up, const char *options);
    /* Gives everything back to the upstream and frees the state. */
    void (*destroy)(void *state);
    /* A block of at least bytes (>= 1) inside memory from the upstream;
     * NULL: out of memory.  Best aligned to the pool's `alignment` (256 by
     * default): cupola pads and aligns a block that is not.  stream is opaque: a
     * cudaStream_t on the CUDA backend (cudaStreamLegacy for the default
     * stream), cupola's own stream object on the host backend (NULL for the
     * default stream). */
    void *(*allocate)(void *state, size_t bytes, void *stream);
    /* Takes back a block of allocate, with the bytes it was asked for. */
    void (*deallocate)(void *state, void *ptr, size_t bytes, void *stream);

    /* ---- optional (0/NULL when absent) ---- */
    unsigned flags; /* CUPOLA_ALLOCATOR_* */
    /* The largest block allocate could return now without calling the
     * upstream, and the bytes held from the upstream that no block uses;
     * cupola reports both in stats() (and fragmentation from them). */
    void (*stats)(void *state, size_t *largest_free, size_t *free_bytes);
} cupola_allocator;

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_ALLOCATOR_H */
