/*
 * kernel.c: cupola.kernels, the built-in kernels.  All the work runs in
 * C/CUDA (cuda/kernels.cu, or the host backend's CPU loops); Lua only picks
 * the buffer, the stream and the launch shape.
 */
#include <string.h>

#include "binding.h"
#include "nvtx.h"

/* With CUPOLA_NVTX=1 each built-in launch is a range in the "cupola" NVTX
 * domain.  The stream is resolved before the range opens (resolving may
 * raise), and the status is checked after it closes, so ranges balance. */
static void kpush(const char *name)
{
    if (cp_nvtx_on)
        cp_nvtx_cupola_push(name);
}

static cp_status kpop(cp_status st)
{
    if (cp_nvtx_on)
        cp_nvtx_cupola_pop();
    return st;
}

static const char *const dtype_names[] = {"f32", "f64", "i32", "u32", "u8", NULL};
static const size_t dtype_sizes[] = {4, 8, 4, 4, 1};

/* Launch options, parsed in one pass over the table (no lookups per
 * option, nothing allocated): the common case, no table, costs one type
 * test.  Each kernel allows a subset. */
enum { O_TYPE = 1, O_STREAM = 2, O_GRID = 4, O_BLOCK = 8 };

typedef struct kopts {
    cp_dtype t;
    cp_shape sh;
    cp_stream *s;
} kopts;

static lua_Integer optinteger(lua_State *L, const char *key, lua_Integer lo, lua_Integer hi)
{
    int isint;
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    if (!isint)
        luaL_error(L, "option '%s' must be an integer, not %s", key, l_pushtyped(L, -1));
    if (v < lo || v > hi)
        luaL_error(L, "option '%s' must be in 1..%I (or absent), not %I", key, hi, v);
    return v;
}

/* Fills o from the options at idx; the stream defaults to b's (or the
 * default stream when b is NULL). */
static void kparse(lua_State *L, int idx, const char *fname, unsigned allowed, l_buffer *b,
                   kopts *o)
{
    o->t = CP_F32;
    o->sh.grid = 0;
    o->sh.block = 0;
    /* the default stream means that of b's device (multigpu) */
    o->s = b ? l_devstream(b->stream->s, b->device) : l_defaultstream()->s;
    if (lua_type(L, idx) != LUA_TTABLE) {
        if (lua_isnoneornil(L, idx))
            return;
        l_checktable(L, idx); /* raises */
    }
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        const char *k;
        unsigned which = 0;
        if (lua_type(L, -2) != LUA_TSTRING)
            luaL_error(L, "%s: option names must be strings, not %s", fname, l_pushtyped(L, -2));
        k = lua_tostring(L, -2);
        switch (k[0]) {
        case 't': which = strcmp(k, "type") == 0 ? O_TYPE : 0; break;
        case 's': which = strcmp(k, "stream") == 0 ? O_STREAM : 0; break;
        case 'g': which = strcmp(k, "grid") == 0 ? O_GRID : 0; break;
        case 'b': which = strcmp(k, "block") == 0 ? O_BLOCK : 0; break;
        default: break;
        }
        if (!(which & allowed))
            luaL_error(L, "%s: unknown option %s", fname, l_pushshown(L, -2));
        switch (which) {
        case O_TYPE: {
            const char *t;
            int i;
            if (lua_type(L, -1) != LUA_TSTRING)
                luaL_error(L, "option 'type' must be a string, not %s", l_pushtyped(L, -1));
            t = lua_tostring(L, -1);
            for (i = 0; dtype_names[i] && strcmp(t, dtype_names[i]) != 0; i++) {
            }
            if (!dtype_names[i])
                luaL_error(L, "option 'type' must be one of f32, f64, i32, u32, u8, not %s",
                           l_pushshown(L, -1));
            o->t = (cp_dtype)i;
            break;
        }
        case O_STREAM: {
            l_stream *st = l_testudstream(L, -1);
            if (!st)
                luaL_error(L, "option 'stream' must be a " L_STREAM ", not %s", l_pushtyped(L, -1));
            if (!st->ref)
                luaL_error(L, "attempt to use a closed " L_STREAM);
            o->s = b ? l_devstream(st->ref->s, b->device) : st->ref->s;
            break;
        }
        case O_GRID: o->sh.grid = (unsigned)optinteger(L, "grid", 1, 0x7fffffff); break;
        default: o->sh.block = (unsigned)optinteger(L, "block", 1, 1024); break;
        }
        lua_pop(L, 1);
    }
}

/* kernels.fill(b, value, {type="f32", stream=, grid=, block=}) -> b */
static int k_fill(lua_State *L)
{
    l_buffer *b = l_checkbuffer(L, 1);
    cp_scalar v;
    kopts o;
    cp_dtype t;
    lua_Number d;

    l_checkmemory(L, b, 1);
    d = l_checknumber(L, 2);
    kparse(L, 3, "cupola.kernels.fill", O_TYPE | O_STREAM | O_GRID | O_BLOCK, b, &o);
    t = o.t;
    if (t == CP_F32 || t == CP_F64) {
        v.f = (double)d;
    } else {
        int isint;
        lua_Integer n = lua_tointegerx(L, 2, &isint);
        const char *bad = NULL;
        if (!isint)
            bad = "an integer type needs an integer value";
        else if (t == CP_U8 && (n < 0 || n > 255))
            bad = "u8 value must be in 0..255";
        else if (t == CP_U32 && (n < 0 || n > 4294967295LL))
            bad = "u32 value must be in 0..4294967295";
        else if (t == CP_I32 && (n < -2147483648LL || n > 2147483647LL))
            bad = "i32 value out of range";
        if (bad)
            luaL_argerror(L, 2, lua_pushfstring(L, "%s, got %s", bad, l_pushshown(L, 2)));
        v.i = (int64_t)n;
    }
    kpush("launch fill");
    l_check(L, kpop(cp_be->k_fill(b->ptr, b->size / dtype_sizes[t], t, v, &o.sh, o.s)));
    lua_pushvalue(L, 1); /* returns its first argument (cheaper than lua_settop) */
    return 1;
}

/* kernels.sqrt_index(b, opts) -> b: data[i] = sqrt(i) over f32s, the
 * smallest kernel that touches every element (the benchmarks' workload). */
static int k_sqrt_index(lua_State *L)
{
    l_buffer *b = l_checkbuffer(L, 1);
    kopts o;
    l_checkmemory(L, b, 1);
    kparse(L, 2, "cupola.kernels.sqrt_index", O_STREAM | O_GRID | O_BLOCK, b, &o);
    kpush("launch sqrt_index");
    l_check(L, kpop(cp_be->k_sqrt_index((float *)b->ptr, b->size / sizeof(float), &o.sh, o.s)));
    lua_pushvalue(L, 1); /* returns its first argument (cheaper than lua_settop) */
    return 1;
}

/* kernels.checksum(b, {type="f32", stream=}) -> number: the sum of the
 * elements (exact integer for integer types); waits for the stream. */
static int k_checksum(lua_State *L)
{
    l_buffer *b = l_checkbuffer(L, 1);
    cp_scalar out;
    kopts o;
    cp_dtype t;
    l_checkmemory(L, b, 1);
    kparse(L, 2, "cupola.kernels.checksum", O_TYPE | O_STREAM | O_GRID | O_BLOCK, b, &o);
    t = o.t;
    out.u = 0;
    kpush("launch checksum");
    l_check(L, kpop(cp_be->k_checksum(b->ptr, b->size, t, &o.sh, o.s, &out)));
    if (t == CP_F32 || t == CP_F64)
        lua_pushnumber(L, (lua_Number)out.f);
    else
        lua_pushinteger(L, (lua_Integer)out.i);
    return 1;
}

/* kernels.spin(microseconds, {stream=}): keeps a stream busy. */
static int k_spin(lua_State *L)
{
    lua_Integer us = l_checkinteger(L, 1);
    kopts o;
    if (us < 0 || us > 60 * 1000 * 1000)
        luaL_argerror(L, 1, lua_pushfstring(L, "microseconds must be in 0..60000000, got %I", (LUAI_UACINT)us));
    kparse(L, 2, "cupola.kernels.spin", O_STREAM, NULL, &o);
    kpush("launch spin");
    l_check(L, kpop(cp_be->k_spin((uint64_t)us, o.s)));
    return 0;
}

/* kernels.pattern(b, seed, {stream=}) -> b: bytes that depend on seed and
 * offset; kernels.verify(b, seed, opts) -> number of bytes that differ. */
static int k_pattern(lua_State *L)
{
    l_buffer *b = l_checkbuffer(L, 1);
    lua_Integer seed = l_checkinteger(L, 2);
    kopts o;
    l_checkmemory(L, b, 1);
    kparse(L, 3, "cupola.kernels.pattern", O_STREAM, b, &o);
    kpush("launch pattern");
    l_check(L, kpop(cp_be->k_pattern(b->ptr, b->size, (uint64_t)seed, o.s)));
    lua_pushvalue(L, 1); /* returns its first argument (cheaper than lua_settop) */
    return 1;
}

static int k_verify(lua_State *L)
{
    l_buffer *b = l_checkbuffer(L, 1);
    lua_Integer seed = l_checkinteger(L, 2);
    uint64_t bad = 0;
    kopts o;
    l_checkmemory(L, b, 1);
    kparse(L, 3, "cupola.kernels.verify", O_STREAM, b, &o);
    kpush("launch verify");
    l_check(L, kpop(cp_be->k_verify(b->ptr, b->size, (uint64_t)seed, o.s, &bad)));
    lua_pushinteger(L, (lua_Integer)bad);
    return 1;
}

void l_open_kernels(lua_State *L)
{
    static const luaL_Reg funcs[] = {{"fill", k_fill},         {"sqrt_index", k_sqrt_index},
                                     {"checksum", k_checksum}, {"spin", k_spin},
                                     {"pattern", k_pattern},   {"verify", k_verify},
                                     {NULL, NULL}};
    lua_newtable(L);
    l_setfuncs(L, funcs);
    lua_setfield(L, -2, "kernels");
}
