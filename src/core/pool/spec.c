/*
 * spec.c: a pool described in one string, for C entry points that take their
 * configuration as text (the PyTorch allocator reads CUPOLA_TORCH_POOL, the
 * CuPy one CUPOLA_CUPY_POOL, advise's rows name pools so).
 *
 *   KIND[,KEY=VALUE]...     e.g. "vmm", "tlsf,initial=1GiB,release_threshold=4GiB",
 *                           "cub,bin_growth=4,max_cached_bytes=256MiB",
 *                           torch,conf="expandable_segments:True,max_split_size_mb:128"
 *
 * KIND: any of cp_pool_kind_name's but those whose row says a spec cannot
 * name them (plugin: it needs a path and a symbol).  KEYs are cupola.pool's
 * options, read through the registry's descriptors (model.h) as
 * cupola.pool{...} reads them: the common ones (upstream, initial, max,
 * alignment, release_threshold, grow, fallback, reuse) and the kind's own
 * (cub's bin_growth, ..., bfc's memory_limit, ..., torch's conf, ...), with
 * the same defaults, checks and refusals.  A VALUE is text: a size (4096,
 * 64KiB, 1.5GiB), an integer, true or false (also 1, 0), a number, a name.
 * A value that holds a comma (torch's conf) is put in double quotes, which
 * are not part of it: conf="expandable_segments:True,max_split_size_mb:128";
 * it then runs to the next double quote (so it cannot hold one).  In a
 * shell, the spec goes in single quotes:
 *   CUPOLA_TORCH_POOL='torch,conf="expandable_segments:True"' python train.py
 * Blanks around names and values (outside the quotes) are ignored; a key
 * given twice, an unknown key or a bad value is an error naming it.
 *
 * cp_pool_spec_serve (below) is the policy a spec's pool has when it serves a
 * framework.
 */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "resource.h"
#include "size.h"

/* [b, e) without the blanks around it. */
static void trim(const char **b, const char **e)
{
    while (*b < *e && isspace((unsigned char)**b))
        (*b)++;
    while (*e > *b && isspace((unsigned char)(*e)[-1]))
        (*e)--;
}

/* The end of the item that starts at p: the next comma outside double
 * quotes, or the end of the string. */
static const char *item_end(const char *p)
{
    int quoted = 0;
    for (; *p && (quoted || *p != ','); p++)
        if (*p == '"')
            quoted = !quoted;
    return p;
}

/* "a, b or c" of the names name(0), name(1), ..., into buf. */
static const char *names(char *buf, size_t len, const char *(*name)(int))
{
    int i;
    size_t n = 0;
    const char *v;
    buf[0] = '\0';
    for (i = 0; (v = name(i)) != NULL; i++)
        if (n < len)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", v);
    return buf;
}

/* The kinds a spec may name, "arena, freelist, ...", into buf. */
static const char *spec_kinds(char *buf, size_t len)
{
    const cp_model *m;
    int i, k = 0;
    size_t n = 0;
    buf[0] = '\0';
    for (i = 0; (m = cp_model_at(i)) != NULL; i++)
        if (!m->no_spec && n < len)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", k++ ? ", " : "", m->name);
    return buf;
}

/* The options a spec of kind m takes: the common ones, then m's own. */
static const char *spec_keys(char *buf, size_t len, const cp_model *m)
{
    const cp_opt *lists[2] = {cp_pool_common_opts(), m->opts}, *d;
    int i, k = 0;
    size_t n = 0;
    buf[0] = '\0';
    for (i = 0; i < 2; i++)
        for (d = lists[i]; d && d->name; d++)
            if (!(d->flags & CP_OPT_NO_SPEC) && n < len)
                n += (size_t)snprintf(buf + n, len - n, "%s%s", k++ ? ", " : "", d->name);
    return buf;
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static cp_status bad(const char *spec, const char *fmt, ...)
{
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return cp_error_set(CP_ERR_INVALID, "pool spec \"%.200s\": %s", spec, why);
}

/* The message a check left (cp_error_msg), as the spec's error. */
static cp_status bad_check(const char *spec)
{
    char why[400];
    snprintf(why, sizeof why, "%s", cp_error_msg());
    return cp_error_set(CP_ERR_INVALID, "pool spec \"%.200s\": %s", spec, why);
}

/* The spec's text of option d (val) as its value, stored in o. */
static cp_status set_value(const char *spec, cp_pool_opts *o, const cp_opt *d, const char *val)
{
    char list[200];
    const char *c, *key = d->name;
    char *end;
    uint64_t u;
    double x;
    int v;

    switch (d->type) {
    case CP_OPT_SIZE:
        if (cp_parse_size(val, &u) != 0 || u > UINT64_MAX / 2)
            return bad(spec, "option '%s' must be a size (4096, 64KiB, 1.5GiB), not '%s'", key,
                       val);
        return cp_pool_opt_set(o, d, &u) == CP_OK ? CP_OK : bad_check(spec);
    case CP_OPT_U32:
        for (c = val; *c; c++)
            if (!isdigit((unsigned char)*c))
                break;
        u = *val && !*c ? strtoull(val, &end, 10) : UINT64_MAX;
        if (!*val || *c || u > 0xffffffffu)
            return bad(spec, "option '%s' must be an integer from 0 to 4294967295, not '%s'",
                       key, val);
        return cp_pool_opt_set(o, d, &u) == CP_OK ? CP_OK : bad_check(spec);
    case CP_OPT_BOOL:
        v = strcmp(val, "true") == 0 || strcmp(val, "1") == 0     ? 1
            : strcmp(val, "false") == 0 || strcmp(val, "0") == 0 ? 0
                                                                  : -1;
        if (v < 0)
            return bad(spec, "option '%s' must be true or false, not '%s'", key, val);
        return cp_pool_opt_set(o, d, &v) == CP_OK ? CP_OK : bad_check(spec);
    case CP_OPT_NUMBER:
        x = *val ? strtod(val, &end) : NAN;
        if (!*val || *end || !(x >= d->lo && x <= d->hi)) {
            return bad(spec, "option '%s' must be a number from %g to %g, not '%s'", key, d->lo,
                       d->hi, val);
        }
        return cp_pool_opt_set(o, d, &x) == CP_OK ? CP_OK : bad_check(spec);
    case CP_OPT_CHOICE:
        for (v = 0; d->choice(v) && strcmp(val, d->choice(v)) != 0; v++)
            ;
        if (!d->choice(v)) {
            const char *near = cp_nearest_name(val, d->choice);
            return bad(spec, "option '%s' must be one of %s, not '%s'%s%s%s", key,
                       names(list, sizeof list, d->choice), val, near ? "; did you mean '" : "",
                       near ? near : "", near ? "'?" : "");
        }
        return cp_pool_opt_set(o, d, &v) == CP_OK ? CP_OK : bad_check(spec);
    default:
        return cp_pool_opt_set(o, d, &val) == CP_OK ? CP_OK : bad_check(spec);
    }
}

/* The spec's parse: its text, the buffer its strings go to, and what was seen. */
typedef struct spec_state {
    const char *spec;
    char *buf;
    size_t len, used;
    const cp_opt *seen[64];
    int nseen;
} spec_state;

/* Copies [b, e) into the buffer as a string; NULL when it has no room. */
static const char *keep(spec_state *ps, const char *b, const char *e)
{
    char *s = ps->buf + ps->used;
    if ((size_t)(e - b) >= ps->len - ps->used)
        return NULL;
    memcpy(s, b, (size_t)(e - b));
    s[e - b] = '\0';
    ps->used += (size_t)(e - b) + 1;
    return s;
}

/* The item [b, e), "KEY=VALUE", into o (of kind m). */
static cp_status item(spec_state *ps, cp_pool_opts *o, const cp_model *m, const char *b,
                      const char *e)
{
    const char *spec = ps->spec, *eq = memchr(b, '=', (size_t)(e - b));
    const char *kb = b, *ke = eq, *vb, *ve, *val;
    char key[32], list[300], vbuf[128];
    const cp_model *owner;
    const cp_opt *d;
    int i;

    if (!eq) {
        trim(&b, &e);
        snprintf(key, sizeof key, "%.*s", (int)(e - b), b);
        return bad(spec, "'%s' is not KEY=VALUE", key);
    }
    vb = eq + 1;
    ve = e;
    trim(&kb, &ke);
    trim(&vb, &ve);
    if ((size_t)(ke - kb) >= sizeof key)
        return bad(spec, "a key or value is too long");
    memcpy(key, kb, (size_t)(ke - kb));
    key[ke - kb] = '\0';
    if (vb < ve && *vb == '"') {
        /* a quoted value: what lies between the quotes, as it is */
        if (ve - vb < 2 || ve[-1] != '"')
            return bad(spec, "option '%s': the value's opening '\"' has no closing one", key);
        vb++;
        ve--;
    }
    if (memchr(vb, '"', (size_t)(ve - vb)))
        return bad(spec, "option '%s': a '\"' may only enclose the whole value", key);
    d = cp_model_opt(NULL, key);
    if (!d || (d->flags & CP_OPT_NO_SPEC))
        d = cp_model_opt(m, key);
    if (!d || (d->flags & CP_OPT_NO_SPEC)) {
        owner = cp_pool_opt_owner(key);
        if (owner && owner != m && !(cp_model_opt(owner, key)->flags & CP_OPT_NO_SPEC))
            return bad(spec, "option '%s' is for kind '%s', not '%s'", key, owner->name, m->name);
        return bad(spec, "unknown option '%s' (%s)", key, spec_keys(list, sizeof list, m));
    }
    for (i = 0; i < ps->nseen; i++)
        if (ps->seen[i] == d)
            return bad(spec, "option '%s' is given twice", key);
    if (ps->nseen < (int)(sizeof ps->seen / sizeof ps->seen[0]))
        ps->seen[ps->nseen++] = d;
    if (cp_model_refuses(m, key))
        return bad(spec, "option '%s' does not apply to kind '%s' (%s)", key, m->name,
                   m->foreign_why);
    if (d->type == CP_OPT_STRING) {
        if ((val = keep(ps, vb, ve)) == NULL)
            return bad(spec, "a key or value is too long");
    } else {
        if ((size_t)(ve - vb) >= sizeof vbuf)
            return bad(spec, "a key or value is too long");
        memcpy(vbuf, vb, (size_t)(ve - vb));
        vbuf[ve - vb] = '\0';
        val = vbuf;
    }
    return set_value(spec, o, d, val);
}

cp_status cp_pool_spec_parse(const char *spec, cp_pool_opts *o, char *buf, size_t buflen)
{
    spec_state ps;
    char list[200];
    const char *p, *b, *e, *kind;
    const cp_model *m;
    cp_status st;

    memset(o, 0, sizeof *o);
    if (!spec)
        return cp_error_set(CP_ERR_INVALID, "pool spec missing");
    memset(&ps, 0, sizeof ps);
    ps.spec = spec;
    ps.buf = buf;
    ps.len = buflen;
    b = spec;
    e = p = item_end(spec);
    trim(&b, &e);
    if (e == b || (kind = keep(&ps, b, e)) == NULL)
        return bad(spec, "the spec starts with the pool's kind (%s)",
                   spec_kinds(list, sizeof list));
    m = cp_model_find(kind);
    if (m && m->no_spec)
        return bad(spec, "kind '%s' %s (%s)", kind, m->no_spec, spec_kinds(list, sizeof list));
    if (!m) {
        const char *near = cp_nearest_name(kind, cp_model_name);
        return bad(spec, "unknown pool kind '%s' (%s)%s%s%s", kind, spec_kinds(list, sizeof list),
                   near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
    }
    cp_pool_opts_init(o, kind);
    while (*p == ',') {
        b = p + 1;
        p = item_end(b);
        if ((st = item(&ps, o, m, b, p)) != CP_OK)
            return st;
    }
    if (m->check && m->check(o) != CP_OK)
        return bad_check(spec);
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
 * pool/heap.h; their rows carry CP_MODEL_KEEPS_IDLE) get CP_SERVE_KEEP_ALL:
 * no chunk is returned to make room, so a warm pool makes no upstream call
 * on steps that repeat (cupola.pool's
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
    const cp_model *m = cp_model_find(o->kind);
    if (m && (m->traits & CP_MODEL_KEEPS_IDLE) && !o->release_threshold_set)
        o->release_threshold = CP_SERVE_KEEP_ALL;
}
