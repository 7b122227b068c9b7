/*
 * pool/torch_resource.c: the torch model as a cp_resource (every pool's entry
 * points: blocks found from their address, a free on another stream made a
 * pending one), its creation from the pool options, its accessors and
 * PyTorch's counters as read (pool/torch.c states the policy).
 */
#include "torch_impl.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "model.h"
#include "streamorder.h"

/* ---- accessors --------------------------------------------------------------- */
const cp_torch_conf *cp_torch_get_conf(const cp_torch *t)
{
    return &t->conf;
}

void cp_torch_get_stats(cp_torch *t, cp_torch_stats *out)
{
    cp_torch_stat *all[] = {out->allocation, out->segment, out->active, out->inactive_split,
                            out->allocated_bytes, out->reserved_bytes, out->active_bytes,
                            out->inactive_split_bytes, out->requested_bytes};
    size_t i, k;
    *out = t->st;
    for (i = 0; i < sizeof all / sizeof all[0]; i++) {
        all[i][0].current = all[i][1].current + all[i][2].current;
        all[i][0].freed = all[i][1].freed + all[i][2].freed;
        for (k = 0; k < 3; k++)
            all[i][k].allocated = all[i][k].current + all[i][k].freed;
    }
    out->oversize_allocations.allocated =
        out->oversize_allocations.current + out->oversize_allocations.freed;
    out->oversize_segments.allocated = out->oversize_segments.current + out->oversize_segments.freed;
}

uint64_t cp_torch_limit(const cp_torch *t)
{
    return t->has_limit ? t->limit : 0;
}

void cp_torch_account(cp_torch *t, uint64_t allocs, uint64_t frees, uint64_t failed,
                      uint64_t used_peak)
{
    t->base.st.allocs += allocs;
    t->base.st.frees += frees;
    t->base.st.failed += failed;
    if (used_peak > t->base.st.used_peak)
        t->base.st.used_peak = used_peak;
    if ((uint64_t)t->st.reserved_bytes[CP_TORCH_ALL].peak > t->base.st.reserved_peak)
        t->base.st.reserved_peak = (uint64_t)t->st.reserved_bytes[CP_TORCH_ALL].peak;
}

const uint64_t *cp_torch_reserved_now(const cp_torch *t)
{
    return &t->base.reserved;
}

int cp_torch_is_virtual(const cp_torch *t)
{
    return t->is_virtual;
}

uint64_t cp_torch_device_memory(const cp_torch *t)
{
    return t->device_memory;
}

/* ---- the resource ------------------------------------------------------------ */
static cp_status t_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    cp_torch *t = (cp_torch *)r;
    cp_torch_block *b;
    uint64_t addr = 0;
    cp_status st = cp_torch_malloc(t, bytes, cp_so_sid(s), &b, &addr);
    if (st != CP_OK)
        return st;
    if (cp_ptrmap_put(&t->live, addr, b) != 0) {
        cp_torch_free(t, b);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    *out = (void *)(uintptr_t)addr;
    return CP_OK;
}

static cp_status t_free(cp_resource *r, void *p, size_t bytes, cp_stream *s)
{
    cp_torch *t = (cp_torch *)r;
    cp_torch_block *b = (cp_torch_block *)cp_ptrmap_get(&t->live, (uint64_t)(uintptr_t)p);
    (void)bytes;
    if (!b)
        return cp_error_set(CP_ERR_INVALID, "free of %p, which this torch pool did not hand out",
                            p);
    cp_ptrmap_del(&t->live, (uint64_t)(uintptr_t)p);
    if (!t->is_virtual && cp_so_sid(s) != b->stream) {
        /* Freed on another stream than its own: a use of that stream
         * (record_stream), so it waits for that stream's work. */
        tevent *e = t->spare_ev;
        cp_event *ev = NULL;
        if (e)
            t->spare_ev = e->next;
        else
            e = (tevent *)calloc(1, sizeof *e);
        if (e)
            ev = e->e;
        if (!e || (!ev && cp_be->event_create(&ev, 0) != CP_OK)) {
            /* no event (or no host memory for one): wait for the stream
             * instead; the block is off the live map, so it must go back
             * now or be lost */
            free(e);
            cp_be->stream_synchronize(s);
            cp_torch_free(t, b);
            return CP_OK;
        }
        e->e = ev;
        if (cp_be->event_record(ev, s) != CP_OK) {
            e->next = t->spare_ev;
            t->spare_ev = e;
            cp_be->stream_synchronize(s);
            cp_torch_free(t, b);
            return CP_OK;
        }
        e->b = b;
        e->sid = cp_so_sid(s);
        e->next = NULL;
        if (t->events_tail)
            t->events_tail->next = e;
        else
            t->events = e;
        t->events_tail = e;
        cp_tk_make_pending(t, b);
        b->use = s;
        return CP_OK;
    }
    cp_torch_free(t, b);
    return CP_OK;
}

static cp_status t_trim(cp_resource *r, size_t keep)
{
    cp_torch *t = (cp_torch *)r;
    cp_tk_release_cached(t, keep);
    return CP_OK;
}

static void t_free_info(cp_resource *r, uint64_t *largest, uint64_t *free_bytes)
{
    cp_torch *t = (cp_torch *)r;
    cp_rbn *n;
    uint64_t big = 0;
    /* the trees are ordered by stream first: look at every stream's largest */
    for (n = cp_rb_min(t->large.blocks); n; n = cp_rb_next(n))
        if (blk_of(n)->size > big)
            big = blk_of(n)->size;
    for (n = cp_rb_min(t->small.blocks); n; n = cp_rb_next(n))
        if (blk_of(n)->size > big)
            big = blk_of(n)->size;
    *largest = big;
    *free_bytes = t->total - (uint64_t)(t->st.allocated_bytes[1].current +
                                        t->st.allocated_bytes[2].current);
}

static void t_destroy(cp_resource *r)
{
    cp_torch *t = (cp_torch *)r;
    /* Everything back: pending blocks, cached blocks, expandable ranges. */
    if (!t->is_virtual) {
        while (t->events) {
            tevent *e = t->events;
            t->events = e->next;
            cp_be->event_synchronize(e->e);
            e->next = t->spare_ev;
            t->spare_ev = e;
        }
    }
    t->events_tail = NULL;
    t->rec = NULL;
    cp_tk_release_cached(t, 0);
    /* live blocks (none, by the binding's contract; a replay frees its
     * own) and split pieces of segments still hold memory: give the
     * segments back wholesale */
    if (!t->is_virtual) {
        cp_ptrmap seen;
        size_t i;
        if (cp_ptrmap_init(&seen, 64) == 0) {
            for (i = 0; t->live.slots && i <= t->live.mask; i++) {
                cp_torch_block *b = (cp_torch_block *)t->live.slots[i].val;
                if (!t->live.slots[i].key || !b)
                    continue;
                while (b->prev)
                    b = b->prev;
                if (!b->seg && !cp_ptrmap_get(&seen, b->ptr)) {
                    uint64_t sz = 0;
                    cp_torch_block *x;
                    for (x = b; x; x = x->next)
                        sz += x->size;
                    cp_ptrmap_put(&seen, b->ptr, (void *)1);
                    cp_torch_dev_free(t->dev, b->ptr, sz);
                }
            }
            cp_ptrmap_fini(&seen);
        }
    }
    while (t->segs) {
        tseg *s = t->segs;
        t->segs = s->next;
        if (!t->is_virtual) {
            uint64_t off;
            for (off = 0; off < s->size; off += s->page)
                cp_torch_dev_unmap(t->dev, s->base + off, s->page, s->page);
        }
        cp_torch_dev_unreserve(t->dev, s->base, s->size);
        free(s);
    }
    while (t->spare_ev) {
        tevent *e = t->spare_ev;
        t->spare_ev = e->next;
        if (e->e)
            cp_be->event_destroy(e->e);
        free(e);
    }
    while (t->slabs) {
        tslab *s = t->slabs;
        t->slabs = s->next;
        free(s);
    }
    while (t->tokslabs) {
        tokslab *s = t->tokslabs;
        t->tokslabs = s->next;
        free(s);
    }
    cp_ptrmap_fini(&t->live);
    cp_torch_dev_destroy(t->dev);
    free(t);
}

static void t_device_calls(cp_resource *r, uint64_t *allocs, uint64_t *frees)
{
    cp_torch *t = (cp_torch *)r;
    *allocs = t->st.num_device_alloc;
    *frees = t->st.num_device_free;
}

static const cp_resource_ops torch_ops = {
    .kind = "torch",
    .alloc = t_alloc,
    .free = t_free,
    .trim = t_trim,
    .free_info = t_free_info,
    .destroy = t_destroy,
    .device_calls = t_device_calls,
};

cp_torch *cp_torch_of(cp_resource *r)
{
    return r && r->ops == &torch_ops ? (cp_torch *)r : NULL;
}

static cp_status torch_create(cp_resource **out, cp_resource *up, const cp_pool_opts *o)
{
    const cp_torch_opts *to = (const cp_torch_opts *)cp_pool_own_const(o);
    cp_torch *t;
    cp_status st;
    cp_upstream_kind kind = o->upstream;

    *out = NULL;
    cp_resource_destroy(up); /* the model talks to its device itself */
    t = (cp_torch *)calloc(1, sizeof *t);
    if (!t)
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    cp_resource_init(&t->base, &torch_ops);
    st = cp_torch_conf_parse(to->conf, to->conf ? strlen(to->conf) : 0, &t->conf);
    if (st == CP_OK)
        st = cp_torch_dev_create(&t->dev, kind, o->device,
                                 to->address_model ? CP_TORCH_ADDR_BUMP : CP_TORCH_ADDR_DRIVER);
    if (st == CP_OK && cp_ptrmap_init(&t->live, 64) != 0)
        st = cp_error_set(CP_ERR_OOM, "out of host memory");
    if (st != CP_OK) {
        cp_torch_dev_destroy(t->dev);
        cp_ptrmap_fini(&t->live);
        free(t);
        return st;
    }
    t->is_virtual = cp_torch_dev_is_virtual(t->dev);
    {
        int i;
        for (i = 0; i < 16; i++)
            t->divisions |= t->conf.roundup_divisions[i] > 1;
    }
    t->small.small = 1;
    t->device_memory = to->device_memory ? to->device_memory
                       : t->is_virtual        ? VIRTUAL_MEMORY
                                              : cp_torch_dev_memory(t->dev);
    if (!t->device_memory)
        t->device_memory = VIRTUAL_MEMORY;
    t->has_limit = o->max != 0;
    t->limit = o->max;
    if (t->conf.memory_fraction < 1.0) {
        uint64_t f = (uint64_t)(t->conf.memory_fraction * (double)t->device_memory);
        if (!t->has_limit || f < t->limit)
            t->limit = f;
        t->has_limit = 1;
    }
    *out = &t->base;
    return CP_OK;
}

/* ---- the registry's row (model.h) --------------------------------------------- */

/* A conf is checked as it is read, so that the message names the option. */
static cp_status check_conf(const cp_opt *d, const void *v)
{
    const char *conf, *m;
    cp_torch_conf c;
    char msg[400];
    memcpy(&conf, v, sizeof conf);
    if (!conf || cp_torch_conf_parse(conf, strlen(conf), &c) == CP_OK)
        return CP_OK;
    m = cp_error_msg();
    snprintf(msg, sizeof msg, "%s", strncmp(m, "conf: ", 6) == 0 ? m + 6 : m);
    return cp_error_set(CP_ERR_INVALID, "option '%s': %s", d->name, msg);
}

static const char *address_model_name(int i)
{
    static const char *const names[] = {"driver", "bump"};
    return i >= 0 && i < 2 ? names[i] : NULL;
}

static cp_status torch_check(const cp_pool_opts *o)
{
    const cp_torch_opts *to = (const cp_torch_opts *)cp_pool_own_const(o);
    if (o->upstream != CP_UP_DEVICE && o->upstream != CP_UP_VIRTUAL)
        return cp_error_set(CP_ERR_INVALID, "kind 'torch' takes upstream \"device\" or "
                            "\"virtual\", not \"%s\"", cp_upstream_name(o->upstream));
    if (to->address_model && o->upstream != CP_UP_VIRTUAL)
        return cp_error_set(CP_ERR_INVALID, "option 'address_model' is for the \"virtual\" "
                            "upstream (the device places its own segments)");
    return CP_OK;
}

static const cp_opt torch_opts[] = {
    {.name = "conf", .type = CP_OPT_STRING, .offset = offsetof(cp_torch_opts, conf),
     .what = "PYTORCH_CUDA_ALLOC_CONF syntax", .check = check_conf},
    {.name = "device_memory", .type = CP_OPT_SIZE,
     .offset = offsetof(cp_torch_opts, device_memory)},
    {.name = "address_model", .type = CP_OPT_CHOICE,
     .offset = offsetof(cp_torch_opts, address_model), .def = CP_TORCH_ADDR_DRIVER,
     .choice = address_model_name},
    {.name = NULL},
};

static const char *const torch_refuses[] = {"initial", "grow", "alignment", "release_threshold",
                                            "reuse", NULL};

/* PyTorch's allocator decides nothing by the recording's time, and replays
 * a snapshot's own addresses. */
const cp_model cp_torch_model = {
    .name = "torch",
    .create = torch_create,
    .opts = torch_opts,
    .opts_size = sizeof(cp_torch_opts),
    .foreign = torch_refuses,
    .foreign_why = "PyTorch's allocator has no such setting; its settings are in 'conf'",
    .check = torch_check,
    .traits = CP_MODEL_OWN_CLOCK | CP_MODEL_RECORDED,
};
