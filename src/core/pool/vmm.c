/*
 * pool/vmm.c: a pool over the device's virtual memory management (CUDA's
 * cuMemAddressReserve / cuMemCreate / cuMemMap / cuMemSetAccess), where
 * physical memory is mapped only under live blocks: the way PyTorch's
 * expandable segments and GMLake (ASPLOS 2024) get fragmentation near zero.
 *
 * Two layers.  Addresses: the block heap of pool/heap.h over address space
 * that costs nothing (a reservation, no memory behind it), with the
 * freelist's index: best fit, lowest address among equal sizes, split at
 * once, merge at once.  Memory: physical pages of the device's granularity
 * G (cp_be->vm_granularity; 2 MiB on current GPUs, and the host backend and
 * the virtual upstream use the same), one handle per page, so that any free
 * page can back any address: a large request takes free pages wherever they
 * are and maps them into one contiguous range (GMLake's stitching, at the
 * granularity of one page).
 *
 * Policy, exactly:
 *  - Requests are rounded up to the alignment (default 256 bytes); a block
 *    touches the pages its bytes lie in.  Each page counts the live blocks
 *    touching it.
 *  - Address space is reserved in ranges of twice the device's memory (the
 *    most that could ever be mapped, with as much again for holes between
 *    blocks), or of the request when larger; 2^37 bytes over the virtual
 *    upstream, which has no device.  A range is never given back before the
 *    pool is closed: it costs no memory.  Ranges are aligned to G.
 *  - An allocation maps the pages of its block that have none (a page of
 *    a block freed earlier keeps its mapping until released: it is taken
 *    as it is).  A page to map gets its memory either from a settled idle
 *    page (mapped, no live block on it, its frees complete), which is
 *    unmapped and its handle mapped here ("moved"), or from a new handle;
 *    which one is the policy's choice, below.  A moved page is the least
 *    recently idle one (pages idle longest are the least likely to be
 *    taken back by the next allocations).  When the device refuses a new
 *    handle, or max or grow=false forbid one, idle pages are moved
 *    whatever the policy (synchronizing the device once if none is
 *    settled).  Every run of pages mapped for one block gets one access
 *    call (cp_be->vm_set_access over the run), so a large block pays one
 *    call for all of its pages, moved ones included.
 *  - Frees never unmap: a free followed by an allocation that lands on the
 *    same pages costs nothing.  Pages are released (unmapped, their memory
 *    given back) only at the end of an allocation, once their frees are
 *    known complete, least recently idle first, and by trim.
 *  - Stream order: a page is unmapped only when the frees of the blocks
 *    that were on it are complete.  Over the virtual upstream nothing runs
 *    on the memory, so an idle page is settled at once.  Over the device,
 *    the pages a stream's frees leave idle join that stream's open
 *    generation (no event is recorded by a free).  When the pool next
 *    allocates on that stream (known alive then) and needs pages or may
 *    release idle ones (below), the generation is closed: settled at once
 *    if the stream has no work queued (cp_be->stream_query), else one event
 *    recorded on the stream covers all of its frees (events are recycled)
 *    and the generation queues.  Allocations that map pages, and the
 *    releases, query the oldest queued events and settle those complete,
 *    stopping at the first that is not: no device synchronization on the
 *    alloc/free path.  Idle pages of a stream the pool is no longer used
 *    on wait for trim, or for a forced move (max, grow=false, a refused
 *    handle), which synchronizes the device once.
 *    Reuse of the addresses themselves follows the pool's reuse option, as
 *    in every pool (streamorder.h); unlike the chunked pools, a block freed
 *    on one stream merges with the idle addresses beside it even once
 *    several streams use the pool: only the addresses take its stream's
 *    tag, the pages go wherever needed.
 *  - trim(keep) synchronizes the device if idle pages are pending, then
 *    unmaps and releases idle pages while more than keep idle bytes are
 *    mapped (paid by no budget: the caller asked).
 *  - reserved is the mapped physical bytes (pages x G); stats() adds the
 *    page size, the pages mapped now, the maps and unmaps so far (one
 *    each per page), and under the default policy the window, the recent
 *    peak of demand and the budget left.  max bounds the mapped bytes.
 *    initial maps that many bytes (whole pages) at creation, kept as idle
 *    pages; grow=false maps no page beyond them (moving idle ones still
 *    serves new addresses).
 *    A request whose pages cannot all be had within max or grow=false
 *    fails before any page is mapped.
 *  - Device: every virtual memory call names the pool's device
 *    (opts.device), whatever the calling thread's current device: the
 *    pages are that device's memory, accessible from it, and the address
 *    range's size follows from its memory.
 *  - Upstreams: "device" (the backend's virtual memory calls: real pages on
 *    the host backend too) and "virtual" (the same page accounting, no
 *    memory and no calls: a replay reports what the GPU would map).
 *
 * Which page moves, and when pages are released.  The default policy
 * decides by time (no release_threshold given).  Moving or remapping a page
 * is what costs: ~59 us a 2 MiB page on an H100 (map + access + unmap of a
 * handle; a new handle costs about the same), 50-100 times an alloc+free
 * pair.  What it guarantees, on the pool's clock
 * (pool/clock.h: the wall clock, or a replay's trace time):
 *  - Mapping budget.  Moves and releases are paid from a budget that
 *    accrues BUDGET = 1/32 of the clock's time and starts empty; each costs
 *    PAGE_COST = 59 us.  A release is charged when it happens because the
 *    page will be mapped again when demand returns; so pages mapped beyond
 *    the first mapping of the pool's peak number of pages (moves, and
 *    refills of released pages) cost at most 1/32 of the elapsed time at
 *    59 us a page: below 5 % even if a page costs 50 % more than the
 *    figure.  The budget holds at most two remappings of the device's
 *    memory (the pages of the address span, twice the memory: 3.9 s of
 *    mapping for a 64 GiB device): a phase change that moves every page
 *    the pool could ever map elsewhere and back, the most any workload
 *    needs at once, while a pool idle for hours buys no bigger burst than
 *    that.  (Bounding it by the pool's own peak instead starves a pool that
 *    stayed small while its program started up.)  When the budget is
 *    short, a page that would have been moved is a new one: the pool
 *    trades memory for time.
 *  - Recent peak of demand (TCMalloc's skip-subrelease window, jemalloc's
 *    peak demand).  Demand is the pages live blocks touch.  Its recent peak
 *    D is the most demand over the last WINDOW seconds (kept as the most
 *    per eighth of the window, DEMAND_EPOCHS = 8).  The pool keeps
 *    D + D/64 pages mapped (HEADROOM = 64, whole pages up): a demand that
 *    wobbles within 1.6 % below its recent peak maps nothing, and 1.6 %
 *    leaves most of the 5 % a pool may hold above its live bytes to the
 *    pages live blocks share with free space.  A page to map is moved only
 *    when a new one would take the mapped pages past D + D/64, and the
 *    budget can pay.
 *  - Decay (jemalloc's dirty_decay_ms).  A settled idle page that has been
 *    idle for WINDOW seconds is released, least recently idle first, while
 *    more than D + D/64 pages are mapped and the budget pays; the budget
 *    spreads the releases out (at most BUDGET / PAGE_COST, 530 pages a
 *    second), so pages idle past the window go smoothly, never below the
 *    recent peak, and never those a loop takes back within the window.
 *  - WINDOW = peak pages x PAGE_COST / BUDGET: the time the budget needs to
 *    remap the pool's peak once.  A demand that falls and, after the
 *    window, comes back costs at most its peak's remapping per window,
 *    the budget's rate again; a larger pool waits longer (an 80 GiB device
 *    of 2 MiB pages: 77 s; 4,000 pages: 7.6 s), a small one little.  Pages
 *    idle for less than a window are never released by time.
 *  - The clock is read when a free leaves pages idle, when an allocation
 *    must map pages, raises the demand's peak or leaves idle pages (then
 *    only the reading, until the time something could next be released:
 *    when the floor may fall, the oldest idle page reaches the window, or
 *    the budget pays); nothing happens between pool operations (no thread
 *    of its own), and trim releases at once.
 *  - initial bytes (whole pages) stay mapped whatever the demand.
 * With release_threshold given, the pool keeps K = max(release_threshold,
 * initial) idle bytes (whole pages) instead: a page is moved while more
 * than K idle pages are mapped (else it is new), and idle pages beyond K
 * are released ("reaped") at the end of the next allocation, with no
 * budget and no clock.  With 0, after every allocation the mapped pages
 * are exactly those live blocks touch (plus pending ones); with UINT64_MAX
 * no page is ever released once warm.
 *
 * Where the numbers come from (none is fitted to a trace): the page is the
 * device's granularity, what the hardware maps; the address range is twice
 * the device's memory, the most that could be mapped plus as much again for
 * holes; PAGE_COST is the measured cost of moving a page (H100, CUDA 13);
 * BUDGET, HEADROOM and WINDOW follow from it and from the bounds above (at
 * most 5 % of the time mapping, at most 5 % above the live bytes).  There
 * is no size threshold at all: every block is placed by best fit and pays
 * only for the pages it touches, so no request is "big".
 */
#include "vmm_impl.h"
#include "model.h"

#include <stdlib.h>
#include <string.h>

/* ---- the address heap (the freelist's policy) ---- */

static uint64_t v_chunk(cp_heap *h, uint64_t size, uint8_t *pool)
{
    vmm *v = (vmm *)h;
    uint64_t c = (size + v->gran - 1) & ~(v->gran - 1);
    *pool = 0;
    if (c < size)
        return size;
    return c > v->span ? c : v->span;
}

static uint8_t v_pool_of(cp_heap *h, uint64_t size)
{
    (void)h;
    (void)size;
    return 0;
}

static int v_split(cp_heap *h, const cp_blk *b, uint64_t size)
{
    return b->size - size >= h->align;
}

static void v_insert(cp_heap *h, cp_blk *b)
{
    cp_sfit_insert(&((vmm *)h)->ix, b);
}

static void v_remove(cp_heap *h, cp_blk *b)
{
    cp_sfit_remove(&((vmm *)h)->ix, b);
}

static cp_blk *v_find(cp_heap *h, uint64_t size, uint8_t pool, uint64_t sid, cp_stream *s)
{
    (void)pool;
    return cp_sfit_find(h, &((vmm *)h)->ix, size, sid, s);
}

static uint64_t v_largest(cp_heap *h)
{
    return cp_sfit_max(&((vmm *)h)->ix);
}

/* A new address range: its page table (zeroed: no page mapped). */
static cp_status v_chunk_added(cp_heap *h, cp_blk *b)
{
    vmm *v = (vmm *)h;
    vrange *nr;
    uint64_t n = b->up_bytes / v->gran;
    vpage *pg;
    if (b->up_ptr % v->gran && v->real)
        return cp_error_set(CP_ERR_BACKEND, "vmm: the address range is not page-aligned");
    /* Requests past `most` are refused before they reserve; a range is at
     * most the span, or one such request with its alignment's padding, or
     * `initial`. */
    if (b->up_bytes / 2 > (v->most > v->span ? v->most : v->span))
        return cp_error_set(CP_ERR_OOM, "out of memory: an address range of %llu bytes is more "
                            "than the pool could ever map (%llu)",
                            (unsigned long long)b->up_bytes, (unsigned long long)v->most);
    nr = realloc(v->ranges, (v->nranges + 1) * sizeof *nr);
    if (!nr)
        return cp_error_set(CP_ERR_OOM, "out of host memory for the page table");
    v->ranges = nr;
    /* calloc: the table's untouched parts cost no memory */
    pg = calloc((size_t)n, sizeof *pg);
    if (!pg)
        return cp_error_set(CP_ERR_OOM, "out of host memory for the page table");
    nr[v->nranges].base = b->up_ptr;
    nr[v->nranges].npages = n;
    nr[v->nranges].pages = pg;
    v->nranges++;
    return CP_OK;
}

static const cp_heap_policy vmm_policy = {
    .kind = "vmm",
    .round = cp_heap_round,
    .chunk_size = v_chunk,
    .pool_of = v_pool_of,
    .split = v_split,
    .insert = v_insert,
    .remove = v_remove,
    .find = v_find,
    .largest = v_largest,
    .chunk_added = v_chunk_added,
};

/* ---- pages ---- */

/* ---- the default policy: clock, budget, recent demand ---- */

static cp_status v_free(cp_resource *r, void *ptr, size_t bytes, cp_stream *s)
{
    vmm *v = (vmm *)r;
    cp_status st = cp_heap_free_with(r, ptr, bytes, s, &vmm_policy);
    if (st == CP_OK) {
        vgen *g = NULL;
        /* Over the device the pages it leaves idle join its stream's open
         * generation: no event is recorded here (an alloc+free pair that
         * lands on the same page again records none at all). */
        if (v->real && !(g = cp_vm_open_of(v, cp_so_sid(s), 1)))
            g = &v->nogen;
        cp_vm_pages_put(v, v->h.last_addr, v->h.last_size, g);
        v->live_bytes -= v->h.last_size;
    }
    return st;
}

/* Unmaps and releases idle pages beyond keep_pages whose frees are known
 * complete, least recently idle first (a failure stops it: the page is
 * off the books, the error stays set). */
/* Can the pages [p, last] that have none be mapped at all (new pages within
 * max and grow, or idle pages elsewhere to move)?  Checked before mapping
 * anything, so that a request that cannot be served leaves no page mapped
 * for nothing (a failure of the device itself still may). */
static cp_status check_room(vmm *v, vpage *p, vpage *last, uint64_t *needp)
{
    uint64_t need = 0, idle_here = 0, room, mapped = v->mapped_pages * v->gran;
    for (; p <= last; p++) {
        if (!p->handle)
            need++;
        else if (!p->live)
            idle_here++;
    }
    *needp = need;
    if (!need)
        return CP_OK;
    room = v->idle_pages - idle_here;
    if (v->h.o.grow) {
        if (!v->max)
            return CP_OK;
        if (v->max > mapped)
            room += (v->max - mapped) / v->gran;
    }
    if (need <= room)
        return CP_OK;
    if (!v->h.o.grow)
        return cp_error_set(CP_ERR_OOM, "out of memory: %llu more pages needed, %llu idle "
                            "(grow=false, mapped %llu)", (unsigned long long)need,
                            (unsigned long long)room, (unsigned long long)mapped);
    return cp_error_set(CP_ERR_OOM, "out of memory: %llu more pages of %llu bytes would pass "
                        "the pool's max of %llu (mapped %llu)", (unsigned long long)need,
                        (unsigned long long)v->gran, (unsigned long long)v->max,
                        (unsigned long long)mapped);
}

static cp_status v_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    vmm *v = (vmm *)r;
    cp_status st;
    uint64_t addr, size;
    vpage *p, *last, *run = NULL;
    uint64_t need = 0;
    /* Every page of a block is mapped while it lives: a request past what
     * the device (or `max`) holds can never be served, and is refused
     * before its address range and page table are made. */
    if ((uint64_t)bytes > v->most)
        return cp_error_set(CP_ERR_OOM, "out of memory: %llu bytes are more than the pool "
                            "could ever map (%s %llu)", (unsigned long long)bytes,
                            v->most == v->max ? "max" : v->real ? "the device's memory" : "the limit",
                            (unsigned long long)v->most);
    st = cp_heap_alloc_with(r, bytes, s, out, &vmm_policy);
    if (st != CP_OK)
        return st;
    addr = v->h.last_addr;
    size = v->h.last_size;
    p = page_of(v, addr);
    last = page_of(v, addr + size - 1);
    st = check_room(v, p, last, &need);
    if (st != CP_OK) {
        cp_heap_free_with(r, *out, bytes, s, &vmm_policy);
        *out = NULL;
        return st;
    }
    v->live_bytes += size;
    if (need) {
        if (v->timed)
            cp_vm_tick(v);
        if (v->gq || v->nopen) {
            /* pages to map: find pending idle ones now movable */
            if (v->nopen)
                cp_vm_close_open(v, cp_so_sid(s), s);
            if (v->gq)
                cp_vm_settle_done(v);
        }
    }
    for (; p <= last; p++) {
        if (p->live++ == 0 && p->handle)
            idle_unlink(v, p);
        if (!p->handle && !run)
            run = p;
        if (run && (p->handle || p == last)) {
            vpage *end = p->handle ? p : p + 1;
            st = cp_vm_map_run(v, run, (uint64_t)(end - run));
            run = NULL;
            if (st != CP_OK)
                break;
        }
    }
    if (st != CP_OK) {
        /* Give the block back: its pages count it until the free below,
         * idle ones taken off their list as the loop takes them (the free
         * puts them back: left on it, they went on twice). */
        for (p++; p <= last; p++)
            if (p->live++ == 0 && p->handle)
                idle_unlink(v, p);
        v_free(r, *out, bytes, s);
        *out = NULL;
    }
    if (v->timed) {
        uint64_t d = v_demand(v);
        if (d > v->ep[v->ep_cur].peak) {
            cp_vm_tick(v); /* a new peak: when it happened counts */
            v_note_demand(v, d);
        }
        if ((v->settled_tail || v->gq || v->nopen) &&
            cp_clock_now(v->h.base.clock) >= v->decay_at)
            cp_vm_decay(v, s);
    } else if (v->idle_pages > v->keep_pages) {
        cp_vm_reap(v, s);
    }
    return st;
}

/* ---- trim, stats, destroy ---- */

static cp_status v_trim(cp_resource *r, size_t keep)
{
    vmm *v = (vmm *)r;
    cp_status st = cp_heap_trim(r, keep); /* settles stream tags */
    if (st != CP_OK)
        return st;
    if (v->idle_pages * v->gran <= keep)
        return CP_OK;
    st = cp_vm_settle_all(v);
    if (st != CP_OK)
        return st;
    while (v->settled_tail && v->idle_pages * v->gran > keep)
        if ((st = cp_vm_release_page(v, v->settled_tail)) != CP_OK)
            return st;
    return CP_OK;
}

static uint64_t v_reserved(cp_resource *r)
{
    vmm *v = (vmm *)r;
    return v->mapped_pages * v->gran;
}

/* Free bytes are the mapped bytes live blocks do not cover; the largest
 * block servable without taking more memory is the idle pages stitched
 * together (fragmentation is then the share of free bytes lying in pages
 * that live blocks still touch). */
static void v_free_info(cp_resource *r, uint64_t *largest, uint64_t *free_bytes)
{
    vmm *v = (vmm *)r;
    uint64_t mapped = v->mapped_pages * v->gran;
    *free_bytes = mapped > v->live_bytes ? mapped - v->live_bytes : 0;
    *largest = v->idle_pages * v->gran;
    if (*largest > *free_bytes)
        *largest = *free_bytes;
}

static void v_vm_info(cp_resource *r, cp_stats *out)
{
    vmm *v = (vmm *)r;
    out->page_bytes = v->gran;
    out->pages_mapped = v->mapped_pages;
    out->maps = v->maps;
    out->device_allocs = v->maps;
    out->device_frees = v->unmaps;
    out->unmaps = v->unmaps;
    if (v->timed) {
        double until;
        cp_vm_tick(v);
        out->by_time = 1;
        out->decay_window = cp_vm_window(v);
        out->recent_peak = cp_vm_recent_peak(v, &until) * v->gran;
        out->map_budget = v->budget;
    }
}

static void v_destroy(cp_resource *r)
{
    vmm *v = (vmm *)r;
    size_t i;
    uint64_t j;
    /* Nothing may run on the memory any more (the caller closes an empty
     * pool); every mapped page is unmapped and released, then the heap
     * returns the address ranges. */
    if (v->real && v->mapped_pages)
        cp_vm_dev_sync(v);
    /* Idle pages from their lists; a scan of the tables only if pages of
     * live blocks remain (a C caller's leak): untouched parts of the
     * tables stay untouched. */
    cp_vm_settle_all(v);
    while (v->settled)
        cp_vm_release_page(v, v->settled);
    while (v->nopen) {
        vgen *g = v->opens[--v->nopen].g;
        g->next = v->gspare;
        v->gspare = g;
    }
    free(v->opens);
    v->opens = NULL;
    while (v->gspare) {
        vgen *g = v->gspare;
        v->gspare = g->next;
        if (g->e)
            cp_be->event_destroy(g->e);
        free(g);
    }
    for (i = 0; i < v->nranges; i++) {
        for (j = 0; v->mapped_pages && j < v->ranges[i].npages; j++) {
            vpage *p = &v->ranges[i].pages[j];
            if (p->handle && v->real) {
                cp_be->vm_unmap(v->dev, (void *)(uintptr_t)page_addr(v, p), (size_t)v->gran);
                cp_be->vm_release(v->dev, p->handle, (size_t)v->gran);
            }
            if (p->handle)
                v->mapped_pages--;
        }
        free(v->ranges[i].pages);
    }
    free(v->ranges);
    v->ranges = NULL;
    v->nranges = 0;
    cp_heap_destroy(r);
}

static const cp_resource_ops vmm_ops = {
    .kind = "vmm",
    .alloc = v_alloc,
    .free = v_free,
    .trim = v_trim,
    .free_info = v_free_info,
    .reserved = v_reserved,
    .destroy = v_destroy,
    .vm_info = v_vm_info,
};

/* ---- the address-space upstream of the device upstream ---- */

typedef struct vaspace {
    cp_resource r;
    int dev;
} vaspace;

static cp_status va_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    cp_status st;
    (void)s;
    st = cp_be->vm_reserve(((vaspace *)r)->dev, out, bytes);
    if (st == CP_OK)
        r->reserved += bytes;
    return st;
}

static cp_status va_free(cp_resource *r, void *p, size_t bytes, cp_stream *s)
{
    (void)s;
    r->reserved -= bytes;
    return cp_be->vm_free_range(((vaspace *)r)->dev, p, bytes);
}

static void va_destroy(cp_resource *r)
{
    free(r);
}

static const cp_resource_ops va_ops = {
    .kind = "address space",
    .alloc = va_alloc,
    .free = va_free,
    .destroy = va_destroy,
};

static cp_status vmm_create(cp_resource **out, cp_resource *up, const cp_pool_opts *o)
{
    vmm *v;
    cp_pool_opts ho = *o;
    cp_status st;
    size_t g = 0;

    *out = NULL;
    if (o->upstream != CP_UP_DEVICE && o->upstream != CP_UP_VIRTUAL) {
        cp_resource_destroy(up);
        return cp_error_set(CP_ERR_INVALID, "a vmm pool maps device memory itself: upstream "
                            "must be 'device' or 'virtual', not '%s'",
                            cp_upstream_name(o->upstream));
    }
    v = calloc(1, sizeof *v);
    if (!v) {
        cp_resource_destroy(up);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    cp_resource_init(&v->h.base, &vmm_ops);
    v->h.keep_chunks = 1;
    v->h.big = 0; /* mapped pages, not chunks, are what reserved counts */
    v->ix.shift = cp_log2_floor(o->alignment ? o->alignment : 256);
    v->max = o->max;
    v->dev = o->device;
    v->gran = VIRT_GRANULE;
    v->nogen.e = NULL;
    v->span = VIRT_SPAN;
    v->most = VIRT_MOST;
    if (o->upstream == CP_UP_DEVICE) {
        size_t fr = 0, total = 0;
        vaspace *va;
        v->real = 1;
        if (!cp_be->vm_granularity || (st = cp_be->vm_granularity(v->dev, &g)) != CP_OK) {
            if (!cp_be->vm_granularity)
                st = cp_error_set(CP_ERR_UNSUPPORTED, "the %s backend has no virtual memory "
                                  "management", cp_be->name);
            cp_resource_destroy(up);
            free(v);
            return st;
        }
        v->gran = g;
        if ((cp_be->mem_get_info_on ? cp_be->mem_get_info_on(v->dev, &fr, &total)
                                    : cp_be->mem_get_info(&fr, &total)) == CP_OK && total) {
            v->span = ((2 * (uint64_t)total) + v->gran - 1) / v->gran * v->gran;
            v->most = (uint64_t)total;
        }
        va = malloc(sizeof *va);
        if (!va) {
            cp_resource_destroy(up);
            free(v);
            return cp_error_set(CP_ERR_OOM, "out of host memory");
        }
        cp_resource_init(&va->r, &va_ops);
        va->dev = v->dev;
        cp_resource_destroy(up);
        up = &va->r;
    }
    if (v->gran & (v->gran - 1)) {
        cp_resource_destroy(up);
        free(v);
        return cp_error_set(CP_ERR_BACKEND, "vmm: granularity %llu is not a power of two",
                            (unsigned long long)g);
    }
    v->gshift = cp_log2_floor(v->gran);
    if (v->max && v->max < v->most)
        v->most = v->max;
    /* The address space comes in whole pages, aligned to the page: a block
     * alignment up to the page needs no padding, and a larger one (a power
     * of two, so a multiple of the page) pads by whole pages, which the
     * reservation accepts. */
    if (v->real)
        v->h.up_align = v->gran;
    v->h.chunk_unit = v->gran; /* a range is whole pages, also when a smaller one is retried */
    v->timed = !o->release_threshold_set;
    if (v->timed)
        v->keep_pages = (o->initial + v->gran - 1) >> v->gshift;
    else
        v->keep_pages =
            (o->release_threshold > o->initial ? o->release_threshold : o->initial) >> v->gshift;
    /* The heap sees address space only: no limit on it, and initial is
     * mapped below rather than reserved.  Its range is a span, or initial's
     * pages alone where the address space cannot hold a span (valgrind, a
     * `ulimit -v`), as for any range. */
    ho.max = 0;
    ho.initial = (o->initial + v->gran - 1) / v->gran * v->gran;
    if (ho.initial < o->initial)
        ho.initial = o->initial; /* wrapped: refused as too large below */
    v->h.initial_want = ho.initial ? v->span : 0;
    ho.grow = 1;
    st = cp_heap_init(&v->h, up, &ho, &vmm_policy);
    /* Idle addresses need not stay shared between streams: address space is
     * plentiful, and the pages under it (what reserved counts) go to any
     * stream once their frees are complete. */
    v->h.so.share_idle = 0;
    v->h.o.grow = o->grow;
    v->h.o.max = o->max;
    if (st == CP_OK && o->initial && v->nranges) {
        uint64_t n = (o->initial + v->gran - 1) / v->gran, i;
        vpage *pg = v->ranges[0].pages;
        int grow = v->h.o.grow;
        if (n > v->ranges[0].npages)
            n = v->ranges[0].npages;
        v->h.o.grow = 1;
        v->h.base.st.reserved_peak = n * v->gran; /* new handles, not moves */
        st = cp_vm_map_run(v, pg, n);
        v->h.o.grow = grow;
        for (i = 0; st == CP_OK && i < n; i++) {
            settled_push(v, &pg[i]);
            v->idle_pages++;
        }
    }
    if (st != CP_OK) {
        v_destroy(&v->h.base);
        return st;
    }
    *out = &v->h.base;
    return CP_OK;
}

/* The registry's row (model.h). */
const cp_model cp_vmm_model = {
    .name = "vmm",
    .create = vmm_create,
};
