/*
 * pool/vmm_decay.c: when the vmm pool gives idle pages back (pool/vmm.c
 * states the policy): beyond release_threshold at once (reap), or by the
 * default policy, which reads the pool's clock, accrues a budget for
 * mapping, follows the recent peak of demand and releases pages idle for a
 * window (decay).
 */
#include "vmm_impl.h"

/* The decay window: the time the budget needs to remap the peak once. */
double cp_vm_window(const vmm *v)
{
    return (double)v->peak_pages * PAGE_COST / BUDGET;
}

/* The most demand over the window (epochs that ended within it, and the
 * current one), at the last reading; *until: the first time one of the
 * epochs counted leaves the window (or the current one ends), before which
 * the figure cannot fall. */
uint64_t cp_vm_recent_peak(const vmm *v, double *until)
{
    double w = cp_vm_window(v);
    uint64_t d = v_demand(v);
    unsigned i;
    *until = v->ep_start + w / DEMAND_EPOCHS;
    for (i = 0; i <= DEMAND_EPOCHS; i++) {
        if (i == v->ep_cur || v->ep[i].start < v->now - w)
            continue;
        if (v->ep[i].start + w < *until)
            *until = v->ep[i].start + w;
        if (v->ep[i].peak > d)
            d = v->ep[i].peak;
    }
    return v->ep[v->ep_cur].peak > d ? v->ep[v->ep_cur].peak : d;
}

/* Reads the clock; the budget accrues (up to two remappings of the device).
 * A reading below the last (a manual clock reset at creation) is no time
 * passing. */
static void v_clock(vmm *v)
{
    double now = cp_clock_now(v->h.base.clock);
    if (now > v->now) {
        double cap = (double)(v->span >> v->gshift) * PAGE_COST;
        v->budget += (now - v->now) * BUDGET;
        if (v->budget > cap)
            v->budget = cap;
        v->now = now;
    }
}

/* v_clock, then a new epoch begins every eighth of the window (v_roll),
 * and the floor (recent peak plus headroom, at least initial) follows.  A past
 * epoch's `start` holds the time it ended: the last reading before the
 * next began.  That is exact because the clock is read whenever an epoch's
 * peak rises, and before a free lowers the demand; between readings demand
 * only rises within the peak, and the next epoch starts from the demand
 * then. */
void cp_vm_roll(vmm *v)
{
    double last = v->now;
    v_clock(v);
    if (v->now - v->ep_start >= cp_vm_window(v) / DEMAND_EPOCHS) {
        v->ep[v->ep_cur].start = last; /* its end */
        v->ep_cur = (v->ep_cur + 1) % (DEMAND_EPOCHS + 1);
        v->ep[v->ep_cur].peak = v_demand(v);
        v->ep_start = v->now;
    }
}

void cp_vm_tick(vmm *v)
{
    uint64_t fl;
    cp_vm_roll(v);
    fl = with_headroom(cp_vm_recent_peak(v, &v->floor_until));
    v->floor_pages = fl > v->keep_pages ? fl : v->keep_pages;
}

void cp_vm_reap(vmm *v, cp_stream *s)
{
    if (v->nopen)
        cp_vm_close_open(v, cp_so_sid(s), s);
    while (v->idle_pages > v->keep_pages) {
        if (!v->settled_tail) {
            if (!v->gq)
                return;
            cp_vm_settle_done(v);
            if (!v->settled_tail)
                return;
        }
        if (cp_vm_release_page(v, v->settled_tail) != CP_OK)
            return;
    }
}

/* The default policy's release: settled pages idle for a window or more,
 * least recently idle first, while more than the floor are mapped and the
 * budget pays (a failure stops it, as in reap).  Called at the end of every
 * allocation that leaves idle pages: the clock is read then, so the window
 * is measured even while allocations map nothing. */
void cp_vm_decay(vmm *v, cp_stream *s)
{
    double w;
    vpage *p;
    cp_vm_tick(v);
    w = cp_vm_window(v);
    if (v->mapped_pages > v->floor_pages && v->budget >= PAGE_COST) {
        if (v->nopen)
            cp_vm_close_open(v, cp_so_sid(s), s);
        if (v->gq && (!v->settled_tail || v->now - v->settled_tail->idle_since < w))
            cp_vm_settle_done(v); /* pending pages may have been idle longer */
        while (v->mapped_pages > v->floor_pages && v->budget >= PAGE_COST &&
               (p = v->settled_tail) != NULL && v->now - p->idle_since >= w) {
            if (cp_vm_release_page(v, p) != CP_OK)
                return;
            v->budget -= PAGE_COST;
        }
    }
    /* When anything could be released next (allocations until then only
     * read the clock): when the floor may fall, when the least recently
     * idle page will have been idle a window, or when the budget pays. */
    if (v->mapped_pages <= v->floor_pages)
        v->decay_at = v->floor_until;
    else if (!v->settled_tail)
        v->decay_at = v->now; /* pending pages: at the next allocation */
    else if (v->now - v->settled_tail->idle_since < w)
        v->decay_at = v->settled_tail->idle_since + w;
    else
        v->decay_at = v->now + (PAGE_COST - v->budget) / BUDGET;
}
