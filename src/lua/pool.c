/*
 * pool.c: cupola.Pool, the allocators written in C (resource.h):
 * cupola.pool{kind=, upstream=, initial=, grow=, max=, alignment=,
 * release_threshold=, reuse=, fallback=, limit=, log=, clock=}, and the user's own
 * allocators: kind = "plugin" with path= or source=, symbol=, options=.
 *
 * The pool is reference counted (l_poolref): the Lua handle and each live
 * buffer hold a reference, so a pool collected in the same cycle as its
 * buffers is destroyed only after the last of them has given its block back.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "kernel/compile.h"

typedef struct l_pool {
    uint64_t tag;   /* L_TAG(L_T_POOL) (binding.h) */
    l_poolref *ref; /* NULL once closed */
    cp_pool_opts opts;
    const char *kind; /* cp_pool_kind_name's (static) */
} l_pool;

/* The Pool at arg, open or closed. */
static l_pool *udpool(lua_State *L, int arg)
{
    return (l_pool *)l_checktag(L, arg, L_T_POOL, sizeof(l_pool), L_POOL);
}

static l_pool *topool(lua_State *L, int arg)
{
    l_pool *p = udpool(L, arg);
    if (!p->ref)
        luaL_error(L, "attempt to use a closed " L_POOL);
    return p;
}

/* The index of the name (name(0), name(1), ... from the core) that option
 * key of the table at idx names (absent: def). */
static int checkchoice(lua_State *L, int idx, const char *key, const char *def,
                       const char *(*name)(int i))
{
    const char *v = l_optstring_field(L, idx, key, def);
    const char *n;
    int i;
    for (i = 0; (n = name(i)) != NULL; i++)
        if (strcmp(v, n) == 0)
            return i;
    lua_pushfstring(L, "cupola.pool: option '%s' must be one of ", key);
    l_pushnames(L, name, ", ");
    lua_pushliteral(L, ", not '");
    l_pushcut(L, v, strlen(v));
    lua_pushliteral(L, "'");
    lua_concat(L, 5);
    return l_error_here(L);
}

/* A plugin's C source, compiled by the system C compiler into a cached
 * shared object (kernel/compile.h); pushes nothing, returns the path in a
 * buffer owned by the Lua stack (a string left on it). */
static const char *compile_source(lua_State *L, const char *src, size_t len)
{
    const char *dir = l_plugin_include_dir();
    const char *args[8];
    const char *depends[2] = {NULL, NULL};
    cp_cc_job job;
    cp_cc_result res;
    cp_status st;
    int n = 0;

    if (!dir)
        luaL_error(L, "cupola.pool: option 'source' needs require \"cupola\" (cupola.include_dir "
                      "names the directory of <cupola/allocator.h>)");
    lua_pushfstring(L, "-I%s", dir);
    args[n++] = lua_tostring(L, -1);
    args[n++] = "-O2";
    args[n++] = "-fPIC";
    args[n++] = "-shared";
    args[n] = NULL;
    lua_pushfstring(L, "%s/cupola/allocator.h", dir);
    depends[0] = lua_tostring(L, -1);
    memset(&job, 0, sizeof job);
    memset(&res, 0, sizeof res);
    job.lang = CP_CC_C;
    job.name = "plugin.c";
    job.source = src;
    job.source_len = len;
    job.args = args;
    job.depends = depends;
    job.salt = "cupola plugin allocator 1";
    st = cp_cc_shared_object(&job, &res);
    if (st == CP_ERR_INVALID)
        l_fail_log(L, "", res.log);
    free(res.log);
    if (st != CP_OK)
        l_fail(L, st);
    lua_pop(L, 2);
    lua_pushstring(L, res.path);
    return lua_tostring(L, -1);
}

/* kind = "plugin": path or source, symbol, options.  Strings stay on the
 * stack (or in the option table) until cp_pool_create has returned. */
static void plugin_options(lua_State *L, l_pool *p)
{
    const char *path = l_optstring_field(L, 1, "path", NULL);
    const char *symbol = l_optstring_field(L, 1, "symbol", NULL);
    const char *options = l_optstring_field(L, 1, "options", NULL);
    size_t len = 0;
    const char *source = NULL;

    if (lua_getfield(L, 1, "source") != LUA_TNIL) {
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "cupola.pool: option 'source' must be a string (C source), not %s",
                       l_pushtyped(L, -1));
        source = lua_tolstring(L, -1, &len);
    }
    lua_pop(L, 1);
    if (strcmp(p->kind, "plugin") != 0) {
        if (path || symbol || options || source)
            luaL_error(L, "cupola.pool: options 'path', 'source', 'symbol' and 'options' are for "
                          "kind 'plugin', not '%s'", p->kind);
        return;
    }
    if (!path == !source)
        luaL_error(L, "cupola.pool: kind 'plugin' needs exactly one of 'path' and 'source'");
    if (!symbol)
        luaL_error(L, "cupola.pool: kind 'plugin' needs option 'symbol' (the name of the "
                      "exported const cupola_allocator)");
    if (source)
        path = compile_source(L, source, len); /* leaves the path on the stack */
    p->opts.plugin_path = path;
    p->opts.plugin_symbol = symbol;
    p->opts.plugin_options = options;
}

/* kind = "cub": CachingDeviceAllocator's four settings (pool/cub.c checks
 * their ranges; here only their types and signs).  Absent ones take CUB's
 * defaults. */
static void cub_options(lua_State *L, l_pool *p)
{
    static const char *const names[] = {"bin_growth", "min_bin", "max_bin"};
    static const lua_Integer defs[] = {8, 3, 7};
    uint64_t *dst[] = {&p->opts.cub_bin_growth, &p->opts.cub_min_bin, &p->opts.cub_max_bin};
    int i, any = 0;
    for (i = 0; i < 3; i++) {
        int isint;
        lua_Integer v = defs[i];
        if (lua_getfield(L, 1, names[i]) != LUA_TNIL) {
            any = 1;
            v = lua_tointegerx(L, -1, &isint);
            if (!isint || v < 0)
                luaL_error(L, "cupola.pool: option '%s' must be a non-negative integer, not %s",
                           names[i], l_pushshown(L, -1));
        }
        lua_pop(L, 1);
        *dst[i] = (uint64_t)v;
    }
    lua_getfield(L, 1, "max_cached_bytes");
    any |= !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (any && strcmp(p->kind, "cub") != 0)
        luaL_error(L, "cupola.pool: options 'bin_growth', 'min_bin', 'max_bin' and "
                      "'max_cached_bytes' are for kind 'cub', not '%s'", p->kind);
    /* CUB's default constructor's cap: 3 * 8^7 - 1 bytes */
    p->opts.cub_max_cached_bytes = l_optsize_field(L, 1, "max_cached_bytes", 6291455);
    p->opts.cub_given = 1;
}

/* Each Pool gets a metatable of its own whose __index is a table: the
 * methods and the pool's fields, all constant but `closed` (which
 * pool_mark_closed updates).  `p:alloc` then costs the VM one table lookup
 * instead of a call to a C __index, on the path every allocation from Lua
 * takes.  The other entries (__gc, __close, __name, ...) are the class's. */
static void pool_setmeta(lua_State *L, int ud, const l_pool *p)
{
    luaL_getmetatable(L, L_POOL);
    lua_createtable(L, 0, 8);
    lua_pushnil(L);
    while (lua_next(L, -3)) {
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_rawset(L, -4);
    }
    lua_createtable(L, 0, 12);
    lua_getfield(L, -3, "methods");
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_rawset(L, -5);
    }
    lua_pop(L, 1);
    lua_pushstring(L, p->kind);
    lua_setfield(L, -2, "kind");
    lua_pushstring(L, cp_upstream_name(p->opts.upstream));
    lua_setfield(L, -2, "upstream");
    lua_pushstring(L, cp_reuse_name(p->opts.reuse));
    lua_setfield(L, -2, "reuse");
    lua_pushinteger(L, (lua_Integer)p->opts.alignment);
    lua_setfield(L, -2, "alignment");
    lua_pushinteger(L, p->opts.device);
    lua_setfield(L, -2, "device");
    lua_pushstring(L, cp_clock_name(p->opts.clock));
    lua_setfield(L, -2, "clock");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "closed");
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, ud);
    lua_pop(L, 1);
}

/* Once closed, p.closed answers true.  A pool whose construction failed
 * still has the class's metatable, whose __index (the shared method table)
 * is left alone. */
static void pool_mark_closed(lua_State *L, int ud)
{
    int top = lua_gettop(L);
    luaL_getmetatable(L, L_POOL);
    if (lua_getmetatable(L, ud) && !lua_rawequal(L, -1, -2) &&
        lua_getfield(L, -1, "__index") == LUA_TTABLE) {
        lua_pushboolean(L, 1);
        lua_setfield(L, -2, "closed");
    }
    lua_settop(L, top);
}

static int pool_new(lua_State *L)
{
    static const char *const opts[] = {"kind", "upstream", "initial", "grow", "max", "alignment",
                                       "release_threshold", "reuse", "fallback", "limit", "log",
                                       "path", "source", "symbol", "options", "device", "clock",
                                       "bin_growth", "min_bin", "max_bin", "max_cached_bytes", NULL};
    l_pool *p;
    cp_resource *r = NULL, *outer;
    size_t limit;
    const char *log;
    int k, ud;

    if (lua_isnoneornil(L, 1)) {
        lua_settop(L, 0);
        lua_newtable(L);
    }
    l_checkoptions(L, 1, "cupola.pool", opts);
    p = (l_pool *)lua_newuserdatauv(L, sizeof *p, 0);
    memset(p, 0, sizeof *p);
    p->tag = L_TAG(L_T_POOL);
    luaL_setmetatable(L, L_POOL);
    ud = lua_gettop(L);

    k = checkchoice(L, 1, "kind", "tlsf", cp_pool_kind_name);
    p->kind = p->opts.kind = cp_pool_kind_name(k);
    p->opts.upstream = (cp_upstream_kind)checkchoice(L, 1, "upstream", "device", cp_upstream_name);
    p->opts.reuse = (cp_reuse)checkchoice(L, 1, "reuse", "event", cp_reuse_name);
    p->opts.initial = l_optsize_field(L, 1, "initial", 0);
    p->opts.grow = l_optbool_field(L, 1, "grow", 1);
    p->opts.max = l_optsize_field(L, 1, "max", 0);
    p->opts.alignment = l_optsize_field(L, 1, "alignment", 256);
    p->opts.release_threshold = l_optsize_field(L, 1, "release_threshold", 0);
    /* given at all (0 included): a vmm pool keeps that many idle bytes
     * instead of deciding by time */
    p->opts.release_threshold_set = lua_getfield(L, 1, "release_threshold") != LUA_TNIL;
    lua_pop(L, 1);
    p->opts.clock = (cp_clock_kind)checkchoice(L, 1, "clock", "wall", cp_clock_name);
    p->opts.fallback = l_optbool_field(L, 1, "fallback", 0);
    p->opts.device = l_optdevice_field(L, 1, "cupola.pool");
    if (p->opts.alignment == 0 || (p->opts.alignment & (p->opts.alignment - 1)) != 0)
        return luaL_error(L, "cupola.pool: option 'alignment' must be a power of two, not %I",
                          (lua_Integer)p->opts.alignment);
    if (p->opts.max && p->opts.initial > p->opts.max)
        return luaL_error(L, "cupola.pool: option 'initial' is larger than 'max' (%I > %I)",
                          (LUAI_UACINT)p->opts.initial, (LUAI_UACINT)p->opts.max);
    limit = l_optsize_field(L, 1, "limit", 0);
    log = l_optstring_field(L, 1, "log", NULL);
    plugin_options(L, p);
    cub_options(L, p);

    p->ref = (l_poolref *)calloc(1, sizeof *p->ref);
    if (!p->ref)
        return luaL_error(L, "cupola.pool: out of host memory");
    p->ref->refs = 1;
    p->ref->has_memory = p->opts.upstream != CP_UP_VIRTUAL;
    p->ref->device = p->opts.device;
    {
        int nret = l_alloc_result_info(L, cp_pool_create(&r, &p->opts), p->kind, p->opts.initial,
                                       p->opts.device, NULL);
        /* the strings live on the Lua stack only for the call */
        p->opts.plugin_path = p->opts.plugin_symbol = p->opts.plugin_options = NULL;
        if (nret) {
            free(p->ref);
            p->ref = NULL;
            return nret;
        }
    }
    /* Adaptors wrap the pool; each owns what it wraps. */
    outer = r;
    if (limit && cp_limit_adaptor(&outer, r, limit) != CP_OK) {
        cp_resource_destroy(r);
        free(p->ref);
        p->ref = NULL;
        return l_fail(L, CP_ERR_BACKEND);
    }
    r = outer;
    if (log && cp_log_adaptor(&outer, r, log) != CP_OK) {
        cp_resource_destroy(r);
        free(p->ref);
        p->ref = NULL;
        return l_fail(L, CP_ERR_INVALID);
    }
    p->ref->r = outer;
    lua_settop(L, ud);
    pool_setmeta(L, ud, p);
    return 1;
}

/* The figures of this thread's last refusal (cp_resource_last_oom) as the
 * fourth value of an out-of-memory answer. */
static void push_oom_figures(lua_State *L)
{
    cp_oom_figures f;
    cp_resource_last_oom(&f);
    lua_createtable(L, 0, 7);
    lua_pushinteger(L, (lua_Integer)f.requested);
    lua_setfield(L, -2, "requested");
    lua_pushinteger(L, (lua_Integer)f.free);
    lua_setfield(L, -2, "free");
    lua_pushinteger(L, (lua_Integer)f.largest_free);
    lua_setfield(L, -2, "largest_free");
    lua_pushnumber(L, f.fragmentation);
    lua_setfield(L, -2, "fragmentation");
    lua_pushinteger(L, (lua_Integer)f.reserved);
    lua_setfield(L, -2, "reserved");
    lua_pushinteger(L, (lua_Integer)f.used);
    lua_setfield(L, -2, "used");
    lua_pushstring(L, f.kind ? f.kind : "?");
    lua_setfield(L, -2, "kind");
}

/* p:alloc(size, s) -> Buffer | nil, msg, "out_of_memory", figures */
static int pool_alloc(lua_State *L)
{
    l_pool *p = udpool(L, 1);
    size_t n = l_checksize(L, 2);
    l_streamref *s = l_optstream(L, 3);
    void *ptr = NULL;
    int nret;

    if (!p->ref)
        return luaL_error(L, "attempt to use a closed " L_POOL);
    luaL_argcheck(L, n > 0, 2, "size must be at least 1 byte, got 0");
    /* The buffer goes to index 4: without a stream argument, index 3 must
     * read as nil, not as the new buffer (which then named itself as its
     * stream). */
    lua_settop(L, 3);
    l_newbuffer(L);
    if ((nret = l_alloc_result(L, cp_resource_alloc(p->ref->r, n, s->s, &ptr))) != 0) {
        push_oom_figures(L);
        return nret + 1;
    }
    l_buffer_own_pool(L, -1, ptr, n, 3, s, 1, p->ref);
    return 1;
}

/* ---- raw blocks: p:alloc_raw, p:free_raw, p:buffer ----
 * A raw block is a block of the pool handed out as its address alone (an
 * integer), with no Lua object: no userdata to make, no finalizer to run, so
 * the pair costs the pool's own work and two C calls.  The pool's map
 * (rawmap.h, in its C owner) holds each block's size and stream; free_raw and
 * buffer() accept only addresses it holds live, so a wrong address raises
 * instead of reaching the allocator.  Each live block holds a reference to
 * its stream (as a Buffer does), not to the Stream object.  Raw blocks do
 * not keep the pool alive: when its handle is closed or collected, the blocks
 * still live are freed with it (close() returns how many).  buffer(address)
 * hands a block over to a Buffer, which owns it from then on. */

/* An address as messages show it: the integer the script holds, and in hex
 * (on the Lua stack). */
static const char *pushaddr(lua_State *L, uint64_t a)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%lld (0x%llx)", (long long)a, (unsigned long long)a);
    lua_pushstring(L, buf);
    return lua_tostring(L, -1);
}

/* checkraw's path for anything but an integer naming a live block: a float
 * with an integer's value is that integer; else the error. */
static l_rawblock *checkraw_slow(lua_State *L, l_pool *p, int arg, const char *fname)
{
    int isint = 1;
    lua_Integer v;
    uint64_t a;
    l_rawblock *b;
    const l_rawblock *in;
    const char *as;

    /* an integer, or a float with an integer's value; never a string */
    if (lua_type(L, arg) != LUA_TNUMBER)
        l_typeerror(L, arg, "address (an integer from alloc_raw)");
    v = lua_isinteger(L, arg) ? lua_tointeger(L, arg) : lua_tointegerx(L, arg, &isint);
    if (!isint)
        luaL_argerror(L, arg, lua_pushfstring(L, "address must be an integer, got %s",
                                              l_pushshown(L, arg)));
    a = (uint64_t)v;
    b = l_rawmap_find(&p->ref->raw, a);
    if (b && b->state == L_RAW_LIVE)
        return b;
    as = pushaddr(L, a);
    if (b && b->state == L_RAW_FREED)
        luaL_argerror(L, arg, lua_pushfstring(L, "%saddress %s was already given back by free_raw",
                                              strcmp(fname, "free_raw") == 0 ? "double free: " : "",
                                              as));
    if (b && b->state == L_RAW_BUFFER)
        luaL_argerror(L, arg, lua_pushfstring(L, "address %s already belongs to the Buffer that "
                                                 "buffer() made of it; free it through that Buffer",
                                              as));
    if (b && b->state == L_RAW_RESET)
        luaL_argerror(L, arg, lua_pushfstring(L, "address %s was freed by the pool's reset()", as));
    if ((in = l_rawmap_containing(&p->ref->raw, a)) != NULL) {
        const char *start = pushaddr(L, in->addr);
        luaL_argerror(L, arg, lua_pushfstring(L, "address %s lies inside the %I-byte raw block at %s; "
                                                 "%s takes the address alloc_raw returned",
                                              as, (lua_Integer)in->size, start, fname));
    }
    luaL_argerror(L, arg, lua_pushfstring(L, "address %s is not a live block this pool gave by "
                                             "alloc_raw (never given, or freed long ago)", as));
    return NULL;
}

/* The live raw block at the address argument arg of the method fname, or a
 * Lua error naming the argument, the address and what is wrong with it. */
static inline l_rawblock *checkraw(lua_State *L, l_pool *p, int arg, const char *fname)
{
    if (lua_isinteger(L, arg)) {
        l_rawblock *b = l_rawmap_find(&p->ref->raw, (uint64_t)lua_tointeger(L, arg));
        if (b && b->state == L_RAW_LIVE)
            return b;
    }
    return checkraw_slow(L, p, arg, fname);
}

/* p:alloc_raw(size, s) -> address | nil, msg, "out_of_memory", figures */
static int pool_alloc_raw(lua_State *L)
{
    l_pool *p = udpool(L, 1);
    /* (a positive integer, the common size, without l_checksize's checks) */
    lua_Integer in = lua_isinteger(L, 2) ? lua_tointeger(L, 2) : 0;
    size_t n = in > 0 ? (size_t)in : l_checksize(L, 2);
    l_streamref *s = l_optstream(L, 3);
    void *ptr = NULL;
    uint32_t was;
    cp_status st;

    if (!p->ref)
        return luaL_error(L, "attempt to use a closed " L_POOL);
    luaL_argcheck(L, n > 0, 2, "size must be at least 1 byte, got 0");
    /* room first: once the pool has handed the block out, nothing may fail */
    if (l_rawmap_reserve(&p->ref->raw) != 0)
        return luaL_error(L, L_POOL ":alloc_raw: out of host memory for the pool's map");
    st = cp_resource_alloc(p->ref->r, n, s->s, &ptr);
    if (st != CP_OK) {
        int nret = l_alloc_result(L, st);
        push_oom_figures(L);
        return nret + 1;
    }
    l_rawmap_put(&p->ref->raw, (uint64_t)(uintptr_t)ptr, n, s, &was);
    l_streamref_retain(s);
    if (was == L_RAW_LIVE) /* the allocator's fault, never the script's */
        return luaL_error(L, L_POOL ":alloc_raw: the %s pool handed out %s while it was still live",
                          p->kind, pushaddr(L, (uint64_t)(uintptr_t)ptr));
    lua_pushinteger(L, (lua_Integer)(uintptr_t)ptr);
    return 1;
}

/* p:free_raw(address, s): stream-ordered on s (default: the stream the
 * block was allocated on), as b:free(s). */
static int pool_free_raw(lua_State *L)
{
    l_pool *p = udpool(L, 1);
    l_rawblock *b;
    l_streamref *own, *s;
    cp_status st;

    if (!p->ref)
        return luaL_error(L, "attempt to use a closed " L_POOL);
    b = checkraw(L, p, 2, "free_raw");
    own = (l_streamref *)b->stream;
    s = lua_isnoneornil(L, 3) ? own : l_optstream(L, 3);
    st = cp_resource_free(p->ref->r, (void *)(uintptr_t)b->addr, (size_t)b->size, s->s);
    l_rawmap_mark(&p->ref->raw, b, L_RAW_FREED);
    l_streamref_release(own);
    l_check(L, st);
    return 0;
}

/* p:buffer(address) -> Buffer: the Buffer takes the raw block over (its
 * free, close or collection gives it back; free_raw of the address is then
 * an error).  It is ordered on the block's stream and counts as a live
 * buffer of the pool, as one from p:alloc. */
static int pool_buffer(lua_State *L)
{
    l_pool *p = udpool(L, 1);
    l_rawblock *b;
    l_streamref *s;

    if (!p->ref)
        return luaL_error(L, "attempt to use a closed " L_POOL);
    b = checkraw(L, p, 2, "buffer");
    s = (l_streamref *)b->stream;
    lua_settop(L, 2);
    l_pushstream(L, s); /* 3 */
    l_newbuffer(L);     /* 4; nothing below raises */
    l_buffer_own_pool(L, 4, (void *)(uintptr_t)b->addr, (size_t)b->size, 3, s, 1, p->ref);
    l_rawmap_mark(&p->ref->raw, b, L_RAW_BUFFER);
    l_streamref_release(s); /* the Buffer holds its own */
    return 1;
}

/* Frees the pool's live raw blocks (its handle is going); returns how many. */
static lua_Integer free_raw_blocks(l_poolref *r)
{
    lua_Integer n = 0;
    uint64_t i;
    for (i = 0; r->raw.slots && i <= r->raw.mask && r->raw.live > 0; i++) {
        l_rawblock *b = &r->raw.slots[i];
        if (b->state == L_RAW_LIVE) {
            l_streamref *s = (l_streamref *)b->stream;
            cp_resource_free(r->r, (void *)(uintptr_t)b->addr, (size_t)b->size, s->s);
            l_rawmap_mark(&r->raw, b, L_RAW_FREED);
            l_streamref_release(s);
            n++;
        }
    }
    return n;
}

/* After an arena's reset(): every raw block is gone with the rest. */
static void reset_raw_blocks(l_poolref *r)
{
    uint64_t i;
    for (i = 0; r->raw.slots && i <= r->raw.mask && r->raw.live > 0; i++) {
        l_rawblock *b = &r->raw.slots[i];
        if (b->state == L_RAW_LIVE) {
            l_streamref *s = (l_streamref *)b->stream;
            l_rawmap_mark(&r->raw, b, L_RAW_RESET);
            l_streamref_release(s);
        }
    }
}

static int pool_trim(lua_State *L)
{
    l_pool *p = topool(L, 1);
    size_t keep = lua_isnoneornil(L, 2) ? 0 : l_checksize(L, 2);
    l_check(L, cp_resource_trim(p->ref->r, keep));
    return 0;
}

/* p:reset(): an arena frees everything at once; its live buffers are closed. */
static int pool_reset(lua_State *L)
{
    l_pool *p = topool(L, 1);
    cp_status st = cp_resource_reset(p->ref->r);
    if (st == CP_ERR_UNSUPPORTED)
        return luaL_error(L, L_POOL ":reset: only arena pools can be reset (this one is '%s')",
                          p->kind);
    l_check(L, st);
    p->ref->generation++;
    p->ref->live = 0;
    reset_raw_blocks(p->ref);
    return 0;
}

/* p:time() -> seconds on the pool's clock (since it was created, or as set) */
static int pool_time(lua_State *L)
{
    lua_pushnumber(L, cp_resource_time(topool(L, 1)->ref->r));
    return 1;
}

/* A manual clock's new reading t (checked here, so the message names the
 * argument and the value). */
static void set_clock(lua_State *L, l_pool *p, int arg, double t, const char *fname)
{
    double now = cp_resource_time(p->ref->r);
    if (cp_resource_clock_kind(p->ref->r) != CP_CLOCK_MANUAL)
        luaL_error(L, L_POOL ":%s: the pool's clock is \"wall\"; only a pool made with "
                      "clock = \"manual\" can be set", fname);
    if (!isfinite(t))
        luaL_argerror(L, arg, lua_pushfstring(L, "the time must be finite, not %f",
                                              (LUAI_UACNUMBER)t));
    if (t < now)
        luaL_argerror(L, arg, lua_pushfstring(L, "time %f is before the clock's reading %f (a "
                                                 "clock never goes back)",
                                              (LUAI_UACNUMBER)t, (LUAI_UACNUMBER)now));
    l_check(L, cp_resource_set_time(p->ref->r, t));
}

/* p:set_time(t): a manual clock reads t seconds from now on (t >= p:time()) */
static int pool_set_time(lua_State *L)
{
    l_pool *p = topool(L, 1);
    set_clock(L, p, 2, (double)l_checknumber(L, 2), "set_time");
    return 0;
}

/* p:advance(dt) -> the new reading: a manual clock moves dt >= 0 seconds on */
static int pool_advance(lua_State *L)
{
    l_pool *p = topool(L, 1);
    double dt = (double)l_checknumber(L, 2);
    luaL_argcheck(L, dt >= 0 && isfinite(dt), 2,
                  lua_pushfstring(L, "the seconds to advance must be finite and at least 0, "
                                     "not %f", (LUAI_UACNUMBER)dt));
    set_clock(L, p, 2, cp_resource_time(p->ref->r) + dt, "advance");
    lua_pushnumber(L, cp_resource_time(p->ref->r));
    return 1;
}

static int pool_stats(lua_State *L)
{
    l_pool *p = topool(L, 1);
    cp_stats s;
    cp_resource_stats(p->ref->r, &s);
    lua_createtable(L, 0, 12);
#define SETI(f)                                   \
    lua_pushinteger(L, (lua_Integer)s.f);         \
    lua_setfield(L, -2, #f)
    SETI(used);
    SETI(used_peak);
    SETI(reserved);
    SETI(reserved_peak);
    SETI(allocs);
    SETI(frees);
    SETI(failed);
    SETI(largest_free);
    SETI(free_bytes);
    if (s.page_bytes) {
        /* a pool over virtual memory management: its pages */
        SETI(page_bytes);
        SETI(pages_mapped);
        SETI(maps);
        SETI(unmaps);
        if (s.by_time) {
            /* the default policy's state (vmm.c) */
            SETI(recent_peak);
            lua_pushnumber(L, s.decay_window);
            lua_setfield(L, -2, "decay_window");
            lua_pushnumber(L, s.map_budget);
            lua_setfield(L, -2, "map_budget");
        }
    }
#undef SETI
    {
        int i;
        for (i = 0; i < s.nextra; i++) {
            lua_pushinteger(L, (lua_Integer)s.extra[i].value);
            lua_setfield(L, -2, s.extra[i].name);
        }
    }
    lua_pushnumber(L, s.fragmentation);
    lua_setfield(L, -2, "fragmentation");
    lua_pushinteger(L, p->ref->live);
    lua_setfield(L, -2, "live_buffers");
    lua_pushinteger(L, (lua_Integer)p->ref->raw.live);
    lua_setfield(L, -2, "live_raw");
    return 1;
}

/* p:close() -> the number of raw blocks it freed (0 when already closed).
 * Refuses while Buffers are live: they hold the pool and may still be used;
 * raw blocks are only addresses, freed with the pool. */
static int pool_close(lua_State *L)
{
    l_pool *p = udpool(L, 1);
    lua_Integer nraw;
    if (!p->ref) {
        lua_pushinteger(L, 0);
        return 1;
    }
    if (p->ref->live > 0)
        return luaL_error(L, L_POOL ":close: the pool has %d live buffer%s; free them first",
                          p->ref->live, p->ref->live == 1 ? "" : "s");
    nraw = free_raw_blocks(p->ref);
    l_poolref_release(p->ref);
    p->ref = NULL;
    pool_mark_closed(L, 1);
    lua_pushinteger(L, nraw);
    return 1;
}

/* __gc and __close: the raw blocks go too (buffers, if any, keep the pool's
 * C owner until they are freed). */
static int pool_gc(lua_State *L)
{
    l_pool *p = udpool(L, 1);
    if (p->ref) {
        free_raw_blocks(p->ref);
        l_poolref_release(p->ref);
        p->ref = NULL;
        pool_mark_closed(L, 1);
    }
    return 0;
}

static int pool_tostring(lua_State *L)
{
    l_pool *p = udpool(L, 1);
    if (!p->ref)
        lua_pushfstring(L, L_POOL " (%s, closed)", p->kind);
    else
        lua_pushfstring(L, L_POOL " (%s over %s, %d live%s)", p->kind,
                        cp_upstream_name(p->opts.upstream), p->ref->live,
                        p->ref->raw.live ? lua_pushfstring(L, ", %I raw", (lua_Integer)p->ref->raw.live)
                                         : "");
    return 1;
}

/* For trace.c: the resource behind a Pool argument. */
cp_resource *l_checkresource(lua_State *L, int arg);
cp_resource *l_checkresource(lua_State *L, int arg)
{
    return topool(L, arg)->ref->r;
}

void l_open_pool(lua_State *L)
{
    static const luaL_Reg meta[] = {{"__gc", pool_gc},           {"__close", pool_gc},
                                    {"__tostring", pool_tostring},
                                    {"__newindex", l_readonly_newindex}, {NULL, NULL}};
    static const luaL_Reg methods[] = {{"alloc", pool_alloc}, {"trim", pool_trim},
                                       {"alloc_raw", pool_alloc_raw}, {"free_raw", pool_free_raw},
                                       {"buffer", pool_buffer},
                                       {"reset", pool_reset}, {"stats", pool_stats},
                                       {"close", pool_close}, {"time", pool_time},
                                       {"set_time", pool_set_time}, {"advance", pool_advance},
                                       {NULL, NULL}};
    l_newclass(L, L_POOL, meta, methods);
    lua_pushcfunction(L, pool_new);
    lua_setfield(L, -2, "pool");
}
