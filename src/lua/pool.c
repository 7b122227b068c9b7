/*
 * pool.c: cupola.Pool, the allocators written in C (resource.h):
 * cupola.pool{kind=, upstream=, initial=, grow=, max=, alignment=,
 * release_threshold=, reuse=, fallback=, limit=, log=, clock=}, and the user's own
 * allocators: kind = "plugin" with path= or source=, symbol=, options=.
 *
 * The pool is reference counted (l_poolref): the Lua handle and each live
 * buffer hold a reference, so a pool collected in the same cycle as its
 * buffers is destroyed only after the last of them has given its block back.
 * Raw blocks (p:alloc_raw, p:free_raw, p:buffer: "raw blocks" below) hold
 * none: they are freed when the handle goes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "binding.h"
#include "kernel/compile.h"
#include "pool/cupy.h"
#include "pool/model.h"
#include "pool/plugin.h"
#include "pool/torch.h"

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

/* kind = "plugin": path (read through the registry) or source, which is
 * compiled into a path here; symbol.  Strings stay on the stack (or in the
 * option table) until cp_pool_create has returned. */
static void plugin_source(lua_State *L, l_pool *p)
{
    cp_plugin_opts *po = (cp_plugin_opts *)cp_pool_own(&p->opts);
    size_t len = 0;
    const char *source = NULL;

    if (lua_getfield(L, 1, "source") != LUA_TNIL) {
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "cupola.pool: option 'source' must be a string (C source), not %s",
                       l_pushtyped(L, -1));
        source = lua_tolstring(L, -1, &len);
    }
    lua_pop(L, 1);
    if (!po->path == !source)
        luaL_error(L, "cupola.pool: kind 'plugin' needs exactly one of 'path' and 'source'");
    if (!po->symbol)
        luaL_error(L, "cupola.pool: kind 'plugin' needs option 'symbol' (the name of the "
                      "exported const cupola_allocator)");
    if (source)
        po->path = compile_source(L, source, len); /* leaves the path on the stack */
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
    if (strcmp(p->kind, "torch") == 0) {
        const cp_torch_opts *to = (const cp_torch_opts *)cp_pool_own_const(&p->opts);
        lua_pushstring(L, to->conf ? to->conf : "");
        lua_setfield(L, -2, "conf");
    }
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
    l_pool *p;
    cp_resource *r = NULL, *outer;
    size_t limit;
    const char *log;
    int ud;

    if (lua_isnoneornil(L, 1)) {
        lua_settop(L, 0);
        lua_newtable(L);
    }
    l_checktable(L, 1);
    p = (l_pool *)lua_newuserdatauv(L, sizeof *p, 0);
    memset(p, 0, sizeof *p);
    p->tag = L_TAG(L_T_POOL);
    luaL_setmetatable(L, L_POOL);
    ud = lua_gettop(L);

    p->kind = l_pool_opts(L, 1, &p->opts)->name;
    limit = 0;
    if (lua_getfield(L, 1, "limit") != LUA_TNIL)
        limit = l_checksize_named(L, lua_gettop(L), "cupola.pool: option 'limit'");
    lua_pop(L, 1);
    log = l_optstring_field(L, 1, "log", NULL);
    if (strcmp(p->kind, "plugin") == 0)
        plugin_source(L, p);

    p->ref = (l_poolref *)calloc(1, sizeof *p->ref);
    if (!p->ref)
        return luaL_error(L, "cupola.pool: out of host memory");
    p->ref->refs = 1;
    p->ref->has_memory = p->opts.upstream != CP_UP_VIRTUAL;
    p->ref->device = p->opts.device;
    {
        int nret = l_alloc_result_info(L, cp_pool_create(&r, &p->opts), p->kind, p->opts.initial,
                                       p->opts.device, NULL);
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
    /* the model's strings pointed into the option table (or the stack) */
    memset(&p->opts.own, 0, sizeof p->opts.own);
    p->opts.own_kind = NULL;
    return 1;
}

/* PyTorch's counters under torch.cuda.memory_stats()'s names ("stat.type.
 * metric" flattened to stat_type_metric: allocated_bytes_all_peak, ...), the
 * counters by their own names, and the usual short ones. */
static void push_torch_stats(lua_State *L, cp_torch *t)
{
    static const char *const types[] = {"all", "small_pool", "large_pool"};
    cp_torch_stats st;
    char key[64];
    int k;
    cp_torch_get_stats(t, &st);
#define STAT(name, arr)                                                              \
    for (k = 0; k < 3; k++) {                                                        \
        snprintf(key, sizeof key, "%s.%s.current", name, types[k]);                \
        lua_pushinteger(L, (lua_Integer)arr[k].current);                             \
        lua_setfield(L, -2, key);                                                    \
        snprintf(key, sizeof key, "%s.%s.peak", name, types[k]);                   \
        lua_pushinteger(L, (lua_Integer)arr[k].peak);                                \
        lua_setfield(L, -2, key);                                                    \
        snprintf(key, sizeof key, "%s.%s.allocated", name, types[k]);              \
        lua_pushinteger(L, (lua_Integer)arr[k].allocated);                           \
        lua_setfield(L, -2, key);                                                    \
        snprintf(key, sizeof key, "%s.%s.freed", name, types[k]);                  \
        lua_pushinteger(L, (lua_Integer)arr[k].freed);                               \
        lua_setfield(L, -2, key);                                                    \
    }
    STAT("allocation", st.allocation);
    STAT("segment", st.segment);
    STAT("active", st.active);
    STAT("inactive_split", st.inactive_split);
    STAT("allocated_bytes", st.allocated_bytes);
    STAT("reserved_bytes", st.reserved_bytes);
    STAT("active_bytes", st.active_bytes);
    STAT("inactive_split_bytes", st.inactive_split_bytes);
    STAT("requested_bytes", st.requested_bytes);
#undef STAT
#define ONE(name, s)                                               \
    lua_pushinteger(L, (lua_Integer)(s).current);                  \
    lua_setfield(L, -2, name ".current");                          \
    lua_pushinteger(L, (lua_Integer)(s).peak);                     \
    lua_setfield(L, -2, name ".peak");                             \
    lua_pushinteger(L, (lua_Integer)(s).allocated);                \
    lua_setfield(L, -2, name ".allocated");                        \
    lua_pushinteger(L, (lua_Integer)(s).freed);                    \
    lua_setfield(L, -2, name ".freed")
    ONE("oversize_allocations", st.oversize_allocations);
    ONE("oversize_segments", st.oversize_segments);
#undef ONE
#define CNT(name)                                  \
    lua_pushinteger(L, (lua_Integer)st.name);      \
    lua_setfield(L, -2, #name)
    CNT(num_alloc_retries);
    CNT(num_ooms);
    CNT(num_sync_all_streams);
    CNT(num_device_alloc);
    CNT(num_device_free);
#undef CNT
    /* the figures scripts ask for most, under short names: all pools' */
#define SHORT(name, arr)                                 \
    lua_pushinteger(L, (lua_Integer)arr[0].current);     \
    lua_setfield(L, -2, name);                           \
    lua_pushinteger(L, (lua_Integer)arr[0].peak);        \
    lua_setfield(L, -2, name "_peak")
    SHORT("allocated_bytes", st.allocated_bytes);
    SHORT("reserved_bytes", st.reserved_bytes);
    SHORT("active_bytes", st.active_bytes);
    SHORT("requested_bytes", st.requested_bytes);
#undef SHORT
    lua_pushinteger(L, (lua_Integer)st.oversize_allocations.current);
    lua_setfield(L, -2, "oversize_allocations");
    lua_pushinteger(L, (lua_Integer)st.oversize_segments.current);
    lua_setfield(L, -2, "oversize_segments");
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

/* cupola.core._pair_repeat(p, n, size, s) -> seconds: n alloc+free pairs of p
 * from C, inside this Lua process: for bench/speed.lua, which sets the raw
 * pair's binding apart from the pool's own work as the caller's caches and
 * branch history leave it. */
static int pair_repeat(lua_State *L)
{
    l_pool *p = topool(L, 1);
    lua_Integer n = l_checkinteger(L, 2), i;
    size_t size = l_checksize(L, 3);
    l_streamref *s = l_optstream(L, 4);
    struct timespec t0, t1;
    luaL_argcheck(L, size > 0, 3, "size must be at least 1 byte, got 0");
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (i = 0; i < n; i++) {
        void *ptr = NULL;
        l_check(L, cp_resource_alloc(p->ref->r, size, s->s, &ptr));
        l_check(L, cp_resource_free(p->ref->r, ptr, size, s->s));
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    lua_pushnumber(L, (lua_Number)(t1.tv_sec - t0.tv_sec) + (lua_Number)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return 1;
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
    SETI(device_allocs);
    SETI(device_frees);
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
    if (cp_torch_of(p->ref->r))
        push_torch_stats(L, cp_torch_of(p->ref->r));
    return 1;
}

/* p:empty_cache(): torch.cuda.empty_cache() (kind "torch"). */
static int pool_empty_cache(lua_State *L)
{
    l_pool *p = topool(L, 1);
    if (!cp_torch_of(p->ref->r))
        return luaL_error(L, L_POOL ":empty_cache: only pools of kind 'torch' have it (this one "
                             "is '%s'; trim(0) returns what any pool caches)", p->kind);
    l_check(L, cp_resource_trim(p->ref->r, 0));
    return 0;
}

/* p:free_all_blocks(): CuPy's MemoryPool.free_all_blocks() (kind "cupy"):
 * every free chunk that is a whole cudaMalloc block goes back; returns the
 * bytes given back (CuPy returns nothing). */
static int pool_free_all_blocks(lua_State *L)
{
    l_pool *p = topool(L, 1);
    cp_cupy *m = cp_cupy_of(p->ref->r);
    uint64_t freed;
    if (!m)
        return luaL_error(L, L_POOL ":free_all_blocks: only pools of kind 'cupy' have it (this "
                             "one is '%s'; trim(0) returns what any pool caches)", p->kind);
    cp_resource_lock(p->ref->r);
    freed = cp_cupy_free_all_blocks(m, 1, 0);
    cp_resource_unlock(p->ref->r);
    lua_pushinteger(L, (lua_Integer)freed);
    return 1;
}

/* p:settings(): PyTorch's allocator_settings, as its snapshots report them,
 * with the conf string and the host-side keys named. */
static int pool_settings(lua_State *L)
{
    l_pool *p = topool(L, 1);
    cp_torch *t = cp_torch_of(p->ref->r);
    const cp_torch_conf *c;
    char buf[1024];
    int i;
    if (!t)
        return luaL_error(L, L_POOL ":settings: only pools of kind 'torch' have it (this one "
                             "is '%s')", p->kind);
    c = cp_torch_get_conf(t);
    lua_createtable(L, 0, 16);
    lua_getfield(L, 1, "conf"); /* as given (the pool's field) */
    lua_setfield(L, -2, "PYTORCH_CUDA_ALLOC_CONF");
    cp_torch_conf_format(c, buf, sizeof buf);
    lua_pushstring(L, buf);
    lua_setfield(L, -2, "conf");
    lua_pushinteger(L, c->max_split_size == CP_TORCH_NO_SPLIT_LIMIT
                           ? -1 : (lua_Integer)c->max_split_size);
    lua_setfield(L, -2, "max_split_size");
    lua_pushinteger(L, (lua_Integer)c->max_non_split_rounding);
    lua_setfield(L, -2, "max_non_split_rounding");
    lua_pushinteger(L, (lua_Integer)c->large_segment_size);
    lua_setfield(L, -2, "large_segment_size");
    lua_pushnumber(L, c->gc_threshold);
    lua_setfield(L, -2, "garbage_collection_threshold");
    lua_pushboolean(L, c->expandable_segments);
    lua_setfield(L, -2, "expandable_segments");
    lua_pushboolean(L, c->release_lock_on_cudamalloc);
    lua_setfield(L, -2, "release_lock_on_cudamalloc");
    lua_pushboolean(L, c->graph_capture_record_stream_reuse);
    lua_setfield(L, -2, "graph_capture_record_stream_reuse");
    lua_pushnumber(L, c->memory_fraction);
    lua_setfield(L, -2, "per_process_memory_fraction");
    lua_createtable(L, 0, 16);
    for (i = 0; i < 16; i++) {
        char key[8];
        snprintf(key, sizeof key, "%d", 1 << i);
        lua_pushinteger(L, (lua_Integer)c->roundup_divisions[i]);
        lua_setfield(L, -2, key);
    }
    lua_setfield(L, -2, "roundup_power2_divisions");
    lua_pushinteger(L, (lua_Integer)cp_torch_limit(t));
    lua_setfield(L, -2, "limit");
    lua_pushinteger(L, (lua_Integer)cp_torch_device_memory(t));
    lua_setfield(L, -2, "device_memory");
    /* the pinned-memory (host) allocator's keys: read, not modelled */
    lua_createtable(L, 0, 4);
    for (i = 0; cp_torch_host_keys[i]; i++) {
        if (!(c->host_keys & (1u << i)))
            continue;
        if (i == 0)
            lua_pushboolean(L, c->pinned_use_host_register);
        else if (i == 1)
            lua_pushinteger(L, (lua_Integer)c->pinned_num_register_threads);
        else if (i == 2)
            lua_pushboolean(L, c->pinned_use_background_threads);
        else
            lua_pushinteger(L, (lua_Integer)c->pinned_reserve_segment_size_mb);
        lua_setfield(L, -2, cp_torch_host_keys[i]);
    }
    lua_setfield(L, -2, "host_side");
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
    static const luaL_Reg methods[] = {{"alloc", pool_alloc},
                                       {"alloc_raw", pool_alloc_raw},
                                       {"free_raw", pool_free_raw},
                                       {"buffer", pool_buffer},
                                       {"trim", pool_trim},
                                       {"free_all_blocks", pool_free_all_blocks},
                                       {"reset", pool_reset},
                                       {"stats", pool_stats},
                                       {"empty_cache", pool_empty_cache},
                                       {"settings", pool_settings},
                                       {"close", pool_close},
                                       {"time", pool_time},
                                       {"set_time", pool_set_time},
                                       {"advance", pool_advance},
                                       {NULL, NULL}};
    l_newclass(L, L_POOL, meta, methods);
    lua_pushcfunction(L, pool_new);
    lua_setfield(L, -2, "pool");
    l_open_pool_kinds(L);
    lua_pushcfunction(L, pair_repeat);
    lua_setfield(L, -2, "_pair_repeat");
}
