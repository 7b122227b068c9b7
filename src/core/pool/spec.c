/*
 * spec.c: a pool described in one string, for C entry points that take their
 * configuration as text (the PyTorch allocator reads CUPOLA_TORCH_POOL).
 *
 *   KIND[,KEY=VALUE]...     e.g. "vmm", "tlsf,initial=1GiB,release_threshold=4GiB",
 *                           "cub,bin_growth=4,max_cached_bytes=256MiB"
 *
 * KIND: any of cp_pool_kind_name's but plugin (which needs a path and a
 * symbol, which a spec does not carry).  KEYs, as cupola.pool's options:
 * upstream (device, async, managed, pinned, virtual), initial, max,
 * alignment, release_threshold (sizes: 4096, 64KiB, 1.5GiB), grow, fallback
 * (true, false), reuse (stream, event, wait), for cub bin_growth,
 * min_bin, max_bin (integers) and max_cached_bytes (a size), and for bfc
 * memory_limit (a size), allow_growth, garbage_collection and
 * spatial_partitioning (true, false).  Blanks around
 * names and values are ignored; a key given twice, an unknown key or a bad
 * value is an error naming it.
 *
 * cp_pool_spec_serve (below) is the policy a spec's pool has when it serves a
 * framework.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resource.h"
#include "size.h"

static const char *const spec_keys[] = {
    "upstream", "initial", "max", "alignment", "release_threshold", "grow", "fallback", "reuse",
    "bin_growth", "min_bin", "max_bin", "max_cached_bytes",
    "memory_limit", "allow_growth", "garbage_collection", "spatial_partitioning",
};
#define NKEYS (sizeof spec_keys / sizeof spec_keys[0])

static const char *key_name(int i)
{
    return i >= 0 && (size_t)i < NKEYS ? spec_keys[i] : NULL;
}

/* [b, e) without the blanks around it. */
static void trim(const char **b, const char **e)
{
    while (*b < *e && isspace((unsigned char)**b))
        (*b)++;
    while (*e > *b && isspace((unsigned char)(*e)[-1]))
        (*e)--;
}

/* The index of v among the names name(0), name(1), ... (NULL ends them), or
 * -1: the core keeps each list once (cp_pool_kind_name, cp_upstream_name,
 * cp_reuse_name). */
static int choice(const char *v, const char *(*name)(int))
{
    int i;
    const char *n;
    for (i = 0; (n = name(i)) != NULL; i++)
        if (strcmp(v, n) == 0)
            return i;
    return -1;
}

/* "a, b or c" of the names, into buf; skip: a name left out (or NULL). */
static const char *names(char *buf, size_t len, const char *(*name)(int), const char *skip)
{
    int i, k = 0;
    size_t n = 0;
    const char *v;
    buf[0] = '\0';
    for (i = 0; (v = name(i)) != NULL; i++) {
        if (skip && strcmp(v, skip) == 0)
            continue;
        if (n < len)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", k++ ? ", " : "", v);
    }
    return buf;
}

static cp_status bad(const char *spec, const char *fmt, const char *a, const char *b)
{
    char why[256];
    snprintf(why, sizeof why, fmt, a, b);
    return cp_error_set(CP_ERR_INVALID, "pool spec \"%.200s\": %s", spec, why);
}

cp_status cp_pool_spec_parse(const char *spec, cp_pool_opts *o, char *kind, size_t kindlen)
{
    char key[32], val[128], list[160];
    const char *p, *b, *e, *eq;
    int seen[NKEYS] = {0};
    uint64_t u;
    int k;

    memset(o, 0, sizeof *o);
    o->upstream = CP_UP_DEVICE;
    o->grow = 1;
    o->alignment = 256;
    o->reuse = CP_REUSE_EVENT;
    o->cub_bin_growth = 8;
    o->cub_min_bin = 3;
    o->cub_max_bin = 7;
    o->cub_max_cached_bytes = 6291455; /* 3 * 8^7 - 1: CUB's default constructor */
    o->bfc_spatial = -1; /* kind "bfc": JAX's (partitioned when preallocated) */
    if (!spec)
        return cp_error_set(CP_ERR_INVALID, "pool spec missing");
    b = spec;
    e = strchr(spec, ',');
    if (!e)
        e = spec + strlen(spec);
    p = e;
    trim(&b, &e);
    if ((size_t)(e - b) >= kindlen || e == b)
        return bad(spec, "the spec starts with the pool's kind (%s)%s",
                   names(list, sizeof list, cp_pool_kind_name, "plugin"), "");
    memcpy(kind, b, (size_t)(e - b));
    kind[e - b] = '\0';
    if (strcmp(kind, "plugin") == 0)
        return bad(spec, "kind '%s' needs a path and a symbol, which a spec does not carry "
                   "(%s)", kind, names(list, sizeof list, cp_pool_kind_name, "plugin"));
    if (choice(kind, cp_pool_kind_name) < 0)
        return bad(spec, "unknown pool kind '%s' (%s)", kind,
                   names(list, sizeof list, cp_pool_kind_name, "plugin"));
    o->kind = kind;
    o->cub_given = strcmp(kind, "cub") == 0;
    while (*p == ',') {
        b = p + 1;
        p = strchr(b, ',');
        if (!p)
            p = b + strlen(b);
        e = p;
        eq = memchr(b, '=', (size_t)(e - b));
        if (!eq) {
            trim(&b, &e);
            snprintf(key, sizeof key, "%.*s", (int)(e - b), b);
            return bad(spec, "'%s' is not KEY=VALUE%s", key, "");
        }
        {
            const char *kb = b, *ke = eq, *vb = eq + 1, *ve = e;
            trim(&kb, &ke);
            trim(&vb, &ve);
            if ((size_t)(ke - kb) >= sizeof key || (size_t)(ve - vb) >= sizeof val)
                return bad(spec, "a key or value is too long%s%s", "", "");
            memcpy(key, kb, (size_t)(ke - kb));
            key[ke - kb] = '\0';
            memcpy(val, vb, (size_t)(ve - vb));
            val[ve - vb] = '\0';
        }
        k = choice(key, key_name);
        if (k < 0)
            return bad(spec, "unknown option '%s' (upstream, initial, max, alignment, "
                       "release_threshold, grow, fallback, reuse%s)", key,
                       o->cub_given ? ", bin_growth, min_bin, max_bin, max_cached_bytes"
                       : strcmp(kind, "bfc") == 0 ? ", memory_limit, allow_growth, "
                                                    "garbage_collection, spatial_partitioning"
                                                  : "");
        if (seen[k]++)
            return bad(spec, "option '%s' is given twice%s", key, "");
        if (k >= 8 && k < 12 && !o->cub_given)
            return bad(spec, "option '%s' is for kind 'cub', not '%s'", key, kind);
        if (k >= 12 && strcmp(kind, "bfc") != 0)
            return bad(spec, "option '%s' is for kind 'bfc', not '%s'", key, kind);
        switch (k) {
        case 0:
            if ((k = choice(val, cp_upstream_name)) < 0)
                return bad(spec, "option 'upstream' must be one of %s, not '%s'",
                           names(list, sizeof list, cp_upstream_name, NULL), val);
            o->upstream = (cp_upstream_kind)k;
            break;
        case 5:
        case 6:
        case 13:
        case 14:
        case 15: {
            int v = strcmp(val, "true") == 0 || strcmp(val, "1") == 0 ? 1
                    : strcmp(val, "false") == 0 || strcmp(val, "0") == 0 ? 0 : -1;
            if (v < 0)
                return bad(spec, "option '%s' must be true or false, not '%s'", key, val);
            if (k == 5)
                o->grow = v;
            else if (k == 6)
                o->fallback = v;
            else if (k == 13)
                o->bfc_allow_growth = v;
            else if (k == 14)
                o->bfc_garbage_collection = v;
            else
                o->bfc_spatial = v;
            break;
        }
        case 7:
            if ((k = choice(val, cp_reuse_name)) < 0)
                return bad(spec, "option 'reuse' must be one of %s, not '%s'",
                           names(list, sizeof list, cp_reuse_name, NULL), val);
            o->reuse = (cp_reuse)k;
            break;
        case 8:
        case 9:
        case 10: {
            char *end;
            const char *c;
            for (c = val; *c; c++)
                if (!isdigit((unsigned char)*c))
                    break;
            u = *val && !*c ? strtoull(val, &end, 10) : UINT64_MAX;
            if (!*val || *c || u > 0xffffffffu)
                return bad(spec, "option '%s' must be an integer from 0 to 4294967295, not '%s'",
                           key, val);
            *(k == 8 ? &o->cub_bin_growth : k == 9 ? &o->cub_min_bin : &o->cub_max_bin) = u;
            break;
        }
        default:
            if (cp_parse_size(val, &u) != 0 || u > UINT64_MAX / 2)
                return bad(spec, "option '%s' must be a size (4096, 64KiB, 1.5GiB), not '%s'",
                           key, val);
            if (k == 1)
                o->initial = u;
            else if (k == 2)
                o->max = u;
            else if (k == 3)
                o->alignment = u;
            else if (k == 4) {
                o->release_threshold = u;
                o->release_threshold_set = 1; /* as cupola.pool: vmm keeps it, not by time */
            } else if (k == 12)
                o->bfc_memory_limit = u;
            else
                o->cub_max_cached_bytes = u;
            break;
        }
    }
    if (o->alignment == 0 || (o->alignment & (o->alignment - 1)))
        return cp_error_set(CP_ERR_INVALID, "pool spec \"%.200s\": option 'alignment' must be a "
                            "power of two, not %llu", spec, (unsigned long long)o->alignment);
    return CP_OK;
}

/* The policy of a pool serving a framework: libcupola_torch.so and
 * libcupola_cupy.so apply it to the spec they read, and cupola advise to
 * its CUPOLA_TORCH_POOL rows, so that what advise replays is what the
 * library runs.
 *
 * A framework's caching allocator (PyTorch's, CuPy's) keeps the memory it
 * takes for reuse: it gives it back only when the device refuses a request
 * (then it frees what is idle and retries) or when the program asks
 * (empty_cache, free_all_blocks; here cupola_torch_trim, cupola_cupy_trim,
 * since neither reaches a pluggable allocator).  So, where the spec does not
 * set release_threshold, the pools whose release_threshold is the idle
 * chunks they keep when they grow (freelist, tlsf, caching: the block heap,
 * pool/heap.h) get CP_SERVE_KEEP_ALL: no chunk is returned to make room, so
 * a warm pool makes no upstream call on steps that repeat (cupola.pool's
 * default, 0, returns idle chunks to stay within the peak so far, and a
 * training loop takes them back the next step: a cudaFree, which waits for
 * the whole device, and a cudaMalloc in the middle of every step).  The
 * heap frees its idle chunks and retries when the upstream refuses
 * (pool/heap.h), so keeping them costs no request that would fit without
 * them.  The peak is then the most the pool holds at once with nothing
 * returned (higher than with 0; advise shows it).
 *
 * The other kinds keep their own rules: vmm's page moves and releases are
 * paid from a time budget (at most 1/32 of the time; none on fixed-shape
 * training), and a release_threshold would stop it moving idle pages, so
 * that it maps a page under every address it ever hands out; arena reuses
 * an emptied chunk before it grows; cub and torch are models of CUB's and
 * PyTorch's own allocators.  A spec that sets release_threshold (0
 * included) keeps it: the user chose. */
void cp_pool_spec_serve(cp_pool_opts *o)
{
    static const char *const keep_all[] = {"freelist", "tlsf", "caching"};
    size_t i;
    if (!o->kind || o->release_threshold_set)
        return;
    for (i = 0; i < sizeof keep_all / sizeof keep_all[0]; i++)
        if (strcmp(o->kind, keep_all[i]) == 0)
            o->release_threshold = CP_SERVE_KEEP_ALL;
}
