/*
 * trace.c: cupola.Trace.  cupola.trace.load(path) reads a trace of any
 * format the core reads (trace/trace.h) in C; the object's methods and the
 * cupola.core.trace table (the rest of the binding: trace_binding.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_binding.h"

l_trace *l_totrace(lua_State *L, int arg)
{
    l_trace *tr = (l_trace *)l_checkudata(L, arg, L_TRACE);
    if (!tr->t)
        luaL_error(L, "attempt to use a closed " L_TRACE);
    return tr;
}

cp_trace **l_trace_new(lua_State *L)
{
    l_trace *tr = (l_trace *)lua_newuserdatauv(L, sizeof *tr, 0);
    tr->t = NULL;
    tr->busy = 0;
    luaL_setmetatable(L, L_TRACE);
    return &tr->t;
}

static int trace_load(lua_State *L)
{
    static const char *const opts[] = {"device", "allocator", NULL};
    size_t plen;
    const char *allocator;
    const char *path = l_checklstring(L, 1, &plen);
    cp_trace **slot;
    cp_status st;
    lua_Integer device;
    /* C sees the path up to its first NUL: "a\0b" would open "a". */
    if (strlen(path) != plen)
        return luaL_argerror(L, 1, lua_pushfstring(L, "path contains a NUL byte, got %s", l_pushshown(L, 1)));
    l_checkoptions(L, 2, "cupola.trace.load", opts);
    device = l_optint_field(L, 2, "device", -1);
    if (lua_istable(L, 2)) {
        int given = lua_getfield(L, 2, "device") != LUA_TNIL;
        lua_pop(L, 1);
        if (given && (device < 0 || device > 65535))
            return luaL_argerror(L, 2, lua_pushfstring(L, "option 'device' must be in 0..65535, "
                                                        "got %I", (LUAI_UACINT)device));
    }
    allocator = l_optstring_field(L, 2, "allocator", NULL);
    slot = l_trace_new(L);
    st = cp_trace_load_opts(path, (int)device, allocator, slot);
    if (st == CP_ERR_OOM)
        return l_alloc_result(L, st);
    l_check(L, st);
    return 1;
}

static int trace_close(lua_State *L)
{
    l_trace *tr = (l_trace *)l_checkudata(L, 1, L_TRACE);
    /* advise_run's progress function runs while its threads read the
     * trace (never from __gc: the call holds the trace on its stack) */
    if (tr->busy)
        return luaL_error(L, "attempt to close a " L_TRACE " while advise_run replays it");
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
    lua_pushnumber(L, in.duration_us);
    lua_setfield(L, -2, "duration_us");
    lua_pushstring(L, cp_trace_path(t));
    lua_setfield(L, -2, "path");
    lua_pushstring(L, cp_trace_format(t));
    lua_setfield(L, -2, "format");
    if (strcmp(cp_trace_format(t), "cupola_record") == 0 ||
        strcmp(cp_trace_format(t), "cupy_hook") == 0) {
        /* a recording or log cut by a killed program loaded what was whole */
        lua_pushboolean(L, cp_trace_warning(t) != NULL);
        lua_setfield(L, -2, "cut");
        if (cp_trace_warning(t)) {
            lua_pushstring(L, cp_trace_warning(t));
            lua_setfield(L, -2, "warning");
        }
    }
    SETI(devices);
    SETI(ignored);
    SETI(unmatched);
    SETI(ooms);
    {
        const char *env = cp_trace_torch_conf(t, 0), *set = cp_trace_torch_conf(t, 1);
        if (env) {
            /* PyTorch's own view of its settings: the env string as read,
             * and the effective settings as a conf string */
            lua_pushstring(L, env);
            lua_setfield(L, -2, "torch_conf");
            lua_pushstring(L, set);
            lua_setfield(L, -2, "torch_settings");
        }
    }
    if (cp_trace_allocator(t)) {
        lua_pushstring(L, cp_trace_allocator(t));
        lua_setfield(L, -2, "allocator");
        SETI(reordered);
        if (in.bfc_peak_bytes_in_use) {
            SETI(bfc_peak_bytes_in_use);
        }
        if (in.device_memory) {
            SETI(device_memory);
        }
    }
    if (in.torch_reserved) {
        SETI(torch_reserved_end);
        SETI(torch_peak_reserved);
    }
#undef SETI
    l_trace_push_scaled(L, t);
    {
        /* a CuPy hook log: what it says beyond its rows */
        cp_trace_cupy_info ci;
        if (cp_trace_cupy_info_get(t, &ci)) {
            lua_createtable(L, 0, 9);
#define SETC(f, name)                          \
    do {                                       \
        lua_pushinteger(L, (lua_Integer)ci.f); \
        lua_setfield(L, -2, name);             \
    } while (0)
            SETC(device_allocs, "device_allocs");
            SETC(device_alloc_failures, "device_alloc_failures");
            SETC(zero_mallocs, "zero_mallocs");
            SETC(gc_frees, "gc_frees");
            SETC(free_all_blocks, "free_all_blocks");
            if (ci.total_bytes)
                SETC(peak_total_bytes, "peak_total_bytes");
#undef SETC
            lua_pushboolean(L, ci.stream);
            lua_setfield(L, -2, "has_stream");
            lua_pushboolean(L, ci.malloc_preprocess);
            lua_setfield(L, -2, "has_malloc_preprocess");
            lua_pushboolean(L, ci.total_bytes);
            lua_setfield(L, -2, "has_total_bytes");
            lua_setfield(L, -2, "cupy");
        }
    }
}

static int trace_info(lua_State *L)
{
    push_info(L, l_totrace(L, 1)->t);
    return 1;
}

/* t:event(i) -> {action=, pointer=, size=, stream=, thread=, time_us=}, 1-based */
/* A label of the trace's (trace.h: its first line the frame people
 * recognise, its second the innermost Python frame where that is another,
 * then the whole stack, one frame a line; other formats' labels are one
 * line) into the table at index t: label, python_frame, stack = {...}. */
void l_trace_push_label(lua_State *L, const char *label, int t)
{
    const char *nl = strchr(label, '\n'), *p;
    lua_Integer k = 0;
    lua_pushlstring(L, label, nl ? (size_t)(nl - label) : strlen(label));
    lua_setfield(L, t, "label");
    if (!nl)
        return;
    p = nl + 1;
    nl = strchr(p, '\n');
    if ((nl ? (size_t)(nl - p) : strlen(p)) > 0) {
        lua_pushlstring(L, p, nl ? (size_t)(nl - p) : strlen(p));
        lua_setfield(L, t, "python_frame");
    }
    lua_newtable(L);
    while (nl) {
        p = nl + 1;
        nl = strchr(p, '\n');
        lua_pushlstring(L, p, nl ? (size_t)(nl - p) : strlen(p));
        lua_rawseti(L, -2, ++k);
    }
    lua_setfield(L, t, "stack");
}

static int trace_event(lua_State *L)
{
    l_trace *tr = l_totrace(L, 1);
    lua_Integer i = l_checkinteger(L, 2);
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
    lua_pushinteger(L, (lua_Integer)row.device);
    lua_setfield(L, -2, "device");
    if (row.label)
        l_trace_push_label(L, row.label, lua_gettop(L));
    {
        /* JAX: BFC's chunk and its bytes_in_use after the event, as recorded */
        uint64_t chunk, in_use;
        if (cp_trace_jax_row(tr->t, (size_t)(i - 1), &chunk, &in_use)) {
            if (chunk != UINT64_MAX) {
                lua_pushinteger(L, (lua_Integer)chunk);
                lua_setfield(L, -2, "allocation_bytes");
            }
            if (in_use != UINT64_MAX) {
                lua_pushinteger(L, (lua_Integer)in_use);
                lua_setfield(L, -2, "bytes_in_use");
            }
        }
    }
    return 1;
}

static int trace_index(lua_State *L)
{
    l_trace *tr = (l_trace *)l_checkudata(L, 1, L_TRACE);
    const char *k = l_checkstring(L, 2);
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
    lua_pushinteger(L, (lua_Integer)cp_trace_events(l_totrace(L, 1)->t));
    return 1;
}

static int trace_tostring(lua_State *L)
{
    l_trace *tr = (l_trace *)l_checkudata(L, 1, L_TRACE);
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
                                       {"replay", l_trace_replay}, {"close", trace_close},
                                       {NULL, NULL}};
    static const luaL_Reg funcs[] = {{"load", trace_load},
                                     {"replay", l_trace_replay},
                                     {"timeline_data", l_trace_timeline_data},
                                     {"advise_run", l_trace_advise_run},
                                     {"advise_facts", l_trace_advise_facts},
                                     {"serving", l_trace_serving},
                                     {"alloc_event", l_trace_alloc_event},
                                     {"oom_frames", l_trace_oom_frames},
                                     {"scale", l_trace_scale},
                                     {"rescale", l_trace_rescale},
                                     {NULL, NULL}};
    l_newclass(L, L_TRACE, meta, methods);
    luaL_newlib(L, funcs);
    lua_newtable(L); /* the sources, weak keys */
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, L_SOURCES);
    lua_setfield(L, -2, "sources");
    lua_setfield(L, -2, "trace");
}
