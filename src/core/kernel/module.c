/*
 * kernel/module.c: the backend-independent half of module.h: reference
 * counts, shape checks, and the dispatch to cuda_module.c or host_module.c.
 */
#include "kernel/module.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

const char *const cp_ktype_names[CP_KT_COUNT] = {"ptr", "i32", "u32", "i64",
                                                 "u64", "f32", "f64", "device_pool"};
const unsigned char cp_ktype_sizes[CP_KT_COUNT] = {8, 4, 4, 8, 8, 4, 8, 8};

struct cp_kmodule {
    atomic_int refs;
    const cp_kimpl_ops *ops;
    void *impl;
    char name[256];
};

struct cp_kernel {
    cp_kmodule *m;
    void *impl;
};

static const cp_kimpl_ops *ops_for_backend(void)
{
    if (cp_be && strcmp(cp_be->name, "cuda") == 0)
        return &cp_kimpl_cuda;
    return &cp_kimpl_host;
}

cp_status cp_kmodule_load(const cp_kmodule_desc *d, cp_kmodule **out, int *where, char **log)
{
    CP_GUARD();
    cp_kmodule *m;
    cp_status st;
    int w = -1;
    *out = NULL;
    if (log)
        *log = NULL;
    if (!d || !d->data)
        return cp_error_set(CP_ERR_INVALID, "module: nothing to load");
    m = calloc(1, sizeof *m);
    if (!m)
        return cp_error_set(CP_ERR_OOM, "out of memory for a module");
    m->ops = ops_for_backend();
    atomic_init(&m->refs, 1);
    {
        const char *nm = d->name && *d->name ? d->name : "module";
        size_t k = strlen(nm);
        if (k >= sizeof m->name)
            k = sizeof m->name - 1;
        memcpy(m->name, nm, k);
        m->name[k] = '\0';
    }
    st = m->ops->load(d, &m->impl, &w, log);
    if (st != CP_OK) {
        free(m);
        return st;
    }
    if (where)
        *where = w;
    *out = m;
    return CP_OK;
}

void cp_kmodule_retain(cp_kmodule *m)
{
    atomic_fetch_add(&m->refs, 1);
}

void cp_kmodule_release(cp_kmodule *m)
{
    if (m && atomic_fetch_sub(&m->refs, 1) == 1) {
        m->ops->unload(m->impl);
        free(m);
    }
}

const char *cp_kmodule_name(const cp_kmodule *m)
{
    return m->name;
}

void *cp_kmodule_symbol(cp_kmodule *m, const char *name)
{
    return m->ops->symbol ? m->ops->symbol(m->impl, name) : NULL;
}

cp_status cp_kernel_get(cp_kmodule *m, const char *name, const cp_ktype *types, unsigned n,
                        cp_kernel **out)
{
    cp_kernel *k;
    cp_status st;
    *out = NULL;
    if (n > CP_KMAX_PARAMS)
        return cp_error_set(CP_ERR_INVALID, "a kernel takes at most %d parameters", CP_KMAX_PARAMS);
    for (unsigned i = 0; i < n; i++)
        if ((unsigned)types[i] >= CP_KT_COUNT)
            return cp_error_set(CP_ERR_INVALID, "parameter %u: unknown type", i + 1);
    k = calloc(1, sizeof *k);
    if (!k)
        return cp_error_set(CP_ERR_OOM, "out of memory for a kernel");
    st = m->ops->get(m->impl, m->name, name, types, n, &k->impl);
    if (st != CP_OK) {
        free(k);
        return st;
    }
    cp_kmodule_retain(m);
    k->m = m;
    *out = k;
    return CP_OK;
}

void cp_kernel_release(cp_kernel *k)
{
    if (!k)
        return;
    k->m->ops->put(k->impl);
    cp_kmodule_release(k->m);
    free(k);
}

cp_status cp_kernel_launch(cp_kernel *k, const cp_klaunch *l, void *const *args)
{
    CP_GUARD();
    return k->m->ops->launch(k->impl, l, args);
}

cp_status cp_kernel_registers(cp_kernel *k, int *out)
{
    CP_GUARD();
    return k->m->ops->registers(k->impl, out);
}

cp_status cp_klaunch_check(const cp_klaunch *l, const cp_klimits *lim)
{
    static const char axis[3] = {'x', 'y', 'z'};
    uint64_t threads = 1;
    for (int i = 0; i < 3; i++) {
        if (l->grid[i] == 0)
            return cp_error_set(CP_ERR_INVALID, "option 'grid': %c is 0 (each dimension must be >= 1)",
                                axis[i]);
        if (l->grid[i] > lim->max_grid[i])
            return cp_error_set(CP_ERR_INVALID,
                                "option 'grid': %c = %u exceeds the device's limit %u", axis[i],
                                l->grid[i], lim->max_grid[i]);
        if (l->block[i] == 0)
            return cp_error_set(CP_ERR_INVALID,
                                "option 'block': %c is 0 (each dimension must be >= 1)", axis[i]);
        if (l->block[i] > lim->max_block[i])
            return cp_error_set(CP_ERR_INVALID,
                                "option 'block': %c = %u exceeds the device's limit %u", axis[i],
                                l->block[i], lim->max_block[i]);
        threads *= l->block[i];
    }
    if (threads > lim->max_threads)
        return cp_error_set(CP_ERR_INVALID,
                            "option 'block': %llu threads per block exceed the limit %u",
                            (unsigned long long)threads, lim->max_threads);
    if (l->shared > lim->max_shared)
        return cp_error_set(CP_ERR_INVALID,
                            "option 'shared': %zu bytes of dynamic shared memory exceed the limit "
                            "%zu",
                            l->shared, lim->max_shared);
    return CP_OK;
}
