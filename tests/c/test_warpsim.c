/*
 * test_warpsim.c: the in-kernel allocators' warp paths on the CPU.
 *
 * On the host backend a warp is one lane, so the code of
 * cupola/device_alloc.cuh that serves several lanes at once (a warp's
 * reservation in one atomicAdd, whole slabs handed to a warp, a run cut for
 * the lanes asking one length, warp_bump's shared offset, the frees counted
 * once per slab) never runs there.  This test runs it: each lane of a
 * simulated warp of 32 is a coroutine (ucontext), and the warp functions of
 * the shim (CPD_WARP_SIM) are the simulator's:
 *  - __activemask: the lanes waiting at the same call site when every lane
 *    has run as far as it can, or, one time in four, a random part of them
 *    (independent thread scheduling may leave a warp split);
 *  - match_any, match_all, shfl, ballot: they wait until every lane of
 *    their mask waits at the same kind of call with the same mask (the
 *    compiler may have copied the call: from sm_70 on the lanes need not
 *    meet at one instruction), then answer as CUDA does.  A lane of the mask that has exited, or waits at another
 *    call for good, is an error (on a GPU: undefined behaviour or a hang);
 *    so is a lane missing from its own mask or a shuffle from a lane
 *    outside it;
 *  - a pause lets the other lanes and warps run.
 * Warps are interleaved at random (seeded) at every warp call and pause; the
 * atomics are the host shim's.  Each case checks what dp:run checks (blocks
 * disjoint, aligned, inside the pool, data intact, NULL only when the pool
 * is spent, everything back after the frees) and that the warp path it
 * aims at was taken (a warp's whole-slab blocks share a chunk; a warp's
 * single-chunk runs share a map word).
 */
#define CPD_WARP_SIM 1

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

/* The warp functions the shim leaves to the includer (device_alloc.cuh). */
static void cpd_pause(void);
static unsigned int cpd_activemask(void);
static unsigned int cpd_lanemask_lt(void);
static unsigned int cpd_match_any64(unsigned int mask, unsigned long long v);
static unsigned int cpd_match_all64(unsigned int mask, unsigned long long v, int *pred);
static unsigned long long cpd_shfl64(unsigned int mask, unsigned long long v, int src);
static unsigned int cpd_ballot(unsigned int mask, int pred);
static unsigned int cpd_warp_hash(void);

#include "devpool_layout.h"
#include "cupola/dp_body.cuh"
#include "tap.h"

#define OK(cond, ...) tap_ok_line((cond) != 0, __LINE__, __VA_ARGS__)

/* ---- the simulator ------------------------------------------------------------ */

#define LANES 32u
#define MAXW 16u
#define STACK (64u * 1024u)

enum { L_RUN, L_OP, L_DONE };
enum { OP_ACTIVE, OP_MATCH, OP_MATCH_ALL, OP_SHFL, OP_BALLOT, OP_PAUSE };
static const char *const op_names[] = {"activemask", "match_any", "match_all", "shfl", "ballot", "pause"};

typedef struct sim_lane {
    ucontext_t ctx;
    int state, op, src;
    const void *site;
    unsigned mask;
    unsigned long long val, result;
} sim_lane;

typedef void sim_body(void *arg, unsigned warp, unsigned lane);

typedef struct sim {
    sim_lane lane[MAXW][LANES];
    ucontext_t sched;
    unsigned nw, cur_w, cur_l;
    int split; /* split activemask groups at random */
    unsigned long long rng;
    sim_body *body;
    void *arg;
    char err[4096];
    unsigned char *stacks;
} sim;

static sim *S;

static unsigned long long sim_rand(void)
{
    unsigned long long x = S->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return S->rng = x;
}

static unsigned long long sim_op(int op, const void *site, unsigned mask, unsigned long long v, int src)
{
    sim_lane *l = &S->lane[S->cur_w][S->cur_l];
    l->state = L_OP;
    l->op = op;
    l->site = site;
    l->mask = mask;
    l->val = v;
    l->src = src;
    swapcontext(&l->ctx, &S->sched);
    return l->result;
}

#define SITE __builtin_return_address(0)
__attribute__((noinline)) static void cpd_pause(void) { sim_op(OP_PAUSE, SITE, 0, 0, 0); }
__attribute__((noinline)) static unsigned int cpd_activemask(void)
{
    return (unsigned)sim_op(OP_ACTIVE, SITE, 0, 0, 0);
}
static unsigned int cpd_lanemask_lt(void) { return (1u << S->cur_l) - 1u; }
__attribute__((noinline)) static unsigned int cpd_match_any64(unsigned int mask, unsigned long long v)
{
    return (unsigned)sim_op(OP_MATCH, SITE, mask, v, 0);
}
__attribute__((noinline)) static unsigned int cpd_match_all64(unsigned int mask, unsigned long long v, int *pred)
{
    unsigned r = (unsigned)sim_op(OP_MATCH_ALL, SITE, mask, v, 0);
    *pred = r != 0;
    return r;
}
__attribute__((noinline)) static unsigned long long cpd_shfl64(unsigned int mask, unsigned long long v, int src)
{
    return sim_op(OP_SHFL, SITE, mask, v, src);
}
__attribute__((noinline)) static unsigned int cpd_ballot(unsigned int mask, int pred)
{
    return (unsigned)sim_op(OP_BALLOT, SITE, mask, (unsigned long long)(pred != 0), 0);
}
/* The SM and warp slot of a GPU: here the warp's number, spread. */
static unsigned int cpd_warp_hash(void) { return S->cur_w * 7919u + 13u; }

static void lane_main(void)
{
    S->body(S->arg, S->cur_w, S->cur_l);
    S->lane[S->cur_w][S->cur_l].state = L_DONE;
}

/* Resolves what warp w's lanes wait for; how many lanes go on. */
static unsigned resolve(unsigned w)
{
    sim_lane *L = S->lane[w];
    int state[LANES];
    unsigned moved = 0;
    for (unsigned i = 0; i < LANES; i++)
        state[i] = L[i].state;
    for (unsigned i = 0; i < LANES; i++) {
        unsigned m = 0, ok = 1;
        if (state[i] != L_OP || L[i].state != L_OP)
            continue;
        if (L[i].op == OP_PAUSE) {
            L[i].state = L_RUN;
            moved++;
            continue;
        }
        if (L[i].op == OP_ACTIVE) {
            for (unsigned j = 0; j < LANES; j++)
                if (state[j] == L_OP && L[j].state == L_OP && L[j].op == OP_ACTIVE && L[j].site == L[i].site)
                    m |= 1u << j;
            if (S->split && __builtin_popcount(m) > 1 && sim_rand() % 4u == 0) {
                unsigned part = m & (unsigned)sim_rand();
                if (part & (1u << i))
                    m = part;
                else
                    m &= ~part;
            }
            for (unsigned j = 0; j < LANES; j++)
                if (m & (1u << j)) {
                    L[j].result = m;
                    L[j].state = L_RUN;
                    moved++;
                }
            continue;
        }
        m = L[i].mask;
        if (!(m & (1u << i))) {
            snprintf(S->err, sizeof S->err, "warp %u lane %u: %s at %p with mask %08x leaves the lane out", w,
                     i, op_names[L[i].op], L[i].site, m);
            return 0;
        }
        for (unsigned j = 0; j < LANES; j++) {
            if (!(m & (1u << j)))
                continue;
            if (state[j] == L_DONE) {
                snprintf(S->err, sizeof S->err, "warp %u lane %u: %s at %p with mask %08x names lane %u, which exited",
                         w, i, op_names[L[i].op], L[i].site, m, j);
                return 0;
            }
            if (state[j] != L_OP || L[j].state != L_OP || L[j].op != L[i].op || L[j].mask != m)
                ok = 0;
        }
        if (!ok)
            continue;
        for (unsigned j = 0; j < LANES; j++) {
            unsigned long long r = 0;
            if (!(m & (1u << j)))
                continue;
            switch (L[j].op) {
            case OP_MATCH:
                for (unsigned k = 0; k < LANES; k++)
                    if ((m & (1u << k)) && L[k].val == L[j].val)
                        r |= 1ull << k;
                break;
            case OP_MATCH_ALL:
                r = m;
                for (unsigned k = 0; k < LANES; k++)
                    if ((m & (1u << k)) && L[k].val != L[j].val)
                        r = 0;
                break;
            case OP_BALLOT:
                for (unsigned k = 0; k < LANES; k++)
                    if ((m & (1u << k)) && L[k].val)
                        r |= 1ull << k;
                break;
            case OP_SHFL:
                if (L[j].src < 0 || L[j].src >= (int)LANES || !(m & (1u << L[j].src))) {
                    snprintf(S->err, sizeof S->err, "warp %u lane %u: shfl at %p from lane %d, outside mask %08x",
                             w, j, L[j].site, L[j].src, m);
                    return 0;
                }
                r = L[L[j].src].val;
                break;
            }
            L[j].result = r;
        }
        for (unsigned j = 0; j < LANES; j++)
            if (m & (1u << j)) {
                L[j].state = L_RUN;
                moved++;
            }
    }
    return moved;
}

/* A fresh coroutine for lane l of warp w (its own frame: getcontext
 * returns twice). */
__attribute__((noinline)) static void lane_init(sim *s, unsigned w, unsigned l, int live)
{
    sim_lane *L = &s->lane[w][l];
    memset(L, 0, sizeof *L);
    L->state = live ? L_RUN : L_DONE;
    getcontext(&L->ctx);
    L->ctx.uc_stack.ss_sp = s->stacks + (size_t)(w * LANES + l) * STACK;
    L->ctx.uc_stack.ss_size = STACK;
    L->ctx.uc_link = &s->sched;
    makecontext(&L->ctx, lane_main, 0);
}

/* Lets lane l of warp w run until it waits or ends (its own frame: the
 * caller's locals are not live across the switch). */
__attribute__((noinline)) static void run_lane(sim *s, unsigned w, unsigned l)
{
    s->cur_w = w;
    s->cur_l = l;
    swapcontext(&s->sched, &s->lane[w][l].ctx);
}

/* Runs body on nw warps of 32 lanes (lanes >= lanes_live exit at once, as
 * threads past n do); 0, or -1 with S->err. */
static int sim_run(sim *s, unsigned nw, unsigned lanes_live, sim_body *body, void *arg)
{
    unsigned long long rounds = 0;
    S = s;
    s->nw = nw;
    s->body = body;
    s->arg = arg;
    s->err[0] = 0;
    for (unsigned w = 0; w < nw; w++)
        for (unsigned l = 0; l < LANES; l++)
            lane_init(s, w, l, l < lanes_live);
    for (;;) {
        unsigned live = 0, moved = 0, w0 = (unsigned)(sim_rand() % nw);
        for (unsigned k = 0; k < nw; k++) {
            unsigned w = (w0 + k) % nw, l0 = (unsigned)(sim_rand() % LANES);
            for (unsigned j = 0; j < LANES; j++) {
                unsigned l = (l0 + j) % LANES;
                if (s->lane[w][l].state == L_RUN)
                    run_lane(s, w, l);
            }
        }
        for (unsigned w = 0; w < nw; w++) {
            moved += resolve(w);
            if (s->err[0])
                return -1;
            for (unsigned l = 0; l < LANES; l++)
                live += s->lane[w][l].state != L_DONE;
        }
        if (live == 0)
            return 0;
        if (moved == 0 || ++rounds > 20000000ull) {
            int n = snprintf(s->err, sizeof s->err, "%s:", moved ? "no end" : "deadlock");
            for (unsigned w = 0; w < nw && n < (int)sizeof s->err - 64; w++)
                for (unsigned l = 0; l < LANES && n < (int)sizeof s->err - 64; l++)
                    if (s->lane[w][l].state == L_OP)
                        n += snprintf(s->err + n, sizeof s->err - (size_t)n, " w%u.%u %s@%p/%08x", w, l,
                                      op_names[s->lane[w][l].op], s->lane[w][l].site, s->lane[w][l].mask);
            return -1;
        }
    }
}

/* ---- pools on the host, as the host backend makes them ------------------------ */

typedef struct pool {
    cpd_layout L;
    unsigned char *mem;
    cupola_device_pool st;
} pool;

static int pool_make(pool *p, cpd_u32 kind, cpd_u64 capacity)
{
    cpd_layout_make(kind, capacity, &p->L);
    p->mem = aligned_alloc(256, (size_t)p->L.total);
    if (!p->mem)
        return -1;
    memset(p->mem, 0, (size_t)p->L.total);
    if (kind == CPD_KIND_SLAB)
        memset(p->mem + p->L.lists_off, 0xff, p->L.lists_bytes);
    if (kind == CPD_KIND_HEAP)
        memset(p->mem + p->L.hslots_off, 0xff, (size_t)p->L.nslots_total * 4u);
    cpd_state_init(&p->st, kind, capacity, &p->L, p->mem);
    cpd_reset_state(&p->st);
    return 0;
}

static void pool_usage(pool *p, cpd_u64 *used, cpd_u64 *peak)
{
    if (p->st.kind == CPD_KIND_HEAP)
        cpd_heap_usage(&p->st, p->st.cstate, p->st.run_len, used, peak);
    else
        cpd_usage(&p->st, p->st.slab_class, p->st.slab_used, used, peak);
}

/* ---- the cases -------------------------------------------------------------------- */

typedef struct work {
    pool *p;
    unsigned nw;
    cpd_u64 min, max;       /* sizes drawn in [min, max] per thread */
    unsigned long long seed;
    unsigned char **ptrs;   /* per thread: its block (kept), or NULL */
    int churn;              /* allocate, write, pause, check, free, `churn` times */
    unsigned long long bad; /* blocks whose pattern was overwritten (churn) */
    unsigned long long first;
} work;

static cpd_u64 size_of(const work *wk, unsigned long long i)
{
    cpd_u64 span = wk->max - wk->min;
    return span ? wk->min + cupola_mix64(wk->seed ^ (i * 0x9e3779b97f4a7c15ull)) % (span + 1) : wk->min;
}

static void fill(unsigned char *b, cpd_u64 n, unsigned long long tag)
{
    for (cpd_u64 k = 0; k < n; k++)
        b[k] = (unsigned char)(cupola_mix64(tag + k / 8) >> (8 * (k % 8)));
}

static int intact(const unsigned char *b, cpd_u64 n, unsigned long long tag)
{
    for (cpd_u64 k = 0; k < n; k++)
        if (b[k] != (unsigned char)(cupola_mix64(tag + k / 8) >> (8 * (k % 8))))
            return 0;
    return 1;
}

static void body_alloc(void *arg, unsigned w, unsigned l)
{
    work *wk = arg;
    unsigned long long i = wk->first + (unsigned long long)w * LANES + l;
    cpd_u64 n = size_of(wk, i);
    if (wk->churn) {
        for (int r = 0; r < wk->churn; r++) {
            unsigned long long t = i * 1000u + (unsigned)r;
            unsigned char *b = cpd_alloc(&wk->p->st, n);
            if (!b)
                continue;
            fill(b, n, t);
            cpd_pause();
            if (!intact(b, n, t))
                __atomic_fetch_add(&wk->bad, 1ull, __ATOMIC_RELAXED);
            cpd_free(&wk->p->st, b);
            n = size_of(wk, i + 7919u * (unsigned)(r + 1));
        }
        return;
    }
    wk->ptrs[i] = cpd_alloc(&wk->p->st, n);
    if (wk->ptrs[i])
        fill(wk->ptrs[i], n, i);
}

/* Thread i frees the block of thread count-1-i (another lane, another warp). */
typedef struct freeing {
    pool *p;
    unsigned char **ptrs;
    unsigned long long count, first;
} freeing;

static void body_free(void *arg, unsigned w, unsigned l)
{
    freeing *f = arg;
    unsigned long long i = f->first + (unsigned long long)w * LANES + l;
    if (i < f->count && f->ptrs[f->count - 1 - i])
        cpd_free(&f->p->st, f->ptrs[f->count - 1 - i]);
}

typedef struct span {
    uintptr_t lo, hi;
} span;

static int by_lo(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Blocks 0..count-1 (sizes from wk): NULLs, overlaps or blocks outside the
 * pool, misaligned ones, overwritten ones. */
static void check_blocks(const work *wk, unsigned long long count, unsigned long long *nulls,
                         unsigned long long *bad)
{
    span *sp = malloc(sizeof *sp * (size_t)count);
    unsigned long long k = 0;
    uintptr_t base = (uintptr_t)wk->p->st.base, end = base + (uintptr_t)wk->p->st.capacity;
    *nulls = *bad = 0;
    for (unsigned long long i = 0; i < count; i++) {
        cpd_u64 n = size_of(wk, i);
        if (!wk->ptrs[i]) {
            ++*nulls;
            continue;
        }
        if ((uintptr_t)wk->ptrs[i] % 16u || (uintptr_t)wk->ptrs[i] < base || (uintptr_t)wk->ptrs[i] + n > end ||
            !intact(wk->ptrs[i], n, i))
            ++*bad;
        sp[k].lo = (uintptr_t)wk->ptrs[i];
        sp[k++].hi = (uintptr_t)wk->ptrs[i] + n;
    }
    qsort(sp, (size_t)k, sizeof *sp, by_lo);
    for (unsigned long long j = 1; j < k; j++)
        if (sp[j].lo < sp[j - 1].hi)
            ++*bad;
    free(sp);
}

static sim SIM;

/* A sweep run by one warp of 32 lanes (they split the cache's buckets):
 * what they gave back, all lanes together. */
typedef struct sweeper {
    pool *p;
    unsigned long long n;
} sweeper;

static void body_sweep(void *arg, unsigned w, unsigned l)
{
    sweeper *sw = arg;
    (void)w;
    (void)l;
    __atomic_fetch_add(&sw->n, (unsigned long long)cpd_heap_sweep(&sw->p->st, CPD_HEAP_NONE), __ATOMIC_SEQ_CST);
}

static unsigned sweep_by_warp(pool *p)
{
    sweeper sw = {p, 0};
    int split = SIM.split;
    SIM.split = 0;
    sim_run(&SIM, 1, LANES, body_sweep, &sw);
    SIM.split = split;
    return (unsigned)sw.n;
}


/* Allocates for threads [0, count) in batches of nw warps (lanes of the last
 * warp past count exit), then checks. */
static int alloc_all(work *wk, unsigned long long count)
{
    for (unsigned long long first = 0; first < count; first += (unsigned long long)wk->nw * LANES) {
        unsigned long long left = count - first;
        unsigned nw = left >= (unsigned long long)wk->nw * LANES ? wk->nw : (unsigned)((left + LANES - 1) / LANES);
        wk->first = first;
        if (nw * LANES > left) {
            /* the last warp is partial: run full warps, then it alone */
            if (nw > 1 && sim_run(&SIM, nw - 1, LANES, body_alloc, wk) != 0)
                return -1;
            wk->first = first + (unsigned long long)(nw - 1) * LANES;
            if (sim_run(&SIM, 1, (unsigned)(left - (unsigned long long)(nw - 1) * LANES), body_alloc, wk) != 0)
                return -1;
        } else if (sim_run(&SIM, nw, LANES, body_alloc, wk) != 0) {
            return -1;
        }
    }
    return 0;
}

static int free_all(pool *p, unsigned char **ptrs, unsigned long long count, unsigned nw)
{
    freeing f = {p, ptrs, count, 0};
    for (f.first = 0; f.first < count; f.first += (unsigned long long)nw * LANES)
        if (sim_run(&SIM, nw, LANES, body_free, &f) != 0)
            return -1;
    return 0;
}

static const char *kind_name(cpd_u32 k)
{
    return k == CPD_KIND_WARP_BUMP ? "warp_bump" : k == CPD_KIND_SLAB ? "slab" : "heap";
}

/* count threads allocate [min, max] bytes into a fresh pool, are checked,
 * and (slab, heap) freed by other threads: everything comes back. */
static void case_keep(cpd_u32 kind, cpd_u64 cap, cpd_u64 min, cpd_u64 max, unsigned long long count, int split)
{
    pool p;
    work wk = {0};
    unsigned long long nulls = 0, bad = 0;
    cpd_u64 used = 0, peak = 0;
    int rc;
    snprintf(tap_group, sizeof tap_group, "%s %llu KiB, %llu..%llu B, %llu threads%s", kind_name(kind),
             (unsigned long long)(cap >> 10), (unsigned long long)min, (unsigned long long)max, count,
             split ? ", split warps" : "");
    SIM.split = split;
    if (pool_make(&p, kind, cap) != 0) {
        OK(0, "pool");
        return;
    }
    wk.p = &p;
    wk.nw = MAXW;
    wk.min = min;
    wk.max = max;
    wk.seed = min * 31u + max;
    wk.ptrs = calloc((size_t)count, sizeof *wk.ptrs);
    rc = alloc_all(&wk, count);
    OK(rc == 0, "every warp call met its lanes%s%s", rc ? ": " : "", rc ? SIM.err : "");
    check_blocks(&wk, count, &nulls, &bad);
    OK(bad == 0, "disjoint, aligned, inside the pool, intact (%llu bad)", bad);
    OK(nulls == 0, "every block served (%llu NULL)", nulls);
    if (kind != CPD_KIND_WARP_BUMP) {
        rc = free_all(&p, wk.ptrs, count, MAXW);
        OK(rc == 0, "frees by other threads: every warp call met its lanes%s%s", rc ? ": " : "", rc ? SIM.err : "");
        pool_usage(&p, &used, &peak);
        OK(used == 0, "everything back (%llu B in use)", (unsigned long long)used);
    }
    free(wk.ptrs);
    free(p.mem);
    tap_group[0] = 0;
}

/* Chunks in the heap's free-chunk cache, and whether chunk t is one. */
static unsigned cached_chunks(const pool *p)
{
    unsigned n = 0;
    for (cpd_u32 i = 0; i < p->st.nbuckets * 32u; i++)
        n += p->st.hcache[i] != 0u;
    return n;
}

static int is_cached(const pool *p, cpd_u32 t)
{
    for (cpd_u32 i = 0; i < p->st.nbuckets * 32u; i++)
        if (p->st.hcache[i] == t + 1u)
            return 1;
    return 0;
}

static cpd_u32 chunk_of(const pool *p, const unsigned char *b)
{
    return (cpd_u32)((uintptr_t)(b - p->st.base) >> p->st.chunk_shift);
}

/* count threads (8 warps of 32 unless told) allocate `size` each
 * (wk->ptrs), checked. */
static int heap_round_of(work *wk, unsigned long long count, cpd_u64 size, const char *what)
{
    unsigned long long nulls, bad;
    int rc;
    wk->min = wk->max = size;
    rc = alloc_all(wk, count);
    check_blocks(wk, count, &nulls, &bad);
    OK(rc == 0 && nulls == 0 && bad == 0, "%s: served, disjoint, intact (%s)", what, rc ? SIM.err : "ok");
    return rc == 0 && nulls == 0 && bad == 0;
}

static int heap_round(work *wk, cpd_u64 size, const char *what)
{
    return heap_round_of(wk, 8 * LANES, size, what);
}

/* A heap case's start: its TAP group, the simulator's warp split, a heap
 * pool of cap bytes and room for nptrs blocks in wk; 0 when the pool was
 * made.  heap_case_end frees what it took. */
static int heap_case_begin(pool *p, work *wk, const char *group, int split, cpd_u64 cap, size_t nptrs)
{
    snprintf(tap_group, sizeof tap_group, "%s", group);
    SIM.split = split;
    if (pool_make(p, CPD_KIND_HEAP, cap) != 0)
        return -1;
    wk->p = p;
    wk->ptrs = calloc(nptrs, sizeof *wk->ptrs);
    return 0;
}

static void heap_case_end(pool *p, work *wk)
{
    free(wk->ptrs);
    free(p->mem);
    tap_group[0] = 0;
}

/* The heap's warp paths, seen in where the blocks went: whole slabs and
 * single-chunk runs from the chunk map, the same from the cache of free
 * chunks, the live count, the cache given back by a sweep. */
static void case_heap_paths(void)
{
    pool p;
    work wk = {0};
    int same = 1, from_cache = 0;
    unsigned warps_cached = 0, before;
    cpd_u64 used = 0, peak = 0;
    unsigned char cached_before[1024] = {0};
    /* 64 MiB: 1024 chunks of 64 KiB (64 cache buckets); 2 KiB blocks are 32 to a chunk */
    if (heap_case_begin(&p, &wk, "heap warp paths", 0, 64u << 20, 8 * LANES) != 0)
        return;
    OK(p.st.nchunks == 1024 && p.st.nbuckets == 64, "1024 chunks, 64 cache buckets (%u, %u)", p.st.nchunks,
       p.st.nbuckets);
    /* the cases below use 2 of them, so that 8 warps fill the cache (a
     * bucket past the first 2 is never looked at then) */
    p.st.nbuckets = 2;
    wk.nw = 8;
    heap_round(&wk, 2048, "32 lanes of 2 KiB");
    for (unsigned w = 0; w < 8; w++)
        for (unsigned l = 0; l < LANES; l++)
            same &= chunk_of(&p, wk.ptrs[w * LANES + l]) == chunk_of(&p, wk.ptrs[w * LANES]) &&
                    wk.ptrs[w * LANES + l] == wk.ptrs[w * LANES] + 2048u * l;
    OK(same, "a warp's 32 blocks of 2 KiB are one whole slab, in lane order");
    OK(p.st.chunks_live == 8, "the 8 slabs live: %llu chunks", p.st.chunks_live);
    free_all(&p, wk.ptrs, 8 * LANES, 8);
    pool_usage(&p, &used, &peak);
    OK(used == 0 && cached_chunks(&p) == 8 && p.st.chunks_live == 8,
       "the empty slabs go to the cache, still counted live (%llu B used, %u cached, %llu live)",
       (unsigned long long)used, cached_chunks(&p), p.st.chunks_live);
    for (cpd_u32 t = 0; t < 1024; t++)
        cached_before[t] = (unsigned char)is_cached(&p, t);
    /* again: the warps that find a chunk in their bucket take a whole slab of it */
    heap_round(&wk, 2048, "2 KiB again");
    same = 1;
    for (unsigned w = 0; w < 8; w++) {
        cpd_u32 t = chunk_of(&p, wk.ptrs[w * LANES]);
        for (unsigned l = 0; l < LANES; l++)
            same &= chunk_of(&p, wk.ptrs[w * LANES + l]) == t && wk.ptrs[w * LANES + l] == wk.ptrs[w * LANES] + 2048u * l;
        warps_cached += cached_before[t];
    }
    OK(same, "a warp's 32 blocks are one whole slab, in lane order");
    OK(warps_cached >= 1 && p.st.chunks_live == 8 + (8 - warps_cached) && cached_chunks(&p) == 8 - warps_cached,
       "%u warps took a cached chunk, the others the map (%llu live, %u cached)", warps_cached, p.st.chunks_live,
       cached_chunks(&p));
    free_all(&p, wk.ptrs, 8 * LANES, 8);
    OK(cached_chunks(&p) == p.st.chunks_live, "all %u empty slabs cached", cached_chunks(&p));
    before = sweep_by_warp(&p);
    OK(before >= 8 && cached_chunks(&p) == 0 && p.st.chunks_live == 0,
       "a sweep gives the cache back to the map (%u chunks; %u cached, %llu live)", before, cached_chunks(&p),
       p.st.chunks_live);
    /* single-chunk runs: one map word for the warp */
    heap_round(&wk, 65536, "32 lanes of 64 KiB");
    same = 1;
    for (unsigned w = 0; w < 8; w++)
        for (unsigned l = 0; l < LANES; l++)
            same &= (chunk_of(&p, wk.ptrs[w * LANES + l]) >> 5) == (chunk_of(&p, wk.ptrs[w * LANES]) >> 5);
    OK(same, "a warp's 32 single-chunk runs come from one map word");
    OK(p.st.chunks_live == 8 * LANES, "the live count once per warp: %llu chunks", p.st.chunks_live);
    free_all(&p, wk.ptrs, 8 * LANES, 8);
    OK(cached_chunks(&p) == 64 && p.st.chunks_live == 64,
       "64 go to the cache (its 2 buckets full), the rest back to the map once per warp (%u cached, %llu live)",
       cached_chunks(&p), p.st.chunks_live);
    for (cpd_u32 t = 0; t < 1024; t++)
        cached_before[t] = (unsigned char)is_cached(&p, t);
    before = cached_chunks(&p);
    heap_round(&wk, 65536, "64 KiB again");
    for (unsigned i = 0; i < 8 * LANES; i++)
        from_cache += cached_before[chunk_of(&p, wk.ptrs[i])];
    OK(from_cache == (int)(before - cached_chunks(&p)) && from_cache > 0 &&
           p.st.chunks_live == 64 + 8 * LANES - (unsigned)from_cache,
       "%d runs from the cache, the others from the map (%llu live)", from_cache, p.st.chunks_live);
    free_all(&p, wk.ptrs, 8 * LANES, 8);
    sweep_by_warp(&p);
    pool_usage(&p, &used, &peak);
    OK(used == 0 && p.st.chunks_live == 0, "everything back (%llu B, %llu live)", (unsigned long long)used,
       p.st.chunks_live);
    heap_case_end(&p, &wk);
}

#ifdef CPD_HEAP_STREAM
/* The stream variant (alloc_heap_stream.cuh): a warp's blocks in lane
 * order from its stream, a class's blocks packed from the lowest chunks,
 * runs prepared ahead, everything back after the frees, and a sweep that
 * turns the streams off gives back their runs (the slots serve after it). */
static void case_heap_stream(void)
{
    pool p;
    work wk = {0};
    unsigned long long nulls, bad, count = 6000;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    cpd_u64 used = 0, peak = 0;
    int order = 1, rc;
    unsigned prepared = 0, swept;
    if (heap_case_begin(&p, &wk, "heap streams", 1, 64u << 20, (size_t)count) != 0)
        return;
    OK(p.st.stream_base[1] - p.st.stream_base[0] == 1 && p.st.stream_base[3] - p.st.stream_base[2] == 4,
       "one stream for 16 B, four for 64 B (%u, %u)", p.st.stream_base[1] - p.st.stream_base[0],
       p.st.stream_base[3] - p.st.stream_base[2]);
    wk.nw = 8;
    SIM.split = 0;
    heap_round(&wk, 16, "8 warps of 16 B");
    free_all(&p, wk.ptrs, 8 * LANES, 8);
    /* again, the stream's run installed: each warp one add */
    heap_round(&wk, 16, "8 warps of 16 B again");
    for (unsigned w = 0; w < 8; w++)
        for (unsigned l = 1; l < LANES; l++)
            order &= wk.ptrs[w * LANES + l] == wk.ptrs[w * LANES] + 16u * l;
    OK(order, "a warp's blocks are consecutive, in lane order");
    OK(p.st.hev[CPD_HEV_STREAM] == 16 * LANES, "all from the stream (%llu)", p.st.hev[CPD_HEV_STREAM]);
    free_all(&p, wk.ptrs, 8 * LANES, 8);
    /* 6000 blocks of 64 B from 16 warps at a time, split warps: packed */
    SIM.split = 1;
    wk.nw = MAXW;
    wk.min = wk.max = 64;
    rc = alloc_all(&wk, count);
    check_blocks(&wk, count, &nulls, &bad);
    OK(rc == 0 && nulls == 0 && bad == 0, "6000 blocks of 64 B served, disjoint, intact (%s)", rc ? SIM.err : "ok");
    for (unsigned long long i = 0; i < count; i++) {
        if ((uintptr_t)wk.ptrs[i] < lo)
            lo = (uintptr_t)wk.ptrs[i];
        if ((uintptr_t)wk.ptrs[i] + 64u > hi)
            hi = (uintptr_t)wk.ptrs[i] + 64u;
    }
    /* at most the four streams' runs and their prepared ones (a chunk
     * each here) past the blocks */
    OK(hi - lo <= count * 64u + 8u * 65536u, "packed: %llu B span %llu B of blocks",
       (unsigned long long)(hi - lo), count * 64u);
    for (cpd_u32 i = p.st.stream_base[2]; i < p.st.stream_base[3]; i++)
        prepared += p.st.hprep[i] != 0u;
    OK(p.st.hev[CPD_HEV_INSTALLS] >= 4 && p.st.hev[CPD_HEV_PREPARED] >= 1 && prepared >= 1,
       "runs installed (%llu), prepared ahead (%llu used, %u waiting)", p.st.hev[CPD_HEV_INSTALLS],
       p.st.hev[CPD_HEV_PREPARED], prepared);
    rc = free_all(&p, wk.ptrs, count, MAXW);
    pool_usage(&p, &used, &peak);
    OK(rc == 0 && used == 0 && p.st.chunks_live > 0, "freed: nothing in use, the current runs kept (%llu live)",
       p.st.chunks_live);
    swept = sweep_by_warp(&p);
    OK(swept > 0 && p.st.chunks_live == 0 && p.st.stream_off[2] && p.st.stream_off[0],
       "a sweep turns the streams off and gives their runs back (%u; %llu live)", swept, p.st.chunks_live);
    heap_round(&wk, 64, "64 B after the streams are off");
    OK(p.st.hev[CPD_HEV_STREAM] == 16 * LANES + count, "served by the slots (%llu from streams)",
       p.st.hev[CPD_HEV_STREAM]);
    heap_case_end(&p, &wk);
}
#endif

/* The last look before a NULL: a put that raced a class's first sweep
 * (its entry in, the exhausted flag not yet seen: no epoch bump) left a
 * free chunk in the cache; the class's next request must still find it. */
static void case_heap_last_look(void)
{
    pool p;
    work wk = {0};
    unsigned long long nulls, bad;
    const cpd_u64 cap = 4u << 20; /* 64 chunks */
    unsigned char *run;
    cpd_u32 s;
    int rc;
    if (heap_case_begin(&p, &wk, "heap last look", 0, cap, cap / 16 + 1024) != 0)
        return;
    wk.nw = 1;
    heap_round_of(&wk, 1, 65536, "a single-chunk run");
    run = wk.ptrs[0];
    s = chunk_of(&p, run);
    /* the rest of the pool in 16 B blocks, and more: the class runs out */
    wk.nw = MAXW;
    wk.min = wk.max = 16;
    rc = alloc_all(&wk, (cap - 65536u) / 16u + 256u);
    check_blocks(&wk, (cap - 65536u) / 16u + 256u, &nulls, &bad);
    OK(rc == 0 && nulls >= 256 && bad == 0 && p.st.exhausted,
       "the pool spent in 16 B blocks (%llu NULL, %llu bad, exhausted %u)", nulls, bad, p.st.exhausted);
    /* the run's chunk freed into the cache as by a put that saw nothing */
    p.st.cstate[s] -= CPD_HEAP_RUN << CPD_HEAP_TAG_SHIFT;
    p.st.hcache[s & 31u] = s + 1u;
    wk.nw = 1;
    rc = alloc_all(&wk, LANES);
    check_blocks(&wk, LANES, &nulls, &bad);
    OK(rc == 0 && nulls == 0 && bad == 0 && chunk_of(&p, wk.ptrs[0]) == s,
       "a warp of 16 B blocks finds the cached chunk (%llu NULL, chunk %u of %u)", nulls,
       wk.ptrs[0] ? chunk_of(&p, wk.ptrs[0]) : 0u, s);
    heap_case_end(&p, &wk);
}

/* A full cache in a small pool: the whole pool in one block, then in 8 KiB
 * blocks after 16 B blocks, with nothing lost to the cache (a sweep gives
 * it back when the map runs short). */
static void case_heap_cache_full(void)
{
    pool p;
    work wk = {0};
    unsigned long long nulls, bad;
    const cpd_u64 cap = 4u << 20; /* 64 chunks, 4 buckets of 32 */
    unsigned long long count;
    int rc;
    if (heap_case_begin(&p, &wk, "heap cache, pool spent", 1, cap, cap / 16) != 0)
        return;
    wk.nw = 2;
    heap_round_of(&wk, 64, 65536, "64 single-chunk runs fill the pool");
    OK(p.st.nbuckets == 4 && p.st.chunks_live == 64, "64 live (%u buckets)", p.st.nbuckets);
    free_all(&p, wk.ptrs, 64, 2);
    OK(cached_chunks(&p) > 0, "%u of them cached", cached_chunks(&p));
    wk.nw = 1;
    heap_round_of(&wk, 1, cap, "the whole pool in one block (a sweep emptied the cache)");
    OK(wk.ptrs[0] == p.st.base, "at the pool's start");
    free_all(&p, wk.ptrs, 1, 1);
    OK(p.st.chunks_live == 0 && cached_chunks(&p) == 0, "back: %llu live", p.st.chunks_live);
    /* while a run that missed sweeps and looks again, frees go to the map
     * (frees refilling the cache would keep its second look from finding
     * the chunks its sweep gave back); after it, to the cache again */
    OK(p.st.sweeping == 0 && !p.st.exhausted, "the run's sweep is over, the pool not exhausted (%u, %u)",
       p.st.sweeping, p.st.exhausted);
    heap_round_of(&wk, 32, 65536, "32 single-chunk runs");
    p.st.sweeping = 1; /* as a run sweeping at the same time */
    free_all(&p, wk.ptrs, 32, 1);
    OK(cached_chunks(&p) == 0 && p.st.chunks_live == 0,
       "freed while a run sweeps: none cached (%u cached, %llu live)", cached_chunks(&p), p.st.chunks_live);
    p.st.sweeping = 0;
    heap_round_of(&wk, 32, 65536, "32 single-chunk runs again");
    free_all(&p, wk.ptrs, 32, 1);
    OK(cached_chunks(&p) > 0, "freed after it: cached again (%u)", cached_chunks(&p));
    /* cached 8 KiB slabs, then the pool spent in 16 B and in 8 KiB blocks */
    wk.nw = 8;
    heap_round(&wk, 8192, "8 KiB");
    free_all(&p, wk.ptrs, 8 * LANES, 8);
    OK(cached_chunks(&p) > 0, "%u empty 8 KiB slabs cached", cached_chunks(&p));
    for (cpd_u64 size = 16; size <= 8192; size *= 512) {
        count = cap / size;
        wk.nw = MAXW;
        wk.min = wk.max = size;
        rc = alloc_all(&wk, count);
        check_blocks(&wk, count, &nulls, &bad);
        OK(rc == 0 && nulls == 0 && bad == 0, "every %llu B block of the pool served (%llu NULL, %llu bad%s%s)",
           (unsigned long long)size, nulls, bad, rc ? ": " : "", rc ? SIM.err : "");
        rc = free_all(&p, wk.ptrs, count, MAXW);
        OK(rc == 0, "and freed");
    }
    OK(p.st.failed == 0, "no NULL (%llu)", (unsigned long long)p.st.failed);
    heap_case_end(&p, &wk);
}

/* Allocate until NULL (the survey's out-of-memory test) with full warps:
 * the heap serves >= 90% of a small pool at each size; nothing overlaps. */
static void case_heap_oom(cpd_u64 size)
{
    pool p;
    work wk = {0};
    unsigned long long count, nulls = 0, bad = 0;
    const cpd_u64 cap = 1u << 20;
    int rc;
    char group[64];
    snprintf(group, sizeof group, "heap out of memory, %llu B", (unsigned long long)size);
    count = cap / size + 2 * LANES;
    if (heap_case_begin(&p, &wk, group, 1, cap, (size_t)count) != 0)
        return;
    wk.nw = MAXW;
    wk.min = wk.max = size;
    rc = alloc_all(&wk, count);
    check_blocks(&wk, count, &nulls, &bad);
    OK(rc == 0, "every warp call met its lanes%s%s", rc ? ": " : "", rc ? SIM.err : "");
    OK(bad == 0, "nothing overlaps (%llu bad)", bad);
    OK((count - nulls) * size >= cap * 9 / 10, "served %.1f%% of the capacity",
       100.0 * (double)((count - nulls) * size) / (double)cap);
    OK(nulls > 0 && p.st.failed == nulls, "NULLs counted: %llu", nulls);
    heap_case_end(&p, &wk);
}

/* Threads that allocate, write, let others run, check and free, again and
 * again, sizes drawn per round: far more than the pool passes through. */
static void case_churn(cpd_u32 kind, cpd_u64 cap, cpd_u64 min, cpd_u64 max)
{
    pool p;
    work wk = {0};
    cpd_u64 used = 0, peak = 0;
    int rc = 0;
    snprintf(tap_group, sizeof tap_group, "%s churn, %llu..%llu B", kind_name(kind), (unsigned long long)min,
             (unsigned long long)max);
    SIM.split = 1;
    if (pool_make(&p, kind, cap) != 0)
        return;
    wk.p = &p;
    wk.nw = MAXW;
    wk.min = min;
    wk.max = max;
    wk.seed = 99;
    wk.churn = 12;
    for (int b = 0; b < 4 && rc == 0; b++) {
        wk.first = (unsigned long long)b * MAXW * LANES;
        rc = sim_run(&SIM, MAXW, LANES, body_alloc, &wk);
    }
    OK(rc == 0, "every warp call met its lanes%s%s", rc ? ": " : "", rc ? SIM.err : "");
    OK(wk.bad == 0, "no block overwritten while held (%llu)", wk.bad);
    /* (a slab pool's slabs keep their class until a reset: a class may find
     * every slab it has full and none fresh, which its policy allows) */
    OK(kind == CPD_KIND_SLAB || p.st.failed == 0, "no NULL (%llu)", (unsigned long long)p.st.failed);
    pool_usage(&p, &used, &peak);
    OK(used == 0, "everything back (%llu B in use)", (unsigned long long)used);
    free(p.mem);
    tap_group[0] = 0;
}

int main(void)
{
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    /* the sanitizers do not follow swapcontext's stacks */
    printf("ok 1 - # SKIP warp simulation under a sanitizer\n");
    printf("# 1 passed, 0 failed\n");
    return 0;
#else
    if (getenv("CUPOLA_SLOW")) {
        printf("ok 1 - # SKIP warp simulation under valgrind (CUPOLA_SLOW)\n");
        printf("# 1 passed, 0 failed\n");
        return 0;
    }
    SIM.stacks = malloc((size_t)MAXW * LANES * STACK);
    /* CUPOLA_WARPSIM_SEED: another interleaving */
    SIM.rng = getenv("CUPOLA_WARPSIM_SEED") ? strtoull(getenv("CUPOLA_WARPSIM_SEED"), NULL, 0) * 2654435761ull + 1u
                                            : 0x2545f4914f6cdd1dull;
    printf("# seed %llu\n", SIM.rng);
    if (!SIM.stacks)
        return 1;
    for (int split = 0; split < 2; split++) {
        case_keep(CPD_KIND_WARP_BUMP, 4u << 20, 1, 300, 2000, split);
        case_keep(CPD_KIND_SLAB, 16u << 20, 16, 16, 3000, split);
        case_keep(CPD_KIND_SLAB, 16u << 20, 1, 8192, 1500, split);
        case_keep(CPD_KIND_HEAP, 64u << 20, 16, 16, 3000, split);
        case_keep(CPD_KIND_HEAP, 64u << 20, 512, 512, 2000, split);
        case_keep(CPD_KIND_HEAP, 64u << 20, 4096, 4096, 2000, split);
        case_keep(CPD_KIND_HEAP, 64u << 20, 8192, 8192, 1000, split);
        case_keep(CPD_KIND_HEAP, 64u << 20, 1, 9000, 2000, split);
        case_keep(CPD_KIND_HEAP, 64u << 20, 65536, 65536, 600, split);
        case_keep(CPD_KIND_HEAP, 64u << 20, 1, 200000, 300, split);
        case_keep(CPD_KIND_HEAP, 1u << 20, 1, 4096, 250, split); /* 16 KiB chunks: 512 B are 32 a slab */
    }
    case_heap_paths();
#ifdef CPD_HEAP_STREAM
    case_heap_stream();
#endif
    case_heap_cache_full();
    case_heap_last_look();
    for (cpd_u64 size = 16; size <= 65536; size *= 4)
        case_heap_oom(size);
    case_churn(CPD_KIND_SLAB, 4u << 20, 16, 2048);
    case_churn(CPD_KIND_HEAP, 4u << 20, 16, 2048);
    case_churn(CPD_KIND_HEAP, 64u << 20, 1, 100000); /* 512 lanes hold up to 100 KB each */
    free(SIM.stacks);
    return tap_finish();
#endif
}
