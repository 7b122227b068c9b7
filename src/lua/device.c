/*
 * device.c: several devices (multigpu): cupola.device_count(),
 * cupola.set_device(i), cupola.current_device(), cupola.can_access_peer(i, j),
 * cupola.enable_peer_access(i, j), and the device arguments every
 * constructor shares (cupola.device(i) and mem_info(i) are in cupola.c).
 *
 * Devices are 0-based.  The current device is the calling thread's (as in
 * CUDA) and starts at 0; it is only the default of device= and the device of
 * object-less calls: objects (streams, pools, buffers) carry their own device
 * and every operation on them runs there, whatever is current.
 */
#include "binding.h"

int l_checkdevice(lua_State *L, int arg)
{
    lua_Integer i = l_checkinteger(L, arg);
    int n = cp_be->device_count();
    if (i < 0 || i >= n)
        luaL_argerror(L, arg,
                      lua_pushfstring(L, "device %I does not exist (devices are 0..%d)", i, n - 1));
    return (int)i;
}

int l_optdevice(lua_State *L, int arg)
{
    if (lua_isnoneornil(L, arg))
        return cp_be->get_device();
    return l_checkdevice(L, arg);
}

int l_optdevice_field(lua_State *L, int idx, const char *fname)
{
    lua_Integer i;
    int n = cp_be->device_count(), isnum = 0;
    if (lua_isnoneornil(L, idx) || lua_getfield(L, idx, "device") == LUA_TNIL) {
        if (!lua_isnoneornil(L, idx))
            lua_pop(L, 1);
        return cp_be->get_device();
    }
    i = lua_tointegerx(L, -1, &isnum);
    if (!isnum)
        luaL_error(L, "%s: option 'device' must be an integer, not %s", fname, l_pushtyped(L, -1));
    if (i < 0 || i >= n)
        luaL_error(L, "%s: option 'device' is %I, but devices are 0..%d", fname, i, n - 1);
    lua_pop(L, 1);
    return (int)i;
}

static int l_device_count(lua_State *L)
{
    lua_pushinteger(L, cp_be->device_count());
    return 1;
}

static int l_set_device(lua_State *L)
{
    l_check(L, cp_be->set_device(l_checkdevice(L, 1)));
    return 0;
}

static int l_current_device(lua_State *L)
{
    lua_pushinteger(L, cp_be->get_device());
    return 1;
}

static int l_can_access_peer(lua_State *L)
{
    int i = l_checkdevice(L, 1), j = l_checkdevice(L, 2), yes = 0;
    l_check(L, cp_be->can_access_peer(i, j, &yes));
    lua_pushboolean(L, yes);
    return 1;
}

static int l_enable_peer_access(lua_State *L)
{
    int i = l_checkdevice(L, 1), j = l_checkdevice(L, 2);
    if (i == j)
        luaL_argerror(L, 2, lua_pushfstring(L, "a device cannot enable peer access to itself, got %d twice", i));
    l_check(L, cp_be->enable_peer_access(i, j));
    return 0;
}

void l_open_device(lua_State *L)
{
    static const luaL_Reg funcs[] = {{"device_count", l_device_count},
                                     {"set_device", l_set_device},
                                     {"current_device", l_current_device},
                                     {"can_access_peer", l_can_access_peer},
                                     {"enable_peer_access", l_enable_peer_access},
                                     {NULL, NULL}};
    luaL_setfuncs(L, funcs, 0);
}
