/*
 * stream.c: cupola.Stream, cupola.stream{...} and cupola.default_stream.
 *
 * The C stream is reference counted (l_streamref): the Lua handle holds one
 * reference and each buffer ordered on the stream another, so closing the
 * handle (or collecting it) while buffers still need the stream for their
 * stream-ordered free defers cp_be->stream_destroy until the last of them.
 */
#include <stdlib.h>
#include <string.h>

#include "binding.h"

/* The default stream (s == NULL) is shared by every Lua state of the
 * process and never released, so it is not counted at all. */
void l_streamref_retain(l_streamref *r)
{
    if (r && r->s)
        r->refs++;
}

void l_streamref_release(l_streamref *r)
{
    if (r && r->s && --r->refs == 0) {
        cp_be->stream_destroy(r->s); /* returns at once; queued work completes */
        free(r);
    }
}

static l_streamref default_ref = {NULL, 1};

/* The Stream handles of this state by their reference, weakly (registry,
 * light-userdata key): l_pushstream finds the handle of a stream known only
 * by its reference (a raw block's, when buffer() wraps it). */
static const char key_handles = 0;

static void remember(lua_State *L, int ud, l_streamref *r)
{
    ud = lua_absindex(L, ud);
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &key_handles) == LUA_TTABLE) {
        lua_pushvalue(L, ud);
        lua_rawsetp(L, -2, r);
    }
    lua_pop(L, 1);
}

static l_stream *tostream(lua_State *L, int arg)
{
    l_stream *st = l_udstream(L, arg);
    if (!st->ref)
        luaL_error(L, "attempt to use a closed " L_STREAM);
    return st;
}

cp_stream *l_devstream(cp_stream *s, int dev)
{
    return s ? s : cp_be->stream_legacy(dev);
}

l_streamref *l_defaultstream(void)
{
    return &default_ref;
}

l_streamref *l_optstream(lua_State *L, int arg)
{
    /* the tag first: a stream given costs no lua_type */
    l_stream *st = (l_stream *)lua_touserdata(L, arg);
    if (!l_hastag(L, arg, st, L_T_STREAM, sizeof *st)) {
        if (lua_isnoneornil(L, arg))
            return &default_ref;
        st = l_udstream(L, arg);
    }
    if (!st->ref)
        luaL_error(L, "attempt to use a closed " L_STREAM);
    return st->ref;
}

l_streamref *l_optstream_field(lua_State *L, int idx)
{
    l_streamref *r;
    if (lua_isnoneornil(L, idx))
        return &default_ref;
    lua_getfield(L, idx, "stream");
    if (!lua_isnil(L, -1) && !l_testudstream(L, -1))
        luaL_error(L, "option 'stream' must be a " L_STREAM ", not %s", l_pushtyped(L, -1));
    r = l_optstream(L, lua_absindex(L, -1));
    lua_pop(L, 1);
    return r;
}

static int stream_new(lua_State *L)
{
    static const char *const opts[] = {"priority", "blocking", "device", NULL};
    l_stream *st;
    int priority, blocking, dev;
    cp_stream *s = NULL;

    l_checkoptions(L, 1, "cupola.stream", opts);
    priority = (int)l_optint_field(L, 1, "priority", 0);
    blocking = l_optbool_field(L, 1, "blocking", 0);
    dev = l_optdevice_field(L, 1, "cupola.stream");

    st = (l_stream *)lua_newuserdatauv(L, sizeof *st, 0);
    st->tag = L_TAG(L_T_STREAM);
    st->ref = NULL;
    st->is_default = 0;
    luaL_setmetatable(L, L_STREAM);
    st->ref = (l_streamref *)calloc(1, sizeof *st->ref);
    if (!st->ref)
        return luaL_error(L, "cupola.stream: out of host memory");
    st->ref->refs = 1;
    {
        cp_status rc = cp_be->stream_create_on(&s, dev, priority, blocking);
        if (rc != CP_OK) {
            free(st->ref);
            st->ref = NULL;
            return l_fail(L, rc);
        }
    }
    st->ref->s = s;
    remember(L, -1, st->ref);
    return 1;
}

void l_pushstream(lua_State *L, l_streamref *r)
{
    l_stream *st;
    if (!r || !r->s) {
        lua_getfield(L, LUA_REGISTRYINDEX, "cupola.default_stream");
        return;
    }
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &key_handles) == LUA_TTABLE) {
        lua_rawgetp(L, -1, r);
        st = (l_stream *)lua_touserdata(L, -1);
        lua_remove(L, -2);
        /* (a closed handle no longer names r; nor one whose reference was
         * freed and its address given to another stream) */
        if (st && l_hastag(L, -1, st, L_T_STREAM, sizeof *st) && st->ref == r)
            return;
    }
    lua_pop(L, 1);
    /* The handle was collected or closed while the stream lived on: a new
     * one, holding a reference of its own. */
    st = (l_stream *)lua_newuserdatauv(L, sizeof *st, 0);
    st->tag = L_TAG(L_T_STREAM);
    st->ref = r;
    st->is_default = 0;
    l_streamref_retain(r);
    luaL_setmetatable(L, L_STREAM);
    remember(L, -1, r);
}

/* One release for __gc, __close and close(): safe twice.  The default
 * stream belongs to the device and is never released. */
static int stream_close(lua_State *L)
{
    l_stream *st = l_udstream(L, 1);
    if (st->ref && !st->is_default) {
        l_streamref_release(st->ref);
        st->ref = NULL;
    }
    return 0;
}

static int stream_synchronize(lua_State *L)
{
    l_check(L, cp_be->stream_synchronize(tostream(L, 1)->ref->s));
    return 0;
}

static int stream_query(lua_State *L)
{
    int idle = 0;
    l_check(L, cp_be->stream_query(tostream(L, 1)->ref->s, &idle));
    lua_pushboolean(L, idle);
    return 1;
}

static int stream_wait(lua_State *L)
{
    l_stream *st = tostream(L, 1);
    l_event *ev = l_udevent(L, 2);
    if (!ev->e)
        return luaL_error(L, "attempt to use a closed " L_EVENT);
    l_check(L, cp_be->stream_wait_event(st->ref->s, ev->e));
    lua_settop(L, 1);
    return 1;
}

static int stream_index(lua_State *L)
{
    l_stream *st;
    const char *k;
    if (l_index_method(L))
        return 1;
    st = l_udstream(L, 1);
    k = l_checkstring(L, 2);
    if (strcmp(k, "closed") == 0) {
        lua_pushboolean(L, st->ref == NULL);
        return 1;
    }
    if (strcmp(k, "default") == 0) {
        lua_pushboolean(L, st->is_default);
        return 1;
    }
    if (strcmp(k, "device") == 0 && st->ref) {
        /* the default stream: the current device's legacy stream */
        lua_pushinteger(L, cp_be->stream_device(st->ref->s));
        return 1;
    }
    if (strcmp(k, "id") == 0 && st->ref) {
        lua_pushinteger(L, (lua_Integer)cp_be->stream_id(st->ref->s));
        return 1;
    }
    lua_pushnil(L);
    return 1;
}

static int stream_tostring(lua_State *L)
{
    l_stream *st = l_udstream(L, 1);
    if (st->is_default)
        lua_pushliteral(L, L_STREAM " (default)");
    else if (!st->ref)
        lua_pushliteral(L, L_STREAM " (closed)");
    else
        lua_pushfstring(L, L_STREAM " %d", (int)cp_be->stream_id(st->ref->s));
    return 1;
}

void l_open_stream(lua_State *L)
{
    static const luaL_Reg meta[] = {{"__gc", stream_close},         {"__close", stream_close},
                                    {"__tostring", stream_tostring}, {"__index", stream_index},
                                    {NULL, NULL}};
    static const luaL_Reg methods[] = {{"synchronize", stream_synchronize},
                                       {"query", stream_query},
                                       {"wait", stream_wait},
                                       {"close", stream_close},
                                       {NULL, NULL}};
    l_stream *st;

    l_newclass(L, L_STREAM, meta, methods);
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "v");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &key_handles);

    lua_pushcfunction(L, stream_new);
    lua_setfield(L, -2, "stream");

    /* The legacy default stream: one object per Lua state over the shared
     * static reference. */
    st = (l_stream *)lua_newuserdatauv(L, sizeof *st, 0);
    st->tag = L_TAG(L_T_STREAM);
    st->ref = &default_ref;
    st->is_default = 1;
    luaL_setmetatable(L, L_STREAM);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, "cupola.default_stream");
    lua_setfield(L, -2, "default_stream");
}
