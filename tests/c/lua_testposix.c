/*
 * tests/c/lua_testposix.c: a test-only Lua module (cupola_testposix) with
 * the few POSIX calls the specs need that Lua lacks (luaposix is not a
 * dependency): fork, waitpid, _exit, alarm, and a real crash outside any
 * kernel.  Built by the Makefile into $(BUILD)/testmod/; never installed.
 */
#include <lauxlib.h>
#include <lua.h>

#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

/* fork() -> pid in the parent, 0 in the child */
static int t_fork(lua_State *L)
{
    pid_t pid;
    fflush(NULL);
    pid = fork();
    if (pid < 0)
        return luaL_error(L, "fork failed");
    lua_pushinteger(L, (lua_Integer)pid);
    return 1;
}

/* wait(pid) -> "exit", code | "signal", signo */
static int t_wait(lua_State *L)
{
    int status = 0;
    pid_t pid = (pid_t)luaL_checkinteger(L, 1);
    if (waitpid(pid, &status, 0) != pid)
        return luaL_error(L, "waitpid failed");
    if (WIFSIGNALED(status)) {
        lua_pushliteral(L, "signal");
        lua_pushinteger(L, WTERMSIG(status));
    } else {
        lua_pushliteral(L, "exit");
        lua_pushinteger(L, WEXITSTATUS(status));
    }
    return 2;
}

static int t_exit(lua_State *L)
{
    fflush(NULL);
    _exit((int)luaL_optinteger(L, 1, 0));
}

/* alarm(seconds): a child that hangs is killed by SIGALRM */
static int t_alarm(lua_State *L)
{
    alarm((unsigned)luaL_checkinteger(L, 1));
    return 0;
}

/* a null store in the process's own code (not a kernel's) */
static int t_segv(lua_State *L)
{
    volatile int *volatile p = NULL;
    (void)L;
    fflush(NULL);
    *p = 1;
    return 0;
}

__attribute__((visibility("default"))) int luaopen_cupola_testposix(lua_State *L);
int luaopen_cupola_testposix(lua_State *L)
{
    static const luaL_Reg f[] = {{"fork", t_fork},   {"wait", t_wait}, {"_exit", t_exit},
                                 {"alarm", t_alarm}, {"segv", t_segv}, {NULL, NULL}};
    luaL_newlib(L, f);
    return 1;
}
