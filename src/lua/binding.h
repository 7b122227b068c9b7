/*
 * binding.h: what the per-type binding files (l_*.c) share.
 *
 * Handle types follow Lua's own liolib: a metatable per type with __name,
 * checked with luaL_checkudata (the hot ones by a tag first: "type tags"
 * below); the userdata is pushed in its released state
 * before the resource is acquired, so an error half-way leaves nothing
 * dangling; one release function serves __gc, __close and close().
 *
 * Streams, native pools and custom pools must outlive the Lua objects that
 * name them (a buffer may be finalized after its pool in the same GC cycle),
 * so their userdata box a reference-counted C object (luv's shape): the Lua
 * object holds one reference and every live buffer one more.
 */
#ifndef CUPOLA_BINDING_H
#define CUPOLA_BINDING_H

#include <stddef.h>
#include <stdint.h>

#include <lauxlib.h>
#include <lua.h>

#include "backend/backend.h"
#include "pool/model.h"
#include "pool/resource.h"
#include "rawmap.h"

#define L_STREAM "cupola.Stream"
#define L_EVENT "cupola.Event"
#define L_BUFFER "cupola.Buffer"
#define L_MEMPOOL "cupola.Mempool"
#define L_POOL "cupola.Pool"
#define L_TRACE "cupola.Trace"
#define L_MODULE "cupola.Module"
#define L_KERNEL "cupola.Kernel"
#define L_DEVICEPOOL "cupola.DevicePool" /* its C struct's first member is the device pointer */

/* A stream shared by its Lua handle and the buffers ordered on it. */
typedef struct l_streamref {
    cp_stream *s; /* NULL: the legacy default stream */
    int refs;
} l_streamref;

struct cp_ipc_server;

/* A native (CUDA) memory pool. */
typedef struct l_mempoolref {
    cp_mempool *p;
    int refs;       /* the Lua handle (while open) + live buffers */
    int live;       /* live buffers */
    int is_default; /* the device's: never destroyed */
    int device;     /* multigpu: whose memory */
    int shareable;  /* created with handle="posix_fd" */
    int imported;   /* cupola.mempool.import: another process's pool */
    char nonce[17]; /* names the export (hex), "" until exported or imported */
    struct cp_ipc_server *server; /* serves the pool's fd while exported */
} l_mempoolref;

/* The Mempool userdata (mempool.c; ipc.c makes imported ones). */
typedef struct l_mempool {
    uint64_t tag;      /* L_TAG(L_T_MEMPOOL): see "type tags" below */
    l_mempoolref *ref; /* NULL once closed */
} l_mempool;

/* A custom pool (resource.h). */
typedef struct l_poolref {
    cp_resource *r;
    int refs;
    int live;
    int has_memory;      /* 0 for the virtual upstream: no bytes to touch */
    uint64_t generation; /* bumped by reset(): older buffers are gone */
    int device;          /* multigpu: whose memory the upstream takes */
    l_rawmap raw;        /* the blocks handed out as addresses (p:alloc_raw) */
} l_poolref;

/* Stream and Event userdata. */
typedef struct l_stream {
    uint64_t tag; /* L_TAG(L_T_STREAM): see "type tags" below */
    l_streamref *ref; /* NULL once closed */
    int is_default;
} l_stream;

typedef struct l_event {
    uint64_t tag; /* L_TAG(L_T_EVENT) */
    cp_event *e; /* NULL once closed */
    int timing;
} l_event;

/* Where a buffer's memory came from, and so how it goes back. */
typedef enum l_origin {
    L_FROM_MALLOC = 0, /* cupola.malloc: cudaMalloc / cudaFree */
    L_FROM_ASYNC,      /* cupola.malloc_async: the current pool */
    L_FROM_MEMPOOL,    /* Mempool:alloc */
    L_FROM_POOL,       /* a custom pool */
    L_FROM_IPC         /* cupola.buffer.import of a malloc export (cudaIpcOpenMemHandle) */
} l_origin;

typedef struct l_buffer {
    uint64_t tag; /* L_TAG(L_T_BUFFER) */
    void *ptr; /* NULL once freed */
    size_t size;
    l_origin origin;
    l_streamref *stream; /* the stream it is ordered on (one reference) */
    l_mempoolref *mempool;
    l_poolref *pool;
    uint64_t generation; /* of pool, at allocation */
    int device;          /* multigpu: the device whose memory it is */
    struct cp_ipc_server *server; /* a host malloc buffer's export, while served */
} l_buffer;

/* The user values of a Buffer: its Stream and its pool (Mempool or Pool).
 * A buffer on the default stream leaves L_UV_STREAM nil (the default stream
 * lives as long as the state, and the registry lookup would cost every
 * allocation): read it with l_pushbufferstream. */
#define L_UV_STREAM 1
#define L_UV_POOL 2

/* --- fast type checks (util.c) ---
 *
 * luaL_checkudata finds the metatable by its name in the registry (a string
 * lookup) on every call; the hot paths compare against the metatable by
 * identity instead, held in upvalues:
 *  - every metamethod and method registered by l_newclass has L_NUP
 *    upvalues: its class's metatable (L_UP_META) and method table
 *    (L_UP_METHODS), and the Buffer and Stream metatables (L_UP_BUFFER,
 *    L_UP_STREAM), the two types other types' hot calls take as arguments;
 *  - module functions registered with l_setfuncs / l_pushcfunction have the
 *    same upvalues with the first two nil;
 *  - Buffer, Stream and Event metatables are also in the registry under a
 *    light-userdata key, for functions with no upvalues.
 * Every check falls back to luaL_checkudata, so errors read as before.
 * Functions that use none of this are unaffected by the upvalues. */
#define L_UP_META lua_upvalueindex(1)
#define L_UP_METHODS lua_upvalueindex(2)
#define L_UP_BUFFER lua_upvalueindex(3)
#define L_UP_STREAM lua_upvalueindex(4)
#define L_NUP 4

/* The Buffer metatable under a light-userdata key, for code without the
 * Buffer upvalue (l_newbuffer outside an l_newclass function). */
extern const char l_key_buffer;
/* For __index functions of l_newclass classes: pushes the method named by
 * the key at index 2 (a raw lookup in L_UP_METHODS, no string compare) and
 * returns 1, or pushes nothing and returns 0. */
int l_index_method(lua_State *L);
/* luaL_setfuncs(L, l, 0) into the table on top, and lua_pushcfunction, with
 * the upvalues above (no class: the first two are nil). */
void l_setfuncs(lua_State *L, const luaL_Reg *l);
void l_pushcfunction(lua_State *L, lua_CFunction f);

/* --- type tags (util.c) ---
 *
 * The hottest checks (a Buffer, Stream, Event, Pool, Mempool or Kernel)
 * identify the handle by a tag in its C struct before looking at its
 * metatable: two API calls (lua_touserdata, lua_rawlen) and a compare,
 * where finding and comparing the metatable takes five.  A handle's struct
 * starts with a uint64_t tag, set before its metatable is, equal to
 * L_TAG(its type); it is read only from a full userdata of exactly the
 * struct's size (lua_rawlen is 0 for light userdata), so never past a
 * block.  The tags are a per-process random value (l_tag_init) mixed with
 * the type: no other library's userdata passes by chance, and no script can
 * name the value.  Without the tag the check is luaL_checkudata's (so a
 * handle made by code that does not set it still passes, only slower),
 * plus the size: a foreign userdata of another size given a cupola
 * metatable with debug.setmetatable, which luaL_checkudata takes, is
 * refused instead of being read out of bounds (one of exactly the struct's
 * size still passes, as before).  Errors read as luaL_checkudata's. */
enum { L_T_BUFFER = 1, L_T_STREAM, L_T_EVENT, L_T_POOL, L_T_KERNEL, L_T_MEMPOOL };
extern uint64_t l_tag_secret;
#define L_TAG(t) (l_tag_secret ^ ((uint64_t)(t) * 0x9e3779b97f4a7c15ull))
/* Draws the secret once per process (luaopen calls it before any handle). */
void l_tag_init(void);

/* The slow paths: by the metatable named tname, and the size. */
void *l_testtag_slow(lua_State *L, int arg, size_t size, const char *tname);
void *l_checktag_slow(lua_State *L, int arg, size_t size, const char *tname);

static inline int l_hastag(lua_State *L, int arg, void *p, unsigned t, size_t size)
{
    return p && lua_rawlen(L, arg) == size && *(const uint64_t *)p == L_TAG(t);
}
/* The handle of type t (struct size size, metatable tname) at arg, or NULL. */
static inline void *l_testtag(lua_State *L, int arg, unsigned t, size_t size, const char *tname)
{
    void *p = lua_touserdata(L, arg);
    return l_hastag(L, arg, p, t, size) ? p : l_testtag_slow(L, arg, size, tname);
}
/* The same, raising "tname expected, got X" when it is not one. */
static inline void *l_checktag(lua_State *L, int arg, unsigned t, size_t size, const char *tname)
{
    void *p = lua_touserdata(L, arg);
    return l_hastag(L, arg, p, t, size) ? p : l_checktag_slow(L, arg, size, tname);
}

/* The handle at arg, open or closed (raises if it is not one). */
static inline l_buffer *l_udbuffer(lua_State *L, int arg)
{
    return (l_buffer *)l_checktag(L, arg, L_T_BUFFER, sizeof(l_buffer), L_BUFFER);
}
static inline l_stream *l_udstream(lua_State *L, int arg)
{
    return (l_stream *)l_checktag(L, arg, L_T_STREAM, sizeof(l_stream), L_STREAM);
}
static inline l_event *l_udevent(lua_State *L, int arg)
{
    return (l_event *)l_checktag(L, arg, L_T_EVENT, sizeof(l_event), L_EVENT);
}
static inline l_mempool *l_udmempool(lua_State *L, int arg)
{
    return (l_mempool *)l_checktag(L, arg, L_T_MEMPOOL, sizeof(l_mempool), L_MEMPOOL);
}
/* A Buffer or a Stream at arg, or NULL (for messages of their own). */
static inline l_buffer *l_testudbuffer(lua_State *L, int arg)
{
    return (l_buffer *)l_testtag(L, arg, L_T_BUFFER, sizeof(l_buffer), L_BUFFER);
}
static inline l_stream *l_testudstream(lua_State *L, int arg)
{
    return (l_stream *)l_testtag(L, arg, L_T_STREAM, sizeof(l_stream), L_STREAM);
}

/* --- helpers (util.c) --- */

/* Values in messages.  Every misuse error names the value it got, cut to a
 * readable length, so that a message alone says what went wrong:
 *  - l_pushshown pushes the value as a message shows it and returns it:
 *    'text' (quoted, at most 40 characters then "...", control bytes
 *    escaped), 12, 1.5, true, nil, "no value", or for anything else its
 *    type ("table", "function", a handle's __name such as cupola.Buffer);
 *  - l_pushtyped the same after the type where the value says more than
 *    the type: "string 'high'", "number 1.5", "boolean true", else as
 *    l_pushshown ("table", "cupola.Stream");
 *  - l_pushgot for messages that named the type already ("item 2 is a
 *    number, not a string"): ", got 5" after them, "" for a value that is
 *    no more than its type (a table, a handle);
 *  - l_pushcut pushes s (len bytes) cut and escaped, unquoted. */
const char *l_pushshown(lua_State *L, int idx);
const char *l_pushtyped(lua_State *L, int idx);
const char *l_pushgot(lua_State *L, int idx);
void l_pushcut(lua_State *L, const char *s, size_t len);
/* lauxlib's argument checks, whose messages give only the type, with the
 * value: "bad argument #2 to 'f' (number expected, got string 'abc')".
 * They accept what lauxlib's accept (numeric strings as numbers, numbers
 * as strings). */
int l_typeerror(lua_State *L, int arg, const char *tname);
lua_Integer l_checkinteger(lua_State *L, int arg);
lua_Integer l_optinteger(lua_State *L, int arg, lua_Integer def);
lua_Number l_checknumber(lua_State *L, int arg);
const char *l_checklstring(lua_State *L, int arg, size_t *len);
#define l_checkstring(L, arg) l_checklstring(L, arg, NULL)
const char *l_optlstring(lua_State *L, int arg, const char *def, size_t *len);
#define l_optstring(L, arg, def) l_optlstring(L, arg, def, NULL)
void l_checktable(lua_State *L, int arg);
void *l_checkudata(lua_State *L, int arg, const char *tname);
/* Raises the message on top of the stack with the caller's file:line in
 * front, as luaL_error does (lua_error alone gives no position). */
int l_error_here(lua_State *L);

/* Raises a Lua error with the core's message for st (never returns). */
int l_fail(lua_State *L, cp_status st);
/* Raises unless st is CP_OK. */
void l_check(lua_State *L, cp_status st);
/* Raises prefix + the core's message for a failed compile, its whole log
 * (which the core's message buffer may have cut) in place of the cut one;
 * frees log (may be NULL).  Never returns. */
int l_fail_log(lua_State *L, const char *prefix, char *log);
/* cupola's include folders for run-time compiled code (module.c). */
const char *const *l_include_dirs(void);
/* For allocations: CP_ERR_OOM pushes nil, msg, "out_of_memory" and returns 3;
 * CP_OK returns 0; anything else raises. */
int l_alloc_result(lua_State *L, cp_status st);
/* l_alloc_result where no cupola pool refused (cudaMalloc, native pools,
 * pool creation, device pools): CP_ERR_OOM pushes the three values and an
 * info table (requested and kind, the device's free and total bytes as
 * device_free and device_total, and, given a native pool mp, its reserved
 * and used bytes with free = reserved - used; without one, free is the
 * device's) and returns 4. */
int l_alloc_result_info(lua_State *L, cp_status st, const char *kind, uint64_t requested, int dev,
                        struct cp_mempool *mp);

/* A size argument: integer bytes or a string with binary units ("4MiB").
 * Negative, fractional or malformed sizes raise an argument error. */
size_t l_checksize(lua_State *L, int arg);
/* Parses a size string; returns 0 and fills *out on success. */
int l_parsesize(const char *s, uint64_t *out);

/* Pushes the names name(0), name(1), ... (up to the first NULL) as one
 * string for a message: joined by ", ", the last one by last (", " or
 * " or "). */
void l_pushnames(lua_State *L, const char *(*name)(int i), const char *last);

/* Option tables: checks that idx is a table (or absent, when optional) whose
 * keys are all in allowed (NULL-terminated); raises naming the unknown one. */
void l_checkoptions(lua_State *L, int idx, const char *fname, const char *const allowed[]);
/* Typed option fields of the table at idx (absent: def). */
lua_Integer l_optint_field(lua_State *L, int idx, const char *key, lua_Integer def);
int l_optbool_field(lua_State *L, int idx, const char *key, int def);
size_t l_optsize_field(lua_State *L, int idx, const char *key, size_t def);
/* The size at idx (integer bytes or a string with units), raising
 * "<what>: bad size 'x'" or "<what> must be a size, not <type>". */
size_t l_checksize_named(lua_State *L, int idx, const char *what);
const char *l_optstring_field(lua_State *L, int idx, const char *key, const char *def);

/* --- streams (stream.c) --- */
/* The legacy default stream's reference (never released). */
l_streamref *l_defaultstream(void);
/* The stream argument at arg: absent or nil gives the default stream. */
l_streamref *l_optstream(lua_State *L, int arg);
/* A stream found in an option table's field "stream" (absent: default). */
l_streamref *l_optstream_field(lua_State *L, int idx);
/* The stream work on memory of device dev runs on: s, or for the default
 * stream (NULL) dev's legacy stream (multigpu). */
cp_stream *l_devstream(cp_stream *s, int dev);
/* Pushes a Stream object for the stream r: the default stream's, the live
 * handle made by cupola.stream{}, or (that handle collected while something
 * still holds r) a new handle holding one more reference. */
void l_pushstream(lua_State *L, l_streamref *r);
/* Reference counting of a stream shared by its handle and its buffers. */
void l_streamref_retain(l_streamref *r);
void l_streamref_release(l_streamref *r);

/* --- buffers (buffer.c) ---
 * buffer.c alone takes and drops what a Buffer keeps alive.  Making one:
 * l_newbuffer pushes it released, the caller gets the memory, then one
 * l_buffer_own* call gives the buffer at idx the block p of size bytes,
 * ordered on sref (whose Lua object is at stream_idx; 0 or nil there: the
 * default stream), and takes the references: the stream's, and for a pool's
 * block the pool's (its Lua object at pool_idx becomes b.pool, its C owner
 * counts one more reference and one more live buffer).  Wrapping a block
 * that already exists is the same two calls.  Freeing, closing and
 * collecting the buffer give them all back. */
l_buffer *l_newbuffer(lua_State *L);
/* Memory of no pool (cupola.malloc, a legacy IPC import) of device dev. */
void l_buffer_own(lua_State *L, int idx, void *p, size_t size, l_origin origin, int dev,
                  int stream_idx, l_streamref *sref);
/* A block of a native pool: origin L_FROM_MEMPOOL, or L_FROM_ASYNC for the
 * current pool's (cudaMallocAsync). */
void l_buffer_own_mempool(lua_State *L, int idx, void *p, size_t size, l_origin origin,
                          int stream_idx, l_streamref *sref, int pool_idx, l_mempoolref *r);
/* A block of a cupola Pool. */
void l_buffer_own_pool(lua_State *L, int idx, void *p, size_t size, int stream_idx,
                       l_streamref *sref, int pool_idx, l_poolref *r);
/* Whether the buffer still holds memory (not freed, not reset away by its
 * pool). */
int l_buffer_live(const l_buffer *b);
l_buffer *l_checkbuffer(lua_State *L, int arg); /* a live buffer */
/* Pushes the Stream object a buffer (at idx) is ordered on. */
void l_pushbufferstream(lua_State *L, int idx);
/* --- pool owners (ref.c) --- */
/* Drops one reference; the last one releases the pool (called by buffers and
 * by the pool handles). */
void l_mempoolref_release(l_mempoolref *r);
void l_poolref_release(l_poolref *r);
/* Whether a buffer's bytes may be touched (raises otherwise). */
void l_checkmemory(lua_State *L, l_buffer *b, int arg);

/* --- devices (device.c, multigpu) --- */
/* A device index argument (0-based): absent gives the current device; out
 * of range or negative raises naming the argument. */
/* A device index argument: an integer in 0..device_count()-1, else raises
 * naming the argument. */
int l_checkdevice(lua_State *L, int arg);
int l_optdevice(lua_State *L, int arg);
/* The option "device" of the table at idx (absent: the current device). */
int l_optdevice_field(lua_State *L, int idx, const char *fname);
void l_open_device(lua_State *L);
/* IPC export strings (ipc.c) */
void l_open_ipc(lua_State *L);

/* --- registration --- */
void l_open_stream(lua_State *L);  /* each adds its functions to the module table at -1 */
void l_open_event(lua_State *L);
void l_open_buffer(lua_State *L);
void l_open_mempool(lua_State *L);
void l_open_kernels(lua_State *L);
void l_open_pool(lua_State *L);
/* cupola.pool{...}'s table at idx read into o through the registry's
 * descriptors (pool_opts.c), all but limit, log and plugin's source;
 * returns the kind's model.  Raises naming the option. */
const cp_model *l_pool_opts(lua_State *L, int idx, cp_pool_opts *o);
void l_open_pool_kinds(lua_State *L); /* cupola.pool_kinds (pool_opts.c) */
void l_open_trace(lua_State *L);
void l_open_module(lua_State *L); /* run-time compiled kernels (module.c) */
/* The folder of <cupola/allocator.h> that lua/cupola/init.lua found
 * (cupola.include_dir), or NULL before require "cupola" (module.c). */
const char *l_plugin_include_dir(void);
void l_open_nvtx(lua_State *L);   /* cupola.nvtx */
void l_open_term(lua_State *L);   /* cupola.core._isatty */
void l_open_devpool(lua_State *L); /* in-kernel allocation */

/* __newindex of handle types whose fields are all read-only: raises
 * "cupola.Buffer field 'size' is read-only". */
int l_readonly_newindex(lua_State *L);

/* Creates the metatable tname (luaL_newmetatable: with __name) holding the
 * metamethods and, under "methods", the method table, which is also __index
 * unless meta has its own.  Every function of meta and methods gets the
 * upvalues L_UP_META and L_UP_METHODS (functions that do not use them are
 * unaffected).  Leaves nothing on the stack. */
void l_newclass(lua_State *L, const char *tname, const luaL_Reg *meta, const luaL_Reg *methods);
/* For __index functions: pushes the method k of the object at obj and
 * returns 1, or pushes nothing and returns 0.  Raw lookup in L_UP_METHODS
 * when k is the key at index 2 of an l_newclass function (l_index_method
 * is the same without the arguments). */
int l_getmethod(lua_State *L, int obj, const char *k);

#endif /* CUPOLA_BINDING_H */
