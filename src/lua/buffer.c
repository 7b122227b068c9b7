/*
 * buffer.c: cupola.Buffer, the one type every allocator returns, and
 * cupola.malloc.
 *
 * A buffer is ordered on a stream (b.stream) and came from somewhere
 * (b.pool: a Mempool, a Pool, or nil for malloc).  It holds a reference to
 * both, so its stream-ordered free can always run, even from a finalizer
 * that runs after its pool's or stream's.
 *
 * Finalizers never synchronize the device.  For malloc'd buffers that rules
 * out cudaFree (it synchronizes), so a collected malloc buffer is parked with
 * an event recorded on its stream and really freed at the next point where
 * the user already accepted a synchronization: cupola.malloc, a malloc
 * buffer's explicit free, cupola.synchronize, or the Lua state's close.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ipc.h"
#include "binding.h"

/* ---- the graveyard of collected malloc buffers (process-wide: a buffer
 * may be collected in any Lua state of the process) ---- */

typedef struct grave {
    void *ptr;
    cp_event *done; /* recorded on the buffer's stream; NULL: free on force */
    int dev;        /* whose memory */
    int ipc;        /* opened from another process: close the mapping */
    size_t size;
    struct grave *next;
} grave;

static pthread_mutex_t graveyard_lock = PTHREAD_MUTEX_INITIALIZER;
static grave *graveyard = NULL;

static void graveyard_add(void *ptr, cp_stream *s, int dev, int ipc, size_t size)
{
    grave *g = (grave *)malloc(sizeof *g);
    cp_event *e = NULL;
    if (!g) {
        /* No host memory for bookkeeping: leaking device memory is better
         * than a synchronizing free inside a finalizer. */
        return;
    }
    if (cp_be->event_create(&e, 0) == CP_OK && cp_be->event_record(e, s) != CP_OK) {
        cp_be->event_destroy(e);
        e = NULL;
    }
    g->ptr = ptr;
    g->done = e;
    g->dev = dev;
    g->ipc = ipc;
    g->size = size;
    pthread_mutex_lock(&graveyard_lock);
    g->next = graveyard;
    graveyard = g;
    pthread_mutex_unlock(&graveyard_lock);
}

/* Frees the parked buffers whose work has completed (all of them if force).
 * Called only where a device synchronization is already expected. */
void l_graveyard_reap(int force);
void l_graveyard_reap(int force)
{
    grave **pp, *g, *ready = NULL;

    pthread_mutex_lock(&graveyard_lock);
    pp = &graveyard;
    while ((g = *pp) != NULL) {
        int done = force;
        if (!done && g->done)
            cp_be->event_query(g->done, &done);
        if (done) {
            *pp = g->next;
            g->next = ready;
            ready = g;
        } else {
            pp = &g->next;
        }
    }
    pthread_mutex_unlock(&graveyard_lock);
    while ((g = ready) != NULL) {
        ready = g->next;
        if (g->ipc)
            cp_be->ipc_close_handle(g->ptr, g->size);
        else
            cp_be->mem_free_on(g->dev, g->ptr, CP_MEM_DEVICE);
        if (g->done)
            cp_be->event_destroy(g->done);
        free(g);
    }
}

/* ---- buffers ---- */

static const char *const origin_names[] = {"malloc", "malloc_async", "mempool", "pool", "ipc"};

l_buffer *l_newbuffer(lua_State *L)
{
    l_buffer *b = (l_buffer *)lua_newuserdatauv(L, sizeof *b, 2);
    memset(b, 0, sizeof *b);
    b->tag = L_TAG(L_T_BUFFER);
    /* From the caller's upvalue when it has one: no registry lookup. */
    lua_pushvalue(L, L_UP_BUFFER);
    if (lua_type(L, -1) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_rawgetp(L, LUA_REGISTRYINDEX, &l_key_buffer);
    }
    lua_setmetatable(L, -2);
    return b;
}

/* ---- what a buffer owns ----
 * Every Buffer is made alike: l_newbuffer pushes it released, before the
 * memory is had (an error then leaves nothing behind), and one l_buffer_own*
 * call hands it the memory and takes every reference it keeps: its stream,
 * and its pool (the Lua object as a user value, the C owner counted).
 * buffer_release below gives all of them back. */

static l_buffer *own(lua_State *L, int idx, void *p, size_t size, l_origin origin, int dev,
                     int stream_idx, l_streamref *sref)
{
    l_buffer *b = (l_buffer *)lua_touserdata(L, idx);
    /* The default stream stays nil (l_pushbufferstream): its reference is
     * the only one without a C stream, whether it was given or not. */
    if (stream_idx != 0 && sref->s != NULL) {
        lua_pushvalue(L, stream_idx);
        lua_setiuservalue(L, idx, L_UV_STREAM);
    }
    b->ptr = p;
    b->size = size;
    b->origin = origin;
    b->device = dev;
    b->stream = sref;
    l_streamref_retain(sref);
    return b;
}

/* own() for a block of a pool: the pool's Lua object (at pool_idx) becomes
 * b.pool and its C owner counts one more reference and one more live buffer. */
static l_buffer *own_pooled(lua_State *L, int idx, void *p, size_t size, l_origin origin, int dev,
                            int stream_idx, l_streamref *sref, int pool_idx, int *refs, int *live)
{
    l_buffer *b;
    idx = lua_absindex(L, idx);
    pool_idx = lua_absindex(L, pool_idx);
    b = own(L, idx, p, size, origin, dev, stream_idx, sref);
    lua_pushvalue(L, pool_idx);
    lua_setiuservalue(L, idx, L_UV_POOL);
    ++*refs;
    ++*live;
    return b;
}

void l_buffer_own(lua_State *L, int idx, void *p, size_t size, l_origin origin, int dev,
                  int stream_idx, l_streamref *sref)
{
    own(L, lua_absindex(L, idx), p, size, origin, dev, stream_idx, sref);
}

void l_buffer_own_mempool(lua_State *L, int idx, void *p, size_t size, l_origin origin,
                          int stream_idx, l_streamref *sref, int pool_idx, l_mempoolref *r)
{
    own_pooled(L, idx, p, size, origin, r->device, stream_idx, sref, pool_idx, &r->refs, &r->live)
        ->mempool = r;
}

void l_buffer_own_pool(lua_State *L, int idx, void *p, size_t size, int stream_idx,
                       l_streamref *sref, int pool_idx, l_poolref *r)
{
    l_buffer *b = own_pooled(L, idx, p, size, L_FROM_POOL, r->device, stream_idx, sref, pool_idx,
                             &r->refs, &r->live);
    b->pool = r;
    b->generation = r->generation;
}

/* Is the buffer still holding memory?  A pool's reset() frees its blocks
 * behind the buffers' backs; the generation tells. */
int l_buffer_live(const l_buffer *b)
{
    if (!b->ptr)
        return 0;
    if (b->origin == L_FROM_POOL && b->pool->generation != b->generation)
        return 0;
    return 1;
}

void l_pushbufferstream(lua_State *L, int idx)
{
    if (lua_getiuservalue(L, idx, L_UV_STREAM) == LUA_TNIL) {
        lua_pop(L, 1);
        lua_getfield(L, LUA_REGISTRYINDEX, "cupola.default_stream");
    }
}

l_buffer *l_checkbuffer(lua_State *L, int arg)
{
    l_buffer *b = l_udbuffer(L, arg);
    if (!l_buffer_live(b)) {
        /* "closed" as every handle says; "freed" because that is what a
         * buffer's close does, and what the user did */
        if (b->ptr)
            luaL_error(L, "attempt to use a closed " L_BUFFER ": it was freed by its pool's reset()");
        luaL_error(L, "attempt to use a closed " L_BUFFER
                      ": it was freed (free(), close() or the end of its <close> scope)");
    }
    return b;
}

void l_checkmemory(lua_State *L, l_buffer *b, int arg)
{
    if (b->origin == L_FROM_POOL && !b->pool->has_memory)
        luaL_argerror(L, arg, "buffer has no memory behind it (virtual upstream)");
}

/* Gives the memory back, stream-ordered on s.  from_gc: inside a finalizer,
 * where nothing may synchronize the device.  Always leaves the buffer freed;
 * returns the backend's status for the caller to raise. */
static cp_status buffer_release(l_buffer *b, l_streamref *s, int from_gc)
{
    cp_status st = CP_OK;
    cp_stream *ds;
    if (!b->ptr)
        return CP_OK;
    ds = l_devstream(s->s, b->device);
    if (b->server) { /* the export stops with the memory */
        cp_ipc_server_stop(b->server);
        b->server = NULL;
    }
    switch (b->origin) {
    case L_FROM_MALLOC:
    case L_FROM_IPC:
        if (from_gc) {
            graveyard_add(b->ptr, ds, b->device, b->origin == L_FROM_IPC, b->size);
        } else {
            l_graveyard_reap(0);
            st = b->origin == L_FROM_IPC ? cp_be->ipc_close_handle(b->ptr, b->size)
                                         : cp_be->mem_free_on(b->device, b->ptr, CP_MEM_DEVICE);
        }
        break;
    case L_FROM_ASYNC:
    case L_FROM_MEMPOOL:
        st = cp_be->mem_free_async(b->ptr, ds);
        b->mempool->live--;
        l_mempoolref_release(b->mempool);
        b->mempool = NULL;
        break;
    case L_FROM_POOL:
        if (b->pool->generation == b->generation) {
            st = cp_resource_free(b->pool->r, b->ptr, b->size, s->s);
            b->pool->live--;
        }
        l_poolref_release(b->pool);
        b->pool = NULL;
        break;
    }
    b->ptr = NULL;
    l_streamref_release(b->stream);
    b->stream = NULL;
    return st;
}

/* __gc and __close: never raise, never synchronize. */
static int buffer_gc(lua_State *L)
{
    l_buffer *b = l_udbuffer(L, 1);
    if (b->ptr)
        buffer_release(b, b->stream, 1);
    return 0;
}

/* b:close(): the same release as b:free() on the buffer's own stream, but
 * safe to call twice. */
static int buffer_close(lua_State *L)
{
    l_buffer *b = l_udbuffer(L, 1);
    if (b->ptr)
        l_check(L, buffer_release(b, b->stream, 0));
    return 0;
}

/* b:free(s): stream-ordered on s (default: the buffer's stream).  A second
 * free is a double free, which is misuse and raises; so is a free after the
 * pool's reset() freed the block (its references are dropped first, as
 * close() would). */
static int buffer_free(lua_State *L)
{
    l_buffer *b = l_udbuffer(L, 1);
    l_streamref *s;
    if (!l_buffer_live(b)) {
        if (b->ptr) {
            buffer_release(b, b->stream, 0);
            return luaL_error(L, L_BUFFER ":free: double free (the buffer was freed by its pool's "
                                 "reset())");
        }
        return luaL_error(L, L_BUFFER ":free: double free (the buffer was already freed)");
    }
    s = lua_isnoneornil(L, 2) ? b->stream : l_optstream(L, 2);
    l_check(L, buffer_release(b, s, 0));
    return 0;
}

/* The stream an operation is ordered on: the argument, else b.stream. */
static cp_stream *opstream(lua_State *L, l_buffer *b, int arg)
{
    return l_devstream(lua_isnoneornil(L, arg) ? b->stream->s : l_optstream(L, arg)->s, b->device);
}

static size_t checkoffset(lua_State *L, int arg, size_t limit)
{
    lua_Integer off = l_optinteger(L, arg, 0);
    if (off < 0 || (uint64_t)off > (uint64_t)limit)
        luaL_argerror(L, arg, lua_pushfstring(L, "offset %I out of range 0..%I", off,
                                              (lua_Integer)limit));
    return (size_t)off;
}

/* b:read(offset, len, s) -> string, as the bytes are after the work queued
 * before it on s. */
static int buffer_read(lua_State *L)
{
    l_buffer *b = l_checkbuffer(L, 1);
    size_t off = checkoffset(L, 2, b->size);
    lua_Integer len = l_optinteger(L, 3, (lua_Integer)(b->size - off));
    cp_stream *s = opstream(L, b, 4);
    luaL_Buffer out;
    char *dst;

    l_checkmemory(L, b, 1);
    if (len < 0 || (uint64_t)len > (uint64_t)(b->size - off))
        return luaL_argerror(L, 3, lua_pushfstring(L, "length %I runs past the end of a %I-byte buffer",
                                                    len, (lua_Integer)b->size));
    /* The Lua buffer box is collected if the copy raises. */
    dst = luaL_buffinitsize(L, &out, (size_t)len);
    if (len > 0) {
        l_check(L, cp_be->memcpy_async(dst, (const char *)b->ptr + off, (size_t)len, s));
        l_check(L, cp_be->stream_synchronize(s));
    }
    luaL_pushresultsize(&out, (size_t)len);
    return 1;
}

/* b:write(string, offset, s) -> b */
static int buffer_write(lua_State *L)
{
    l_buffer *b = l_checkbuffer(L, 1);
    size_t n;
    const char *src = l_checklstring(L, 2, &n);
    size_t off = checkoffset(L, 3, b->size);
    cp_stream *s = opstream(L, b, 4);

    l_checkmemory(L, b, 1);
    if (n > b->size - off)
        return luaL_argerror(L, 2, lua_pushfstring(L, "%I bytes at offset %I run past the end of a %I-byte buffer",
                                                    (lua_Integer)n, (lua_Integer)off, (lua_Integer)b->size));
    /* A copy from pageable memory returns once the source has been consumed,
     * so the Lua string may go away after this. */
    if (n > 0)
        l_check(L, cp_be->memcpy_async((char *)b->ptr + off, src, n, s));
    lua_settop(L, 1);
    return 1;
}

/* b:memset(byte, s) -> b */
static int buffer_memset(lua_State *L)
{
    l_buffer *b = l_checkbuffer(L, 1);
    lua_Integer v = l_checkinteger(L, 2);
    cp_stream *s = opstream(L, b, 3);
    l_checkmemory(L, b, 1);
    if (v < 0 || v > 255)
        luaL_argerror(L, 2, lua_pushfstring(L, "byte must be in 0..255, got %I", (LUAI_UACINT)v));
    l_check(L, cp_be->memset_async(b->ptr, (int)v, b->size, s));
    lua_settop(L, 1);
    return 1;
}

/* b:copy_to(dst, s) -> dst: all of b into the start of dst. */
static int buffer_copy_to(lua_State *L)
{
    l_buffer *b = l_checkbuffer(L, 1);
    l_buffer *d = l_checkbuffer(L, 2);
    cp_stream *s = opstream(L, b, 3);
    l_checkmemory(L, b, 1);
    l_checkmemory(L, d, 2);
    if (d->size < b->size)
        return luaL_argerror(L, 2, lua_pushfstring(L, "destination holds %I bytes, source has %I",
                                                    (lua_Integer)d->size, (lua_Integer)b->size));
    /* Across devices: a peer copy (cudaMemcpyPeerAsync), on the stream's device */
    if (d->device != b->device)
        l_check(L, cp_be->memcpy_peer_async(d->ptr, d->device, b->ptr, b->device, b->size, s));
    else
        l_check(L, cp_be->memcpy_async(d->ptr, b->ptr, b->size, s));
    lua_settop(L, 2);
    return 1;
}

static int buffer_index(lua_State *L)
{
    l_buffer *b;
    const char *k;
    if (l_index_method(L))
        return 1;
    b = l_udbuffer(L, 1);
    k = l_checkstring(L, 2);
    if (strcmp(k, "size") == 0)
        lua_pushinteger(L, (lua_Integer)b->size);
    else if (strcmp(k, "address") == 0)
        lua_pushinteger(L, (lua_Integer)(uintptr_t)(l_buffer_live(b) ? b->ptr : NULL));
    else if (strcmp(k, "stream") == 0)
        l_pushbufferstream(L, 1);
    else if (strcmp(k, "pool") == 0)
        lua_getiuservalue(L, 1, L_UV_POOL);
    else if (strcmp(k, "origin") == 0)
        lua_pushstring(L, origin_names[b->origin]);
    else if (strcmp(k, "freed") == 0)
        lua_pushboolean(L, !l_buffer_live(b));
    else if (strcmp(k, "device") == 0)
        lua_pushinteger(L, b->device);
    else
        lua_pushnil(L);
    return 1;
}

static int buffer_tostring(lua_State *L)
{
    l_buffer *b = l_udbuffer(L, 1);
    if (!l_buffer_live(b))
        lua_pushliteral(L, L_BUFFER " (freed)");
    else
        lua_pushfstring(L, L_BUFFER " (%I bytes at %p, %s)", (lua_Integer)b->size, b->ptr,
                        origin_names[b->origin]);
    return 1;
}

static int buffer_len(lua_State *L)
{
    l_buffer *b = l_udbuffer(L, 1);
    lua_pushinteger(L, (lua_Integer)b->size);
    return 1;
}

/* cupola.malloc(size, {device=}) -> Buffer: cudaMalloc (synchronizes the device). */
static int l_malloc(lua_State *L)
{
    static const char *const opts[] = {"device", NULL};
    size_t n = l_checksize(L, 1);
    void *p = NULL;
    int nret, dev;
    luaL_argcheck(L, n > 0, 1, "size must be at least 1 byte, got 0");
    l_checkoptions(L, 2, "cupola.malloc", opts);
    dev = l_optdevice_field(L, 2, "cupola.malloc");
    l_newbuffer(L);
    l_graveyard_reap(0);
    if ((nret = l_alloc_result_info(L, cp_be->mem_alloc_on(dev, &p, n, CP_MEM_DEVICE), "cudaMalloc",
                                    n, dev, NULL)) != 0)
        return nret;
    l_buffer_own(L, -1, p, n, L_FROM_MALLOC, dev, 0, l_defaultstream());
    return 1;
}

/* cupola.synchronize(device): the whole device (default: the current one);
 * also the point where collected malloc buffers are really freed. */
static int l_synchronize(lua_State *L)
{
    l_check(L, cp_be->device_synchronize_on(l_optdevice(L, 1)));
    l_graveyard_reap(0);
    return 0;
}

/* Runs at the Lua state's close (a sentinel in the registry). */
static int l_state_close(lua_State *L)
{
    (void)L;
    l_graveyard_reap(1);
    return 0;
}

void l_open_buffer(lua_State *L)
{
    static const luaL_Reg meta[] = {{"__gc", buffer_gc},     {"__close", buffer_gc},
                                    {"__index", buffer_index}, {"__tostring", buffer_tostring},
                                    {"__len", buffer_len},     {"__newindex", l_readonly_newindex},
                                    {NULL, NULL}};
    static const luaL_Reg methods[] = {{"free", buffer_free},       {"close", buffer_close},
                                       {"read", buffer_read},       {"write", buffer_write},
                                       {"memset", buffer_memset},   {"copy_to", buffer_copy_to},
                                       {NULL, NULL}};
    l_newclass(L, L_BUFFER, meta, methods);
    luaL_getmetatable(L, L_BUFFER);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &l_key_buffer);

    l_pushcfunction(L, l_malloc);
    lua_setfield(L, -2, "malloc");
    lua_pushcfunction(L, l_synchronize);
    lua_setfield(L, -2, "synchronize");

    /* A sentinel whose __gc runs when the state closes. */
    lua_newuserdatauv(L, 1, 0);
    lua_newtable(L);
    lua_pushcfunction(L, l_state_close);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, "cupola.sentinel");
}
