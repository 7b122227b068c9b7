/*
 * create.c: cp_pool_create, which makes a pool of any kind the registry
 * (model.h) knows over any upstream.  It sits above resource.c (the public
 * entry points every resource shares), upstream.c and the allocators, so
 * none of those needs to call back up to build another resource.
 */
#include "model.h"
#include "resource_impl.h"

#include <stdio.h>
#include <string.h>

static cp_status unknown_kind(const char *kind)
{
    char list[256];
    size_t n = 0;
    const cp_model *m;
    int i;
    list[0] = '\0';
    for (i = 0; (m = cp_model_at(i)) != NULL && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", m->name);
    {
        const char *near = cp_nearest_name(kind, cp_model_name);
        return cp_error_set(CP_ERR_INVALID, "unknown pool kind '%s' (%s)%s%s%s", kind, list,
                            near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
    }
}

cp_status cp_pool_create(cp_resource **out, const cp_pool_opts *opts)
{
    cp_pool_opts o = *opts;
    cp_resource *up = NULL, *fb = NULL, *pool = NULL;
    const cp_model *m;
    cp_status st;

    *out = NULL;
    if (!o.kind)
        return cp_error_set(CP_ERR_INVALID, "pool kind missing");
    if (o.alignment == 0)
        o.alignment = 256;
    if (o.alignment & (o.alignment - 1))
        return cp_error_set(CP_ERR_INVALID, "alignment %llu is not a power of two",
                            (unsigned long long)o.alignment);
    if (o.upstream > CP_UP_VIRTUAL)
        return cp_error_set(CP_ERR_INVALID, "unknown upstream %d", (int)o.upstream);
    if ((unsigned)o.clock > CP_CLOCK_MANUAL)
        return cp_error_set(CP_ERR_INVALID, "unknown clock %d", (int)o.clock);
    if (o.reuse > CP_REUSE_WAIT)
        return cp_error_set(CP_ERR_INVALID, "unknown reuse policy %d", (int)o.reuse);
    if (o.max && o.initial > o.max)
        return cp_error_set(CP_ERR_INVALID, "initial (%llu) is larger than max (%llu)",
                            (unsigned long long)o.initial, (unsigned long long)o.max);
    if ((m = cp_model_find(o.kind)) == NULL)
        return unknown_kind(o.kind);
    if (!o.own_kind || strcmp(o.own_kind, o.kind) != 0) {
        /* the caller set no option of this kind's own: its defaults */
        cp_model_defaults(m, o.own.bytes);
        o.own_kind = o.kind;
    }
    if (o.upstream != CP_UP_VIRTUAL && !cp_be)
        return cp_error_set(CP_ERR_INVALID, "no backend selected (cp_backend_select)");
    st = cp_upstream_create_on(&up, o.upstream, o.device);
    if (st != CP_OK)
        return st;
    if (o.fallback) {
        st = cp_upstream_create_on(&fb, o.upstream, o.device);
        if (st != CP_OK) {
            cp_resource_destroy(up);
            return st;
        }
    }
    st = m->create(&pool, up, &o); /* owns up, even on failure */
    if (st != CP_OK) {
        cp_resource_destroy(fb);
        return st;
    }
    pool->fallback = fb;
    pool->reserved_max = o.max;
    /* The clock reads 0 now, of the kind asked for (the pool reads it only
     * once it runs, and treats a reading below its last as no time passed). */
    cp_clock_init(pool->clock, o.clock);
    *out = pool;
    return CP_OK;
}
