/*
 * event.c: cupola.Event and cupola.event{timing=true}.
 *
 * An event is not shared with anything else, so the userdata owns the C
 * event directly.
 */
#include "binding.h"

static l_event *toevent(lua_State *L, int arg)
{
    l_event *ev = l_udevent(L, arg);
    if (!ev->e)
        luaL_error(L, "attempt to use a closed " L_EVENT);
    return ev;
}

static int event_new(lua_State *L)
{
    static const char *const opts[] = {"timing", NULL};
    l_event *ev;
    int timing;
    cp_event *e = NULL;

    l_checkoptions(L, 1, "cupola.event", opts);
    timing = l_optbool_field(L, 1, "timing", 1);
    ev = (l_event *)lua_newuserdatauv(L, sizeof *ev, 0);
    ev->tag = L_TAG(L_T_EVENT);
    ev->e = NULL;
    ev->timing = timing;
    luaL_setmetatable(L, L_EVENT);
    l_check(L, cp_be->event_create(&e, timing));
    ev->e = e;
    return 1;
}

static int event_close(lua_State *L)
{
    l_event *ev = l_udevent(L, 1);
    if (ev->e) {
        cp_be->event_destroy(ev->e);
        ev->e = NULL;
    }
    return 0;
}

static int event_record(lua_State *L)
{
    l_event *ev = toevent(L, 1);
    l_check(L, cp_be->event_record(ev->e, l_optstream(L, 2)->s));
    lua_pushvalue(L, 1); /* returns its first argument (cheaper than lua_settop) */
    return 1;
}

static int event_synchronize(lua_State *L)
{
    l_check(L, cp_be->event_synchronize(toevent(L, 1)->e));
    return 0;
}

static int event_query(lua_State *L)
{
    int done = 0;
    l_check(L, cp_be->event_query(toevent(L, 1)->e, &done));
    lua_pushboolean(L, done);
    return 1;
}

/* e:elapsed(later): milliseconds from e to later, as cudaEventElapsedTime. */
static int event_elapsed(lua_State *L)
{
    l_event *a = toevent(L, 1);
    l_event *b = toevent(L, 2);
    float ms = 0;
    if (!a->timing || !b->timing)
        return luaL_error(L, L_EVENT ":elapsed: both events need timing (created with timing=false)");
    l_check(L, cp_be->event_elapsed(a->e, b->e, &ms));
    lua_pushnumber(L, (lua_Number)ms);
    return 1;
}

static int event_tostring(lua_State *L)
{
    l_event *ev = l_udevent(L, 1);
    lua_pushfstring(L, L_EVENT " (%s%s)", ev->e ? "" : "closed, ",
                    ev->timing ? "timing" : "no timing");
    return 1;
}

void l_open_event(lua_State *L)
{
    static const luaL_Reg meta[] = {{"__gc", event_close},
                                    {"__close", event_close},
                                    {"__tostring", event_tostring},
                                    {NULL, NULL}};
    static const luaL_Reg methods[] = {{"record", event_record},
                                       {"synchronize", event_synchronize},
                                       {"query", event_query},
                                       {"elapsed", event_elapsed},
                                       {"close", event_close},
                                       {NULL, NULL}};
    l_newclass(L, L_EVENT, meta, methods);
    lua_pushcfunction(L, event_new);
    lua_setfield(L, -2, "event");
}
