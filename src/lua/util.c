/*
 * util.c: errors, sizes and option tables for every binding file.
 */
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "binding.h"
#include "size.h"

/* ---- type tags (binding.h) ---- */

uint64_t l_tag_secret;
static pthread_once_t tag_once = PTHREAD_ONCE_INIT;

static void tag_draw(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
        /* no entropy yet (early boot): still unknown to a script */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        v = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)&ts ^
            ((uint64_t)getpid() << 17);
    }
    l_tag_secret = v;
}

void l_tag_init(void)
{
    pthread_once(&tag_once, tag_draw);
}

void *l_testtag_slow(lua_State *L, int arg, size_t size, const char *tname)
{
    void *p = luaL_testudata(L, arg, tname);
    return p && lua_rawlen(L, arg) == size ? p : NULL;
}

void *l_checktag_slow(lua_State *L, int arg, size_t size, const char *tname)
{
    void *p = luaL_testudata(L, arg, tname);
    /* Another userdata given a handle's metatable (debug.setmetatable): the
     * class's, or one of a Pool's own (which carry the class's __name). */
    if ((p && lua_rawlen(L, arg) != size) ||
        (!p && lua_type(L, arg) == LUA_TUSERDATA && luaL_getmetafield(L, arg, "__name") == LUA_TSTRING &&
         strcmp(lua_tostring(L, -1), tname) == 0))
        luaL_argerror(L, arg, lua_pushfstring(L, "%s expected, got another userdata with its metatable",
                                              tname));
    /* the usual message for anything that is not this type, with the value */
    return p ? p : l_checkudata(L, arg, tname);
}

/* ---- values in messages ---- */

/* A string in a message, as the core shows values (cp_shown, error.h). */
void l_pushcut(lua_State *L, const char *s, size_t len)
{
    char buf[CP_SHOWN_BUF];
    lua_pushstring(L, cp_shown(s, len, buf));
}

/* The name of a value's type as lauxlib's messages give it: a handle's
 * __name, else the Lua type. */
static const char *shown_type(lua_State *L, int idx)
{
    const char *t = luaL_typename(L, idx);
    if (luaL_getmetafield(L, idx, "__name") != LUA_TNIL) {
        if (lua_type(L, -1) == LUA_TSTRING)
            t = lua_tostring(L, -1); /* kept alive by the metatable */
        lua_pop(L, 1);
    } else if (lua_type(L, idx) == LUA_TLIGHTUSERDATA) {
        t = "light userdata";
    }
    return t;
}

const char *l_pushshown(lua_State *L, int idx)
{
    idx = lua_absindex(L, idx);
    switch (lua_type(L, idx)) {
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        lua_pushliteral(L, "'");
        l_pushcut(L, s, len);
        lua_pushliteral(L, "'");
        lua_concat(L, 3);
        break;
    }
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx))
            lua_pushfstring(L, "%I", (LUAI_UACINT)lua_tointeger(L, idx));
        else
            lua_pushfstring(L, "%f", (LUAI_UACNUMBER)lua_tonumber(L, idx));
        break;
    case LUA_TBOOLEAN:
        lua_pushstring(L, lua_toboolean(L, idx) ? "true" : "false");
        break;
    case LUA_TNONE:
        lua_pushliteral(L, "no value");
        break;
    default:
        lua_pushstring(L, shown_type(L, idx));
        break;
    }
    return lua_tostring(L, -1);
}

const char *l_pushtyped(lua_State *L, int idx)
{
    int t = lua_type(L, idx);
    idx = lua_absindex(L, idx);
    if (t == LUA_TSTRING || t == LUA_TNUMBER || t == LUA_TBOOLEAN) {
        l_pushshown(L, idx);
        lua_pushfstring(L, "%s %s", lua_typename(L, t), lua_tostring(L, -1));
        lua_remove(L, -2);
        return lua_tostring(L, -1);
    }
    return l_pushshown(L, idx);
}

const char *l_pushgot(lua_State *L, int idx)
{
    int t = lua_type(L, idx);
    if (t != LUA_TSTRING && t != LUA_TNUMBER && t != LUA_TBOOLEAN) {
        lua_pushliteral(L, "");
        return "";
    }
    l_pushshown(L, idx);
    lua_pushfstring(L, ", got %s", lua_tostring(L, -1));
    lua_remove(L, -2);
    return lua_tostring(L, -1);
}

int l_typeerror(lua_State *L, int arg, const char *tname)
{
    const char *got = l_pushtyped(L, arg);
    return luaL_argerror(L, arg, lua_pushfstring(L, "%s expected, got %s", tname, got));
}

lua_Integer l_checkinteger(lua_State *L, int arg)
{
    int isint;
    lua_Integer v = lua_tointegerx(L, arg, &isint);
    if (isint)
        return v;
    if (lua_isnumber(L, arg))
        return luaL_argerror(L, arg, lua_pushfstring(L, "number has no integer representation, got %s",
                                                     l_pushshown(L, arg)));
    return l_typeerror(L, arg, "number");
}

lua_Integer l_optinteger(lua_State *L, int arg, lua_Integer def)
{
    return lua_isnoneornil(L, arg) ? def : l_checkinteger(L, arg);
}

lua_Number l_checknumber(lua_State *L, int arg)
{
    int isnum;
    lua_Number v = lua_tonumberx(L, arg, &isnum);
    if (!isnum)
        l_typeerror(L, arg, "number");
    return v;
}

const char *l_checklstring(lua_State *L, int arg, size_t *len)
{
    const char *s = lua_tolstring(L, arg, len);
    if (!s)
        l_typeerror(L, arg, "string");
    return s;
}

const char *l_optlstring(lua_State *L, int arg, const char *def, size_t *len)
{
    if (lua_isnoneornil(L, arg)) {
        if (len)
            *len = def ? strlen(def) : 0;
        return def;
    }
    return l_checklstring(L, arg, len);
}

void l_checktable(lua_State *L, int arg)
{
    if (lua_type(L, arg) != LUA_TTABLE)
        l_typeerror(L, arg, "table");
}

void *l_checkudata(lua_State *L, int arg, const char *tname)
{
    void *p = luaL_testudata(L, arg, tname);
    if (!p)
        l_typeerror(L, arg, tname);
    return p;
}

int l_error_here(lua_State *L)
{
    luaL_where(L, 1);
    lua_insert(L, -2);
    lua_concat(L, 2);
    return lua_error(L);
}

int l_fail(lua_State *L, cp_status st)
{
    const char *msg = cp_error_msg();
    (void)st;
    return luaL_error(L, "%s", *msg ? msg : "cupola: operation failed");
}

int l_fail_log(lua_State *L, const char *prefix, char *log)
{
    /* A compile error's message is its first line, then the log, cut to
     * the core's error buffer (512 bytes); the whole log came back in log,
     * so the raised message carries all of it: a prelude's or a long first
     * error must not cut off the user's file:line. */
    const char *msg = cp_error_msg(), *nl = strchr(msg, '\n');
    if (log && *log && nl && strncmp(nl + 1, log, strlen(nl + 1)) == 0) {
        luaL_where(L, 1); /* the caller's file:line, as luaL_error gives */
        lua_pushstring(L, prefix);
        lua_pushlstring(L, msg, (size_t)(nl + 1 - msg));
        lua_pushstring(L, log);
        free(log);
        lua_concat(L, 4);
        return lua_error(L);
    }
    free(log);
    return luaL_error(L, "%s%s", prefix, *msg ? msg : "operation failed");
}

void l_check(lua_State *L, cp_status st)
{
    if (st != CP_OK)
        l_fail(L, st);
}

int l_alloc_result(lua_State *L, cp_status st)
{
    if (st == CP_OK)
        return 0;
    if (st != CP_ERR_OOM)
        return l_fail(L, st);
    lua_pushnil(L);
    lua_pushstring(L, *cp_error_msg() ? cp_error_msg() : "out of memory");
    lua_pushliteral(L, "out_of_memory");
    return 3;
}

static void push_oom_info(lua_State *L, const char *kind, uint64_t requested, int dev,
                          struct cp_mempool *mp)
{
    size_t fr = 0, total = 0;
    uint64_t reserved = 0, used = 0;
    int have_dev, have_pool;
    have_dev = (cp_be->mem_get_info_on ? cp_be->mem_get_info_on(dev, &fr, &total)
                                       : cp_be->mem_get_info(&fr, &total)) == CP_OK;
    have_pool = mp && cp_be->mempool_get_attr(mp, CP_POOL_RESERVED_MEM_CURRENT, &reserved) == CP_OK &&
                cp_be->mempool_get_attr(mp, CP_POOL_USED_MEM_CURRENT, &used) == CP_OK;
    lua_createtable(L, 0, 7);
    lua_pushinteger(L, (lua_Integer)requested);
    lua_setfield(L, -2, "requested");
    lua_pushstring(L, kind);
    lua_setfield(L, -2, "kind");
    if (have_dev) {
        lua_pushinteger(L, (lua_Integer)fr);
        lua_setfield(L, -2, "device_free");
        lua_pushinteger(L, (lua_Integer)total);
        lua_setfield(L, -2, "device_total");
    }
    if (have_pool) {
        lua_pushinteger(L, (lua_Integer)reserved);
        lua_setfield(L, -2, "reserved");
        lua_pushinteger(L, (lua_Integer)used);
        lua_setfield(L, -2, "used");
        lua_pushinteger(L, (lua_Integer)(reserved > used ? reserved - used : 0));
        lua_setfield(L, -2, "free");
    } else if (have_dev) {
        lua_pushinteger(L, (lua_Integer)fr);
        lua_setfield(L, -2, "free");
    }
}

int l_alloc_result_info(lua_State *L, cp_status st, const char *kind, uint64_t requested, int dev,
                        struct cp_mempool *mp)
{
    if (st == CP_OK)
        return 0;
    l_alloc_result(L, st); /* raises unless out of memory */
    push_oom_info(L, kind, requested, dev, mp);
    return 4;
}

/* "4MiB", "4 MiB", "1.5GiB", "256B", "4096": binary units only, because the
 * contract's sizes are what allocators count (1 KiB = 1024 B); size.h. */
int l_parsesize(const char *s, uint64_t *out)
{
    return cp_parse_size(s, out);
}

/* Why a string is not a size: "-1MiB" is a negative size, which a user
 * reads as such, not as a malformed one. */
static const char *size_why(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    if (*s == '-' && (isdigit((unsigned char)s[1]) || s[1] == '.'))
        return "size must not be negative";
    return "malformed size (expected e.g. 4096, \"64KiB\", \"4MiB\")";
}

size_t l_checksize(lua_State *L, int arg)
{
    if (lua_type(L, arg) == LUA_TNUMBER) {
        int isint;
        lua_Integer n = lua_tointegerx(L, arg, &isint);
        if (!isint)
            luaL_argerror(L, arg, lua_pushfstring(L, "size must be a whole number of bytes, got %s",
                                                  l_pushshown(L, arg)));
        if (n < 0)
            luaL_argerror(L, arg, lua_pushfstring(L, "size must not be negative, got %I", (LUAI_UACINT)n));
        return (size_t)n;
    }
    if (lua_type(L, arg) == LUA_TSTRING) {
        uint64_t v;
        size_t len;
        const char *s = lua_tolstring(L, arg, &len);
        if (strlen(s) != len || l_parsesize(s, &v) != 0) {
            const char *why = size_why(s);
            l_pushcut(L, s, len);
            if (why[0] == 's') /* negative */
                return (size_t)luaL_argerror(
                    L, arg, lua_pushfstring(L, "%s, got '%s'", why, lua_tostring(L, -1)));
            return (size_t)luaL_argerror(
                L, arg,
                lua_pushfstring(L, "malformed size '%s' (expected e.g. 4096, \"64KiB\", \"4MiB\")",
                                lua_tostring(L, -1)));
        }
        if (v > (uint64_t)SIZE_MAX / 2)
            luaL_argerror(L, arg, lua_pushfstring(L, "size too large, got %s", l_pushshown(L, arg)));
        return (size_t)v;
    }
    return (size_t)l_typeerror(L, arg, "size (integer or string such as \"4MiB\")");
}

void l_pushnames(lua_State *L, const char *(*name)(int i), const char *last)
{
    luaL_Buffer b;
    const char *n;
    int i;
    luaL_buffinit(L, &b);
    for (i = 0; (n = name(i)) != NULL; i++) {
        if (i)
            luaL_addstring(&b, name(i + 1) ? ", " : last);
        luaL_addstring(&b, n);
    }
    luaL_pushresult(&b);
}

void l_checkoptions(lua_State *L, int idx, const char *fname, const char *const allowed[])
{
    if (lua_isnoneornil(L, idx))
        return;
    l_checktable(L, idx);
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        size_t i;
        int known = 0;
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TSTRING) {
            const char *k = lua_tostring(L, -1);
            for (i = 0; allowed[i]; i++)
                if (strcmp(k, allowed[i]) == 0)
                    known = 1;
            if (!known)
                luaL_error(L, "%s: unknown option %s", fname, l_pushshown(L, -1));
        } else {
            luaL_error(L, "%s: option names must be strings, not %s", fname, l_pushtyped(L, -1));
        }
    }
}

static int getfield(lua_State *L, int idx, const char *key)
{
    if (lua_isnoneornil(L, idx)) {
        lua_pushnil(L);
        return LUA_TNIL;
    }
    return lua_getfield(L, idx, key);
}

lua_Integer l_optint_field(lua_State *L, int idx, const char *key, lua_Integer def)
{
    lua_Integer v = def;
    int t = getfield(L, idx, key);
    if (t != LUA_TNIL) {
        int isint;
        v = lua_tointegerx(L, -1, &isint);
        if (!isint)
            luaL_error(L, "option '%s' must be an integer, not %s", key, l_pushtyped(L, -1));
    }
    lua_pop(L, 1);
    return v;
}

int l_optbool_field(lua_State *L, int idx, const char *key, int def)
{
    int v = def;
    int t = getfield(L, idx, key);
    if (t == LUA_TBOOLEAN)
        v = lua_toboolean(L, -1);
    else if (t != LUA_TNIL)
        luaL_error(L, "option '%s' must be a boolean, not %s", key, l_pushtyped(L, -1));
    lua_pop(L, 1);
    return v;
}

size_t l_checksize_named(lua_State *L, int idx, const char *what)
{
    int t = lua_type(L, idx);
    const char *why;
    if (t == LUA_TNUMBER) {
        int isint;
        lua_Integer n = lua_tointegerx(L, idx, &isint);
        if (isint && n >= 0)
            return (size_t)n;
        why = isint ? "size must not be negative" : "size must be a whole number of bytes";
    } else if (t == LUA_TSTRING) {
        uint64_t u;
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        if (strlen(s) != len || l_parsesize(s, &u) != 0)
            why = size_why(s);
        else if (u > (uint64_t)SIZE_MAX / 2)
            why = "size too large";
        else
            return (size_t)u;
    } else {
        return (size_t)luaL_error(L, "%s must be a size, not %s", what, l_pushtyped(L, idx));
    }
    if (t == LUA_TSTRING) {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        l_pushcut(L, s, len);
    } else {
        l_pushshown(L, idx);
    }
    return (size_t)luaL_error(L, "%s: bad size '%s' (%s)", what, lua_tostring(L, -1), why);
}

size_t l_optsize_field(lua_State *L, int idx, const char *key, size_t def)
{
    size_t v = def;
    int top = lua_gettop(L);
    if (getfield(L, idx, key) != LUA_TNIL) {
        int vi = lua_gettop(L);
        v = l_checksize_named(L, vi, lua_pushfstring(L, "option '%s'", key));
    }
    lua_settop(L, top);
    return v;
}

const char *l_optstring_field(lua_State *L, int idx, const char *key, const char *def)
{
    const char *v = def;
    int t = getfield(L, idx, key);
    if (t == LUA_TSTRING) {
        /* The string stays alive in the option table the caller holds. */
        size_t n;
        v = lua_tolstring(L, -1, &n);
        /* C reads up to the first NUL: {symbol = "x\0y"} used to look up 'x' */
        if (strlen(v) != n)
            luaL_error(L, "option '%s' must not hold a NUL byte, got %s", key, l_pushshown(L, -1));
    } else if (t != LUA_TNIL) {
        luaL_error(L, "option '%s' must be a string, not %s", key, l_pushtyped(L, -1));
    }
    lua_pop(L, 1);
    return v;
}

int l_readonly_newindex(lua_State *L)
{
    const char *tname = luaL_typename(L, 1);
    if (luaL_getmetafield(L, 1, "__name") == LUA_TSTRING)
        tname = lua_tostring(L, -1);
    return luaL_error(L, "%s field %s is read-only", tname, l_pushshown(L, 2));
}

/* The registry key: only its address matters. */
const char l_key_buffer = 'b';

int l_index_method(lua_State *L)
{
    if (lua_type(L, L_UP_METHODS) != LUA_TTABLE)
        return 0;
    lua_pushvalue(L, 2);
    if (lua_rawget(L, L_UP_METHODS) != LUA_TNIL)
        return 1;
    lua_settop(L, -2);
    return 0;
}

/* Pushes the Buffer and Stream metatables (created empty if their classes
 * are not registered yet: l_newclass fills them later). */
static void push_shared(lua_State *L)
{
    luaL_newmetatable(L, L_BUFFER);
    luaL_newmetatable(L, L_STREAM);
}

void l_setfuncs(lua_State *L, const luaL_Reg *l)
{
    lua_pushnil(L);
    lua_pushnil(L);
    push_shared(L);
    luaL_setfuncs(L, l, L_NUP);
}

void l_pushcfunction(lua_State *L, lua_CFunction f)
{
    lua_pushnil(L);
    lua_pushnil(L);
    push_shared(L);
    lua_pushcclosure(L, f, L_NUP);
}

void l_newclass(lua_State *L, const char *tname, const luaL_Reg *meta, const luaL_Reg *methods)
{
    luaL_newmetatable(L, tname); /* mt */
    lua_newtable(L);             /* mt methods */
    /* methods: into the method table */
    lua_pushvalue(L, -1);
    lua_pushvalue(L, -3);
    lua_pushvalue(L, -3);
    push_shared(L);
    luaL_setfuncs(L, methods, L_NUP);
    lua_pop(L, 1);
    /* metamethods: into mt */
    lua_pushvalue(L, -2);
    lua_pushvalue(L, -3);
    lua_pushvalue(L, -3);
    push_shared(L);
    luaL_setfuncs(L, meta, L_NUP);
    lua_pop(L, 1);
    /* Handles take no new fields: an assignment says which field is
     * read-only instead of Lua's "attempt to index a cupola.X value". */
    if (lua_getfield(L, -2, "__newindex") == LUA_TNIL) {
        lua_pushcfunction(L, l_readonly_newindex);
        lua_setfield(L, -4, "__newindex");
    }
    lua_pop(L, 1);
    /* A type without its own __index (no fields, only methods) looks the
     * methods up directly: a table __index costs no call at all. */
    if (lua_getfield(L, -2, "__index") == LUA_TNIL) {
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, "__index");
    } else {
        lua_pop(L, 1);
    }
    lua_setfield(L, -2, "methods");
    lua_pop(L, 1);
}

int l_getmethod(lua_State *L, int obj, const char *k)
{
    /* Fast path: called from an l_newclass __index with the key at 2, on an
     * object of that class (so L_UP_METHODS is its method table). */
    if (lua_type(L, 2) == LUA_TSTRING && lua_tostring(L, 2) == k &&
        lua_type(L, L_UP_METHODS) == LUA_TTABLE && lua_getmetatable(L, obj)) {
        const void *mt = lua_topointer(L, -1);
        lua_pop(L, 1);
        if (mt == lua_topointer(L, L_UP_META))
            return l_index_method(L);
    }
    lua_getmetatable(L, obj);
    lua_getfield(L, -1, "methods");
    if (lua_getfield(L, -1, k) != LUA_TNIL) {
        lua_replace(L, -3);
        lua_pop(L, 1);
        return 1;
    }
    lua_pop(L, 3);
    return 0;
}
