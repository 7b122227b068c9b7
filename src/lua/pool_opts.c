/*
 * pool_opts.c: cupola.pool{...}'s option table read through the registry of
 * pool kinds (pool/model.h): every option's name, type, default and checks
 * come from its descriptor, the one the spec string parser (pool/spec.c)
 * reads too; and cupola.pool_kinds(), which shows the descriptors and the
 * kinds' traits to Lua.
 *
 * The binding reads four options itself: kind, device (checked against the
 * devices), limit and log (adaptors it wraps around the pool), and plugin's
 * source (compiled into path: pool.c).
 */
#include <stdio.h>
#include <string.h>

#include "binding.h"
#include "pool/model.h"

static const char *const binding_names[] = {"kind", "limit", "log", "device", NULL};

/* The index of the name (name(0), name(1), ... from the core) that option
 * key of the table at idx names (absent: def). */
static int checkchoice(lua_State *L, int idx, const char *key, const char *def,
                       const char *(*name)(int i))
{
    const char *v = l_optstring_field(L, idx, key, def);
    const char *n;
    int i;
    for (i = 0; (n = name(i)) != NULL; i++)
        if (strcmp(v, n) == 0)
            return i;
    lua_pushfstring(L, "cupola.pool: option '%s' must be one of ", key);
    l_pushnames(L, name, ", ");
    lua_pushliteral(L, ", not '");
    l_pushcut(L, v, strlen(v));
    n = cp_nearest_name(v, name);
    if (n)
        lua_pushfstring(L, "'; did you mean '%s'?", n);
    else
        lua_pushliteral(L, "'");
    lua_concat(L, 5);
    return l_error_here(L);
}

static int given(lua_State *L, int idx, const char *name)
{
    int t = lua_getfield(L, idx, name);
    lua_pop(L, 1);
    return t != LUA_TNIL;
}

/* Every key of the table is an option some kind takes (or the binding's). */
static void check_names(lua_State *L, int idx)
{
    l_checktable(L, idx);
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        const char *const *b;
        int known = 0;
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "cupola.pool: option names must be strings, not %s", l_pushtyped(L, -1));
        for (b = binding_names; *b; b++)
            known |= strcmp(lua_tostring(L, -1), *b) == 0;
        if (!known && !cp_pool_opt_known(lua_tostring(L, -1)))
            luaL_error(L, "cupola.pool: unknown option %s", l_pushshown(L, -1));
    }
}

/* A string option with a meaning of its own (torch's conf): its type and
 * NUL bytes refused with messages that say what it is. */
static const char *described_string(lua_State *L, int idx, const cp_opt *d)
{
    size_t len = 0;
    const char *s;
    lua_getfield(L, idx, d->name);
    if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "cupola.pool: option '%s' must be a string (%s), not %s", d->name, d->what,
                   l_pushtyped(L, -1));
    s = lua_tolstring(L, -1, &len);
    if (memchr(s, '\0', len))
        luaL_error(L, "cupola.pool: option '%s' contains a NUL byte", d->name);
    lua_pop(L, 1); /* the string stays in the option table */
    return s;
}

/* Option d, when the table at idx gives it, read as its type says and
 * stored in o (its check run). */
static void read_opt(lua_State *L, int idx, cp_pool_opts *o, const cp_opt *d)
{
    uint64_t u;
    lua_Integer n;
    lua_Number f;
    int i, isnum;
    const char *s;
    const void *v = &u;

    if ((d->flags & CP_OPT_BINDING) || !given(L, idx, d->name))
        return;
    switch (d->type) {
    case CP_OPT_SIZE:
        /* named as every other refusal of cupola.pool's names its option */
        lua_getfield(L, idx, d->name);
        i = lua_gettop(L);
        u = l_checksize_named(L, i, lua_pushfstring(L, "cupola.pool: option '%s'", d->name));
        lua_pop(L, 2);
        break;
    case CP_OPT_U32:
        lua_getfield(L, idx, d->name);
        n = lua_tointegerx(L, -1, &isnum);
        if (!isnum || n < 0)
            luaL_error(L, "cupola.pool: option '%s' must be a non-negative integer, not %s",
                       d->name, l_pushshown(L, -1));
        lua_pop(L, 1);
        u = (uint64_t)n;
        break;
    case CP_OPT_BOOL:
        i = l_optbool_field(L, idx, d->name, 0);
        v = &i;
        break;
    case CP_OPT_NUMBER:
        lua_getfield(L, idx, d->name);
        f = lua_tonumberx(L, -1, &isnum);
        if (!isnum || !(f >= d->lo && f <= d->hi)) {
            char range[80];
            snprintf(range, sizeof range, "from %g to %g", d->lo, d->hi);
            luaL_error(L, "cupola.pool: option '%s' must be a number %s, not %s", d->name, range,
                       l_pushshown(L, -1));
        }
        lua_pop(L, 1);
        {
            double x = (double)f;
            if (cp_pool_opt_set(o, d, &x) != CP_OK)
                luaL_error(L, "cupola.pool: %s", cp_error_msg());
        }
        return;
    case CP_OPT_CHOICE:
        i = checkchoice(L, idx, d->name, d->choice((int)d->def), d->choice);
        v = &i;
        break;
    default:
        s = d->what ? described_string(L, idx, d) : l_optstring_field(L, idx, d->name, NULL);
        v = &s;
        break;
    }
    if (cp_pool_opt_set(o, d, v) != CP_OK)
        luaL_error(L, "cupola.pool: %s", cp_error_msg());
}

/* An option of another kind than m given: the error, naming them all when
 * they go together (CUB's four settings, a plugin's files: their values are
 * read first, so that a wrong one is named as such). */
static void other_kinds(lua_State *L, int idx, const cp_model *m)
{
    const cp_model *x;
    const cp_opt *d, *e;
    int k;
    for (k = 0; (x = cp_model_at(k)) != NULL; k++) {
        for (d = x->opts; x != m && d && d->name; d++) {
            if (cp_model_opt(m, d->name) || !given(L, idx, d->name))
                continue;
            if (!(x->traits & CP_MODEL_TOGETHER))
                luaL_error(L, "cupola.pool: option '%s' is for kind '%s', not '%s'", d->name,
                           x->name, m->name);
            {
                cp_pool_opts scratch;
                cp_pool_opts_init(&scratch, x->name);
                for (e = x->opts; e->name; e++)
                    if (!cp_model_opt(m, e->name))
                        read_opt(L, idx, &scratch, e);
            }
            lua_pushliteral(L, "cupola.pool: options ");
            for (e = x->opts; e->name; e++)
                lua_pushfstring(L, "%s'%s'", e == x->opts ? "" : e[1].name ? ", " : " and ",
                                e->name);
            lua_pushfstring(L, " are for kind '%s', not '%s'", x->name, m->name);
            lua_concat(L, (int)(e - x->opts) + 2);
            l_error_here(L);
        }
    }
}

const cp_model *l_pool_opts(lua_State *L, int idx, cp_pool_opts *o)
{
    const cp_opt *d;
    const cp_model *m;
    const char *const *f;

    check_names(L, idx);
    m = cp_model_at(checkchoice(L, idx, "kind", "tlsf", cp_pool_kind_name));
    cp_pool_opts_init(o, m->name);
    for (d = cp_pool_common_opts(); d->name; d++)
        read_opt(L, idx, o, d);
    o->device = l_optdevice_field(L, idx, "cupola.pool");
    if (o->max && o->initial > o->max)
        luaL_error(L, "cupola.pool: option 'initial' is larger than 'max' (%I > %I)",
                   (LUAI_UACINT)o->initial, (LUAI_UACINT)o->max);
    other_kinds(L, idx, m);
    for (f = m->foreign; f && *f; f++)
        if (given(L, idx, *f))
            luaL_error(L, "cupola.pool: option '%s' does not apply to kind '%s' (%s)", *f, m->name,
                       m->foreign_why);
    for (d = m->opts; d && d->name; d++)
        read_opt(L, idx, o, d);
    if (m->check && m->check(o) != CP_OK)
        luaL_error(L, "cupola.pool: %s", cp_error_msg());
    return m;
}

/* ---- cupola.pool_kinds() ---- */

static const char *type_name(cp_opt_type t)
{
    static const char *const names[] = {"size", "integer", "boolean", "number", "choice",
                                        "string"};
    return names[t];
}

/* One option's description: {name, type, default, choices, spec, common}. */
static void push_opt(lua_State *L, const cp_opt *d, int common)
{
    int i;
    lua_createtable(L, 0, 6);
    lua_pushstring(L, d->name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, type_name(d->type));
    lua_setfield(L, -2, "type");
    switch (d->type) {
    case CP_OPT_SIZE:
    case CP_OPT_U32:
        lua_pushinteger(L, (lua_Integer)d->def);
        break;
    case CP_OPT_BOOL:
        if (d->def < 0)
            lua_pushnil(L); /* the model decides */
        else
            lua_pushboolean(L, d->def != 0);
        break;
    case CP_OPT_NUMBER:
        lua_pushnumber(L, d->num_def);
        break;
    case CP_OPT_CHOICE:
        lua_pushstring(L, d->choice((int)d->def));
        lua_createtable(L, 4, 0);
        for (i = 0; d->choice(i); i++) {
            lua_pushstring(L, d->choice(i));
            lua_rawseti(L, -2, i + 1);
        }
        lua_setfield(L, -3, "choices");
        break;
    default:
        lua_pushnil(L);
        break;
    }
    lua_setfield(L, -2, "default");
    lua_pushboolean(L, !(d->flags & CP_OPT_NO_SPEC));
    lua_setfield(L, -2, "spec");
    lua_pushboolean(L, common);
    lua_setfield(L, -2, "common");
}

/* cupola.pool_kinds() -> the kinds cupola.pool knows, in order, each also
 * under its name: {name, spec, own_clock, recorded_addresses, keeps_idle,
 * options = {the options it takes: common ones, then its own}}. */
static int pool_kinds(lua_State *L)
{
    const cp_model *m;
    const cp_opt *d;
    int k, n;
    lua_newtable(L);
    for (k = 0; (m = cp_model_at(k)) != NULL; k++) {
        lua_createtable(L, 0, 6);
        lua_pushstring(L, m->name);
        lua_setfield(L, -2, "name");
        lua_pushboolean(L, m->no_spec == NULL);
        lua_setfield(L, -2, "spec");
        lua_pushboolean(L, (m->traits & CP_MODEL_OWN_CLOCK) != 0);
        lua_setfield(L, -2, "own_clock");
        lua_pushboolean(L, (m->traits & CP_MODEL_RECORDED) != 0);
        lua_setfield(L, -2, "recorded_addresses");
        lua_pushboolean(L, (m->traits & CP_MODEL_KEEPS_IDLE) != 0);
        lua_setfield(L, -2, "keeps_idle");
        lua_newtable(L);
        n = 0;
        for (d = cp_pool_common_opts(); d->name; d++)
            if (!cp_model_refuses(m, d->name)) {
                push_opt(L, d, 1);
                lua_rawseti(L, -2, ++n);
            }
        for (d = m->opts; d && d->name; d++) {
            push_opt(L, d, 0);
            lua_rawseti(L, -2, ++n);
        }
        lua_setfield(L, -2, "options");
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, m->name);
        lua_rawseti(L, -2, k + 1);
    }
    return 1;
}

void l_open_pool_kinds(lua_State *L)
{
    lua_pushcfunction(L, pool_kinds);
    lua_setfield(L, -2, "pool_kinds");
}
