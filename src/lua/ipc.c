/*
 * ipc.c: several processes (multigpu): mp:export(), cupola.mempool.import,
 * b:export(), cupola.buffer.import.
 *
 * An export is a string a script can print, pass in an environment variable
 * or on a command line:
 *
 *   cupola-ipc/1;kind=K;backend=B;device=D;size=N;pid=P;nonce=X;socket=S;data=H
 *
 * kind is "pool" (a native pool created with handle="posix_fd"), "block" (a
 * buffer of such a pool) or "malloc" (a cupola.malloc buffer, CUDA's legacy
 * cudaIpcGetMemHandle path); backend is the exporting process's backend; nonce
 * (16 hex digits) names the exported pool, so a block can only be imported
 * into the pool it came from; socket is the Unix socket (abstract namespace)
 * a server thread of the exporting process hands the pool's file descriptor
 * out on, SCM_RIGHTS (core/ipc.c), "-" when nothing travels that way; data
 * is the 64 bytes of cudaMemPoolPtrExportData / cudaIpcMemHandle_t (the host
 * backend's own description of the memory) in hex, "-" for a pool.
 *
 * Everything is checked before use: the prefix and version, the kind, the
 * backend, the device (must exist here), the size, the hex data, that the
 * importing process is not the exporter (CUDA maps IPC memory into other
 * processes only), and, after the fd arrives, that the exporter's message
 * repeats kind, nonce, backend and device.  A pool's export is served until
 * the exporting pool is released; importing after that is a stale export
 * and raises.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "ipc.h"
#include "binding.h"

#define IPC_PREFIX "cupola-ipc/"
#define IPC_VERSION 1
#define RECEIVE_TIMEOUT_MS 10000

typedef struct token {
    char kind[16];
    char backend[16];
    int device;
    lua_Integer size;
    long pid;
    char nonce[17];
    char socket[CP_IPC_NAME_MAX];
    cp_ipc_data data;
    int has_data;
} token;

static void new_nonce(char out[17])
{
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, GRND_NONBLOCK) != (ssize_t)sizeof x) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = ((uint64_t)ts.tv_nsec * UINT64_C(0x9E3779B97F4A7C15)) ^ (uint64_t)getpid() ^
            ((uint64_t)ts.tv_sec << 32);
    }
    snprintf(out, 17, "%016llx", (unsigned long long)x);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static void push_hex(luaL_Buffer *b, const unsigned char *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        luaL_addchar(b, digits[p[i] >> 4]);
        luaL_addchar(b, digits[p[i] & 15]);
    }
}

/* Pushes the export string. */
static void push_token(lua_State *L, const char *kind, int device, lua_Integer size,
                       const char *nonce, const char *socket, const cp_ipc_data *data)
{
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    lua_pushfstring(L, IPC_PREFIX "%d;kind=%s;backend=%s;device=%d;size=%I;pid=%d;nonce=%s;socket=%s;data=",
                    IPC_VERSION, kind, cp_be->name, device, size, (int)getpid(), nonce,
                    socket && *socket ? socket : "-");
    luaL_addvalue(&b);
    if (data)
        push_hex(&b, data->bytes, CP_IPC_DATA_BYTES);
    else
        luaL_addchar(&b, '-');
    luaL_pushresult(&b);
}

/* Raises "bad argument #arg to 'fname' (what, got 'cupola-ipc/1;...')":
 * the export string, cut, says which one it was. */
static int bad(lua_State *L, int arg, const char *what)
{
    return luaL_argerror(L, arg, lua_pushfstring(L, "%s, got %s", what, l_pushshown(L, arg)));
}

static int field_str(const char *v, size_t n, char *out, size_t cap)
{
    if (n == 0 || n >= cap)
        return 0;
    memcpy(out, v, n);
    out[n] = '\0';
    return 1;
}

static int field_int(const char *v, size_t n, long long *out)
{
    char tmp[32];
    char *end;
    if (n == 0 || n >= sizeof tmp)
        return 0;
    memcpy(tmp, v, n);
    tmp[n] = '\0';
    *out = strtoll(tmp, &end, 10);
    return *end == '\0';
}

/* Parses and checks the export string at arg, of kind want (NULL: any). */
static void parse(lua_State *L, int arg, const char *want, token *t)
{
    size_t len;
    const char *s = l_checklstring(L, arg, &len), *p, *end = s + len;
    unsigned seen = 0;
    long long v = 0;
    char *e;
    long ver;

    memset(t, 0, sizeof *t);
    if (len < sizeof IPC_PREFIX || strncmp(s, IPC_PREFIX, sizeof IPC_PREFIX - 1) != 0)
        bad(L, arg, "not a cupola export (it starts with 'cupola-ipc/')");
    ver = strtol(s + sizeof IPC_PREFIX - 1, &e, 10);
    if (e == s + sizeof IPC_PREFIX - 1 || (*e != ';' && *e != '\0'))
        bad(L, arg, "malformed cupola export (no version)");
    if (ver != IPC_VERSION)
        bad(L, arg, lua_pushfstring(L, "cupola export version %d; this cupola reads version %d",
                                    (int)ver, IPC_VERSION));
    for (p = e; p < end && *p == ';';) {
        const char *k = p + 1, *eq = memchr(k, '=', (size_t)(end - k)), *val, *stop;
        size_t kn, vn;
        int ok = 1;
        if (!eq)
            bad(L, arg, "malformed cupola export (a field without '=')");
        stop = memchr(eq, ';', (size_t)(end - eq));
        if (!stop)
            stop = end;
        kn = (size_t)(eq - k);
        val = eq + 1;
        vn = (size_t)(stop - val);
#define KEY(name) (kn == sizeof(name) - 1 && memcmp(k, name, kn) == 0)
        if (KEY("kind")) {
            ok = field_str(val, vn, t->kind, sizeof t->kind);
            seen |= 1;
        } else if (KEY("backend")) {
            ok = field_str(val, vn, t->backend, sizeof t->backend);
            seen |= 2;
        } else if (KEY("device")) {
            ok = field_int(val, vn, &v) && v >= 0 && v < CP_MAX_DEVICES;
            t->device = (int)v;
            seen |= 4;
        } else if (KEY("size")) {
            ok = field_int(val, vn, &v) && v >= 0;
            t->size = (lua_Integer)v;
            seen |= 8;
        } else if (KEY("pid")) {
            ok = field_int(val, vn, &v) && v > 0;
            t->pid = (long)v;
            seen |= 16;
        } else if (KEY("nonce")) {
            ok = vn == 16 && field_str(val, vn, t->nonce, sizeof t->nonce);
            for (size_t i = 0; ok && i < 16; i++)
                ok = hexval(t->nonce[i]) >= 0;
            seen |= 32;
        } else if (KEY("socket")) {
            ok = field_str(val, vn, t->socket, sizeof t->socket);
            if (ok && strcmp(t->socket, "-") == 0)
                t->socket[0] = '\0';
            seen |= 64;
        } else if (KEY("data")) {
            if (vn == 1 && val[0] == '-') {
                t->has_data = 0;
            } else {
                ok = vn == 2 * CP_IPC_DATA_BYTES;
                for (size_t i = 0; ok && i < CP_IPC_DATA_BYTES; i++) {
                    int hi = hexval(val[2 * i]), lo = hexval(val[2 * i + 1]);
                    ok = hi >= 0 && lo >= 0;
                    t->data.bytes[i] = (unsigned char)(hi * 16 + lo);
                }
                t->has_data = 1;
            }
            seen |= 128;
        } else {
            ok = 0;
        }
#undef KEY
        if (!ok)
            bad(L, arg, lua_pushfstring(L, "malformed cupola export (field '%s')",
                                        lua_pushlstring(L, k, kn) ? lua_tostring(L, -1) : "?"));
        p = stop;
    }
    if (p != end || seen != 255)
        bad(L, arg, "malformed cupola export (fields missing)");
    if (want && strcmp(t->kind, want) != 0)
        bad(L, arg, lua_pushfstring(L, "a cupola export of a %s, not of a %s", t->kind, want));
    if (strcmp(t->backend, cp_be->name) != 0)
        bad(L, arg, lua_pushfstring(L, "exported by a process using the %s backend; this one "
                                       "uses %s",
                                    t->backend, cp_be->name));
    if (t->device >= cp_be->device_count())
        bad(L, arg, lua_pushfstring(L, "exported from device %d, which this process does not "
                                       "have (devices 0..%d)",
                                    t->device, cp_be->device_count() - 1));
    if (t->pid == (long)getpid())
        bad(L, arg, "the export comes from this very process: CUDA maps exported memory into "
                    "other processes only");
    if (strcmp(t->kind, "pool") != 0 && (!t->has_data || t->size <= 0))
        bad(L, arg, "malformed cupola export (a buffer without size or data)");
    if (strcmp(t->kind, "pool") == 0 && !t->socket[0])
        bad(L, arg, "malformed cupola export (a pool without a socket)");
}

/* The message that travels with the fd: it must repeat the token. */
static void make_msg(char *out, size_t cap, const char *kind, const char *nonce, int device)
{
    snprintf(out, cap, IPC_PREFIX "%d;kind=%s;nonce=%s;backend=%s;device=%d", IPC_VERSION, kind,
             nonce, cp_be->name, device);
}

/* Receives the fd a token's socket serves; raises on a stale or foreign answer. */
static int receive_fd(lua_State *L, int arg, const token *t)
{
    char msg[CP_IPC_MSG_MAX + 1], want[256];
    size_t n = 0;
    int fd = -1;
    cp_status st = cp_ipc_receive(t->socket, &fd, msg, CP_IPC_MSG_MAX, &n, RECEIVE_TIMEOUT_MS);
    if (st != CP_OK)
        return bad(L, arg, cp_error_msg());
    msg[n] = '\0';
    make_msg(want, sizeof want, t->kind, t->nonce, t->device);
    if (strcmp(msg, want) != 0) {
        close(fd);
        bad(L, arg, "the exporting process answered for another export (stale or forged)");
    }
    return fd;
}

/* ---- pools -------------------------------------------------------------- */

static l_mempoolref *checkmempool(lua_State *L, int arg)
{
    l_mempool *m = (l_mempool *)l_checkudata(L, arg, L_MEMPOOL);
    if (!m->ref)
        luaL_error(L, "attempt to use a closed " L_MEMPOOL);
    return m->ref;
}

/* Exports r's fd (once) and serves it until the pool is released.  A block
 * is exported only after its pool: a block is of no use to a process that
 * cannot import its pool, and on CUDA 13.0 (H200) cudaMemPoolExportPointer
 * of a block whose pool had never been exported answered
 * cudaErrorInvalidValue (bench/results/multi_gpu.md). */
static void serve_pool(lua_State *L, l_mempoolref *r)
{
    char msg[256], name[CP_IPC_NAME_MAX];
    int fd = -1;
    cp_status st;
    if (!r->nonce[0])
        new_nonce(r->nonce);
    if (r->server)
        return;
    l_check(L, cp_be->mempool_export(r->p, &fd));
    make_msg(msg, sizeof msg, "pool", r->nonce, r->device);
    st = cp_ipc_serve(fd, msg, strlen(msg), &r->server, name);
    close(fd); /* the server keeps its own */
    l_check(L, st);
}

/* mp:export() -> string: serves the pool's fd until the pool is released. */
static int mempool_export(lua_State *L)
{
    l_mempoolref *r = checkmempool(L, 1);
    if (r->imported)
        return luaL_error(L, L_MEMPOOL ":export: an imported pool cannot be exported again");
    if (!r->shareable)
        return luaL_error(L, L_MEMPOOL ":export: the pool was not created shareable "
                             "(cupola.mempool{handle=\"posix_fd\"})");
    serve_pool(L, r);
    push_token(L, "pool", r->device, 0, r->nonce, cp_ipc_server_name(r->server), NULL);
    return 1;
}

/* cupola.mempool.import(export) -> Mempool (imported: its buffers come from
 * cupola.buffer.import) */
static int mempool_import(lua_State *L)
{
    token t;
    cp_mempool *p = NULL;
    l_mempool *ud;
    l_mempoolref *r;
    cp_status st;
    int fd;

    parse(L, 1, "pool", &t);
    ud = (l_mempool *)lua_newuserdatauv(L, sizeof *ud, 0);
    ud->tag = L_TAG(L_T_MEMPOOL);
    ud->ref = NULL;
    luaL_setmetatable(L, L_MEMPOOL);
    fd = receive_fd(L, 1, &t); /* may raise: nothing is held yet */
    if (!(r = (l_mempoolref *)calloc(1, sizeof *r))) {
        close(fd);
        return luaL_error(L, "cupola.mempool.import: out of host memory");
    }
    st = cp_be->mempool_import(fd, t.device, &p);
    close(fd); /* the import holds what it needs */
    if (st != CP_OK) {
        free(r);
        return l_fail(L, st);
    }
    r->p = p;
    r->refs = 1;
    r->device = t.device;
    r->imported = 1;
    r->shareable = 1;
    memcpy(r->nonce, t.nonce, sizeof r->nonce);
    ud->ref = r;
    return 1;
}

/* ---- buffers -------------------------------------------------------------- */

/* b:export() -> string */
static int buffer_export(lua_State *L)
{
    l_buffer *b = l_checkbuffer(L, 1);
    cp_ipc_data d;
    char nonce[17], msg[256], name[CP_IPC_NAME_MAX];
    int fd = -1;

    switch (b->origin) {
    case L_FROM_MEMPOOL:
        if (b->mempool->imported)
            return luaL_error(L, L_BUFFER ":export: an imported buffer cannot be exported again");
        if (!b->mempool->shareable)
            return luaL_error(L, L_BUFFER ":export: its pool was not created shareable "
                                 "(cupola.mempool{handle=\"posix_fd\"})");
        serve_pool(L, b->mempool);
        l_check(L, cp_be->mempool_export_ptr(b->ptr, &d));
        push_token(L, "block", b->device, (lua_Integer)b->size, b->mempool->nonce, NULL, &d);
        return 1;
    case L_FROM_MALLOC:
        l_check(L, cp_be->ipc_get_handle(b->ptr, b->size, &d, &fd));
        new_nonce(nonce);
        if (fd >= 0) { /* the memory travels as a file descriptor (host backend) */
            cp_ipc_server_stop(b->server);
            b->server = NULL;
            make_msg(msg, sizeof msg, "malloc", nonce, b->device);
            l_check(L, cp_ipc_serve(fd, msg, strlen(msg), &b->server, name));
        }
        push_token(L, "malloc", b->device, (lua_Integer)b->size, nonce,
                   b->server ? cp_ipc_server_name(b->server) : NULL, &d);
        return 1;
    default:
        return luaL_error(L, L_BUFFER ":export: only buffers of a shareable " L_MEMPOOL
                             " (handle=\"posix_fd\") or of cupola.malloc can be exported, not "
                             "one from %s",
                          b->origin == L_FROM_ASYNC ? "malloc_async"
                          : b->origin == L_FROM_POOL ? "a " L_POOL
                                                     : "an import");
    }
}

/* cupola.buffer.import(pool, export) for a block of an imported pool;
 * cupola.buffer.import(export, {device=}) for a cupola.malloc buffer. */
static int buffer_import(lua_State *L)
{
    token t;
    void *p = NULL;
    int nret;

    if (luaL_testudata(L, 1, L_MEMPOOL)) {
        l_mempoolref *r = checkmempool(L, 1);
        parse(L, 2, "block", &t);
        if (!r->imported)
            return bad(L, 1, "buffers are imported into a pool from cupola.mempool.import");
        if (strcmp(r->nonce, t.nonce) != 0)
            return bad(L, 2, "the buffer belongs to another exported pool");
        if (t.device != r->device)
            return bad(L, 2, "the buffer's device differs from its pool's");
        l_newbuffer(L);
        if ((nret = l_alloc_result(L, cp_be->mempool_import_ptr(r->p, &t.data, (size_t)t.size,
                                                                &p))) != 0)
            return nret;
        l_buffer_own_mempool(L, -1, p, (size_t)t.size, L_FROM_MEMPOOL, 0, l_defaultstream(), 1, r);
        return 1;
    } else {
        static const char *const opts[] = {"device", NULL};
        int dev, fd = -1;
        cp_status st;
        parse(L, 1, "malloc", &t);
        l_checkoptions(L, 2, "cupola.buffer.import", opts);
        dev = lua_isnoneornil(L, 2) ? t.device : l_optdevice_field(L, 2, "cupola.buffer.import");
        l_newbuffer(L);
        if (t.socket[0])
            fd = receive_fd(L, 1, &t);
        st = cp_be->ipc_open_handle(dev, &t.data, fd, (size_t)t.size, &p);
        if (fd >= 0)
            close(fd);
        l_check(L, st);
        l_buffer_own(L, -1, p, (size_t)t.size, L_FROM_IPC, dev, 0, l_defaultstream());
        return 1;
    }
}

/* Adds name = fn to the method table of the class tname. */
static void add_method(lua_State *L, const char *tname, const char *name, lua_CFunction fn)
{
    luaL_getmetatable(L, tname);
    lua_getfield(L, -1, "methods");
    lua_pushcfunction(L, fn);
    lua_setfield(L, -2, name);
    lua_pop(L, 2);
}

void l_open_ipc(lua_State *L)
{
    add_method(L, L_MEMPOOL, "export", mempool_export);
    add_method(L, L_BUFFER, "export", buffer_export);
    lua_getfield(L, -1, "mempool");
    lua_pushcfunction(L, mempool_import);
    lua_setfield(L, -2, "import");
    lua_pop(L, 1);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, buffer_import);
    lua_setfield(L, -2, "import");
    lua_setfield(L, -2, "buffer");
}
