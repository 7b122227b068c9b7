/*
 * floor.c: what Lua's object model alone costs for a call pattern shaped like
 * `p:alloc(n, s):free()`, measured beside the real pair by bench/speed.lua.
 * A Lua module (bench_floor) with no allocator behind it: `alloc` makes a
 * userdata and `free` marks it, so the time is the VM's (method lookup,
 * C calls, the userdata's allocation and collection) and nothing else.
 *
 *   floor.pool(variant) -> object with :alloc(n, s) -> object with :free()
 *   floor.pool("raw") -> object with :alloc_raw(n, s) -> integer and
 *                        :free_raw(integer): the shape of a raw pair
 *                        (`p:free_raw(p:alloc_raw(n, s))`), no object made
 *   variants: "table"  __index is the method table, no finalizer
 *             "gc"     __index is the method table, a __gc finalizer
 *             "cindex" __index is a C function (fields possible), a __gc
 *                      finalizer: the shape of cupola.Pool and cupola.Buffer
 *
 * Built by `make bench` as build/bench_floor.so; never installed.
 */
#include <stdint.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

typedef struct fobj {
    void *ptr;
    size_t size;
} fobj;

static int f_free(lua_State *L)
{
    fobj *o = (fobj *)lua_touserdata(L, 1);
    if (!o)
        return luaL_argerror(L, 1, "object expected");
    o->ptr = NULL;
    return 0;
}

static int f_gc(lua_State *L)
{
    fobj *o = (fobj *)lua_touserdata(L, 1);
    if (o)
        o->ptr = NULL;
    return 0;
}

/* __index as a C function: the methods first (upvalue 1), then a field. */
static int f_index(lua_State *L)
{
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL)
        return 1;
    lua_pushinteger(L, (lua_Integer)((fobj *)lua_touserdata(L, 1))->size);
    return 1;
}

/* pool:alloc(n, s): a new object whose metatable is upvalue 1. */
static int f_alloc(lua_State *L)
{
    fobj *o = (fobj *)lua_newuserdatauv(L, sizeof *o, 2);
    o->ptr = o;
    o->size = (size_t)luaL_checkinteger(L, 2);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_setmetatable(L, -2);
    return 1;
}

/* pool:alloc_raw(n, s) -> an integer (the pool's own address); pool:free_raw(a) */
static int f_alloc_raw(lua_State *L)
{
    void *p = lua_touserdata(L, 1);
    lua_Integer n = luaL_checkinteger(L, 2);
    if (!p)
        return luaL_argerror(L, 1, "pool expected");
    lua_pushinteger(L, (lua_Integer)(uintptr_t)p + (n & 1));
    return 1;
}

static int f_free_raw(lua_State *L)
{
    if (!lua_touserdata(L, 1))
        return luaL_argerror(L, 1, "pool expected");
    luaL_checkinteger(L, 2);
    return 0;
}

/* A metatable for the objects (variant) and one for the pool, whose alloc
 * closes over the objects' metatable. */
static int f_pool(lua_State *L)
{
    const char *v = luaL_checkstring(L, 1);
    int cindex = strcmp(v, "cindex") == 0, gc = cindex || strcmp(v, "gc") == 0;
    if (strcmp(v, "raw") == 0) {
        lua_newuserdatauv(L, 1, 0); /* the pool */
        lua_newtable(L);            /* its metatable */
        lua_newtable(L);            /* its methods */
        lua_pushcfunction(L, f_alloc_raw);
        lua_setfield(L, -2, "alloc_raw");
        lua_pushcfunction(L, f_free_raw);
        lua_setfield(L, -2, "free_raw");
        lua_setfield(L, -2, "__index");
        lua_setmetatable(L, -2);
        return 1;
    }
    if (!cindex && !gc && strcmp(v, "table") != 0)
        return luaL_argerror(L, 1, "variant must be table, gc, cindex or raw");
    lua_newuserdatauv(L, 1, 0); /* the pool */
    lua_newtable(L);            /* pool mt */
    lua_newtable(L);            /* pool methods */
    lua_newtable(L);            /* object mt */
    lua_newtable(L);            /* object methods */
    lua_pushcfunction(L, f_free);
    lua_setfield(L, -2, "free");
    if (cindex) {
        lua_pushcclosure(L, f_index, 1);
    }
    lua_setfield(L, -2, "__index");
    if (gc) {
        lua_pushcfunction(L, f_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pushcclosure(L, f_alloc, 1); /* pool methods.alloc, closing over object mt */
    lua_setfield(L, -2, "alloc");
    if (cindex) {
        lua_pushcclosure(L, f_index, 1);
    }
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, -2);
    return 1;
}

int luaopen_bench_floor(lua_State *L);
__attribute__((visibility("default"))) int luaopen_bench_floor(lua_State *L)
{
    lua_newtable(L);
    lua_pushcfunction(L, f_pool);
    lua_setfield(L, -2, "pool");
    return 1;
}
