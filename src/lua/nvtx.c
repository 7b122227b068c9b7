/*
 * nvtx.c: cupola.nvtx, NVTX ranges from Lua (src/core/nvtx.h).  Works the
 * same with and without a profiler attached, and without CUDA (no-ops with
 * the same bookkeeping), so scripts keep their annotations everywhere.
 */
#include "binding.h"
#include "nvtx.h"

/* nvtx.push(name) -> depth */
static int nvtx_push(lua_State *L)
{
    const char *name = l_checkstring(L, 1);
    lua_pushinteger(L, cp_nvtx_push(name));
    return 1;
}

/* nvtx.pop() -> depth after it; raises when no range is open */
static int nvtx_pop(lua_State *L)
{
    int d = cp_nvtx_pop();
    if (d < 0)
        return luaL_error(L, "cupola.nvtx.pop: no range is open (more pops than pushes)");
    lua_pushinteger(L, d);
    return 1;
}

static int nvtx_mark(lua_State *L)
{
    cp_nvtx_mark(l_checkstring(L, 1));
    return 0;
}

/* nvtx.range(name, fn, ...) -> fn(...)'s results; the range is closed even
 * when fn raises, and the error goes on. */
static int nvtx_range(lua_State *L)
{
    const char *name = l_checkstring(L, 1);
    int st, depth;
    if (lua_type(L, 2) != LUA_TFUNCTION)
        l_typeerror(L, 2, "function");
    depth = cp_nvtx_push(name);
    st = lua_pcall(L, lua_gettop(L) - 2, LUA_MULTRET, 0);
    /* Ranges fn left open are closed too: what it opened ends with it. */
    while (cp_nvtx_depth() >= depth)
        cp_nvtx_pop();
    if (st != LUA_OK)
        return lua_error(L);
    return lua_gettop(L) - 1;
}

static int nvtx_depth(lua_State *L)
{
    lua_pushinteger(L, cp_nvtx_depth());
    return 1;
}

void l_open_nvtx(lua_State *L)
{
    static const luaL_Reg funcs[] = {{"push", nvtx_push},   {"pop", nvtx_pop},
                                     {"mark", nvtx_mark},   {"range", nvtx_range},
                                     {"depth", nvtx_depth}, {NULL, NULL}};
    cp_nvtx_init();
    luaL_newlib(L, funcs);
    lua_pushboolean(L, cp_nvtx_available());
    lua_setfield(L, -2, "available");
    lua_pushboolean(L, cp_nvtx_on);
    lua_setfield(L, -2, "enabled");
    lua_setfield(L, -2, "nvtx");
}
