/*
 * pool/torch_stream.c: blocks of the torch model used on other streams
 * (pool/torch.c states the policy): a free that waits for those streams
 * (an event over the device; the replay's completion otherwise), the
 * events queried at the next malloc, synchronization (every pending block
 * back), and empty_cache.
 */
#include "torch_impl.h"

static void pending_unlink(cp_torch *t, cp_torch_block *b)
{
    cp_torch_block **pp;
    for (pp = &t->pending; *pp; pp = &(*pp)->pnext)
        if (*pp == b) {
            *pp = b->pnext;
            return;
        }
}

static void settle(cp_torch *t, cp_torch_block *b)
{
    if (b->tok) {
        b->tok->b = NULL;
        b->tok = NULL;
    }
    b->events = 0;
    b->later = 0;
    b->use = NULL;
    cp_tk_free_block(t, b);
}

/* Device: PyTorch queries each stream's events in order and stops at the
 * first one not complete (process_events). */
void cp_tk_process_events(cp_torch *t)
{
    tevent **pp = &t->events, *e;
    uint64_t blocked[16];
    int nblocked = 0;
    t->events_tail = NULL;
    while ((e = *pp) != NULL) {
        int done = 0, i, skip = 0;
        for (i = 0; i < nblocked; i++)
            skip |= blocked[i] == e->sid;
        if (!skip && cp_event_done(e->e, &done) == CP_OK && done) {
            *pp = e->next;
            if (e->b->events && --e->b->events == 0) {
                pending_unlink(t, e->b);
                settle(t, e->b);
            }
            e->next = t->spare_ev;
            t->spare_ev = e;
            continue;
        }
        if (!skip && nblocked < 16)
            blocked[nblocked++] = e->sid;
        t->events_tail = e;
        pp = &e->next;
    }
}

/* Every pending block back to its pool: the allocator synchronizes
 * (synchronize_and_free_events). */
void cp_tk_synchronize(cp_torch *t)
{
    t->st.num_sync_all_streams++;
    while (t->events) {
        tevent *e = t->events;
        t->events = e->next;
        cp_be->event_synchronize(e->e);
        if (e->b->events && --e->b->events == 0) {
            pending_unlink(t, e->b);
            settle(t, e->b);
        }
        e->next = t->spare_ev;
        t->spare_ev = e;
    }
    t->events_tail = NULL;
    while (t->pending) {
        cp_torch_block *b = t->pending;
        t->pending = b->pnext;
        settle(t, b);
    }
    while (t->later_new) {
        cp_torch_block *b = t->later_new;
        t->later_new = b->pnext;
        settle(t, b);
    }
    while (t->later_ready) {
        cp_torch_block *b = t->later_ready;
        t->later_ready = b->pnext;
        settle(t, b);
    }
}

/* Completions the replay deferred come back at the start of a malloc. */
void cp_tk_settle_later(cp_torch *t)
{
    while (t->later_ready) {
        cp_torch_block *b = t->later_ready;
        t->later_ready = b->pnext;
        settle(t, b);
    }
}

void cp_tk_make_pending(cp_torch *t, cp_torch_block *b)
{
    cp_tk_free_common(t, b);
    b->events = 1;
    b->pnext = t->pending;
    t->pending = b;
}

cp_torch_pending *cp_torch_free_pending(cp_torch *t, cp_torch_block *b)
{
    cp_torch_pending *p = t->spare_tok;
    if (!p) {
        tokslab *s = (tokslab *)malloc(sizeof *s);
        size_t i;
        if (!s) {
            cp_torch_free(t, b);
            return NULL;
        }
        s->next = t->tokslabs;
        t->tokslabs = s;
        for (i = 0; i < sizeof s->p / sizeof s->p[0]; i++) {
            s->p[i].next = t->spare_tok;
            t->spare_tok = &s->p[i];
        }
        p = t->spare_tok;
    }
    t->spare_tok = p->next;
    cp_tk_make_pending(t, b);
    p->b = b;
    b->tok = p;
    return p;
}

void cp_torch_complete(cp_torch *t, cp_torch_pending *p, int later)
{
    cp_torch_block *b = p->b;
    p->b = NULL;
    p->next = t->spare_tok;
    t->spare_tok = p;
    if (!b)
        return; /* it went back already (a synchronization) */
    b->tok = NULL;
    if (later) {
        /* from the pending list to the completions that come back at the
         * malloc after next (the lists share pnext) */
        pending_unlink(t, b);
        b->later = 1;
        b->pnext = t->later_new;
        t->later_new = b;
        return;
    }
    pending_unlink(t, b);
    settle(t, b);
}

void cp_torch_empty_cache(cp_torch *t)
{
    cp_tk_release_cached(t, 0);
}
