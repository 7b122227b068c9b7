/*
 * resource.c: the public entry points of every resource (the pool factory is
 * create.c).
 *
 * Statistics live here, once: each entry point takes the resource's lock,
 * calls the implementation and counts (used as requested, allocs, frees,
 * failures, peaks).  Reserved bytes are kept by the implementation, because
 * only it knows when it talks to its upstream; the peak is sampled after each
 * allocation, the only operation that can make reserved grow.
 *
 * Fallback: when a pool answers out of memory and was created with fallback,
 * the request goes straight to the pool's own upstream kind (a pool that
 * cannot serve a request still does not fail it) and the address is
 * remembered so that free returns it there.  Fallback bytes count as
 * reserved, and the pool's max (reserved_max) bounds them too: it is a hard
 * limit.
 */
#include "resource_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nvtx.h"

static void explain_oom(cp_resource *r, size_t bytes);

void cp_resource_init(cp_resource *r, const cp_resource_ops *ops)
{
    memset(r, 0, sizeof *r);
    r->ops = ops;
    atomic_init(&r->lock, 0);
    r->clock = &r->own_clock;
    cp_clock_init(r->clock, CP_CLOCK_WALL);
}

double cp_resource_time(cp_resource *r)
{
    double t;
    cp_lock(&r->lock);
    t = cp_clock_now(r->clock);
    cp_unlock(&r->lock);
    return t;
}

const char *cp_clock_name(int kind)
{
    static const char *const names[] = {"wall", "manual"};
    return kind >= 0 && kind <= CP_CLOCK_MANUAL ? names[kind] : NULL;
}

cp_clock_kind cp_resource_clock_kind(cp_resource *r)
{
    return r->clock->manual ? CP_CLOCK_MANUAL : CP_CLOCK_WALL;
}

cp_status cp_resource_set_time(cp_resource *r, double t)
{
    cp_status st = CP_OK;
    cp_lock(&r->lock);
    if (!r->clock->manual)
        st = cp_error_set(CP_ERR_INVALID, "the pool's clock is the wall clock: only a manual "
                          "clock can be set");
    else if (!isfinite(t))
        st = cp_error_set(CP_ERR_INVALID, "time %g is not finite", t);
    else if (t < r->clock->t)
        st = cp_error_set(CP_ERR_INVALID, "time %.9g is before the clock's reading %.9g (a "
                          "clock never goes back)", t, r->clock->t);
    else
        r->clock->t = t;
    cp_unlock(&r->lock);
    return st;
}

cp_clock *cp_resource_clock(cp_resource *r)
{
    return r->clock;
}

static void note_reserved(cp_resource *r)
{
    uint64_t res = (r->ops->reserved ? r->ops->reserved(r) : r->reserved) + r->fb_bytes;
    if (res > r->st.reserved_peak)
        r->st.reserved_peak = res;
}

static cp_status fallback_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    cp_status st;
    /* (a pool whose reserved is not its upstream bytes says so: vmm) */
    uint64_t res = (r->ops->reserved ? r->ops->reserved(r) : r->reserved) + r->fb_bytes;
    if (r->reserved_max && (bytes > r->reserved_max || res > r->reserved_max - bytes))
        return cp_error_set(CP_ERR_OOM, "out of memory: %zu bytes would pass the pool's "
                            "max of %llu bytes (fallback included)",
                            bytes, (unsigned long long)r->reserved_max);
    if (!r->fb_map.slots && cp_ptrmap_init(&r->fb_map, 16) != 0)
        return cp_error_set(CP_ERR_OOM, "out of host memory for the fallback map");
    st = cp_resource_alloc(r->fallback, bytes, s, out);
    if (st != CP_OK)
        return st;
    if (cp_ptrmap_put(&r->fb_map, (uint64_t)(uintptr_t)*out, (void *)(uintptr_t)bytes) != 0) {
        cp_resource_free(r->fallback, *out, bytes, s);
        return cp_error_set(CP_ERR_OOM, "out of host memory for the fallback map");
    }
    r->fb_bytes += bytes;
    return CP_OK;
}

void cp_resource_lock(cp_resource *r)
{
    cp_lock(&r->lock);
}

void cp_resource_unlock(cp_resource *r)
{
    cp_unlock(&r->lock);
}

cp_status cp_resource_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    cp_status st;
    if (__builtin_expect(cp_nvtx_on, 0))
        cp_nvtx_cupola_push("alloc");
    cp_lock(&r->lock);
    st = cp_resource_alloc_locked(r, bytes, s, out);
    cp_unlock(&r->lock);
    if (__builtin_expect(cp_nvtx_on, 0))
        cp_nvtx_cupola_pop();
    return st;
}

cp_status cp_resource_alloc_locked(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    cp_status st;
    st = r->ops->alloc(r, bytes, s, out);
    if (st == CP_ERR_OOM && r->fallback)
        st = fallback_alloc(r, bytes, s, out);
    if (st == CP_OK) {
        r->st.allocs++;
        r->st.used += bytes;
        if (r->st.used > r->st.used_peak)
            r->st.used_peak = r->st.used;
    } else if (st == CP_ERR_OOM) {
        r->st.failed++;
        explain_oom(r, bytes);
    }
    note_reserved(r);
    if (st != CP_OK)
        *out = NULL;
    return st;
}

cp_status cp_resource_free(cp_resource *r, void *p, size_t bytes, cp_stream *s)
{
    cp_status st;
    if (!p)
        return CP_OK;
    if (__builtin_expect(cp_nvtx_on, 0))
        cp_nvtx_cupola_push("free");
    cp_lock(&r->lock);
    st = cp_resource_free_locked(r, p, bytes, s);
    cp_unlock(&r->lock);
    if (__builtin_expect(cp_nvtx_on, 0))
        cp_nvtx_cupola_pop();
    return st;
}

cp_status cp_resource_free_locked(cp_resource *r, void *p, size_t bytes, cp_stream *s)
{
    cp_status st;
    if (!p)
        return CP_OK;
    if (r->fb_map.count) {
        void *v = cp_ptrmap_get(&r->fb_map, (uint64_t)(uintptr_t)p);
        if (v) {
            size_t fbytes = (size_t)(uintptr_t)v;
            cp_ptrmap_del(&r->fb_map, (uint64_t)(uintptr_t)p);
            st = cp_resource_free(r->fallback, p, fbytes, s);
            r->fb_bytes -= fbytes;
            goto count;
        }
    }
    st = r->ops->free(r, p, bytes, s);
count:
    if (st == CP_OK) {
        r->st.frees++;
        r->st.used -= bytes < r->st.used ? bytes : r->st.used;
    }
    return st;
}

cp_status cp_resource_trim(cp_resource *r, size_t keep_bytes)
{
    cp_status st = CP_OK;
    cp_lock(&r->lock);
    if (r->ops->trim)
        st = r->ops->trim(r, keep_bytes);
    cp_unlock(&r->lock);
    return st;
}

cp_status cp_resource_reset(cp_resource *r)
{
    cp_status st;
    cp_lock(&r->lock);
    if (!r->ops->reset) {
        st = cp_error_set(CP_ERR_UNSUPPORTED, "reset() is only supported by arena pools, "
                          "not by '%s'", r->ops->kind);
    } else {
        st = r->ops->reset(r);
        if (st == CP_OK) {
            /* Everything the arena handed out is free now; fallback blocks
             * are separate allocations and stay live. */
            r->st.frees += r->st.allocs - r->st.frees;
            r->st.used = 0;
        }
    }
    cp_unlock(&r->lock);
    return st;
}

void cp_resource_stats(cp_resource *r, cp_stats *out)
{
    uint64_t largest = 0, fb = 0;
    cp_lock(&r->lock);
    *out = r->st;
    out->reserved = (r->ops->reserved ? r->ops->reserved(r) : r->reserved) + r->fb_bytes;
    if (r->ops->free_info)
        r->ops->free_info(r, &largest, &fb);
    out->nextra = 0;
    if (r->ops->vm_info)
        r->ops->vm_info(r, out);
    if (r->ops->device_calls)
        r->ops->device_calls(r, &out->device_allocs, &out->device_frees);
    if (r->ops->extra_stats)
        r->ops->extra_stats(r, out);
    cp_unlock(&r->lock);
    out->largest_free = largest;
    out->free_bytes = fb;
    out->fragmentation = fb ? 1.0 - (double)largest / (double)fb : 0.0;
}

void cp_adaptor_free_info(cp_resource *inner, uint64_t *largest, uint64_t *free_bytes)
{
    cp_stats st;
    cp_resource_stats(inner, &st);
    *largest = st.largest_free;
    *free_bytes = st.free_bytes;
}

void cp_adaptor_vm_info(cp_resource *inner, cp_stats *out)
{
    cp_stats st;
    cp_resource_stats(inner, &st);
    out->page_bytes = st.page_bytes;
    out->pages_mapped = st.pages_mapped;
    out->maps = st.maps;
    out->unmaps = st.unmaps;
    out->by_time = st.by_time;
    out->decay_window = st.decay_window;
    out->recent_peak = st.recent_peak;
    out->map_budget = st.map_budget;
    memcpy(out->extra, st.extra, sizeof out->extra);
    out->nextra = st.nextra;
    out->device_allocs = st.device_allocs;
    out->device_frees = st.device_frees;
}

uint64_t cp_resource_reserved_locked(cp_resource *r)
{
    return (r->ops->reserved ? r->ops->reserved(r) : r->reserved) + r->fb_bytes;
}

uint64_t cp_resource_reserved(cp_resource *r)
{
    uint64_t v;
    cp_lock(&r->lock);
    v = cp_resource_reserved_locked(r);
    cp_unlock(&r->lock);
    return v;
}

const char *cp_resource_kind(const cp_resource *r)
{
    return r->ops->kind;
}

void cp_resource_destroy(cp_resource *r)
{
    if (!r)
        return;
    if (r->fallback) {
        /* Fallback blocks still live are returned too (the caller promised
         * none are in use). */
        uint64_t i;
        for (i = 0; r->fb_map.slots && i <= r->fb_map.mask; i++)
            if (r->fb_map.slots[i].key)
                cp_resource_free(r->fallback, (void *)(uintptr_t)r->fb_map.slots[i].key,
                                 (size_t)(uintptr_t)r->fb_map.slots[i].val, NULL);
        cp_ptrmap_fini(&r->fb_map);
        cp_resource_destroy(r->fallback);
    }
    r->ops->destroy(r);
}

/* ---- Out of memory that explains itself ----------------------
 * When a pool refuses a request, the message is rewritten to carry the
 * pool's figures at that moment (taken under the lock the failing alloc
 * holds), and the same figures are kept per thread for the binding's
 * fourth return value.  Only the failure path pays for it. */
static _Thread_local cp_oom_figures last_oom;

static int vowel(const char *word)
{
    return word && word[0] && strchr("aeiou", word[0]) != NULL;
}

static void human(char *buf, size_t n, uint64_t v)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double d = (double)v;
    int i = 0;
    while (d >= 1024.0 && i < 4) {
        d /= 1024.0;
        i++;
    }
    if (i == 0)
        snprintf(buf, n, "%llu B", (unsigned long long)v);
    else
        snprintf(buf, n, "%.2f %s", d, units[i]);
}

static void explain_oom(cp_resource *r, size_t bytes)
{
    cp_oom_figures *f = &last_oom;
    char why[384], req[32], fr[32], lg[32], rs[32], us[32];
    uint64_t largest = 0, fb = 0;

    if (r->ops->free_info)
        r->ops->free_info(r, &largest, &fb);
    f->requested = bytes;
    f->free = fb;
    f->largest_free = largest;
    f->fragmentation = fb ? 1.0 - (double)largest / (double)fb : 0.0;
    f->reserved = (r->ops->reserved ? r->ops->reserved(r) : r->reserved) + r->fb_bytes;
    f->used = r->st.used;
    f->kind = r->ops->kind;
    snprintf(why, sizeof why, "%s", cp_error_msg());
    {
        /* A wrapped resource explained itself already: keep only its reason,
         * the figures are this (outer) resource's. */
        const char *p = strncmp(why, "out of memory: requested ", 25) == 0 ? strstr(why, ", used ")
                                                                         : NULL;
        p = p ? strchr(p, '(') : NULL;
        if (p) {
            size_t n = strlen(p + 1);
            memmove(why, p + 1, n + 1);
            if (n && why[n - 1] == ')')
                why[n - 1] = '\0';
        }
    }
    if (strncmp(why, "out of memory: ", 15) == 0)
        memmove(why, why + 15, strlen(why + 15) + 1);
    human(req, sizeof req, f->requested);
    human(fr, sizeof fr, f->free);
    human(lg, sizeof lg, f->largest_free);
    human(rs, sizeof rs, f->reserved);
    human(us, sizeof us, f->used);
    /* "an arena pool", "a tlsf pool": the article the kind's first letter takes */
    cp_error_set(CP_ERR_OOM, "out of memory: requested %s from %s %s pool; free in pool %s, "
                 "largest free block %s, fragmentation %.2f, reserved %s, used %s (%s)",
                 req, vowel(f->kind) ? "an" : "a", f->kind, fr, lg, f->fragmentation, rs, us,
                 *why ? why : "refused");
}

void cp_resource_last_oom(cp_oom_figures *out)
{
    *out = last_oom;
}
