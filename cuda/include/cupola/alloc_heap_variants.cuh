/*
 * cupola/alloc_heap_variants.cuh: the switches the heap's code reads for
 * the variants of its policy chosen when a module is compiled (what each
 * does: alloc_heap.cuh, "Variants"), and its event counters
 * (CPD_HEAP_COUNTERS).  Part of the heap: included by alloc_heap.cuh before
 * its other parts.
 */
#ifndef CUPOLA_ALLOC_HEAP_VARIANTS_CUH
#define CUPOLA_ALLOC_HEAP_VARIANTS_CUH

#ifdef CPD_HEAP_SLOTS_WIDE
#define CPD_HEAP_SLOTS_WANT(c) ((c) < 3u ? 128u : (c) < 6u ? 256u : 1024u)
#else
#define CPD_HEAP_SLOTS_WANT(c) (32u << ((c) < 3u ? (c) : 3u))
#endif
#ifndef CPD_HEAP_PROBE
#define CPD_HEAP_PROBE 0
#endif
#ifdef CPD_HEAP_SPREAD_REFILL
#define CPD_HEAP_REFILL_SPREAD 1
#else
#define CPD_HEAP_REFILL_SPREAD 0
#endif
#ifdef CPD_HEAP_BULK_DENSE
#define CPD_HEAP_BULK_SPREAD 0
#else
#define CPD_HEAP_BULK_SPREAD 1
#endif

/* Event counters: the survey's rows carry them per allocation. */
enum {
    CPD_HEV_CALLS,       /* lanes asking for a block of a class */
    CPD_HEV_TAKE_TRIES,  /* atomicOr tries on a slab's bitmap */
    CPD_HEV_RESERVE_MISS, /* lanes whose reservation found the slab full */
    CPD_HEV_BUSY,        /* pauses at a BUSY slot */
    CPD_HEV_PROBES,      /* moves to the next slot past a BUSY one */
    CPD_HEV_REFILLS,     /* slots filled */
    CPD_HEV_REFILL_CACHED, /* ... with a chunk from the cache */
    CPD_HEV_MAP_TRIES,   /* atomicOr tries on chunk map words */
    CPD_HEV_MAP_WORDS,   /* map words looked at by claims */
    CPD_HEV_BULK,        /* lanes served whole slabs */
    CPD_HEV_BORROW,      /* last resorts */
    CPD_HEV_STREAM,      /* lanes served by a stream */
    CPD_HEV_STREAM_WAIT, /* pauses waiting for a stream's next run */
    CPD_HEV_INSTALLS,    /* runs installed in a stream */
    CPD_HEV_PREPARED,    /* ... that were prepared ahead */
    CPD_HEV_FREES        /* frees */
};
#ifdef CPD_HEAP_COUNTERS
#define CPD_HEV(pool, e, n) cpd_add64(&(pool)->hev[e], (cpd_u64)(n))
#else
#define CPD_HEV(pool, e, n) ((void)0)
#endif

#endif /* CUPOLA_ALLOC_HEAP_VARIANTS_CUH */
