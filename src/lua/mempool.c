/*
 * mempool.c: CUDA's native stream-ordered pools as cupola.Mempool:
 * cupola.mempool{...}, cupola.mempool.default(), .current(), .set_current(),
 * and cupola.malloc_async, which allocates from the current one.
 *
 * Attributes are fields (p.release_threshold = "256MiB"); the read-only ones
 * raise when assigned.  On the host backend the same calls are served by
 * cupola's own stream-ordered pool with CUDA's documented semantics.
 */
#include <stdlib.h>
#include <string.h>

#include "binding.h"

static const struct {
    const char *name;
    cp_pool_attr attr;
    int writable;
    int boolean;
} attrs[] = {
    {"release_threshold", CP_POOL_RELEASE_THRESHOLD, 1, 0},
    {"reuse_follow_event_dependencies", CP_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES, 1, 1},
    {"reuse_allow_opportunistic", CP_POOL_REUSE_ALLOW_OPPORTUNISTIC, 1, 1},
    {"reuse_allow_internal_dependencies", CP_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES, 1, 1},
    {"reserved_current", CP_POOL_RESERVED_MEM_CURRENT, 0, 0},
    {"reserved_high", CP_POOL_RESERVED_MEM_HIGH, 0, 0},
    {"used_current", CP_POOL_USED_MEM_CURRENT, 0, 0},
    {"used_high", CP_POOL_USED_MEM_HIGH, 0, 0},
};
#define NATTRS (sizeof attrs / sizeof attrs[0])

static l_mempool *tomempool(lua_State *L, int arg)
{
    l_mempool *m = l_udmempool(L, arg);
    if (!m->ref)
        luaL_error(L, "attempt to use a closed " L_MEMPOOL);
    return m;
}

static l_mempool *newmempool(lua_State *L)
{
    l_mempool *m = (l_mempool *)lua_newuserdatauv(L, sizeof *m, 0);
    m->tag = L_TAG(L_T_MEMPOOL);
    m->ref = NULL;
    luaL_setmetatable(L, L_MEMPOOL);
    m->ref = (l_mempoolref *)calloc(1, sizeof *m->ref);
    if (!m->ref)
        luaL_error(L, "cupola.mempool: out of host memory");
    m->ref->refs = 1;
    return m;
}

static int find_attr(const char *k)
{
    size_t i;
    for (i = 0; i < NATTRS; i++)
        if (strcmp(attrs[i].name, k) == 0)
            return (int)i;
    return -1;
}

/* Sets attribute i from the value at validx; what names it in messages
 * ("cupola.mempool: option 'x'" or "cupola.Mempool attribute 'x'"). */
static void set_attr(lua_State *L, l_mempool *m, int i, int validx, const char *what)
{
    uint64_t v;
    if (attrs[i].boolean) {
        if (!lua_isboolean(L, validx))
            luaL_error(L, "%s must be a boolean, not %s", what, l_pushtyped(L, validx));
        v = (uint64_t)lua_toboolean(L, validx);
    } else {
        v = (uint64_t)l_checksize_named(L, validx, what);
    }
    l_check(L, cp_be->mempool_set_attr(m->ref->p, attrs[i].attr, v));
}

/* Option key of the table at 1, one of list: raises naming the option
 * (luaL_checkoption on a field would say "bad argument #-1"). */
static int checkchoice(lua_State *L, const char *key, const char *def, const char *const list[])
{
    const char *v = l_optstring_field(L, 1, key, def);
    int i;
    for (i = 0; list[i]; i++)
        if (strcmp(v, list[i]) == 0)
            return i;
    l_pushcut(L, v, strlen(v));
    return luaL_error(L, "cupola.mempool: invalid option '%s' for '%s' (one of %s, %s)",
                      lua_tostring(L, -1), key, list[0], list[1]);
}

/* The registry slots of each device's default and current pools: light
 * userdata keys, one byte of these arrays per device (cupola.malloc_async
 * reads the current pool on every call; a string key cost an interning of
 * the name and a lookup by it). */
static const char slot_default[CP_MAX_DEVICES], slot_current[CP_MAX_DEVICES];

/* Pushes the slot's value; l_checkdevice and the backends keep dev in
 * 0..CP_MAX_DEVICES-1. */
static int get_slot(lua_State *L, const char *slots, int dev)
{
    luaL_argcheck(L, dev >= 0 && dev < CP_MAX_DEVICES, 1, "device out of range");
    return lua_rawgetp(L, LUA_REGISTRYINDEX, slots + dev);
}

/* Pops the value on top into the slot. */
static void set_slot(lua_State *L, const char *slots, int dev)
{
    luaL_argcheck(L, dev >= 0 && dev < CP_MAX_DEVICES, 1, "device out of range");
    lua_rawsetp(L, LUA_REGISTRYINDEX, slots + dev);
}

/* cupola.mempool{location=, max_size=, release_threshold=, handle=, reuse_*=, device=} */
static int mempool_new(lua_State *L)
{
    static const char *const opts[] = {"location", "max_size", "release_threshold", "handle",
                                       "reuse_follow_event_dependencies", "reuse_allow_opportunistic",
                                       "reuse_allow_internal_dependencies", "device", NULL};
    static const char *const locations[] = {"device", "host", NULL};
    static const char *const handles[] = {"none", "posix_fd", NULL};
    cp_mempool_props props;
    l_mempool *m;
    cp_mempool *p = NULL;
    size_t i;

    if (lua_istable(L, 1) == 0 && !lua_isnoneornil(L, 1))
        l_typeerror(L, 1, "table of options");
    if (lua_isnoneornil(L, 1)) {
        lua_settop(L, 0);
        lua_newtable(L);
    }
    l_checkoptions(L, 1, "cupola.mempool", opts);
    memset(&props, 0, sizeof props);
    props.location_host = checkchoice(L, "location", "device", locations);
    props.handle_posix_fd = checkchoice(L, "handle", "none", handles);
    props.max_size = l_optsize_field(L, 1, "max_size", 0);
    props.device = l_optdevice_field(L, 1, "cupola.mempool");

    m = newmempool(L);
    l_check(L, cp_be->mempool_create(&p, &props));
    m->ref->p = p;
    m->ref->device = props.device;
    m->ref->shareable = props.handle_posix_fd;
    for (i = 0; i < NATTRS; i++) {
        if (!attrs[i].writable)
            continue;
        int top = lua_gettop(L);
        if (lua_getfield(L, 1, attrs[i].name) != LUA_TNIL) {
            const char *what = lua_pushfstring(L, "cupola.mempool: option '%s'", attrs[i].name);
            set_attr(L, m, (int)i, top + 1, what);
        }
        lua_settop(L, top);
    }
    return 1;
}

/* A device's default pool: one Lua object per state and device. */
static void push_default(lua_State *L, int dev)
{
    if (get_slot(L, slot_default, dev) == LUA_TNIL) {
        cp_mempool *p = NULL;
        l_mempool *m;
        lua_pop(L, 1);
        l_check(L, cp_be->mempool_default_on(dev, &p));
        m = newmempool(L);
        m->ref->p = p;
        m->ref->is_default = 1;
        m->ref->device = dev;
        lua_pushvalue(L, -1);
        set_slot(L, slot_default, dev);
    }
}

/* cupola.mempool.default(device) */
static int mempool_default(lua_State *L)
{
    push_default(L, l_optdevice(L, 1));
    return 1;
}

static void push_current(lua_State *L, int dev)
{
    if (get_slot(L, slot_current, dev) == LUA_TNIL) {
        lua_pop(L, 1);
        push_default(L, dev);
    }
}

/* Forgets the registry's current pool of dev (it goes back to the default). */
static void clear_current(lua_State *L, int dev)
{
    lua_pushnil(L);
    set_slot(L, slot_current, dev);
}

static int current_is(lua_State *L, int idx, int dev)
{
    int same;
    get_slot(L, slot_current, dev);
    same = lua_rawequal(L, -1, idx);
    lua_pop(L, 1);
    return same;
}

/* cupola.mempool.current(device) */
static int mempool_current(lua_State *L)
{
    push_current(L, l_optdevice(L, 1));
    return 1;
}

/* cupola.mempool.set_current(p): for p's device */
static int mempool_set_current(lua_State *L)
{
    l_mempool *m = tomempool(L, 1);
    l_check(L, cp_be->mempool_set_current(m->ref->p));
    lua_pushvalue(L, 1);
    set_slot(L, slot_current, m->ref->device);
    return 0;
}

/* Allocates into a new Buffer from m (the Mempool at midx, checked by the
 * caller) on s, the stream argument at sarg (checked by the caller); origin
 * says which API served it. */
static int alloc_into(lua_State *L, l_mempool *m, int midx, size_t n, int sarg, l_streamref *s,
                      l_origin origin)
{
    void *p = NULL;
    int nret;

    luaL_argcheck(L, n > 0, midx == 1 ? 2 : 1, "size must be at least 1 byte, got 0");
    if (m->ref->imported)
        return luaL_error(L, L_MEMPOOL ":alloc: an imported pool cannot allocate (import the "
                             "exporter's buffers with cupola.buffer.import)");
    l_newbuffer(L);
    /* a pool's stream-ordered work on the default stream goes to the pool's
     * device's legacy stream */
    nret = l_alloc_result_info(L,
                               origin == L_FROM_ASYNC
                                   ? cp_be->mem_alloc_async(&p, n, s->s)
                                   : cp_be->mempool_alloc(m->ref->p, &p, n,
                                                          l_devstream(s->s, m->ref->device)),
                               origin == L_FROM_ASYNC ? "cudaMallocAsync" : "cudaMallocFromPoolAsync",
                               n, m->ref->device, m->ref->p);
    if (nret)
        return nret;
    l_buffer_own_mempool(L, -1, p, n, origin, sarg, s, midx, m->ref);
    return 1;
}

/* p:alloc(size, s): cudaMallocFromPoolAsync. */
static int mempool_alloc(lua_State *L)
{
    size_t n;
    l_mempool *m = tomempool(L, 1);
    n = l_checksize(L, 2);
    lua_settop(L, 3); /* index 3 reads nil without a stream, not the new buffer */
    return alloc_into(L, m, 1, n, 3, l_optstream(L, 3), L_FROM_MEMPOOL);
}

/* cupola.malloc_async(size, s): cudaMallocAsync from the current pool of
 * the stream's device. */
static int l_malloc_async(lua_State *L)
{
    size_t n = l_checksize(L, 1);
    l_mempool *m;
    l_streamref *s;
    lua_settop(L, 2);
    s = l_optstream(L, 2);
    push_current(L, cp_be->stream_device(s->s)); /* index 3 */
    /* The registry only ever holds Mempools (set_current checks), so no
     * type check on this hot path; a closed one still raises. */
    m = (l_mempool *)lua_touserdata(L, 3);
    if (!m || !m->ref)
        return luaL_error(L, "attempt to use a closed " L_MEMPOOL);
    return alloc_into(L, m, 3, n, 2, s, L_FROM_ASYNC);
}

static int mempool_trim(lua_State *L)
{
    l_mempool *m = tomempool(L, 1);
    size_t keep = lua_isnoneornil(L, 2) ? 0 : l_checksize(L, 2);
    l_check(L, cp_be->mempool_trim(m->ref->p, keep));
    return 0;
}

static int mempool_reset_high(lua_State *L)
{
    l_mempool *m = tomempool(L, 1);
    l_check(L, cp_be->mempool_set_attr(m->ref->p, CP_POOL_RESERVED_MEM_HIGH, 0));
    l_check(L, cp_be->mempool_set_attr(m->ref->p, CP_POOL_USED_MEM_HIGH, 0));
    return 0;
}

static void push_attr(lua_State *L, l_mempool *m, int i)
{
    uint64_t v = 0;
    l_check(L, cp_be->mempool_get_attr(m->ref->p, attrs[i].attr, &v));
    if (attrs[i].boolean)
        lua_pushboolean(L, v != 0);
    else
        lua_pushinteger(L, (lua_Integer)v);
}

/* p:stats() -> every attribute in one table. */
static int mempool_stats(lua_State *L)
{
    l_mempool *m = tomempool(L, 1);
    size_t i;
    lua_createtable(L, 0, NATTRS + 1);
    for (i = 0; i < NATTRS; i++) {
        push_attr(L, m, (int)i);
        lua_setfield(L, -2, attrs[i].name);
    }
    lua_pushinteger(L, m->ref->live);
    lua_setfield(L, -2, "live_buffers");
    return 1;
}

/* p:close(): refuses while buffers are live.  The default pool is the
 * device's, as cupola.default_stream is: close() on it does nothing (the
 * contract makes close() safe on every handle, and closing this handle
 * would leave the state without the device's pool). */
static int mempool_close(lua_State *L)
{
    l_mempool *m = l_udmempool(L, 1);
    if (!m->ref || m->ref->is_default)
        return 0;
    if (m->ref->live > 0)
        return luaL_error(L, L_MEMPOOL ":close: the pool has %d live buffer%s; free them first",
                          m->ref->live, m->ref->live == 1 ? "" : "s");
    /* A pool being destroyed must not stay the device's current one. */
    if (current_is(L, 1, m->ref->device)) {
        push_default(L, m->ref->device);
        l_check(L, cp_be->mempool_set_current(tomempool(L, -1)->ref->p));
        clear_current(L, m->ref->device);
    }
    l_mempoolref_release(m->ref);
    m->ref = NULL;
    return 0;
}

/* __gc: the pool lives on while buffers need it (they hold references). */
static int mempool_gc(lua_State *L)
{
    l_mempool *m = l_udmempool(L, 1);
    if (m->ref) {
        l_mempoolref_release(m->ref);
        m->ref = NULL;
    }
    return 0;
}

/* __close: like __gc (buffers keep the pool alive), except that a handle
 * leaving a scope may still be named by the registry.  The device's default
 * pool is never released by a scope (`local m <close> =
 * cupola.mempool.default()` would otherwise leave the state with a closed
 * default, and malloc_async broken); a current pool stops being current. */
static int mempool_tbc(lua_State *L)
{
    l_mempool *m = l_udmempool(L, 1);
    if (!m->ref || m->ref->is_default)
        return 0;
    if (current_is(L, 1, m->ref->device)) {
        push_default(L, m->ref->device);
        cp_be->mempool_set_current(tomempool(L, -1)->ref->p); /* best effort */
        clear_current(L, m->ref->device);
    }
    return mempool_gc(L);
}

static int mempool_index(lua_State *L)
{
    l_mempool *m = l_udmempool(L, 1);
    const char *k = l_checkstring(L, 2);
    int i;
    if (l_getmethod(L, 1, k))
        return 1;
    if (strcmp(k, "closed") == 0) {
        lua_pushboolean(L, m->ref == NULL);
        return 1;
    }
    if (strcmp(k, "device") == 0 && m->ref) {
        lua_pushinteger(L, m->ref->device);
        return 1;
    }
    if (strcmp(k, "imported") == 0 && m->ref) {
        lua_pushboolean(L, m->ref->imported);
        return 1;
    }
    if (strcmp(k, "shareable") == 0 && m->ref) {
        lua_pushboolean(L, m->ref->shareable);
        return 1;
    }
    if ((i = find_attr(k)) < 0) {
        lua_pushnil(L);
        return 1;
    }
    push_attr(L, tomempool(L, 1), i);
    return 1;
}

static int mempool_newindex(lua_State *L)
{
    l_mempool *m = tomempool(L, 1);
    const char *k = l_checkstring(L, 2);
    int i = find_attr(k);
    if (i < 0)
        return luaL_error(L, L_MEMPOOL " has no attribute '%s'", k);
    if (!attrs[i].writable)
        return luaL_error(L, L_MEMPOOL " attribute '%s' is read-only%s", k,
                          strstr(k, "_high") ? " (use reset_high())" : "");
    set_attr(L, m, i, 3, lua_pushfstring(L, L_MEMPOOL " attribute '%s'", k));
    return 0;
}

static int mempool_tostring(lua_State *L)
{
    l_mempool *m = l_udmempool(L, 1);
    if (!m->ref)
        lua_pushliteral(L, L_MEMPOOL " (closed)");
    else
        lua_pushfstring(L, L_MEMPOOL " (%s, %d live)", m->ref->is_default ? "default" : "custom",
                        m->ref->live);
    return 1;
}

static const char *const access_names[] = {"none", "r", "rw", NULL};

/* mp:set_access(device, "rw"|"r"|"none"): cudaMemPoolSetAccess */
static int mempool_set_access(lua_State *L)
{
    l_mempool *m = tomempool(L, 1);
    int dev = l_checkdevice(L, 2);
    int a = (l_checkstring(L, 3), luaL_checkoption(L, 3, NULL, access_names));
    if (dev == m->ref->device && a != CP_ACCESS_READWRITE)
        return luaL_argerror(L, 3, lua_pushfstring(L, "the pool's own device (%d) always has "
                                                      "read-write access", dev));
    l_check(L, cp_be->mempool_set_access(m->ref->p, dev, (cp_access)a));
    lua_settop(L, 1);
    return 1;
}

/* mp:access(device) -> "rw" | "r" | "none": cudaMemPoolGetAccess */
static int mempool_access(lua_State *L)
{
    l_mempool *m = tomempool(L, 1);
    int dev = l_checkdevice(L, 2);
    cp_access a = CP_ACCESS_NONE;
    l_check(L, cp_be->mempool_get_access(m->ref->p, dev, &a));
    lua_pushstring(L, access_names[a]);
    return 1;
}

static int mempool_call(lua_State *L)
{
    lua_remove(L, 1); /* the cupola.mempool table */
    return mempool_new(L);
}

void l_open_mempool(lua_State *L)
{
    static const luaL_Reg meta[] = {{"__gc", mempool_gc},         {"__close", mempool_tbc},
                                    {"__index", mempool_index},   {"__newindex", mempool_newindex},
                                    {"__tostring", mempool_tostring}, {NULL, NULL}};
    static const luaL_Reg methods[] = {{"alloc", mempool_alloc},   {"trim", mempool_trim},
                                       {"reset_high", mempool_reset_high},
                                       {"stats", mempool_stats},   {"close", mempool_close},
                                       {"set_access", mempool_set_access},
                                       {"access", mempool_access},
                                       {NULL, NULL}};
    static const luaL_Reg funcs[] = {{"default", mempool_default},
                                     {"current", mempool_current},
                                     {"set_current", mempool_set_current},
                                     {"new", mempool_new},
                                     {NULL, NULL}};
    l_newclass(L, L_MEMPOOL, meta, methods);

    luaL_newlib(L, funcs);
    lua_newtable(L);
    lua_pushcfunction(L, mempool_call);
    lua_setfield(L, -2, "__call");
    lua_setmetatable(L, -2);
    lua_setfield(L, -2, "mempool");

    l_pushcfunction(L, l_malloc_async);
    lua_setfield(L, -2, "malloc_async");
}
