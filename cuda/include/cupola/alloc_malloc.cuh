/*
 * cupola/alloc_malloc.cuh: CUDA's in-kernel malloc/free, the baseline
 * (included by device_alloc.cuh).
 *
 * Policy, exactly:
 *  - A request of b bytes is accounted as r = round_up(b, 16) + 16: the
 *    16-byte header in front of the block keeps r, so that free knows what
 *    to give back to the accounting.  One atomicAdd of r on pool->offset
 *    (the live bytes) admits it; past capacity it is undone and the request
 *    fails.  Then malloc(r) (CUDA's device heap, whose size the host side
 *    sets to the pool's capacity with cudaLimitMallocHeapSize; the C
 *    library's malloc on the host backend); a NULL from it fails the request
 *    too (CUDA's heap has its own overhead, so it can run out first).
 *    `peak` keeps the highest offset seen (atomicMax).
 *  - free(p) reads r from the header, free()s, subtracts r.
 *  - CUDA's device heap is one per device: every malloc pool of a process
 *    shares it.  A pool grows it to its capacity when it can; CUDA fixes
 *    the heap size once a kernel that calls malloc has run, and later pools
 *    then live with the heap as it is (their requests fail when it is full).
 *    dp:reset cannot take back blocks still allocated (no such operation
 *    exists): it only clears the counters.
 */
#ifndef CUPOLA_ALLOC_MALLOC_CUH
#define CUPOLA_ALLOC_MALLOC_CUH

CPD_FN void *cpd_malloc_alloc(cupola_device_pool *pool, cpd_u64 bytes)
{
    cpd_u64 r = cpd_round_up(bytes) + CPD_ALIGN;
    cpd_u64 old;
    unsigned char *p;

    if (r < bytes) {
        cpd_count_failure(pool);
        return 0;
    }
    old = cpd_add64(&pool->offset, r);
    if (old + r > pool->capacity || old + r < old) {
        cpd_add64(&pool->offset, 0ull - r);
        cpd_count_failure(pool);
        return 0;
    }
    p = (unsigned char *)malloc((size_t)r);
    if (!p) {
        cpd_add64(&pool->offset, 0ull - r);
        cpd_count_failure(pool);
        return 0;
    }
    cpd_max64(&pool->peak, old + r);
    *(cpd_u64 *)(void *)p = r;
    return p + CPD_ALIGN;
}

CPD_FN void cpd_malloc_free(cupola_device_pool *pool, void *ptr)
{
    unsigned char *p = (unsigned char *)ptr - CPD_ALIGN;
    cpd_u64 r = *(cpd_u64 *)(void *)p;
    free(p);
    cpd_add64(&pool->offset, 0ull - r);
}

#endif /* CUPOLA_ALLOC_MALLOC_CUH */
