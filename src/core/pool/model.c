/*
 * model.c: the registry of pool kinds (model.h): the list of the models
 * cupola ships, the ones registered at run time, the common options'
 * descriptor, and what every parser of options shares (defaults, storing a
 * value, the checks of a value).
 */
#include "model.h"

#include <stdio.h>
#include <string.h>

#include "error.h"

/* The models cupola ships, in the order users see them listed: one name
 * each; the model's file defines cp_<name>_model (its row). */
#define CP_MODELS(X) X(arena) X(freelist) X(tlsf) X(caching) X(vmm) X(plugin) \
                     X(cub) X(torch) X(bfc) X(cupy)

#define DECLARE(n) extern const cp_model cp_##n##_model;
CP_MODELS(DECLARE)
#undef DECLARE
#define ROW(n) &cp_##n##_model,
static const cp_model *const shipped[] = {CP_MODELS(ROW)};
#undef ROW
#define NSHIPPED (sizeof shipped / sizeof shipped[0])

/* Models registered at run time (the tests' own): a handful at most. */
#define MAX_REGISTERED 8
static const cp_model *registered[MAX_REGISTERED];
static int nregistered;

/* The options of cupola.pool{} the binding reads itself (kind, and what it
 * wraps around the pool or checks against the devices): no model may take
 * their names. */
static const char *const binding_names[] = {"kind", "device", "limit", "log", NULL};

/* Enums are stored through an int (CP_OPT_CHOICE). */
_Static_assert(sizeof(cp_upstream_kind) == sizeof(int), "cp_upstream_kind is an int");
_Static_assert(sizeof(cp_reuse) == sizeof(int), "cp_reuse is an int");
_Static_assert(sizeof(cp_clock_kind) == sizeof(int), "cp_clock_kind is an int");

static cp_status check_alignment(const cp_opt *d, const void *v)
{
    uint64_t a;
    memcpy(&a, v, sizeof a);
    if (a == 0 || (a & (a - 1)))
        return cp_error_set(CP_ERR_INVALID, "option '%s' must be a power of two, not %llu",
                            d->name, (unsigned long long)a);
    return CP_OK;
}

/* The options every kind takes (a model may refuse some: cp_model.foreign),
 * in the order a spec's message lists them. */
static const cp_opt common[] = {
    {.name = "upstream", .type = CP_OPT_CHOICE, .offset = offsetof(cp_pool_opts, upstream),
     .def = CP_UP_DEVICE, .choice = cp_upstream_name},
    {.name = "initial", .type = CP_OPT_SIZE, .offset = offsetof(cp_pool_opts, initial)},
    {.name = "max", .type = CP_OPT_SIZE, .offset = offsetof(cp_pool_opts, max)},
    {.name = "alignment", .type = CP_OPT_SIZE, .offset = offsetof(cp_pool_opts, alignment),
     .def = 256, .check = check_alignment},
    {.name = "release_threshold", .type = CP_OPT_SIZE,
     .offset = offsetof(cp_pool_opts, release_threshold), .flags = CP_OPT_MARK},
    {.name = "grow", .type = CP_OPT_BOOL, .offset = offsetof(cp_pool_opts, grow), .def = 1},
    {.name = "fallback", .type = CP_OPT_BOOL, .offset = offsetof(cp_pool_opts, fallback)},
    {.name = "reuse", .type = CP_OPT_CHOICE, .offset = offsetof(cp_pool_opts, reuse),
     .def = CP_REUSE_EVENT, .choice = cp_reuse_name},
    {.name = "clock", .type = CP_OPT_CHOICE, .offset = offsetof(cp_pool_opts, clock),
     .def = CP_CLOCK_WALL, .choice = cp_clock_name, .flags = CP_OPT_NO_SPEC},
    {.name = NULL},
};
#define NCOMMON (sizeof common / sizeof common[0] - 1)

const cp_opt *cp_pool_common_opts(void)
{
    return common;
}

const char *cp_model_name(int i)
{
    const cp_model *m = cp_model_at(i);
    return m ? m->name : NULL;
}

/* The edits between a and b (optimal string alignment: insert, delete,
 * substitute, swap two neighbours), or more than max where they exceed it. */
static size_t edits(const char *a, const char *b, size_t max)
{
    size_t la = strlen(a), lb = strlen(b), i, j;
    size_t rows[3][33], *pp = rows[0], *p = rows[1], *c = rows[2];
    if (la > 32 || lb > 32 || (la > lb ? la - lb : lb - la) > max)
        return max + 1;
    for (j = 0; j <= lb; j++)
        p[j] = j;
    for (i = 1; i <= la; i++) {
        size_t *t;
        c[0] = i;
        for (j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] != b[j - 1], v = p[j] + 1;
            if (c[j - 1] + 1 < v)
                v = c[j - 1] + 1;
            if (p[j - 1] + cost < v)
                v = p[j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && pp[j - 2] + 1 < v)
                v = pp[j - 2] + 1;
            c[j] = v;
        }
        t = pp;
        pp = p;
        p = c;
        c = t;
    }
    return p[lb];
}

const char *cp_nearest_name(const char *v, const char *(*name)(int i))
{
    const char *best = NULL, *n;
    size_t bd = 3, len = strlen(v);
    int i, tie = 0;
    for (i = 0; (n = name(i)) != NULL; i++) {
        size_t d = edits(v, n, 2);
        if (d < bd) {
            best = n;
            bd = d;
            tie = 0;
        } else if (d == bd) {
            tie = 1;
        }
    }
    return best && !tie && bd > 0 && 2 * bd < len ? best : NULL;
}

const cp_model *cp_model_at(int i)
{
    if (i < 0)
        return NULL;
    if ((size_t)i < NSHIPPED)
        return shipped[i];
    i -= (int)NSHIPPED;
    return i < nregistered ? registered[i] : NULL;
}

const cp_model *cp_model_find(const char *kind)
{
    const cp_model *m;
    int i;
    for (i = 0; kind && (m = cp_model_at(i)) != NULL; i++)
        if (strcmp(m->name, kind) == 0)
            return m;
    return NULL;
}

const char *cp_pool_kind_name(int i)
{
    const cp_model *m = cp_model_at(i);
    return m ? m->name : NULL;
}

const cp_opt *cp_model_opt(const cp_model *m, const char *name)
{
    const cp_opt *d = m ? m->opts : common;
    for (; d && d->name; d++)
        if (strcmp(d->name, name) == 0)
            return d;
    return NULL;
}

const cp_model *cp_pool_opt_owner(const char *name)
{
    const cp_model *m;
    int i;
    for (i = 0; (m = cp_model_at(i)) != NULL; i++)
        if (cp_model_opt(m, name))
            return m;
    return NULL;
}

int cp_pool_opt_known(const char *name)
{
    return cp_model_opt(NULL, name) || cp_pool_opt_owner(name);
}

int cp_model_refuses(const cp_model *m, const char *name)
{
    const char *const *f;
    for (f = m->foreign; f && *f; f++)
        if (strcmp(*f, name) == 0)
            return 1;
    return 0;
}

static size_t type_size(cp_opt_type t)
{
    switch (t) {
    case CP_OPT_SIZE:
    case CP_OPT_U32:
        return sizeof(uint64_t);
    case CP_OPT_BOOL:
    case CP_OPT_CHOICE:
        return sizeof(int);
    case CP_OPT_NUMBER:
        return sizeof(double);
    default:
        return sizeof(const char *);
    }
}

/* Option d's default into base (the options' struct it belongs to). */
static void put_default(unsigned char *base, const cp_opt *d)
{
    uint64_t u = (uint64_t)d->def;
    int i = (int)d->def;
    const char *s = NULL;
    switch (d->type) {
    case CP_OPT_SIZE:
    case CP_OPT_U32:
        memcpy(base + d->offset, &u, sizeof u);
        break;
    case CP_OPT_BOOL:
    case CP_OPT_CHOICE:
        memcpy(base + d->offset, &i, sizeof i);
        break;
    case CP_OPT_NUMBER:
        memcpy(base + d->offset, &d->num_def, sizeof d->num_def);
        break;
    default:
        memcpy(base + d->offset, &s, sizeof s);
        break;
    }
}

void cp_model_defaults(const cp_model *m, void *own)
{
    const cp_opt *d;
    memset(own, 0, m->opts_size);
    for (d = m->opts; d && d->name; d++)
        if (!(d->flags & CP_OPT_BINDING))
            put_default((unsigned char *)own, d);
}

void cp_pool_opts_init(cp_pool_opts *o, const char *kind)
{
    const cp_model *m = cp_model_find(kind);
    const cp_opt *d;
    memset(o, 0, sizeof *o);
    for (d = common; d->name; d++)
        put_default((unsigned char *)o, d);
    o->kind = kind;
    if (m) {
        cp_model_defaults(m, o->own.bytes);
        o->own_kind = kind;
    }
}

void *cp_pool_own(cp_pool_opts *o)
{
    const cp_model *m;
    if ((!o->own_kind || !o->kind || strcmp(o->own_kind, o->kind) != 0) &&
        (m = cp_model_find(o->kind)) != NULL) {
        cp_model_defaults(m, o->own.bytes);
        o->own_kind = o->kind;
    }
    return o->own.bytes;
}

cp_status cp_pool_opt_set(cp_pool_opts *o, const cp_opt *d, const void *v)
{
    int is_common = d >= common && d < common + NCOMMON;
    unsigned char *base = is_common ? (unsigned char *)o : o->own.bytes;
    cp_status st;
    if (d->flags & CP_OPT_BINDING)
        return CP_OK;
    if (d->check && (st = d->check(d, v)) != CP_OK)
        return st;
    memcpy(base + d->offset, v, type_size(d->type));
    if (d->flags & CP_OPT_MARK)
        o->release_threshold_set = 1;
    return CP_OK;
}

unsigned cp_model_traits_of(const cp_resource *r)
{
    const cp_model *m = r ? cp_model_find(cp_resource_kind(r)) : NULL;
    return m ? m->traits : 0;
}

const char *cp_model_names(char *buf, size_t len, unsigned traits, char quote, const char *last)
{
    const cp_model *m, *with[64];
    size_t n = 0, k, at = 0;
    int i;
    for (i = 0; (m = cp_model_at(i)) != NULL && n < sizeof with / sizeof with[0]; i++)
        if ((m->traits & traits) == traits)
            with[n++] = m;
    buf[0] = '\0';
    for (k = 0; k < n && at < len; k++)
        at += (size_t)snprintf(buf + at, len - at, "%s%c%s%c",
                               k == 0 ? "" : k + 1 == n ? last : ", ", quote, with[k]->name, quote);
    return buf;
}

/* ---- registering a model ---- */

static int taken(const char *name)
{
    const char *const *b;
    for (b = binding_names; *b; b++)
        if (strcmp(*b, name) == 0)
            return 1;
    return cp_pool_opt_known(name);
}

static cp_status check_opt(const cp_model *m, const cp_opt *d)
{
    if (taken(d->name))
        return cp_error_set(CP_ERR_INVALID, "model '%s': option '%s' is already another "
                            "option's name", m->name, d->name);
    if ((unsigned)d->type > CP_OPT_STRING || d->offset + type_size(d->type) > m->opts_size)
        return cp_error_set(CP_ERR_INVALID, "model '%s': option '%s' has no room in its %zu-byte "
                            "options (offset %zu) or an unknown type", m->name, d->name,
                            m->opts_size, d->offset);
    if (d->type == CP_OPT_CHOICE && (!d->choice || !d->choice(0)))
        return cp_error_set(CP_ERR_INVALID, "model '%s': option '%s' is a choice with no names",
                            m->name, d->name);
    if (d->type == CP_OPT_NUMBER && !(d->lo <= d->num_def && d->num_def <= d->hi))
        return cp_error_set(CP_ERR_INVALID, "model '%s': option '%s' has its default outside "
                            "its range", m->name, d->name);
    return CP_OK;
}

cp_status cp_model_register(const cp_model *m)
{
    const cp_opt *d, *e;
    const char *const *f;
    cp_status st;
    if (!m || !m->name || !*m->name || !m->create)
        return cp_error_set(CP_ERR_INVALID, "a model needs a name and a constructor");
    if (cp_model_find(m->name))
        return cp_error_set(CP_ERR_INVALID, "model '%s' is registered already", m->name);
    if (m->opts_size > CP_MODEL_OPTS_MAX)
        return cp_error_set(CP_ERR_INVALID, "model '%s': its options take %zu bytes, more than "
                            "the %d cp_pool_opts has room for", m->name, m->opts_size,
                            CP_MODEL_OPTS_MAX);
    for (d = m->opts; d && d->name; d++) {
        if ((st = check_opt(m, d)) != CP_OK)
            return st;
        for (e = m->opts; e != d; e++)
            if (strcmp(e->name, d->name) == 0)
                return cp_error_set(CP_ERR_INVALID, "model '%s': option '%s' is listed twice",
                                    m->name, d->name);
    }
    for (f = m->foreign; f && *f; f++)
        if (!cp_model_opt(NULL, *f))
            return cp_error_set(CP_ERR_INVALID, "model '%s': it refuses '%s', which is no common "
                                "option", m->name, *f);
    if (nregistered == MAX_REGISTERED)
        return cp_error_set(CP_ERR_INVALID, "no room for model '%s' (%d registered)", m->name,
                            MAX_REGISTERED);
    registered[nregistered++] = m;
    return CP_OK;
}
