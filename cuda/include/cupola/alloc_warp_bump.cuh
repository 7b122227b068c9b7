/*
 * cupola/alloc_warp_bump.cuh: a bump pointer with one atomic per warp
 * (included by device_alloc.cuh).
 *
 * Policy, exactly:
 *  - The lanes of a warp that call at the same time on the same pool are
 *    the peers (__activemask, then __match_any_sync on the pool's address).
 *    Each lane's request is rounded up to 16 bytes; the peers' sizes are
 *    summed (a shortcut when all are equal: __match_all_sync), the lowest
 *    peer does ONE atomicAdd of the sum on pool->offset and broadcasts the
 *    old offset (__shfl_sync); lane k's block starts after the blocks of the
 *    peers below it: the lanes take consecutive slices, in lane order.
 *  - Each lane checks its own slice: if its end passes capacity that lane
 *    gets NULL (counted in `failed`) while lower lanes whose slices fit keep
 *    theirs.  No rollback, as bump.
 *  - free is a no-op; dp:reset returns everything.
 *  - Safe from any thread, kernel, child kernel and stream for the same
 *    reason as bump; the same caveat about resets.  On the host backend a
 *    warp is one lane, so this is bump there.
 */
#ifndef CUPOLA_ALLOC_WARP_BUMP_CUH
#define CUPOLA_ALLOC_WARP_BUMP_CUH

CPD_FN void *cpd_warp_bump_alloc(cupola_device_pool *pool, cpd_u64 bytes)
{
    cpd_u64 r = cpd_round_up(bytes);
    cpd_u32 mask = cpd_activemask();
    cpd_u32 peers = cpd_match_any64(mask, (cpd_u64)(size_t)pool);
    cpd_u32 below = peers & cpd_lanemask_lt();
    int leader = cpd_leader(peers);
    int same = 0;
    cpd_u64 before = 0, total = 0, base = 0;

    cpd_match_all64(peers, r, &same);
    if (same) {
        before = (cpd_u64)cpd_popc(below) * r;
        total = (cpd_u64)cpd_popc(peers) * r;
    } else {
        /* Sizes differ: every peer reads every other's size (at most 32). */
        for (cpd_u32 rest = peers; rest; rest &= rest - 1) {
            int src = cpd_ffs(rest) - 1;
            cpd_u64 v = cpd_shfl64(peers, r, src);
            total += v;
            if ((below >> src) & 1u)
                before += v;
        }
    }
    if (below == 0)
        base = cpd_add64(&pool->offset, total);
    base = cpd_shfl64(peers, base, leader) + before;
    if (base + r > pool->capacity || base + r < base) {
        cpd_count_failure(pool);
        return 0;
    }
    return pool->base + base;
}

#endif /* CUPOLA_ALLOC_WARP_BUMP_CUH */
