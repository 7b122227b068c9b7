/*
 * pool/limit.c: a hard limit over any resource (RMM's limiting adaptor).
 *
 * Policy: an allocation is refused with CP_ERR_OOM, before the wrapped
 * resource is asked, when the bytes in use through the adaptor (sizes as
 * requested) plus the request would pass the limit.  Everything else is
 * passed through; reserved and the free figures are the wrapped resource's.
 */
#include "resource_impl.h"

#include <stdlib.h>

typedef struct limit_res {
    cp_resource base;
    cp_resource *inner;
    uint64_t limit;
} limit_res;

static cp_status lim_alloc(cp_resource *r, size_t bytes, cp_stream *s, void **out)
{
    limit_res *l = (limit_res *)r;
    /* The entry point holds our lock, so st.used is exact here. */
    if (bytes > l->limit || r->st.used > l->limit - bytes)
        return cp_error_set(CP_ERR_OOM, "out of memory: %zu bytes would pass the limit of "
                            "%llu bytes (%llu in use)", bytes, (unsigned long long)l->limit,
                            (unsigned long long)r->st.used);
    return cp_resource_alloc(l->inner, bytes, s, out);
}

static cp_status lim_free(cp_resource *r, void *p, size_t bytes, cp_stream *s)
{
    return cp_resource_free(((limit_res *)r)->inner, p, bytes, s);
}

static cp_status lim_trim(cp_resource *r, size_t keep)
{
    return cp_resource_trim(((limit_res *)r)->inner, keep);
}

static cp_status lim_reset(cp_resource *r)
{
    return cp_resource_reset(((limit_res *)r)->inner);
}

static void lim_free_info(cp_resource *r, uint64_t *largest, uint64_t *free_bytes)
{
    cp_adaptor_free_info(((limit_res *)r)->inner, largest, free_bytes);
}

static void lim_vm_info(cp_resource *r, cp_stats *out)
{
    cp_adaptor_vm_info(((limit_res *)r)->inner, out);
}

static uint64_t lim_reserved(cp_resource *r)
{
    return cp_resource_reserved(((limit_res *)r)->inner);
}

static void lim_destroy(cp_resource *r)
{
    cp_resource_destroy(((limit_res *)r)->inner);
    free(r);
}

static const cp_resource_ops limit_ops = {
    .kind = "limit",
    .alloc = lim_alloc,
    .free = lim_free,
    .trim = lim_trim,
    .reset = lim_reset,
    .free_info = lim_free_info,
    .reserved = lim_reserved,
    .destroy = lim_destroy,
    .vm_info = lim_vm_info,
};

cp_status cp_limit_adaptor(cp_resource **out, cp_resource *inner, uint64_t limit)
{
    limit_res *l;
    *out = NULL;
    if (!inner)
        return cp_error_set(CP_ERR_INVALID, "limit adaptor: no resource to wrap");
    l = malloc(sizeof *l);
    if (!l)
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    cp_resource_init(&l->base, &limit_ops);
    l->base.clock = inner->clock; /* setting the adaptor's clock sets the pool's */
    l->inner = inner;
    l->limit = limit;
    *out = &l->base;
    return CP_OK;
}
