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

/* Launch options common to every kernel: grid, block, stream. */
static void checkshape(lua_State *L, int idx, cp_shape *sh)
{
    lua_Integer g = l_optint_field(L, idx, "grid", 0);
    lua_Integer b = l_optint_field(L, idx, "block", 0);
    if (g < 0 || g > 0x7fffffff)
        luaL_error(L, "option 'grid' must be in 1..2147483647 (or absent), not %I", g);
    if (b < 0 || b > 1024)
        luaL_error(L, "option 'block' must be in 1..1024 (or absent), not %I", b);
    sh->grid = (unsigned)g;
    sh->block = (unsigned)b;
}

static cp_dtype checkdtype(lua_State *L, int idx)
{
    const char *t = l_optstring_field(L, idx, "type", "f32");
    int i;
    for (i = 0; dtype_names[i]; i++)
        if (strcmp(t, dtype_names[i]) == 0)
            return (cp_dtype)i;
    return (cp_dtype)luaL_error(L, "option 'type' must be one of f32, f64, i32, u32, u8, not '%s'", t);
}

/* The stream of a kernel on buffer b: opts.stream, else b.stream. */
static cp_stream *kstream(lua_State *L, int idx, l_buffer *b)
{
    if (!lua_isnoneornil(L, idx)) {
        int t = lua_getfield(L, idx, "stream");
        lua_pop(L, 1);
        if (t != LUA_TNIL)
            return l_optstream_field(L, idx)->s;
    }
    return b ? b->stream->s : l_defaultstream()->s;
}

/* kernels.fill(b, value, {type="f32", stream=, grid=, block=}) -> b */
static int k_fill(lua_State *L)
{
    static const char *const opts[] = {"type", "stream", "grid", "block", NULL};
    l_buffer *b = l_checkbuffer(L, 1);
    cp_scalar v;
    cp_shape sh;
    cp_dtype t;

    l_checkmemory(L, b, 1);
    luaL_checknumber(L, 2);
    l_checkoptions(L, 3, "cupola.kernels.fill", opts);
    t = checkdtype(L, 3);
    checkshape(L, 3, &sh);
    if (t == CP_F32 || t == CP_F64) {
        v.f = (double)lua_tonumber(L, 2);
    } else {
        int isint;
        lua_Integer n = lua_tointegerx(L, 2, &isint);
        luaL_argcheck(L, isint, 2, "an integer type needs an integer value");
        if (t == CP_U8)
            luaL_argcheck(L, n >= 0 && n <= 255, 2, "u8 value must be in 0..255");
        else if (t == CP_U32)
            luaL_argcheck(L, n >= 0 && n <= 4294967295LL, 2, "u32 value must be in 0..4294967295");
        else
            luaL_argcheck(L, n >= -2147483648LL && n <= 2147483647LL, 2, "i32 value out of range");
        v.i = (int64_t)n;
    }
    {
        cp_stream *ks = kstream(L, 3, b);
        kpush("launch fill");
        l_check(L, kpop(cp_be->k_fill(b->ptr, b->size / dtype_sizes[t], t, v, &sh, ks)));
    }
    lua_settop(L, 1);
    return 1;
}

/* kernels.sqrt_index(b, opts) -> b: the seeds' processKernel over f32s. */
static int k_sqrt_index(lua_State *L)
{
    static const char *const opts[] = {"stream", "grid", "block", NULL};
    l_buffer *b = l_checkbuffer(L, 1);
    cp_shape sh;
    l_checkmemory(L, b, 1);
    l_checkoptions(L, 2, "cupola.kernels.sqrt_index", opts);
    checkshape(L, 2, &sh);
    {
        cp_stream *ks = kstream(L, 2, b);
        kpush("launch sqrt_index");
        l_check(L, kpop(cp_be->k_sqrt_index((float *)b->ptr, b->size / sizeof(float), &sh, ks)));
    }
    lua_settop(L, 1);
    return 1;
}

/* kernels.checksum(b, {type="f32", stream=}) -> number: the sum of the
 * elements (exact integer for integer types); waits for the stream. */
static int k_checksum(lua_State *L)
{
    static const char *const opts[] = {"type", "stream", "grid", "block", NULL};
    l_buffer *b = l_checkbuffer(L, 1);
    cp_scalar out;
    cp_shape sh;
    cp_dtype t;
    l_checkmemory(L, b, 1);
    l_checkoptions(L, 2, "cupola.kernels.checksum", opts);
    t = checkdtype(L, 2);
    checkshape(L, 2, &sh);
    out.u = 0;
    {
        cp_stream *ks = kstream(L, 2, b);
        kpush("launch checksum");
        l_check(L, kpop(cp_be->k_checksum(b->ptr, b->size, t, &sh, ks, &out)));
    }
    if (t == CP_F32 || t == CP_F64)
        lua_pushnumber(L, (lua_Number)out.f);
    else
        lua_pushinteger(L, (lua_Integer)out.i);
    return 1;
}

/* kernels.spin(microseconds, {stream=}): keeps a stream busy. */
static int k_spin(lua_State *L)
{
    static const char *const opts[] = {"stream", NULL};
    lua_Integer us = luaL_checkinteger(L, 1);
    luaL_argcheck(L, us >= 0 && us <= 60 * 1000 * 1000, 1, "microseconds must be in 0..60000000");
    l_checkoptions(L, 2, "cupola.kernels.spin", opts);
    {
        cp_stream *ks = kstream(L, 2, NULL);
        kpush("launch spin");
        l_check(L, kpop(cp_be->k_spin((uint64_t)us, ks)));
    }
    return 0;
}

/* kernels.pattern(b, seed, {stream=}) -> b: bytes that depend on seed and
 * offset; kernels.verify(b, seed, opts) -> number of bytes that differ. */
static int k_pattern(lua_State *L)
{
    static const char *const opts[] = {"stream", NULL};
    l_buffer *b = l_checkbuffer(L, 1);
    lua_Integer seed = luaL_checkinteger(L, 2);
    l_checkmemory(L, b, 1);
    l_checkoptions(L, 3, "cupola.kernels.pattern", opts);
    {
        cp_stream *ks = kstream(L, 3, b);
        kpush("launch pattern");
        l_check(L, kpop(cp_be->k_pattern(b->ptr, b->size, (uint64_t)seed, ks)));
    }
    lua_settop(L, 1);
    return 1;
}

static int k_verify(lua_State *L)
{
    static const char *const opts[] = {"stream", NULL};
    l_buffer *b = l_checkbuffer(L, 1);
    lua_Integer seed = luaL_checkinteger(L, 2);
    uint64_t bad = 0;
    l_checkmemory(L, b, 1);
    l_checkoptions(L, 3, "cupola.kernels.verify", opts);
    {
        cp_stream *ks = kstream(L, 3, b);
        kpush("launch verify");
        l_check(L, kpop(cp_be->k_verify(b->ptr, b->size, (uint64_t)seed, ks, &bad)));
    }
    lua_pushinteger(L, (lua_Integer)bad);
    return 1;
}

void l_open_kernels(lua_State *L)
{
    static const luaL_Reg funcs[] = {{"fill", k_fill},         {"sqrt_index", k_sqrt_index},
                                     {"checksum", k_checksum}, {"spin", k_spin},
                                     {"pattern", k_pattern},   {"verify", k_verify},
                                     {NULL, NULL}};
    luaL_newlib(L, funcs);
    lua_setfield(L, -2, "kernels");
}
