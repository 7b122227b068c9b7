/*
 * term.c: cupola.core.isatty(fd): whether a standard stream is a terminal,
 * so progress lines (trace.replay, cupola.bench) appear only where a person
 * watches and never in logs or pipes.
 */
#include <unistd.h>

#include "binding.h"

static int term_isatty(lua_State *L)
{
    lua_Integer fd = l_optinteger(L, 1, 2);
    luaL_argcheck(L, fd >= 0 && fd <= 2, 1, "must be 0, 1 or 2");
    lua_pushboolean(L, isatty((int)fd));
    return 1;
}

void l_open_term(lua_State *L)
{
    lua_pushcfunction(L, term_isatty);
    lua_setfield(L, -2, "_isatty"); /* private: the Lua layer's progress line */
}
