/*
 * trace.c: cupola.Trace.  cupola.trace.load(path) parses an RMM
 * logging-adaptor CSV (plain or gzip) in C; cupola.trace.replay(t, pool,
 * opts) replays it against a Pool entirely in C and returns the figures.
 */
#include <string.h>

#include "binding.h"
#include "trace/trace.h"

typedef struct l_trace {
    cp_trace *t; /* NULL once closed */
} l_trace;

cp_resource *l_checkresource(lua_State *L, int arg); /* pool.c */

static l_trace *totrace(lua_State *L, int arg)
{
    l_trace *tr = (l_trace *)luaL_checkudata(L, arg, L_TRACE);
    if (!tr->t)
        luaL_error(L, "attempt to use a closed " L_TRACE);
    return tr;
}

static int trace_load(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    l_trace *tr = (l_trace *)lua_newuserdatauv(L, sizeof *tr, 0);
    cp_trace *t = NULL;
    cp_status st;
    tr->t = NULL;
    luaL_setmetatable(L, L_TRACE);
    st = cp_trace_load(path, &t);
    if (st == CP_ERR_OOM)
        return l_alloc_result(L, st);
    l_check(L, st);
    tr->t = t;
    return 1;
}

static int trace_close(lua_State *L)
{
    l_trace *tr = (l_trace *)luaL_checkudata(L, 1, L_TRACE);
    if (tr->t) {
        cp_trace_free(tr->t);
        tr->t = NULL;
    }
    return 0;
}

static void push_info(lua_State *L, const cp_trace *t)
{
    cp_trace_info in;
    cp_trace_info_get(t, &in);
    lua_createtable(L, 0, 11);
#define SETI(f)                              \
    lua_pushinteger(L, (lua_Integer)in.f);   \
    lua_setfield(L, -2, #f)
    SETI(events);
    SETI(allocs);
    SETI(frees);
    SETI(streams);
    SETI(threads);
    SETI(leaked);
    SETI(peak_live);
    SETI(total_bytes);
    SETI(max_size);
#undef SETI
    lua_pushnumber(L, in.duration_us);
    lua_setfield(L, -2, "duration_us");
    lua_pushstring(L, cp_trace_path(t));
    lua_setfield(L, -2, "path");
}

static int trace_info(lua_State *L)
{
    push_info(L, totrace(L, 1)->t);
    return 1;
}

/* t:event(i) -> {action=, pointer=, size=, stream=, thread=, time_us=}, 1-based */
static int trace_event(lua_State *L)
{
    l_trace *tr = totrace(L, 1);
    lua_Integer i = luaL_checkinteger(L, 2);
    cp_trace_row row;
    if (i < 1 || (size_t)i > cp_trace_events(tr->t))
        return luaL_argerror(L, 2, lua_pushfstring(L, "event %I out of range 1..%I", i,
                                                    (lua_Integer)cp_trace_events(tr->t)));
    l_check(L, cp_trace_event(tr->t, (size_t)(i - 1), &row));
    lua_createtable(L, 0, 6);
    lua_pushstring(L, row.is_free ? "free" : "allocate");
    lua_setfield(L, -2, "action");
    lua_pushinteger(L, (lua_Integer)row.pointer);
    lua_setfield(L, -2, "pointer");
    lua_pushinteger(L, (lua_Integer)row.size);
    lua_setfield(L, -2, "size");
    lua_pushinteger(L, (lua_Integer)row.stream);
    lua_setfield(L, -2, "stream");
    lua_pushinteger(L, (lua_Integer)row.thread);
    lua_setfield(L, -2, "thread");
    lua_pushnumber(L, row.time_us);
    lua_setfield(L, -2, "time_us");
    return 1;
}

/* replay(t, pool, {single_stream=false, ["repeat"]=1, synchronize=true}) */
static int trace_replay(lua_State *L)
{
    static const char *const opts[] = {"single_stream", "repeat", "synchronize", NULL};
    l_trace *tr = totrace(L, 1);
    cp_resource *r = l_checkresource(L, 2);
    cp_replay_opts o;
    cp_replay_result res;
    lua_Integer rep;

    l_checkoptions(L, 3, "cupola.trace.replay", opts);
    memset(&o, 0, sizeof o);
    o.single_stream = l_optbool_field(L, 3, "single_stream", 0);
    o.synchronize = l_optbool_field(L, 3, "synchronize", 1);
    rep = l_optint_field(L, 3, "repeat", 1);
    luaL_argcheck(L, rep >= 1 && rep <= 1000000, 3, "option 'repeat' must be in 1..1000000");
    o.repeat = (int)rep;
    memset(&res, 0, sizeof res);
    l_check(L, cp_trace_replay(tr->t, r, &o, &res));

    lua_createtable(L, 0, 8);
    lua_pushinteger(L, (lua_Integer)res.events);
    lua_setfield(L, -2, "events");
    lua_pushnumber(L, res.ns_per_event);
    lua_setfield(L, -2, "ns_per_event");
    lua_pushnumber(L, res.seconds);
    lua_setfield(L, -2, "seconds");
    lua_pushinteger(L, (lua_Integer)res.peak_live);
    lua_setfield(L, -2, "peak_live");
    lua_pushinteger(L, (lua_Integer)res.peak_reserved);
    lua_setfield(L, -2, "peak_reserved");
    lua_pushnumber(L, res.reserved_over_live);
    lua_setfield(L, -2, "reserved_over_live");
    lua_pushinteger(L, (lua_Integer)res.failed);
    lua_setfield(L, -2, "failed");
    lua_pushinteger(L, (lua_Integer)res.skipped_frees);
    lua_setfield(L, -2, "skipped_frees");
    lua_pushinteger(L, (lua_Integer)res.maps);
    lua_setfield(L, -2, "maps");
    lua_pushinteger(L, (lua_Integer)res.unmaps);
    lua_setfield(L, -2, "unmaps");
    return 1;
}

static int trace_index(lua_State *L)
{
    l_trace *tr = (l_trace *)luaL_checkudata(L, 1, L_TRACE);
    const char *k = luaL_checkstring(L, 2);
    if (l_getmethod(L, 1, k))
        return 1;
    if (!tr->t) {
        lua_pushnil(L);
        return 1;
    }
    push_info(L, tr->t);
    lua_getfield(L, -1, k);
    return 1;
}

static int trace_len(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)cp_trace_events(totrace(L, 1)->t));
    return 1;
}

static int trace_tostring(lua_State *L)
{
    l_trace *tr = (l_trace *)luaL_checkudata(L, 1, L_TRACE);
    if (!tr->t)
        lua_pushliteral(L, L_TRACE " (closed)");
    else
        lua_pushfstring(L, L_TRACE " (%s, %I events)", cp_trace_path(tr->t),
                        (lua_Integer)cp_trace_events(tr->t));
    return 1;
}

void l_open_trace(lua_State *L)
{
    static const luaL_Reg meta[] = {{"__gc", trace_close},         {"__close", trace_close},
                                    {"__index", trace_index},       {"__len", trace_len},
                                    {"__tostring", trace_tostring}, {NULL, NULL}};
    static const luaL_Reg methods[] = {{"info", trace_info},   {"event", trace_event},
                                       {"replay", trace_replay}, {"close", trace_close},
                                       {NULL, NULL}};
    static const luaL_Reg funcs[] = {{"load", trace_load}, {"replay", trace_replay}, {NULL, NULL}};
    l_newclass(L, L_TRACE, meta, methods);
    luaL_newlib(L, funcs);
    lua_setfield(L, -2, "trace");
}
