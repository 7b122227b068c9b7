/*
 * cupola/alloc_bump.cuh: the atomic-offset pool, the simplest in-kernel
 * allocator there is and the baseline the others are measured by (included
 * by device_alloc.cuh; not a public header on its own).
 *
 * Policy, exactly:
 *  - A request of b bytes takes r = b rounded up to 16 with ONE atomicAdd of
 *    r per calling thread on pool->offset; the block is base + the old
 *    offset.
 *  - If old offset + r > capacity the request fails: NULL, counted in
 *    `failed`.  The offset is not rolled back (one atomic, nothing more): once
 *    past capacity every later request fails until dp:reset, and a failure
 *    can hide room a smaller request would have fit in.
 *  - free is a no-op; dp:reset (offset = 0) returns every block at once.
 *  - Thread safety: the atomic makes concurrent requests from any thread,
 *    kernel, child kernel or stream disjoint.  What it cannot make safe is a
 *    reset ordered on one stream while another stream's kernel still uses its
 *    blocks: the blocks handed out after the reset overlap them (the
 *    two-stream race examples/device_alloc.lua shows).
 */
#ifndef CUPOLA_ALLOC_BUMP_CUH
#define CUPOLA_ALLOC_BUMP_CUH

CPD_FN void *cpd_bump_alloc(cupola_device_pool *pool, cpd_u64 bytes)
{
    cpd_u64 r = cpd_round_up(bytes);
    cpd_u64 old = cpd_add64(&pool->offset, r);
    if (old + r > pool->capacity || old + r < old) {
        cpd_count_failure(pool);
        return 0;
    }
    return pool->base + old;
}

#endif /* CUPOLA_ALLOC_BUMP_CUH */
