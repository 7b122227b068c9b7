/*
 * term.c: cupola.core.isatty(fd): whether a standard stream is a terminal,
 * so progress lines (trace.replay, cupola.bench) appear only where a person
 * watches and never in logs or pipes; its width (_columns).  cupola.core._readline(prompt): the
 * REPL's line reader (lua/cupola/repl.lua), GNU readline's where the
 * interpreter has it (Lua 5.4's lua.c links it for its own REPL), found at
 * run time: cupola neither links nor needs it.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "binding.h"

static int term_isatty(lua_State *L)
{
    lua_Integer fd = l_optinteger(L, 1, 2);
    luaL_argcheck(L, fd >= 0 && fd <= 2, 1, "must be 0, 1 or 2");
    lua_pushboolean(L, isatty((int)fd));
    return 1;
}

/* columns() -> the width of the terminal standard output is (else
 * standard error), or nil where neither is one: what a report fits where
 * COLUMNS is not exported (a shell sets it, but keeps it to itself). */
static int term_columns(lua_State *L)
{
    int fds[2] = {1, 2}, i;
    for (i = 0; i < 2; i++) {
        struct winsize w;
        if (isatty(fds[i]) && ioctl(fds[i], TIOCGWINSZ, &w) == 0 && w.ws_col > 0) {
            lua_pushinteger(L, (lua_Integer)w.ws_col);
            return 1;
        }
    }
    lua_pushnil(L);
    return 1;
}

/* readline(prompt) -> line (nil at the end of input), or nil, false when
 * the process has no readline.  A line that is not empty goes into its
 * history. */
static int term_readline(lua_State *L)
{
    typedef char *(*readline_fn)(const char *);
    typedef void (*add_history_fn)(const char *);
    const char *prompt = luaL_checkstring(L, 1);
    readline_fn rl;
    add_history_fn ah;
    char *line;
    *(void **)&rl = dlsym(RTLD_DEFAULT, "readline");
    *(void **)&ah = dlsym(RTLD_DEFAULT, "add_history");
    if (!rl) {
        lua_pushnil(L);
        lua_pushboolean(L, 0);
        return 2;
    }
    line = rl(prompt);
    if (!line) {
        lua_pushnil(L);
        return 1;
    }
    if (line[0] && ah)
        ah(line);
    lua_pushstring(L, line); /* (out of memory here would leak one line) */
    free(line);
    return 1;
}

void l_open_term(lua_State *L)
{
    lua_pushcfunction(L, term_isatty);
    lua_setfield(L, -2, "_isatty"); /* private: the Lua layer's progress line */
    lua_pushcfunction(L, term_columns);
    lua_setfield(L, -2, "_columns"); /* private: advise's text width (advise/text.lua) */
    lua_pushcfunction(L, term_readline);
    lua_setfield(L, -2, "_readline"); /* private: the REPL's (repl.lua) */
}
