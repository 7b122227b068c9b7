/*
 * create.c: cp_pool_create, the one place that knows every pool kind and
 * upstream by name.  It sits above resource.c (the public entry points every
 * resource shares), upstream.c and the allocators, so none of those needs to
 * call back up to build another resource.
 */
#include "resource_impl.h"

#include <stdio.h>
#include <string.h>

/* Every pool kind: its name and its constructor (which owns the upstream
 * it is given, even on failure).  A new kind is one more line here; the
 * binding lists and checks the names through cp_pool_kind_name. */
static const struct {
    const char *name;
    cp_status (*create)(cp_resource **out, cp_resource *up, const cp_pool_opts *o);
} kinds[] = {
    {"arena", cp_arena_create},
    {"freelist", cp_freelist_create},
    {"tlsf", cp_tlsf_create},
    {"caching", cp_caching_create},
    {"vmm", cp_vmm_create},
    {"plugin", cp_plugin_create},
    {"cub", cp_cub_create},
    {"torch", cp_torch_create},
    {"bfc", cp_bfc_create},
    {"cupy", cp_cupy_create},
};
#define NKINDS (sizeof kinds / sizeof kinds[0])

const char *cp_pool_kind_name(int i)
{
    return i >= 0 && (size_t)i < NKINDS ? kinds[i].name : NULL;
}

static cp_status unknown_kind(const char *kind)
{
    char list[256];
    size_t i, n = 0;
    list[0] = '\0';
    for (i = 0; i < NKINDS && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", kinds[i].name);
    return cp_error_set(CP_ERR_INVALID, "unknown pool kind '%s' (%s)", kind, list);
}

cp_status cp_pool_create(cp_resource **out, const cp_pool_opts *opts)
{
    cp_pool_opts o = *opts;
    cp_resource *up = NULL, *fb = NULL, *pool = NULL;
    cp_status st;
    size_t i;

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
    for (i = 0; i < NKINDS; i++)
        if (strcmp(kinds[i].name, o.kind) == 0)
            break;
    if (i == NKINDS)
        return unknown_kind(o.kind);
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
    st = kinds[i].create(&pool, up, &o); /* owns up, even on failure */
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
