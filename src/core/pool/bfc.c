/*
 * pool/bfc.c: XLA's best-fit-with-coalescing allocator (tsl::BFCAllocator,
 * xla/tsl/framework/bfc_allocator.cc) as jaxlib 0.11.2's GPU client sets it
 * up (CreateBFCAllocator in xla/pjrt/gpu/gpu_helpers.cc, reached from
 * jaxlib/xla_client.py's plugin options), modelled exactly over any cupola
 * upstream.
 *
 * Policy, exactly (BFC's, with its names):
 *  - memory_limit: the most bytes the allocator holds from its SubAllocator
 *    (the device), used as given (BFC rounds only its regions, to 256 bytes:
 *    see Extend).  JAX's is total_memory * XLA_CLIENT_MEM_FRACTION (or the
 *    deprecated XLA_PYTHON_CLIENT_MEM_FRACTION), the double product
 *    truncated (CreateBFCAllocator).  jaxlib 0.11.2 reported, on an H100 of
 *    85,018,542,080 bytes: at the default 0.75 that product exactly
 *    (63,763,906,560, not a multiple of 2 MiB); with the fraction set, the
 *    product rounded up to a multiple of 2 MiB (0.0036 -> 306,184,192),
 *    grow or not: a rounding in the plugin's option path that the source
 *    read here (CreateBFCAllocator) does not show; bytes_limit in
 *    memory_stats() is the figure to pass.  Required over the virtual
 *    upstream; over the device upstream the default is 0.75 of the
 *    device's total memory, as JAX's.
 *  - kMinAllocationSize = 256: every request of n bytes is served as a chunk
 *    of at least RoundedBytes(n) = n rounded up to a multiple of 256 (a
 *    request of 0 bytes, which BFC refuses, is served here as 256: cupola's
 *    pools give every request an address).  Chunks are 256-aligned, so the
 *    alignment JAX asks (64) never splits off padding.
 *  - Bins: kNumBins = 21; bin b holds the free chunks of sizes
 *    [256 << b, 256 << (b + 1)), the last bin everything of 256 MiB and up.
 *    Within a bin free chunks are ordered by size, then by address.  A
 *    request looks in the bin of its rounded size, then in each larger bin,
 *    and takes the first chunk at least its rounded size: the smallest that
 *    fits, the lowest address among equal sizes (best fit).
 *  - Split rule (ShouldSplitChunk): the chosen chunk is split, the request
 *    taking its low end and the rest becoming a free chunk, when the chunk
 *    is at least twice the rounded size or the remainder would be at least
 *    max_internal_fragmentation_bytes: 128 MiB, or, with
 *    fragmentation_fraction > 0, that fraction of memory_limit (as a double,
 *    truncated).  Otherwise the request takes the whole chunk (its
 *    bytes_in_use counts the whole chunk).
 *  - Coalescing: a freed chunk merges with its next neighbour if that is
 *    free, then into its previous neighbour if that is free (TryToCoalesce);
 *    neighbours are chunks of the same AllocationRegion only.
 *  - Spatial partitioning (Options::enable_spatial_partitioning, XLA's flag
 *    --xla_gpu_enable_allocator_spatial_partitioning, on by default in
 *    jaxlib 0.11.2 for a preallocated pool, i.e. without allow_growth;
 *    option spatial_partitioning): chunks carry a tag.  The fresh region is
 *    the central gap (kCentralGap), kept out of the bins.  Every request
 *    (JAX's default memory: AllocationEnd::kLower) first takes the best fit
 *    among the binned free holes (kLower), and only when none fits the
 *    central gap, if it is large enough; the chunk handed out is tagged
 *    kLower.  A freed chunk whose next neighbour is the gap, or that ends
 *    the region, rejoins the gap (ReturnBoundaryChunkToGap) and merges with
 *    it; holes that merge with the gap become the gap (MergedChunkTag).
 *    The split rule applies to the gap as to a hole: jaxlib 0.11.2 handed
 *    out the whole gap where it was less than twice the request (the
 *    recordings: a request of 50,331,904 bytes got the gap's 82,923,008 at
 *    the end of the pool), where the newest source read carves the gap at
 *    the request's size (AllocateChunkFromLowEnd's split_exactly); this
 *    model follows the recordings.  largest_free_block_bytes counts the
 *    gap.  With growth there is no gap: every free chunk is a binned hole.
 *  - AllocationRegions (Extend): when no free chunk fits, a new region is
 *    asked of the upstream.  available = memory_limit - pool_bytes, rounded
 *    down to a multiple of 256; a rounded size above it fails at once.
 *    curr_region_allocation_bytes starts at RoundedBytes(min(memory_limit,
 *    2 MiB)) with allow_growth, RoundedBytes(memory_limit) without; it is
 *    doubled until the request fits in it, and the region asked is
 *    min(curr_region_allocation_bytes, available) (without growth: the whole
 *    limit, at the first allocation).  When the upstream refuses, the size is
 *    backed off to RoundedBytes(bytes * 0.9) (kBackpedalFactor, a float:
 *    the product is computed in single precision, as XLA's is), strictly
 *    less each time, until it is below the rounded request (failure).  After
 *    a region is had, curr_region_allocation_bytes doubles once more unless
 *    the loop above already doubled it.  The new region is one free chunk;
 *    the request that asked for it lands at its base.  Regions are never
 *    merged with adjacent ones (the GPU client's DeviceMemAllocator does not
 *    support coalescing) and never returned, except:
 *  - garbage_collection (off in JAX, TF_ENABLE_GPU_GARBAGE_COLLECTION in
 *    TensorFlow): when Extend fails, every region with no chunk in use is
 *    given back (if that leaves room for the request) and Extend is tried
 *    once more (DeallocateFreeRegions).
 *  - Nothing is retried later: BFC's 10-second wait for another thread's
 *    free has nothing to wait for in a replay, and a refused request writes
 *    no MemoryAllocation event.  Streams are not BFC's: it serves every
 *    stream from the one pool.  PJRT gives a buffer back to BFC only once
 *    the device work using it is done, so over a memory upstream a free
 *    first waits for its stream's work (over the virtual upstream there is
 *    none); a chunk freed is then anyone's at once.
 *  - Statistics under BFC's names (AllocatorStats): num_allocs,
 *    bytes_in_use and peak_bytes_in_use (chunk bytes), pool_bytes and
 *    peak_pool_bytes (region bytes), largest_alloc_size (the largest chunk
 *    handed out), bytes_limit (memory_limit), largest_free_block_bytes
 *    (the largest free chunk), and regions (AllocationRegions held) with
 *    region_frees (those given back).  reserved is pool_bytes.
 *  - Recorded addresses (replays of a JAX profile, cp_bfc_use_recorded):
 *    the region a request makes is placed at the address the recording gave
 *    that request (a new region's first chunk is at its base), instead of
 *    where the upstream would put it: where BFC's choice between chunks of
 *    equal size goes by address, the model then chooses as JAX did.  A
 *    recorded base that is not 256-aligned or would overlap a region held
 *    is not used (the upstream places the region; where the virtual
 *    upstream's address meets a region placed at a recorded base, the
 *    first place above it clear of the regions held).  The model's address,
 *    chunk and bytes_in_use after each request are compared with the
 *    recording's, and the first that differs noted.
 */
#include "resource_impl.h"
#include "bfc.h"
#include "model.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define MINSZ 256u
#define NBINS 21
#define NOCHUNK UINT32_MAX
#define MAXFRAG_DEFAULT ((int64_t)128 << 20)

typedef struct bchunk {
    uint64_t ptr, size, req;
    uint32_t prev, next; /* physical neighbours in the region (NOCHUNK: none) */
    int32_t bin;         /* -1: not in a bin (in use, or unused handle) */
    uint32_t region;     /* index of the region it lies in */
    uint8_t in_use;
    uint8_t gap;         /* spatial partitioning: kCentralGap (else kLower) */
} bchunk;

/* A bin's entry: the chunk's key beside its handle, so that the search
 * reads one array and not the chunks (the replay's speed). */
typedef struct bent {
    uint64_t size, ptr;
    uint32_t h, pad;
} bent;

typedef struct bbin {
    bent *e; /* free chunks, sorted by (size, ptr) */
    uint32_t n, cap;
} bbin;

typedef struct bregion {
    uint64_t base, size;
    uint32_t first;   /* handle of the chunk at base (stable: it never merges into a prev) */
    uint8_t from_up;  /* 1: had from the upstream (returned to it) */
    uint8_t live;     /* 0: given back (garbage collection) */
} bregion;

typedef struct bfc {
    cp_resource base;
    cp_resource *up;
    uint64_t limit, curr_region;
    int64_t max_frag;
    int growth, gc, virt;
    int spatial;      /* enable_spatial_partitioning (lower end only) */
    uint32_t gap;     /* central_gap_ (NOCHUNK: none) */
    int gap_exact;    /* the gap is carved at the request's size (XLA after 0.11.2) */
    bchunk *c;
    uint32_t nc, capc, unused; /* unused: free list of handles, through next */
    bbin bins[NBINS];
    uint32_t nonempty; /* bit b: bin b holds a chunk */
    bregion *reg;
    uint32_t nreg, capreg, live_regions;
    cp_ptrmap live; /* chunk ptr -> handle + 1, for chunks in use */
    /* AllocatorStats */
    uint64_t num_allocs, in_use, peak_in_use, pool, peak_pool, largest_alloc;
    uint64_t region_frees;
    /* recorded addresses */
    const uint64_t *rec, *rec_chunk, *rec_in_use;
    uint64_t nrec, recpos, mismatches, first_mismatch;
    uint64_t chunk_mismatches, first_chunk_mismatch;
    uint64_t cur_hint;
    int has_hint;
} bfc;

static int put_free(bfc *m, uint32_t h);
static uint64_t largest_free(const bfc *m);

static int bin_of(uint64_t bytes)
{
    uint64_t v = (bytes < MINSZ ? MINSZ : bytes) >> 8;
    int b = 63 - __builtin_clzll(v);
    return b < NBINS - 1 ? b : NBINS - 1;
}

static uint64_t rounded(uint64_t n)
{
    return (n + MINSZ - 1) / MINSZ * MINSZ;
}

/* first index in bin whose chunk is not less than key (size, ptr) */
static uint32_t bin_lower(const bbin *bn, uint64_t size, uint64_t ptr)
{
    uint32_t lo = 0, hi = bn->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        const bent *x = &bn->e[mid];
        if (x->size < size || (x->size == size && x->ptr < ptr))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int bin_insert(bfc *m, uint32_t h)
{
    bchunk *c = &m->c[h];
    int b = bin_of(c->size);
    bbin *bn = &m->bins[b];
    uint32_t i;
    if (bn->n == bn->cap) {
        uint32_t nc = bn->cap ? 2 * bn->cap : 16;
        bent *ne = realloc(bn->e, nc * sizeof *ne);
        if (!ne)
            return -1;
        bn->e = ne;
        bn->cap = nc;
    }
    i = bin_lower(bn, c->size, c->ptr);
    memmove(bn->e + i + 1, bn->e + i, (bn->n - i) * sizeof *bn->e);
    bn->e[i].size = c->size;
    bn->e[i].ptr = c->ptr;
    bn->e[i].h = h;
    bn->n++;
    m->nonempty |= 1u << b;
    c->bin = b;
    return 0;
}

static void bin_remove(bfc *m, uint32_t h)
{
    bchunk *c = &m->c[h];
    bbin *bn = &m->bins[c->bin];
    uint32_t i = bin_lower(bn, c->size, c->ptr);
    memmove(bn->e + i, bn->e + i + 1, (bn->n - i - 1) * sizeof *bn->e);
    if (--bn->n == 0)
        m->nonempty &= ~(1u << c->bin);
    c->bin = -1;
}

static uint32_t chunk_new(bfc *m)
{
    uint32_t h;
    if (m->unused != NOCHUNK) {
        h = m->unused;
        m->unused = m->c[h].next;
    } else {
        if (m->nc == m->capc) {
            uint32_t nc = m->capc ? 2 * m->capc : 64;
            bchunk *n = realloc(m->c, nc * sizeof *n);
            if (!n)
                return NOCHUNK;
            m->c = n;
            m->capc = nc;
        }
        h = m->nc++;
    }
    memset(&m->c[h], 0, sizeof m->c[h]);
    m->c[h].prev = m->c[h].next = NOCHUNK;
    m->c[h].bin = -1;
    return h;
}

static void chunk_drop(bfc *m, uint32_t h)
{
    m->c[h].bin = -1;
    m->c[h].next = m->unused;
    m->unused = h;
}

/* SplitChunk: h keeps its first n bytes; the rest becomes a free chunk. */
static int split(bfc *m, uint32_t h, uint64_t n)
{
    uint32_t nh = chunk_new(m);
    bchunk *c, *x;
    if (nh == NOCHUNK)
        return -1;
    c = &m->c[h];
    x = &m->c[nh];
    x->ptr = c->ptr + n;
    x->size = c->size - n;
    x->region = c->region;
    x->gap = c->gap; /* it inherits the tag */
    c->size = n;
    x->prev = h;
    x->next = c->next;
    if (c->next != NOCHUNK)
        m->c[c->next].prev = nh;
    c->next = nh;
    if (put_free(m, nh) != 0) {
        /* undo: out of host memory */
        c->size += x->size;
        c->next = x->next;
        if (x->next != NOCHUNK)
            m->c[x->next].prev = h;
        chunk_drop(m, nh);
        return -1;
    }
    return 0;
}

/* MergeChunks: h2 (h1's next) into h1. */
static void merge(bfc *m, uint32_t h1, uint32_t h2)
{
    bchunk *a = &m->c[h1], *b = &m->c[h2];
    a->next = b->next;
    if (b->next != NOCHUNK)
        m->c[b->next].prev = h1;
    a->size += b->size;
    a->gap = a->gap == b->gap ? a->gap : 1; /* MergedChunkTag */
    chunk_drop(m, h2);
}

/* RemoveFreeChunk: out of its bin, or no longer the gap. */
static void unfree(bfc *m, uint32_t h)
{
    if (m->gap == h)
        m->gap = NOCHUNK;
    else
        bin_remove(m, h);
}

static uint32_t coalesce(bfc *m, uint32_t h)
{
    bchunk *c = &m->c[h];
    if (c->next != NOCHUNK && !m->c[c->next].in_use) {
        unfree(m, c->next);
        merge(m, h, c->next);
    }
    c = &m->c[h];
    if (c->prev != NOCHUNK && !m->c[c->prev].in_use) {
        uint32_t p = c->prev;
        unfree(m, p);
        merge(m, p, h);
        h = p;
    }
    return h;
}

/* FindChunkPtr: best fit from bin b up; the chunk's address, or 0. */
/* The chunk a request of rb bytes takes (removed from its bin or from
 * being the gap), or NOCHUNK: FindTaggedChunkPtr's best fit over the bins,
 * then (spatial partitioning) FindChunkPtrInCentralGap. */
static uint32_t pick(bfc *m, uint64_t rb, int *from_gap)
{
    uint32_t bits = m->nonempty & ~((1u << bin_of(rb)) - 1);
    *from_gap = 0;
    while (bits) {
        int b = __builtin_ctz(bits);
        bbin *bn = &m->bins[b];
        uint32_t i = bin_lower(bn, rb, 0), h;
        bits &= bits - 1;
        if (i == bn->n)
            continue;
        h = bn->e[i].h;
        memmove(bn->e + i, bn->e + i + 1, (bn->n - i - 1) * sizeof *bn->e);
        if (--bn->n == 0)
            m->nonempty &= ~(1u << b);
        m->c[h].bin = -1;
        return h;
    }
    if (m->gap != NOCHUNK && m->c[m->gap].size >= rb) {
        uint32_t h = m->gap;
        m->gap = NOCHUNK;
        *from_gap = 1;
        return h;
    }
    return NOCHUNK;
}

/* A free chunk back where free chunks go: the gap, or its bin. */
static int put_free(bfc *m, uint32_t h)
{
    if (m->c[h].gap) {
        if (m->gap == NOCHUNK) {
            m->gap = h;
            return 0;
        }
        /* a second gap: XLA CHECK-fails here; only upper-end use makes one */
        m->c[h].gap = 0;
    }
    return bin_insert(m, h);
}

static cp_status find(bfc *m, uint64_t rb, uint64_t req, uint64_t *out)
{
    int from_gap;
    uint32_t h = pick(m, rb, &from_gap);
    if (h != NOCHUNK) {
        bchunk *c = &m->c[h];
        /* AllocateChunkFromLowEnd: the gap is carved exactly, a hole by the
         * split rule (ShouldSplitChunk) */
        if ((from_gap && m->gap_exact) ? c->size > rb
                                       : (c->size - rb >= rb || (int64_t)(c->size - rb) >= m->max_frag)) {
            if (split(m, h, rb) != 0) {
                (void)put_free(m, h);
                return cp_error_set(CP_ERR_OOM, "out of host memory for the pool's chunks");
            }
            c = &m->c[h];
        }
        c->gap = 0; /* the in-use chunk gets the lower tag */
        if (cp_ptrmap_put(&m->live, c->ptr, (void *)(uintptr_t)(h + 1)) != 0) {
            (void)put_free(m, coalesce(m, h));
            return cp_error_set(CP_ERR_OOM, "out of host memory for the pool's chunks");
        }
        c->in_use = 1;
        c->req = req;
        m->num_allocs++;
        m->in_use += c->size;
        if (m->in_use > m->peak_in_use)
            m->peak_in_use = m->in_use;
        if (c->size > m->largest_alloc)
            m->largest_alloc = c->size;
        *out = c->ptr;
        return CP_OK;
    }
    *out = 0;
    return CP_OK;
}

static int add_region(bfc *m, uint64_t base, uint64_t size, int from_up)
{
    uint32_t h;
    bregion *r;
    if (m->nreg == m->capreg) {
        uint32_t nc = m->capreg ? 2 * m->capreg : 8;
        bregion *n = realloc(m->reg, nc * sizeof *n);
        if (!n)
            return -1;
        m->reg = n;
        m->capreg = nc;
    }
    h = chunk_new(m);
    if (h == NOCHUNK)
        return -1;
    m->c[h].ptr = base;
    m->c[h].size = size;
    m->c[h].region = m->nreg;
    m->c[h].gap = (uint8_t)m->spatial; /* a fresh region is the central gap */
    if (put_free(m, h) != 0) {
        chunk_drop(m, h);
        return -1;
    }
    r = &m->reg[m->nreg++];
    r->base = base;
    r->size = size;
    r->first = h;
    r->from_up = (uint8_t)from_up;
    r->live = 1;
    m->live_regions++;
    return 0;
}

/* Whether [base, base + bytes) meets a region held. */
static int overlaps(const bfc *m, uint64_t base, uint64_t bytes)
{
    uint32_t i;
    for (i = 0; i < m->nreg; i++) {
        const bregion *r = &m->reg[i];
        if (r->live && base < r->base + r->size && r->base < base + bytes)
            return 1;
    }
    return 0;
}

/* The first 256-aligned base at or above *base where [base, base + bytes)
 * meets no region held: 0, or -1 when none lies below 2^64.  Each move
 * passes one region's end, so there are at most as many as regions. */
static int place_clear(const bfc *m, uint64_t *base, uint64_t bytes)
{
    uint64_t b = (*base + MINSZ - 1) / MINSZ * MINSZ;
    int moved = 1;
    if (b < *base)
        return -1;
    while (moved) {
        uint32_t i;
        moved = 0;
        for (i = 0; i < m->nreg; i++) {
            const bregion *r = &m->reg[i];
            if (r->live && b < r->base + r->size && r->base < b + bytes) {
                b = r->base + r->size; /* regions are multiples of 256 */
                if (b > UINT64_MAX - bytes)
                    return -1;
                moved = 1;
            }
        }
    }
    *base = b;
    return 0;
}

/* Extend: 1 when a region was added, 0 when none could be had. */
static int extend(bfc *m, uint64_t rb, cp_stream *s, cp_status *err)
{
    uint64_t avail = (m->limit - m->pool) / MINSZ * MINSZ, bytes;
    int increased = 0, placed = 0;
    void *p = NULL;
    cp_status st;
    *err = CP_OK;
    if (rb > avail)
        return 0;
    while (rb > m->curr_region) {
        /* (a limit near 2^64 through the C interface: never wrap to 0) */
        m->curr_region = m->curr_region > UINT64_MAX / 2 ? UINT64_MAX - MINSZ + 1
                                                         : m->curr_region * 2;
        increased = 1;
    }
    bytes = m->curr_region < avail ? m->curr_region : avail;
    /* a recorded base must be one BFC could have had: 256-aligned, the
     * region within the address space (else the upstream places it) */
    if (m->has_hint && (m->cur_hint % MINSZ || m->cur_hint > UINT64_MAX - bytes ||
                        overlaps(m, m->cur_hint, bytes)))
        m->has_hint = 0;
    if (m->has_hint) {
        /* the recording's address for this request: the region's base */
        p = (void *)(uintptr_t)m->cur_hint;
        st = CP_OK;
    } else {
        for (;;) {
            st = bytes > SIZE_MAX ? CP_ERR_OOM : cp_resource_alloc(m->up, (size_t)bytes, s, &p);
            if (st != CP_ERR_OOM)
                break;
            {
                /* kBackpedalFactor is a float: the product is single precision */
                uint64_t back = rounded((uint64_t)((float)bytes * 0.9f));
                if (back >= bytes)
                    back = bytes - MINSZ;
                bytes = back;
            }
            if (bytes < rb)
                return 0;
        }
        if (st != CP_OK) {
            *err = st;
            return 0;
        }
    }
    if (!m->has_hint && overlaps(m, (uint64_t)(uintptr_t)p, bytes)) {
        /* Where the virtual upstream's address falls in a region placed at
         * a recorded base (a recording's addresses where the counter runs):
         * the region goes to the first place above clear of those held, as
         * the counter's are only addresses; it was refused, a request JAX
         * served failing for where the replay keeps its address space.
         * Over memory the device's own block cannot overlap one held: never
         * two chunks at one place. */
        uint64_t at = (uint64_t)(uintptr_t)p;
        (void)cp_resource_free(m->up, p, (size_t)bytes, s);
        if (!m->virt || place_clear(m, &at, bytes) != 0)
            return 0;
        p = (void *)(uintptr_t)at;
        placed = 1;
    }
    if (!increased && m->curr_region <= UINT64_MAX / 2)
        m->curr_region *= 2;
    if (add_region(m, (uint64_t)(uintptr_t)p, bytes, !m->has_hint && !placed) != 0) {
        if (!m->has_hint && !placed)
            (void)cp_resource_free(m->up, p, (size_t)bytes, s);
        *err = cp_error_set(CP_ERR_OOM, "out of host memory for the pool's regions");
        return 0;
    }
    m->pool += bytes;
    if (m->pool > m->peak_pool)
        m->peak_pool = m->pool;
    m->base.reserved = m->pool;
    return 1;
}

static void region_release(bfc *m, bregion *r)
{
    uint32_t h = r->first;
    while (h != NOCHUNK) {
        uint32_t nx = m->c[h].next;
        if (m->gap == h)
            m->gap = NOCHUNK;
        else if (m->c[h].bin >= 0)
            bin_remove(m, h);
        if (m->c[h].in_use)
            (void)cp_ptrmap_del(&m->live, m->c[h].ptr);
        chunk_drop(m, h);
        h = nx;
    }
    if (r->from_up)
        (void)cp_resource_free(m->up, (void *)(uintptr_t)r->base, (size_t)r->size, NULL);
    m->pool -= r->size;
    m->base.reserved = m->pool;
    r->live = 0;
    m->live_regions--;
    m->region_frees++;
}

/* DeallocateFreeRegions: 1 when regions were given back. */
static int gc_regions(bfc *m, uint64_t rb)
{
    uint64_t freeable = 0;
    uint32_t i;
    if (!m->gc)
        return 0;
    for (i = 0; i < m->nreg; i++) {
        bregion *r = &m->reg[i];
        if (r->live && !m->c[r->first].in_use && m->c[r->first].size == r->size)
            freeable += r->size;
    }
    if (!freeable || rb > m->limit - m->pool + freeable)
        return 0;
    for (i = 0; i < m->nreg; i++) {
        bregion *r = &m->reg[i];
        if (r->live && !m->c[r->first].in_use && m->c[r->first].size == r->size)
            region_release(m, r);
    }
    return 1;
}

static cp_status bfc_alloc(cp_resource *res, size_t bytes, cp_stream *s, void **out)
{
    bfc *m = (bfc *)res;
    uint64_t rb, addr = 0;
    cp_status st, est;
    int hint = 0;

    if (bytes > UINT64_MAX - MINSZ)
        return cp_error_set(CP_ERR_OOM, "out of memory: %llu bytes", (unsigned long long)bytes);
    rb = rounded(bytes ? bytes : 1);

    if (m->rec) {
        uint64_t want = m->recpos < m->nrec ? m->rec[m->recpos] : 0;
        m->cur_hint = want;
        hint = want != 0;
    }
    st = find(m, rb, bytes, &addr);
    if (st == CP_OK && !addr) {
        m->has_hint = hint;
        if (extend(m, rb, s, &est))
            st = find(m, rb, bytes, &addr);
        else if (est != CP_OK)
            st = est;
        if (st == CP_OK && !addr && gc_regions(m, rb)) {
            if (extend(m, rb, s, &est))
                st = find(m, rb, bytes, &addr);
            else if (est != CP_OK)
                st = est;
        }
        m->has_hint = 0;
    }
    if (m->rec) {
        if (addr && m->recpos < m->nrec && addr != m->rec[m->recpos]) {
            if (!m->mismatches)
                m->first_mismatch = m->recpos;
            m->mismatches++;
        }
        /* the recording's chunk and bytes_in_use after it, where it has them */
        if (addr && m->recpos < m->nrec && m->rec_chunk) {
            uint32_t h = (uint32_t)((uintptr_t)cp_ptrmap_get(&m->live, addr) - 1);
            uint64_t want_c = m->rec_chunk[m->recpos], want_u = m->rec_in_use[m->recpos];
            if ((want_c != UINT64_MAX && want_c != m->c[h].size) ||
                (want_u != UINT64_MAX && want_u != m->in_use)) {
                if (!m->chunk_mismatches)
                    m->first_chunk_mismatch = m->recpos;
                m->chunk_mismatches++;
            }
        }
        m->recpos++;
    }
    if (st != CP_OK)
        return st;
    if (!addr) {
        uint64_t largest = largest_free(m);
        return cp_error_set(CP_ERR_OOM, "out of memory: BFC could not allocate %llu bytes "
                            "(rounded to %llu): pool_bytes %llu of memory_limit %llu, "
                            "bytes_in_use %llu, largest free chunk %llu",
                            (unsigned long long)bytes, (unsigned long long)rb,
                            (unsigned long long)m->pool, (unsigned long long)m->limit,
                            (unsigned long long)m->in_use, (unsigned long long)largest);
    }
    *out = (void *)(uintptr_t)addr;
    return CP_OK;
}

static cp_status bfc_free(cp_resource *res, void *p, size_t bytes, cp_stream *s)
{
    bfc *m = (bfc *)res;
    void *v = cp_ptrmap_del(&m->live, (uint64_t)(uintptr_t)p);
    uint32_t h;
    (void)bytes;
    if (!v)
        return cp_error_set(CP_ERR_INVALID, "free of %p, which is not a live chunk of this "
                            "bfc pool", p);
    h = (uint32_t)((uintptr_t)v - 1);
    /* PJRT hands a buffer back to BFC only once the device work using it is
     * done (its usage events): over memory, the freeing stream's work first */
    if (!m->virt && cp_be)
        (void)cp_be->stream_synchronize(s);
    m->c[h].in_use = 0;
    m->in_use -= m->c[h].size;
    /* ReturnBoundaryChunkToGap: the lower end's last chunk rejoins the gap */
    if (m->spatial && (m->c[h].next == NOCHUNK || m->c[m->c[h].next].gap))
        m->c[h].gap = 1;
    h = coalesce(m, h);
    if (put_free(m, h) != 0)
        return cp_error_set(CP_ERR_OOM, "out of host memory for the pool's bins");
    return CP_OK;
}

/* LargestFreeChunk: the largest binned chunk, or the gap if larger. */
static uint64_t largest_free(const bfc *m)
{
    uint64_t g = m->gap != NOCHUNK ? m->c[m->gap].size : 0;
    int b;
    for (b = NBINS - 1; b >= 0; b--)
        if (m->bins[b].n) {
            uint64_t l = m->bins[b].e[m->bins[b].n - 1].size;
            return l > g ? l : g;
        }
    return g;
}

static void bfc_free_info(cp_resource *res, uint64_t *largest, uint64_t *free_bytes)
{
    bfc *m = (bfc *)res;
    *largest = largest_free(m);
    *free_bytes = m->pool - m->in_use;
}

static void bfc_extra(cp_resource *res, cp_stats *out)
{
    bfc *m = (bfc *)res;
    const struct {
        const char *name;
        uint64_t v;
    } f[] = {
        {"num_allocs", m->num_allocs},
        {"bytes_in_use", m->in_use},
        {"peak_bytes_in_use", m->peak_in_use},
        {"pool_bytes", m->pool},
        {"peak_pool_bytes", m->peak_pool},
        {"largest_alloc_size", m->largest_alloc},
        {"largest_free_block_bytes", largest_free(m)},
        {"bytes_limit", m->limit},
        {"regions", m->live_regions},
        {"region_frees", m->region_frees},
    };
    size_t i;
    for (i = 0; i < sizeof f / sizeof f[0] && out->nextra < CP_STATS_EXTRA; i++) {
        out->extra[out->nextra].name = f[i].name;
        out->extra[out->nextra++].value = f[i].v;
    }
}

static void bfc_device_calls(cp_resource *res, uint64_t *allocs, uint64_t *frees)
{
    bfc *m = (bfc *)res;
    *allocs = m->nreg;
    *frees = m->region_frees;
}

static void bfc_destroy(cp_resource *res)
{
    bfc *m = (bfc *)res;
    uint32_t i;
    int b;
    for (i = 0; i < m->nreg; i++)
        if (m->reg[i].live && m->reg[i].from_up)
            (void)cp_resource_free(m->up, (void *)(uintptr_t)m->reg[i].base,
                                   (size_t)m->reg[i].size, NULL);
    for (b = 0; b < NBINS; b++)
        free(m->bins[b].e);
    free(m->c);
    free(m->reg);
    cp_ptrmap_fini(&m->live);
    cp_resource_destroy(m->up);
    free(m);
}

static const cp_resource_ops bfc_ops = {
    .kind = "bfc",
    .alloc = bfc_alloc,
    .free = bfc_free,
    .free_info = bfc_free_info,
    .destroy = bfc_destroy,
    .extra_stats = bfc_extra,
    .device_calls = bfc_device_calls,
};

int cp_bfc_is(const cp_resource *r)
{
    return r && r->ops == &bfc_ops;
}

void cp_bfc_use_recorded(cp_resource *r, const uint64_t *addr, const uint64_t *chunk,
                         const uint64_t *in_use, uint64_t n)
{
    bfc *m = (bfc *)r;
    m->rec = addr;
    m->rec_chunk = chunk && in_use ? chunk : NULL;
    m->rec_in_use = in_use;
    m->nrec = n;
    m->recpos = m->mismatches = m->first_mismatch = 0;
    m->chunk_mismatches = m->first_chunk_mismatch = 0;
}

void cp_bfc_end_recorded(cp_resource *r, cp_bfc_recorded *out)
{
    bfc *m = (bfc *)r;
    out->mismatches = m->mismatches;
    out->first_mismatch = m->first_mismatch;
    out->chunk_mismatches = m->chunk_mismatches;
    out->first_chunk_mismatch = m->first_chunk_mismatch;
    m->rec = m->rec_chunk = m->rec_in_use = NULL;
    m->nrec = 0;
}

void cp_bfc_figures(const cp_resource *r, cp_bfc_stats *out)
{
    const bfc *m = (const bfc *)r;
    out->num_allocs = m->num_allocs;
    out->bytes_in_use = m->in_use;
    out->peak_bytes_in_use = m->peak_in_use;
    out->pool_bytes = m->pool;
    out->peak_pool_bytes = m->peak_pool;
    out->regions = m->nreg;
    out->bytes_limit = m->limit;
}

int cp_bfc_virtual(const cp_resource *r)
{
    return ((const bfc *)r)->virt;
}

static cp_status bfc_create(cp_resource **out, cp_resource *up, const cp_pool_opts *o)
{
    const cp_bfc_opts *bo = (const cp_bfc_opts *)cp_pool_own_const(o);
    bfc *m;
    cp_status st = CP_OK;
    uint64_t limit = bo->memory_limit;
    int b;

    *out = NULL;
    if (!limit && o->upstream != CP_UP_VIRTUAL && cp_be) {
        size_t fr = 0, total = 0;
        cp_status q = cp_be->mem_get_info_on ? cp_be->mem_get_info_on(o->device, &fr, &total)
                                             : cp_be->mem_get_info(&fr, &total);
        if (q == CP_OK)
            limit = (uint64_t)((double)total * 0.75); /* JAX's default fraction */
    }
    if (!limit)
        st = cp_error_set(CP_ERR_INVALID, "kind 'bfc': option 'memory_limit' is required over "
                          "the %s upstream (XLA's limit: the device's memory times "
                          "XLA_CLIENT_MEM_FRACTION)", cp_upstream_name(o->upstream));
    else if (limit < MINSZ)
        st = cp_error_set(CP_ERR_INVALID, "kind 'bfc': option 'memory_limit' must be at least "
                          "256 bytes (kMinAllocationSize), not %llu", (unsigned long long)limit);
    else if (o->initial)
        st = cp_error_set(CP_ERR_INVALID, "kind 'bfc': option 'initial' is not supported (BFC "
                          "preallocates memory_limit unless allow_growth = true)");
    else if (!o->grow)
        st = cp_error_set(CP_ERR_INVALID, "kind 'bfc': option 'grow' = false is not supported "
                          "(use allow_growth; memory_limit bounds the pool)");
    else if (o->max)
        st = cp_error_set(CP_ERR_INVALID, "kind 'bfc': option 'max' is not supported "
                          "(memory_limit is BFC's limit)");
    else if (o->release_threshold)
        st = cp_error_set(CP_ERR_INVALID, "kind 'bfc': option 'release_threshold' is not "
                          "supported (BFC never returns regions but by garbage_collection)");
    else if (o->alignment > MINSZ)
        st = cp_error_set(CP_ERR_INVALID, "kind 'bfc': option 'alignment' = %llu is more than "
                          "BFC's 256-byte chunks give (JAX asks 64)",
                          (unsigned long long)o->alignment);
    else if (bo->spatial > 0 && bo->allow_growth)
        st = cp_error_set(CP_ERR_INVALID, "kind 'bfc': option 'spatial_partitioning' = true needs "
                          "allow_growth = false (one fixed address range, as XLA requires)");
    else if (!(bo->fragmentation_fraction >= 0.0 && bo->fragmentation_fraction <= 1.0))
        st = cp_error_set(CP_ERR_INVALID, "kind 'bfc': option 'fragmentation_fraction' must be "
                          "from 0 to 1, not %g", bo->fragmentation_fraction);
    if (st != CP_OK) {
        cp_resource_destroy(up);
        return st;
    }
    m = calloc(1, sizeof *m);
    if (!m || cp_ptrmap_init(&m->live, 256) != 0) {
        free(m);
        cp_resource_destroy(up);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    cp_resource_init(&m->base, &bfc_ops);
    m->up = up;
    m->limit = limit;
    m->virt = o->upstream == CP_UP_VIRTUAL;
    m->growth = bo->allow_growth;
    m->gc = bo->garbage_collection;
    m->curr_region = m->growth ? rounded(limit < (2u << 20) ? limit : (2u << 20)) : rounded(limit);
    m->max_frag = bo->fragmentation_fraction > 0.0
                      ? (int64_t)(bo->fragmentation_fraction * (double)limit)
                      : MAXFRAG_DEFAULT;
    m->unused = NOCHUNK;
    m->gap = NOCHUNK;
    /* jaxlib 0.11.2 partitions a preallocated pool (its flag
     * --xla_gpu_enable_allocator_spatial_partitioning defaults to true) */
    m->spatial = bo->spatial < 0 ? !m->growth : bo->spatial;
    for (b = 0; b < NBINS; b++)
        m->bins[b].e = NULL;
    *out = &m->base;
    return CP_OK;
}

static cp_status check_memory_limit(const cp_opt *d, const void *v)
{
    uint64_t limit;
    memcpy(&limit, v, sizeof limit);
    if (limit < MINSZ)
        return cp_error_set(CP_ERR_INVALID, "option '%s' must be at least 256 bytes (BFC's "
                            "kMinAllocationSize), not %llu", d->name, (unsigned long long)limit);
    return CP_OK;
}

/* What the options say together, checked as they are read (bfc_create
 * checks the rest once it knows the device). */
static cp_status bfc_check(const cp_pool_opts *o)
{
    const cp_bfc_opts *bo = (const cp_bfc_opts *)cp_pool_own_const(o);
    if (o->upstream != CP_UP_DEVICE && o->upstream != CP_UP_VIRTUAL)
        return cp_error_set(CP_ERR_INVALID, "kind 'bfc' takes upstream \"device\" or \"virtual\", "
                            "not \"%s\"", cp_upstream_name(o->upstream));
    if (o->upstream == CP_UP_VIRTUAL && !bo->memory_limit)
        return cp_error_set(CP_ERR_INVALID, "kind 'bfc' over the \"virtual\" upstream needs option "
                            "'memory_limit' (bytes: JAX's is the device's memory times "
                            "XLA_CLIENT_MEM_FRACTION, 0.75 by default)");
    return CP_OK;
}

static const cp_opt bfc_opts[] = {
    {.name = "memory_limit", .type = CP_OPT_SIZE, .offset = offsetof(cp_bfc_opts, memory_limit),
     .check = check_memory_limit},
    {.name = "allow_growth", .type = CP_OPT_BOOL, .offset = offsetof(cp_bfc_opts, allow_growth)},
    {.name = "garbage_collection", .type = CP_OPT_BOOL,
     .offset = offsetof(cp_bfc_opts, garbage_collection)},
    {.name = "fragmentation_fraction", .type = CP_OPT_NUMBER,
     .offset = offsetof(cp_bfc_opts, fragmentation_fraction), .lo = 0, .hi = 1},
    /* jaxlib 0.11.2's default: partitioned when preallocated */
    {.name = "spatial_partitioning", .type = CP_OPT_BOOL, .offset = offsetof(cp_bfc_opts, spatial),
     .def = -1},
    {.name = NULL},
};

static const char *const bfc_refuses[] = {"initial", "max", "release_threshold", "grow", NULL};

/* The registry's row (model.h): JAX's allocator decides nothing by the
 * recording's time, and places regions at a recording's addresses. */
const cp_model cp_bfc_model = {
    .name = "bfc",
    .create = bfc_create,
    .opts = bfc_opts,
    .opts_size = sizeof(cp_bfc_opts),
    .foreign = bfc_refuses,
    .foreign_why = "BFC's settings are memory_limit, allow_growth, garbage_collection and "
                   "fragmentation_fraction",
    .check = bfc_check,
    .traits = CP_MODEL_OWN_CLOCK | CP_MODEL_RECORDED,
};
