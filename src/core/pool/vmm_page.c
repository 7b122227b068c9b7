/*
 * pool/vmm_page.c: the vmm pool's pages (pool/vmm.c states the policy):
 * physical memory for a page (new, or an idle page's moved), mapping runs
 * of pages, the pages a free leaves idle, and the generations that hold
 * idle pages until the frees on their stream are known complete.
 */
#include "vmm_impl.h"

#include <stdlib.h>

/* Generation g's frees are complete: its pages are settled. */
static void gen_settle(vmm *v, vgen *g)
{
    vpage *p;
    while ((p = g->pages) != NULL) {
        g->pages = p->in;
        settled_push(v, p);
    }
}

/* Settles the generations at the head of the queue whose events have
 * completed (one query each, stopping at the first that has not). */
void cp_vm_settle_done(vmm *v)
{
    vgen *g;
    while ((g = v->gq) != NULL) {
        int done = 0;
        if (cp_event_done(g->e, &done) != CP_OK || !done)
            return;
        gen_settle(v, g);
        v->gq = g->next;
        if (!v->gq)
            v->gq_tail = NULL;
        g->next = v->gspare;
        v->gspare = g;
    }
}

cp_status cp_vm_dev_sync(vmm *v)
{
    return cp_be->device_synchronize_on ? cp_be->device_synchronize_on(v->dev)
                                        : cp_be->device_synchronize();
}

/* The device is synchronized: every pending page is settled. */
cp_status cp_vm_settle_all(vmm *v)
{
    vgen *g;
    uint32_t i;
    int any = v->gq || v->nogen.pages;
    for (i = 0; i < v->nopen && !any; i++)
        any = v->opens[i].g->pages != NULL;
    if (!any)
        return CP_OK;
    if (v->real) {
        cp_status st = cp_vm_dev_sync(v);
        if (st != CP_OK)
            return st;
    }
    gen_settle(v, &v->nogen);
    for (i = 0; i < v->nopen; i++)
        gen_settle(v, v->opens[i].g);
    while ((g = v->gq) != NULL) {
        gen_settle(v, g);
        v->gq = g->next;
        g->next = v->gspare;
        v->gspare = g;
    }
    v->gq_tail = NULL;
    return CP_OK;
}

static cp_status unmap_page(vmm *v, vpage *p)
{
    if (v->real) {
        cp_status st =
            cp_be->vm_unmap(v->dev, (void *)(uintptr_t)page_addr(v, p), (size_t)v->gran);
        if (st != CP_OK)
            return st;
    }
    v->unmaps++;
    return CP_OK;
}

/* Unmaps an idle page and releases its memory.  A failed unmap still takes
 * the page off the idle list (so loops over it end) and keeps the handle
 * (it is still mapped): the pool counts it no longer, the error says why. */
cp_status cp_vm_release_page(vmm *v, vpage *p)
{
    cp_status st = unmap_page(v, p);
    idle_unlink(v, p);
    if (st == CP_OK && v->real)
        cp_be->vm_release(v->dev, p->handle, (size_t)v->gran);
    p->handle = 0;
    v->mapped_pages--;
    return st;
}

/* Physical memory for one page: moved from an idle page, or new. */
static cp_status page_source(vmm *v, uint64_t *handle)
{
    uint64_t mapped = v->mapped_pages * v->gran;
    int must_move = (v->max && mapped + v->gran > v->max) || !v->h.o.grow;
    int move;
    cp_status st = CP_OK;
    vpage *p;

    if (v->timed) {
        /* Move only past the recent peak (this page's demand counted) and
         * when the budget pays; otherwise a new page. */
        uint64_t d = v_demand(v) + 1, fl = with_headroom(d);
        v_note_demand(v, d);
        if (fl < v->floor_pages)
            fl = v->floor_pages;
        move = must_move ||
               (v->settled && v->mapped_pages + 1 > fl && v->budget >= PAGE_COST);
        if (move && !must_move)
            v->budget -= PAGE_COST;
        else if (!move && v->mapped_pages + 1 > fl)
            v->decay_at = 0; /* past the floor: look again at the next allocation */

    } else {
        move = must_move || (v->settled && v->idle_pages > v->keep_pages);
    }
    if (!move) {
        if (v->real) {
            st = cp_be->vm_create(v->dev, handle, (size_t)v->gran);
        } else {
            *handle = ++v->next_handle;
        }
        if (st == CP_OK) {
            if (++v->mapped_pages > v->peak_pages)
                v->peak_pages = v->mapped_pages;
            return CP_OK;
        }
        if (st != CP_ERR_OOM)
            return st;
    }
    /* Move an idle page, the least recently idle settled one; if none is
     * settled, synchronize once. */
    if (!v->settled && v->idle_pages && (st = cp_vm_settle_all(v)) != CP_OK)
        return st;
    p = v->settled_tail;
    if (!p) {
        if (must_move && v->h.o.grow)
            return cp_error_set(CP_ERR_OOM, "out of memory: one more page would pass the "
                                "pool's max of %llu bytes (mapped %llu)",
                                (unsigned long long)v->max, (unsigned long long)mapped);
        if (!v->h.o.grow)
            return cp_error_set(CP_ERR_OOM, "out of memory: no idle page left to map "
                                "(grow=false, mapped %llu)", (unsigned long long)mapped);
        return st != CP_OK ? st : cp_error_set(CP_ERR_OOM, "out of memory: no page to map");
    }
    st = unmap_page(v, p);
    if (st != CP_OK)
        return st;
    idle_unlink(v, p);
    *handle = p->handle;
    p->handle = 0;
    return CP_OK;
}

cp_status cp_vm_map_run(vmm *v, vpage *first, uint64_t n)
{
    uint64_t i;
    cp_status st = CP_OK;
    for (i = 0; i < n; i++) {
        vpage *p = first + i;
        uint64_t hd = 0;
        st = page_source(v, &hd);
        if (st == CP_OK && v->real) {
            st = cp_be->vm_map(v->dev, (void *)(uintptr_t)page_addr(v, p), (size_t)v->gran, hd);
            if (st != CP_OK) {
                cp_be->vm_release(v->dev, hd, (size_t)v->gran);
                v->mapped_pages--;
            }
        }
        if (st != CP_OK)
            break;
        p->handle = hd;
        v->maps++;
    }
    /* One access call for the whole run mapped. */
    if (i && v->real) {
        cp_status a = cp_be->vm_set_access(v->dev, (void *)(uintptr_t)page_addr(v, first),
                                           (size_t)(i * v->gran));
        if (a != CP_OK && st == CP_OK)
            st = a;
        if (a != CP_OK) {
            /* no access: the run is of no use; undo it */
            uint64_t j;
            for (j = 0; j < i; j++) {
                cp_be->vm_unmap(v->dev, (void *)(uintptr_t)page_addr(v, &first[j]),
                                (size_t)v->gran);
                cp_be->vm_release(v->dev, first[j].handle, (size_t)v->gran);
                first[j].handle = 0;
                v->mapped_pages--;
                v->unmaps++;
            }
        }
    }
    return st;
}

/* A block of [addr, addr+size) is no longer live: its pages lose it.
 * Pages left idle go to the settled list (virtual upstream: nothing runs
 * on them) or to generation g. */
uint64_t cp_vm_pages_put(vmm *v, uint64_t addr, uint64_t size, vgen *g)
{
    vpage *p = page_of(v, addr), *last = page_of(v, addr + size - 1);
    uint64_t n = 0;
    for (; p && p <= last; p++) {
        if (--p->live == 0 && p->handle) {
            if (v->timed && !n)
                cp_vm_roll(v); /* the clock is read once per free that idles pages */
            p->idle_since = v->now;
            if (g) {
                p->gen = g;
                idle_push(&g->pages, p);
            } else {
                settled_push(v, p);
            }
            v->idle_pages++;
            n++;
        }
    }
    return n;
}

/* The open generation of stream sid (created on demand; NULL when no
 * host memory is left: the caller uses the event-less one). */
vgen *cp_vm_open_of(vmm *v, uint64_t sid, int create)
{
    uint32_t i;
    vgen *g;
    for (i = 0; i < v->nopen; i++)
        if (v->opens[i].sid == sid)
            return v->opens[i].g;
    if (!create)
        return NULL;
    if (v->nopen == v->capopen) {
        uint32_t cap = v->capopen ? 2 * v->capopen : 4;
        struct vopen *no = realloc(v->opens, cap * sizeof *no);
        if (!no)
            return NULL;
        v->opens = no;
        v->capopen = cap;
    }
    g = v->gspare;
    if (g)
        v->gspare = g->next;
    else if (!(g = calloc(1, sizeof *g)))
        return NULL;
    g->next = NULL;
    v->opens[v->nopen].sid = sid;
    v->opens[v->nopen].g = g;
    v->nopen++;
    return g;
}

/* Moves every page of g to the event-less generation. */
static void gen_orphan(vmm *v, vgen *g)
{
    vpage *p;
    while ((p = g->pages) != NULL) {
        g->pages = p->in;
        p->gen = &v->nogen;
        idle_push(&v->nogen.pages, p);
    }
}

/* The pool runs on stream s (id sid), so s is alive: closes sid's open
 * generation by recording its event on s now (it covers every free of
 * that stream before it) and queues it; its pages settle once the event
 * has completed.  Recording later than the frees is only more cautious. */
void cp_vm_close_open(vmm *v, uint64_t sid, cp_stream *s)
{
    uint32_t i = 0;
    vgen *g = NULL;
    int idle = 0;
    /* Entries whose pages were all taken back go (streams come and go:
     * the list stays as short as the streams with pending idle pages). */
    while (i < v->nopen) {
        vgen *o = v->opens[i].g;
        if (!o->pages) {
            o->next = v->gspare;
            v->gspare = o;
            v->opens[i] = v->opens[--v->nopen];
        } else if (v->opens[i].sid == sid) {
            g = o;
            break;
        } else {
            i++;
        }
    }
    if (!g)
        return;
    if (cp_be->stream_query(s, &idle) == CP_OK && idle) {
        gen_settle(v, g); /* nothing queued on s: its frees are complete */
        return;
    }
    if ((!g->e && cp_be->event_create(&g->e, 0) != CP_OK) ||
        cp_be->event_record(g->e, s) != CP_OK) {
        gen_orphan(v, g);
        return;
    }
    v->opens[i] = v->opens[--v->nopen];
    g->next = NULL;
    if (v->gq_tail)
        v->gq_tail->next = g;
    else
        v->gq = g;
    v->gq_tail = g;
}
