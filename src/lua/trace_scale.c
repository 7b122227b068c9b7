/*
 * trace_scale.c: the C half of cupola.trace.scale (lua/cupola/trace.lua
 * reads the recordings and checks the sizes): core.trace.scale(traces,
 * sizes, at), core.trace.rescale(t, at), and the `scaled` field a
 * prediction's Trace carries (trace/scale.h has the rules).
 */
#include <stdio.h>

#include "trace/scale.h"
#include "trace_binding.h"

/* A size as the prediction takes it: an integer in 1..CP_SCALE_SIZE_MAX. */
static uint64_t checksize(lua_State *L, int arg, const char *what)
{
    lua_Integer v;
    if (!lua_isinteger(L, arg))
        luaL_argerror(L, arg, lua_pushfstring(L, "%s must be a positive integer, got %s", what,
                                              l_pushtyped(L, arg)));
    v = lua_tointeger(L, arg);
    if (v < 1 || (uint64_t)v > CP_SCALE_SIZE_MAX)
        luaL_argerror(L, arg, lua_pushfstring(L, "%s must be an integer in 1..%I, got %I", what,
                                              (LUAI_UACINT)CP_SCALE_SIZE_MAX, (LUAI_UACINT)v));
    return (uint64_t)v;
}

/* core.trace.scale({t1, t2, ...}, {s1, s2, ...}, at) -> Trace */
int l_trace_scale(lua_State *L)
{
    const cp_trace *recs[CP_SCALE_RECORDINGS_MAX];
    uint64_t sizes[CP_SCALE_RECORDINGS_MAX], at;
    lua_Integer i, n;
    cp_trace **slot;
    cp_status st;

    l_checktable(L, 1);
    l_checktable(L, 2);
    n = (lua_Integer)lua_rawlen(L, 1);
    if (n != (lua_Integer)lua_rawlen(L, 2))
        return luaL_argerror(L, 2, "as many sizes as traces expected");
    if (n > CP_SCALE_RECORDINGS_MAX)
        return luaL_argerror(L, 1, lua_pushfstring(L, "at most %d recordings, got %I",
                                                    CP_SCALE_RECORDINGS_MAX, (LUAI_UACINT)n));
    at = checksize(L, 3, "the size to predict");
    for (i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        recs[i] = l_totrace(L, -1)->t;
        lua_pop(L, 1);
        lua_rawgeti(L, 2, i + 1);
        sizes[i] = checksize(L, lua_gettop(L), "a recording's size");
        lua_pop(L, 1);
    }
    slot = l_trace_new(L);
    st = cp_trace_scale(recs, sizes, (size_t)n, at, slot);
    if (st == CP_ERR_OOM)
        return l_alloc_result(L, st);
    l_check(L, st);
    return 1;
}

/* core.trace.rescale(t, at) -> Trace: t a prediction, at another size */
int l_trace_rescale(lua_State *L)
{
    const cp_trace *t = l_totrace(L, 1)->t;
    uint64_t at = checksize(L, 2, "the size to predict");
    cp_trace **slot = l_trace_new(L);
    cp_status st = cp_trace_rescale(t, at, slot);
    if (st == CP_ERR_OOM)
        return l_alloc_result(L, st);
    l_check(L, st);
    return 1;
}

void l_trace_push_scaled(lua_State *L, const cp_trace *t)
{
    const cp_scale_info *in = cp_trace_scale_info(t);
    size_t i;
    if (!in)
        return;
    lua_createtable(L, 0, 12);
    lua_createtable(L, (int)in->nfrom, 0);
    for (i = 0; i < in->nfrom; i++) {
        lua_pushinteger(L, (lua_Integer)in->from[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "from");
#define SETI(f)                              \
    lua_pushinteger(L, (lua_Integer)in->f);  \
    lua_setfield(L, -2, #f)
    SETI(at);
    SETI(base);
    SETI(matched);
    SETI(by_rule);
    SETI(by_rule_bytes);
    SETI(left_out);
    SETI(steeper);
    SETI(steeper_bytes);
    lua_createtable(L, 0, 6);
    SETI(constant);
    SETI(linear);
    SETI(square);
    SETI(cube);
    SETI(affine);
    SETI(polynomial);
    lua_setfield(L, -2, "fits");
#undef SETI
    if (in->steeper) {
        /* the one thing two recordings cannot show, said where it matters */
        lua_pushfstring(L, "%I request%s grow%s faster than the size between the two "
                        "recordings and %s fitted by a line (%I bytes in use at the peak): "
                        "two recordings cannot tell a square from a line; where the size is "
                        "a sequence length, a third recording fits the square",
                        (LUAI_UACINT)in->steeper, in->steeper == 1 ? "" : "s",
                        in->steeper == 1 ? "s" : "", in->steeper == 1 ? "is" : "are",
                        (LUAI_UACINT)in->steeper_bytes);
        lua_setfield(L, -2, "note");
    }
    lua_setfield(L, -2, "scaled");
}
