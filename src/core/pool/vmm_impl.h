/*
 * pool/vmm_impl.h: the inside of the vmm pool (pool/vmm.c states its
 * policy), shared by its files:
 *   vmm.c         the policy; blocks on the address heap (allocation, free,
 *                 the pages a block needs mapped), trim, counters, creation
 *   vmm_page.c    pages: mapping (a new page or an idle one moved), idle
 *                 lists, the generations of pages whose frees are pending
 *                 on a stream, settling them, unmapping
 *   vmm_decay.c   when idle pages are given back: beyond release_threshold
 *                 (reap), or the default policy's clock, budget and recent
 *                 demand (decay)
 * cp_vm_ names the functions one file defines and another calls.
 *
 * Plain C: never includes lua.h.
 */
#ifndef CUPOLA_VMM_IMPL_H
#define CUPOLA_VMM_IMPL_H

#include "heap.h"

#define VIRT_GRANULE (UINT64_C(2) << 20)
#define VIRT_SPAN (UINT64_C(1) << 37)
/* The most one request may take over the virtual upstream, which has no
 * device memory to bound it: 4 TiB, over ten times any GPU's memory.  Each
 * range's page table is 48 bytes a page (calloc'ed, touched as pages map),
 * so a bound on requests is a bound on the table. */
#define VIRT_MOST (UINT64_C(1) << 42)

/* The default policy's constants (the header says why). */
#define PAGE_COST 59e-6      /* seconds to move or remap one page */
#define BUDGET (1.0 / 32)    /* share of the clock's time the budget accrues */
#define HEADROOM 64          /* pages kept above the recent peak: 1 per 64 */
#define DEMAND_EPOCHS 8      /* the window's demand peaks, one per eighth */

typedef struct vpage vpage;
typedef struct vgen vgen;

/* The pages one free left idle while their frees are not known complete,
 * with an event recorded on the free's stream after it (NULL: none; only a
 * device synchronization settles them). */
struct vgen {
    cp_event *e;
    vpage *pages;        /* its pending pages (idle list) */
    vgen *next;          /* queue, oldest first, or the spare list */
};

struct vpage {
    uint32_t live;       /* live blocks touching the page */
    vgen *gen;           /* idle and pending: its generation; NULL: settled */
    uint64_t handle;     /* physical memory mapped here; 0: none */
    vpage *ip, *in;      /* idle list (settled, or the generation's) */
    double idle_since;   /* idle: the clock's reading when it became idle */
};

typedef struct vrange {
    uint64_t base, npages;
    vpage *pages;
} vrange;

typedef struct vmm {
    cp_heap h;
    cp_sfit ix;
    int real;             /* the backend maps memory (device upstream) */
    int dev;              /* the device whose memory is mapped (opts.device) */
    uint64_t gran;
    unsigned gshift;      /* log2(gran) */
    uint64_t span;        /* address space per range */
    uint64_t max;         /* bound on mapped bytes (0: none) */
    uint64_t most;        /* the largest request whose pages could ever map */
    vrange *ranges;
    size_t nranges;
    vpage *settled, *settled_tail; /* idle pages whose frees are complete,
                                      most recently idle first */
    vgen *gq, *gq_tail;   /* generations of pending pages, oldest first */
    vgen *gspare;         /* recycled generations (their events kept) */
    vgen nogen;           /* pending pages with no event */
    struct vopen {        /* per stream: the pages its frees left idle since
                             its last recorded event (no event yet) */
        uint64_t sid;
        vgen *g;
    } *opens;
    uint32_t nopen, capopen;
    uint64_t keep_pages;  /* idle pages kept mapped: max(release_threshold, initial) */
    uint64_t idle_pages, mapped_pages, next_handle;
    uint64_t maps, unmaps;
    uint64_t live_bytes;  /* rounded sizes of the live blocks */
    /* The default policy (timed: no release_threshold given): */
    int timed;
    double now;           /* the clock's latest reading seen */
    double budget;        /* seconds of mapping the pool may still spend */
    uint64_t peak_pages;  /* most pages ever mapped */
    uint64_t floor_pages; /* recent peak of demand + headroom (at the last tick) */
    struct vepoch {       /* the most demand in each eighth of the window */
        double start;     /* past epochs: the time they ended */
        uint64_t peak;
    } ep[DEMAND_EPOCHS + 1]; /* one more: the one overwritten ended a window ago */
    unsigned ep_cur;
    double ep_start;      /* when the current epoch began */
    double floor_until;   /* the floor stays at least until then */
    double decay_at;      /* no page can be released before then */
} vmm;

/* ---- pages and idle lists ---- */

static inline vpage *page_of(vmm *v, uint64_t addr)
{
    size_t i;
    if (__builtin_expect(addr - v->ranges[0].base < v->ranges[0].npages << v->gshift, 1))
        return &v->ranges[0].pages[(addr - v->ranges[0].base) >> v->gshift];
    for (i = 1; i < v->nranges; i++) {
        vrange *g = &v->ranges[i];
        if (addr >= g->base && addr - g->base < g->npages * v->gran)
            return &g->pages[(addr - g->base) / v->gran];
    }
    return NULL;
}

static inline uint64_t page_addr(const vmm *v, const vpage *p)
{
    size_t i;
    for (i = 0; i < v->nranges; i++) {
        const vrange *g = &v->ranges[i];
        if (p >= g->pages && p < g->pages + g->npages)
            return g->base + (uint64_t)(p - g->pages) * v->gran;
    }
    return 0;
}

static inline void idle_push(vpage **list, vpage *p)
{
    p->ip = NULL;
    p->in = *list;
    if (*list)
        (*list)->ip = p;
    *list = p;
}

static inline void settled_push(vmm *v, vpage *p)
{
    p->gen = NULL;
    if (!v->settled)
        v->settled_tail = p;
    idle_push(&v->settled, p);
}

static inline void idle_unlink(vmm *v, vpage *p)
{
    if (p->ip)
        p->ip->in = p->in;
    else if (p->gen)
        p->gen->pages = p->in;
    else
        v->settled = p->in;
    if (p->in)
        p->in->ip = p->ip;
    else if (!p->gen)
        v->settled_tail = p->ip;
    p->ip = p->in = NULL;
    p->gen = NULL;
    v->idle_pages--;
}

/* Pages live blocks touch now (idle ones, pending included, are the rest). */
static inline uint64_t v_demand(const vmm *v)
{
    return v->mapped_pages - v->idle_pages;
}

static inline uint64_t with_headroom(uint64_t d)
{
    return d + (d + HEADROOM - 1) / HEADROOM;
}

/* Demand d is reached now: the current epoch's peak. */
static inline void v_note_demand(vmm *v, uint64_t d)
{
    if (d > v->ep[v->ep_cur].peak)
        v->ep[v->ep_cur].peak = d;
}

/* ---- across the files ---- */
/* vmm_decay.c */
void cp_vm_decay(vmm *v, cp_stream *s);
void cp_vm_reap(vmm *v, cp_stream *s);
uint64_t cp_vm_recent_peak(const vmm *v, double *until);
void cp_vm_roll(vmm *v);
void cp_vm_tick(vmm *v);
double cp_vm_window(const vmm *v);
/* vmm_page.c */
void cp_vm_close_open(vmm *v, uint64_t sid, cp_stream *s);
cp_status cp_vm_dev_sync(vmm *v);
cp_status cp_vm_map_run(vmm *v, vpage *first, uint64_t n);
vgen *cp_vm_open_of(vmm *v, uint64_t sid, int create);
uint64_t cp_vm_pages_put(vmm *v, uint64_t addr, uint64_t size, vgen *g);
cp_status cp_vm_release_page(vmm *v, vpage *p);
cp_status cp_vm_settle_all(vmm *v);
void cp_vm_settle_done(vmm *v);

#endif /* CUPOLA_VMM_IMPL_H */
