/*
 * cupola/alloc_heap_defs.cuh: the heap's words (a chunk's state word, the
 * layout's room for the variants), its size classes and the bit and lane
 * helpers every part uses.  Part of the heap: included by alloc_heap.cuh,
 * after alloc_heap_variants.cuh.
 */
#ifndef CUPOLA_ALLOC_HEAP_DEFS_CUH
#define CUPOLA_ALLOC_HEAP_DEFS_CUH

#define CPD_HEAP_TAG_SHIFT 25u
#define CPD_HEAP_ACTIVE (1u << 24)
#define CPD_HEAP_COUNT 0x00ffffffu
#define CPD_HEAP_RUN 127u
#define CPD_HEAP_NONE 0xffffffffu

/* Buckets of the free-chunk cache a take or a put looks at: the warp's and
 * the next ones. */
#define CPD_HEAP_STEAL 8u
/* ... and those one lane alone takes from (filling a slot). */
#define CPD_HEAP_TAKE 2u
/* A claim of k chunks passes over map words with fewer than min(k, this)
 * free on its passes with the hints. */
#define CPD_HEAP_ROOM 8u
/* A chunk's run_len word while a stream hands it out: this bit, and the
 * count of its blocks handed out so far (alloc_heap_stream.cuh). */
#define CPD_HEAP_STREAM_MARK 0x80000000u
/* Room in every heap's layout (cpd_layout_heap) for the variants: slots a
 * class may use (at most nchunks / 16), and streams of the classes of 64
 * blocks a slab or more (4096 / nb of them, 1 .. 64, at most nchunks / 16;
 * alloc_heap_stream.cuh). */
#define CPD_HEAP_SLOTS_ROOM 1024u
#define CPD_HEAP_STREAM_MIN_BLOCKS 64u
#define CPD_HEAP_STREAMS_ROOM 64u

CPD_FN cpd_u32 cpd_heap_tag(cpd_u32 st) { return st >> CPD_HEAP_TAG_SHIFT; }
CPD_FN cpd_u32 cpd_heap_count(cpd_u32 st) { return st & CPD_HEAP_COUNT; }

CPD_FN cpd_u32 cpd_heap_blocks(const cupola_device_pool *pool, cpd_u32 c)
{
    return 1u << (pool->chunk_shift - 4u - c);
}

/* The slots class c uses: hslots[slot_base[c] ..] of them. */
CPD_FN cpd_u32 cpd_heap_nslots(const cupola_device_pool *pool, cpd_u32 c)
{
    cpd_u32 room = pool->slot_base[c + 1u] - pool->slot_base[c], want = CPD_HEAP_SLOTS_WANT(c);
    return room < want ? room : want;
}

CPD_FN cpd_u32 cpd_heap_class_of(cpd_u64 bytes)
{
    cpd_u32 c = 0;
    cpd_u64 s = CPD_ALIGN;
    while (s < bytes) {
        s <<= 1;
        c++;
    }
    return c;
}

CPD_FN cpd_u32 cpd_pow2_ceil(cpd_u32 x)
{
    cpd_u32 p = 1;
    while (p < x)
        p <<= 1;
    return p;
}

/* Bit p of the result: bits p .. p+m-1 of f are all set (1 <= m <= 32). */
CPD_FN cpd_u32 cpd_runs_of(cpd_u32 f, cpd_u32 m)
{
    cpd_u32 have = 1;
    while (have < m) {
        cpd_u32 s = have <= m - have ? have : m - have;
        f &= f >> s;
        have += s;
    }
    return f;
}

/* The positions that are multiples of align (a power of two <= 32). */
CPD_FN cpd_u32 cpd_align_mask(cpd_u32 align)
{
    switch (align) {
    case 1: return 0xffffffffu;
    case 2: return 0x55555555u;
    case 4: return 0x11111111u;
    case 8: return 0x01010101u;
    case 16: return 0x00010001u;
    default: return 1u;
    }
}

CPD_FN cpd_u32 cpd_lanemask_eq(void)
{
    return cpd_lanemask_lt() + 1u;
}

/* The lanes calling with the same pool and the same key. */
CPD_FN cpd_u32 cpd_heap_peers(const cupola_device_pool *pool, cpd_u32 mask, cpd_u32 key)
{
    cpd_u32 same_pool = cpd_match_any64(mask, (cpd_u64)(size_t)pool);
    return cpd_match_any64(same_pool, (cpd_u64)key);
}

#endif /* CUPOLA_ALLOC_HEAP_DEFS_CUH */
