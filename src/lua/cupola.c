/*
 * cupola.c: luaopen_cupola_core, the only symbol the module exports.
 *
 * Loading chooses the backend (CUDA when a device is usable, else the host
 * emulation; CUPOLA_BACKEND=cuda|host forces one) and builds the core table
 * that lua/cupola/init.lua completes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "binding.h"

static int l_backend(lua_State *L)
{
    lua_pushstring(L, cp_be->name);
    return 1;
}

static int l_device(lua_State *L)
{
    cp_device_info d;
    char cc[32];
    l_check(L, cp_be->device_info_on(l_optdevice(L, 1), &d));
    lua_createtable(L, 0, 12);
    lua_pushstring(L, d.name);
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, d.index);
    lua_setfield(L, -2, "index");
    lua_pushinteger(L, (lua_Integer)d.memory);
    lua_setfield(L, -2, "memory");
    lua_pushinteger(L, d.sms);
    lua_setfield(L, -2, "sms");
    snprintf(cc, sizeof cc, "%d.%d", d.cc_major, d.cc_minor);
    lua_pushstring(L, cc);
    lua_setfield(L, -2, "cc");
    lua_pushboolean(L, d.mempools);
    lua_setfield(L, -2, "mempools");
    lua_pushinteger(L, d.driver);
    lua_setfield(L, -2, "driver");
    lua_pushinteger(L, d.runtime);
    lua_setfield(L, -2, "runtime");
    lua_pushinteger(L, d.priority_least);
    lua_setfield(L, -2, "priority_least");
    lua_pushinteger(L, d.priority_greatest);
    lua_setfield(L, -2, "priority_greatest");
    lua_pushstring(L, cp_be->name);
    lua_setfield(L, -2, "backend");
    return 1;
}

/* cupola.bytes("4MiB") -> 4194304 */
static int l_bytes(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)l_checksize(L, 1));
    return 1;
}

/* cupola.mem_info(device) -> free, total (bytes) */
static int l_mem_info(lua_State *L)
{
    size_t fr = 0, total = 0;
    l_check(L, cp_be->mem_get_info_on(l_optdevice(L, 1), &fr, &total));
    lua_pushinteger(L, (lua_Integer)fr);
    lua_pushinteger(L, (lua_Integer)total);
    return 2;
}

/* cupola.clock() -> seconds on the monotonic clock (for host-side timing). */
static int l_clock(lua_State *L)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
    return 1;
}

LUAMOD_API int luaopen_cupola_core(lua_State *L);
__attribute__((visibility("default"))) LUAMOD_API int luaopen_cupola_core(lua_State *L)
{
    static const luaL_Reg funcs[] = {{"backend", l_backend},
                                     {"device", l_device},
                                     {"bytes", l_bytes},
                                     {"mem_info", l_mem_info},
                                     {"clock", l_clock},
                                     {NULL, NULL}};
    if (cp_backend_select(getenv("CUPOLA_BACKEND")) != CP_OK)
        return luaL_error(L, "cupola: %s", cp_error_msg());
    l_tag_init();
    luaL_newlib(L, funcs);
    l_open_stream(L);
    l_open_event(L);
    l_open_buffer(L);
    l_open_mempool(L);
    l_open_kernels(L);
    l_open_pool(L);
    l_open_trace(L);
    l_open_module(L);
    l_open_device(L);
    l_open_ipc(L);
    l_open_nvtx(L);
    l_open_term(L);
    l_open_devpool(L);
    return 1;
}
