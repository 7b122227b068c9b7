/*
 * module.c: cupola.module{...} -> cupola.Module, m:kernel(name, types) ->
 * cupola.Kernel, k:launch(opts, ...): user kernels compiled at run time
 * (src/core/kernel/).  Lua only names the kernel, the shape and the
 * arguments; the marshalling into the kernel's argument slots is done here
 * without allocating (the Kernel userdata holds the slots).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "binding.h"
#include "kernel/compile.h"
#include "kernel/module.h"

typedef struct l_module {
    cp_kmodule *m; /* NULL once closed */
} l_module;

typedef struct l_kernel {
    uint64_t tag; /* L_TAG(L_T_KERNEL) (binding.h) */
    cp_kernel *k; /* NULL once closed */
    unsigned n;
    cp_ktype types[CP_KMAX_PARAMS];
    void *argp[CP_KMAX_PARAMS]; /* argp[i] = &vals[i] */
    uint64_t vals[CP_KMAX_PARAMS];
    char name[128];
} l_kernel;

/* cupola's include folders (cupola/device.h, the host prelude), and the
 * folder of <cupola/allocator.h> for plugins compiled from source (pool.c),
 * set by lua/cupola/init.lua from where it was loaded, or $CUPOLA_INCLUDE. */
#define MAX_INCLUDE 8
static char *include_dirs[MAX_INCLUDE + 1];
static char *plugin_dir;

const char *l_plugin_include_dir(void)
{
    return plugin_dir;
}

/* core._set_include_path(dirs, plugin_dir) */
static int set_include_path(lua_State *L)
{
    char *dirs[MAX_INCLUDE + 1] = {NULL};
    const char *pdir = l_optstring(L, 2, NULL);
    char *pcopy = NULL;
    lua_Integer n;
    l_checktable(L, 1);
    n = luaL_len(L, 1);
    luaL_argcheck(L, n <= MAX_INCLUDE, 1, "at most 8 include folders");
    for (lua_Integer i = 1; i <= n; i++) {
        size_t len;
        const char *s;
        lua_geti(L, 1, i);
        s = lua_tolstring(L, -1, &len);
        if (!s || len == 0 || len > 4000 || strlen(s) != len) {
            for (lua_Integer j = 0; j < i - 1; j++)
                free(dirs[j]);
            return luaL_argerror(L, 1, "include folders must be non-empty strings");
        }
        {
            /* absolute now: compilers run later, perhaps from elsewhere */
            char *abs = realpath(s, NULL);
            dirs[i - 1] = abs ? abs : strdup(s);
        }
        lua_pop(L, 1);
    }
    if (pdir && !(pcopy = strdup(pdir))) {
        for (int i = 0; i < MAX_INCLUDE; i++)
            free(dirs[i]);
        return luaL_error(L, "out of host memory");
    }
    for (int i = 0; i < MAX_INCLUDE; i++) {
        free(include_dirs[i]);
        include_dirs[i] = dirs[i];
    }
    free(plugin_dir);
    plugin_dir = pcopy;
    return 0;
}

/* The module is unloaded (dlclose) when its last Lua state closes. */
__attribute__((destructor)) static void free_include_path(void)
{
    for (int i = 0; i < MAX_INCLUDE; i++) {
        free(include_dirs[i]);
        include_dirs[i] = NULL;
    }
    free(plugin_dir);
    plugin_dir = NULL;
}

const char *const *l_include_dirs(void)
{
    return (const char *const *)include_dirs;
}

static int get_include_path(lua_State *L)
{
    lua_newtable(L);
    for (int i = 0; include_dirs[i]; i++) {
        lua_pushstring(L, include_dirs[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* ---- Module ------------------------------------------------------------------ */

static l_module *tomodule(lua_State *L, int arg)
{
    l_module *m = (l_module *)l_checkudata(L, arg, L_MODULE);
    if (!m->m)
        luaL_error(L, "attempt to use a closed " L_MODULE);
    return m;
}

static int module_release(lua_State *L)
{
    l_module *m = (l_module *)l_checkudata(L, 1, L_MODULE);
    if (m->m) {
        cp_kmodule_release(m->m); /* kernels keep the code loaded */
        m->m = NULL;
    }
    return 0;
}

/* Reads a file into a Lua string (pushed). */
static const char *push_file(lua_State *L, const char *path, size_t *len)
{
    luaL_Buffer b;
    FILE *f = fopen(path, "rb");
    size_t k;
    if (!f)
        return NULL;
    luaL_buffinit(L, &b);
    do {
        char *p = luaL_prepbuffer(&b);
        k = fread(p, 1, LUAL_BUFFERSIZE, f);
        luaL_addsize(&b, k);
    } while (k == LUAL_BUFFERSIZE);
    /* A read error (a directory opens but cannot be read: EISDIR) used to
     * end the loop like the end of the file, and the module compiled
     * from an empty source. */
    if (ferror(f)) {
        int e = errno;
        fclose(f);
        errno = e;
        return NULL;
    }
    fclose(f);
    luaL_pushresult(&b);
    return lua_tolstring(L, -1, len);
}

/* cupola.module{source=, name=, options=} / {path=} / {ptx=} / {cubin=path} */
static int module_new(lua_State *L)
{
    static const char *const opts[] = {"source", "path", "ptx", "cubin", "name", "options", "compiler", NULL};
    const char *options[65];
    cp_kmodule_desc d;
    l_module *m;
    int where = 0, nsrc = 0;
    char *log = NULL;
    cp_status st;

    l_checktable(L, 1);
    l_checkoptions(L, 1, "cupola.module", opts);
    memset(&d, 0, sizeof d);
    for (int i = 0; i < 4; i++) {
        int t = lua_getfield(L, 1, opts[i]);
        lua_pop(L, 1);
        if (t != LUA_TNIL)
            nsrc++;
        if (t != LUA_TNIL && t != LUA_TSTRING)
            return luaL_error(L, "cupola.module: option '%s' must be a string, not %s", opts[i],
                              (lua_getfield(L, 1, opts[i]), l_pushtyped(L, -1)));
    }
    if (nsrc != 1)
        return luaL_error(L, "cupola.module: give exactly one of 'source', 'path', 'ptx', 'cubin' "
                             "(%d given)",
                          nsrc);
    d.name = l_optstring_field(L, 1, "name", NULL);
    lua_getfield(L, 1, "source");
    lua_getfield(L, 1, "path");
    lua_getfield(L, 1, "ptx");
    lua_getfield(L, 1, "cubin"); /* stack: 2 source, 3 path, 4 ptx, 5 cubin */
    if (!lua_isnil(L, 2)) {
        d.kind = CP_KSRC_SOURCE;
        d.data = lua_tolstring(L, 2, &d.len);
        if (!d.name)
            d.name = "module.cu";
    } else if (!lua_isnil(L, 3)) {
        const char *path = lua_tostring(L, 3);
        d.kind = CP_KSRC_SOURCE;
        d.data = push_file(L, path, &d.len); /* at 6 */
        if (!d.data)
            return luaL_error(L, "cupola.module: option 'path': cannot read '%s' (%s)", path,
                              strerror(errno));
        if (!d.name) {
            const char *slash = strrchr(path, '/');
            d.name = slash ? slash + 1 : path;
        }
    } else if (!lua_isnil(L, 4)) {
        d.kind = CP_KSRC_PTX;
        d.data = lua_tolstring(L, 4, &d.len);
        if (!d.name)
            d.name = "module.ptx";
    } else {
        d.kind = CP_KSRC_CUBIN;
        d.data = lua_tolstring(L, 5, &d.len);
        if (!d.name) {
            const char *slash = strrchr(d.data, '/');
            d.name = slash ? slash + 1 : d.data;
        }
    }
    /* options: a list of strings, checked against the allow-list */
    lua_getfield(L, 1, "options");
    if (!lua_isnil(L, -1)) {
        lua_Integer n;
        if (!lua_istable(L, -1))
            return luaL_error(L, "cupola.module: option 'options' must be a list of strings, not %s",
                              l_pushtyped(L, -1));
        n = luaL_len(L, -1);
        if (n > 64)
            return luaL_error(L, "cupola.module: option 'options': at most 64 compiler options, got %I",
                              (LUAI_UACINT)n);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, -1, i);
            if (lua_type(L, -1) != LUA_TSTRING) {
                const char *t = luaL_typename(L, -1);
                return luaL_error(L, "cupola.module: option 'options': item %d is a %s, not a string%s",
                                  (int)i, t, l_pushgot(L, -1));
            }
            options[i - 1] = lua_tostring(L, -1);
            if (cp_cc_check_option(options[i - 1]) != CP_OK)
                return luaL_error(L, "cupola.module: %s", cp_error_msg());
            lua_pop(L, 1); /* the string stays alive in the options table */
        }
        options[n] = NULL;
        d.options = options;
    }
    d.include_dirs = (const char *const *)include_dirs;
    {
        /* compiler: "nvrtc" (the default) or "nvcc" (the toolkit's, for
         * sources NVRTC cannot take; CUDA backend) */
        const char *c = l_optstring_field(L, 1, "compiler", "nvrtc");
        if (strcmp(c, "nvcc") == 0)
            d.nvcc = 1;
        else if (strcmp(c, "nvrtc") != 0)
            return luaL_error(L, "cupola.module: option 'compiler' must be \"nvrtc\" or \"nvcc\", not '%s'", c);
        if (d.nvcc && d.kind != CP_KSRC_SOURCE)
            return luaL_error(L, "cupola.module: option 'compiler' applies to source= and path= only");
    }

    m = (l_module *)lua_newuserdatauv(L, sizeof *m, 0);
    m->m = NULL;
    luaL_setmetatable(L, L_MODULE);
    st = cp_kmodule_load(&d, &m->m, &where, &log);
    if (st != CP_OK) {
        if (st == CP_ERR_INVALID)
            return l_fail_log(L, "cupola.module: ", log);
        free(log);
        return luaL_error(L, "cupola.module: %s", cp_error_msg());
    }
    /* fields the user reads (m.name, m.cached, m.code, m.log), in a table
     * weakly keyed by the handle */
    lua_getfield(L, LUA_REGISTRYINDEX, "cupola.Module.fields");
    lua_pushvalue(L, -2);
    lua_createtable(L, 0, 4);
    lua_pushstring(L, d.name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, where == 1 ? "memory" : where == 2 ? "disk" : where == -1 ? "as given" : "compiled");
    lua_setfield(L, -2, "code");
    lua_pushboolean(L, where == 1 || where == 2);
    lua_setfield(L, -2, "cached");
    if (log && *log) {
        lua_pushstring(L, log);
        lua_setfield(L, -2, "log");
    }
    free(log);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    return 1;
}

static void push_fields(lua_State *L, int obj)
{
    lua_getfield(L, LUA_REGISTRYINDEX, "cupola.Module.fields");
    lua_pushvalue(L, obj);
    lua_rawget(L, -2);
    lua_remove(L, -2);
}

static int module_index(lua_State *L)
{
    const char *k = l_checkstring(L, 2);
    if (l_getmethod(L, 1, k))
        return 1;
    push_fields(L, 1);
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, k);
        return 1;
    }
    lua_pushnil(L);
    return 1;
}

static int module_tostring(lua_State *L)
{
    l_module *m = (l_module *)l_checkudata(L, 1, L_MODULE);
    if (!m->m)
        lua_pushliteral(L, L_MODULE " (closed)");
    else
        lua_pushfstring(L, L_MODULE " '%s' (%p)", cp_kmodule_name(m->m), (void *)m);
    return 1;
}

/* m:kernel(name, {"ptr", "f32", ...}) -> Kernel */
static int module_kernel(lua_State *L)
{
    l_module *m = tomodule(L, 1);
    size_t namelen;
    const char *name = l_checklstring(L, 2, &namelen);
    l_kernel *k;
    lua_Integer n;
    cp_ktype types[CP_KMAX_PARAMS];
    cp_status st;

    /* "set\0x" used to find the kernel 'set' */
    if (strlen(name) != namelen)
        luaL_argerror(L, 2, lua_pushfstring(L, "a kernel name holds no NUL byte, got %s", l_pushshown(L, 2)));
    l_checktable(L, 3);
    n = luaL_len(L, 3);
    if (n > CP_KMAX_PARAMS)
        luaL_argerror(L, 3, lua_pushfstring(L, "at most 128 parameters, got %I", (LUAI_UACINT)n));
    for (lua_Integer i = 1; i <= n; i++) {
        const char *t;
        int found = -1;
        lua_geti(L, 3, i);
        t = lua_tostring(L, -1);
        if (lua_type(L, -1) == LUA_TSTRING)
            for (int j = 0; j < CP_KT_COUNT; j++)
                if (strcmp(t, cp_ktype_names[j]) == 0)
                    found = j;
        if (found < 0)
            return luaL_argerror(
                L, 3,
                lua_pushfstring(L, "parameter %d: unknown type '%s' (ptr, i32, u32, i64, u64, f32, "
                                   "f64, device_pool)",
                                (int)i, t ? t : l_pushtyped(L, -1)));
        types[i - 1] = (cp_ktype)found;
        lua_pop(L, 1);
    }
    k = (l_kernel *)lua_newuserdatauv(L, sizeof *k, 1);
    k->tag = L_TAG(L_T_KERNEL);
    k->k = NULL;
    k->n = (unsigned)n;
    memcpy(k->types, types, (size_t)n * sizeof *types);
    for (unsigned i = 0; i < CP_KMAX_PARAMS; i++)
        k->argp[i] = &k->vals[i];
    snprintf(k->name, sizeof k->name, "%s", name);
    luaL_setmetatable(L, L_KERNEL);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1); /* the kernel keeps its module's handle alive */
    st = cp_kernel_get(m->m, name, types, (unsigned)n, &k->k);
    if (st != CP_OK) {
        /* Name the argument at fault: a name the module lacks is the
         * name's, anything else (a count or a type that does not match the
         * kernel's signature) the declared types'. */
        const char *msg = cp_error_msg();
        if (st != CP_ERR_INVALID) /* a driver failure, with its CUDA name */
            return luaL_error(L, "%s", msg);
        return luaL_argerror(L, strncmp(msg, "no kernel ", 10) == 0 ? 2 : 3, msg);
    }
    return 1;
}

/* ---- Kernel ------------------------------------------------------------------ */

/* The Kernel at arg, open or closed. */
static l_kernel *udkernel(lua_State *L, int arg)
{
    return (l_kernel *)l_checktag(L, arg, L_T_KERNEL, sizeof(l_kernel), L_KERNEL);
}

static l_kernel *tokernel(lua_State *L, int arg)
{
    l_kernel *k = udkernel(L, arg);
    if (!k->k)
        luaL_error(L, "attempt to use a closed " L_KERNEL);
    return k;
}

static int kernel_release(lua_State *L)
{
    l_kernel *k = udkernel(L, 1);
    if (k->k) {
        cp_kernel_release(k->k);
        k->k = NULL;
    }
    return 0;
}

/* k:registers() -> registers per thread (CUDA), or nil on the host backend */
static int kernel_registers(lua_State *L)
{
    l_kernel *k = tokernel(L, 1);
    int n = 0;
    cp_status st = cp_kernel_registers(k->k, &n);
    if (st == CP_ERR_UNSUPPORTED) {
        lua_pushnil(L);
        return 1;
    }
    l_check(L, st);
    lua_pushinteger(L, n);
    return 1;
}

static int kernel_tostring(lua_State *L)
{
    l_kernel *k = udkernel(L, 1);
    if (!k->k)
        lua_pushliteral(L, L_KERNEL " (closed)");
    else
        lua_pushfstring(L, L_KERNEL " '%s' (%d parameters)", k->name, (int)k->n);
    return 1;
}

/* A dimension option's value at idx: an integer, or {x, y, z} (missing ones
 * are 1). */
static void dims_value(lua_State *L, int idx, const char *key, unsigned out[3])
{
    int t = lua_type(L, idx);
    out[0] = out[1] = out[2] = 1;
    if (t == LUA_TNUMBER) {
        int isint;
        lua_Integer v = lua_tointegerx(L, idx, &isint);
        if (!isint || v < 0 || v > 0xffffffffLL)
            luaL_error(L, "bad argument #1 to 'launch' (option '%s' must be an integer in "
                          "1..4294967295, got %s)",
                       key, l_pushshown(L, idx));
        out[0] = (unsigned)v;
    } else if (t == LUA_TTABLE) {
        lua_Integer n = luaL_len(L, idx);
        if (n < 1 || n > 3)
            luaL_error(L, "bad argument #1 to 'launch' (option '%s' must be {x}, {x, y} or {x, y, z}, "
                          "got a table of length %I)",
                       key, (LUAI_UACINT)n);
        for (lua_Integer i = 1; i <= n; i++) {
            int isint;
            lua_Integer v;
            lua_geti(L, idx, i);
            v = lua_tointegerx(L, -1, &isint);
            if (lua_type(L, -1) != LUA_TNUMBER || !isint || v < 0 || v > 0xffffffffLL)
                luaL_error(L, "bad argument #1 to 'launch' (option '%s': item %d must be an "
                              "integer in 1..4294967295, got %s)",
                           key, (int)i, l_pushtyped(L, -1));
            out[i - 1] = (unsigned)v;
            lua_pop(L, 1);
        }
    } else {
        luaL_error(L, "bad argument #1 to 'launch' (option '%s' must be an integer or {x, y, z}, not %s)",
                   key, l_pushtyped(L, idx));
    }
}

/* The launch options, read in one pass over the table (the hot path: no
 * lookups by name, no allocation). */
static void launch_options(lua_State *L, cp_klaunch *l)
{
    int have_grid = 0, have_block = 0, have_threads = 0;
    lua_Integer threads = 0;
    unsigned block[3] = {256, 1, 1};
    /* inside the loop the key is at v - 1 and its value at v */
    int v = lua_gettop(L) + 2;
    l->shared = 0;
    l->stream = l_defaultstream()->s;
    lua_pushnil(L);
    while (lua_next(L, 2) != 0) {
        size_t kl;
        const char *key;
        if (lua_type(L, -2) != LUA_TSTRING)
            luaL_error(L, "bad argument #1 to 'launch' (option names must be strings, not %s)",
                       l_pushtyped(L, -2));
        key = lua_tolstring(L, -2, &kl);
        if (kl == 4 && memcmp(key, "grid", 4) == 0) {
            dims_value(L, v, "grid", l->grid);
            have_grid = 1;
        } else if (kl == 5 && memcmp(key, "block", 5) == 0) {
            dims_value(L, v, "block", block);
            have_block = 1;
        } else if (kl == 6 && memcmp(key, "shared", 6) == 0) {
            int isint;
            lua_Integer sh = lua_tointegerx(L, v, &isint);
            uint64_t u;
            /* a size string ("48KiB") as everywhere sizes are taken */
            if (lua_type(L, v) == LUA_TSTRING && l_parsesize(lua_tostring(L, v), &u) == 0 &&
                u <= (uint64_t)LUA_MAXINTEGER)
                sh = (lua_Integer)u, isint = 1;
            else if (lua_type(L, v) != LUA_TNUMBER)
                isint = 0;
            if (!isint || sh < 0)
                luaL_error(L, "bad argument #1 to 'launch' (option 'shared' must be a byte count "
                              ">= 0 or a size such as \"48KiB\", got %s)",
                           l_pushtyped(L, v));
            /* Any count is taken: the backend's limit check (before the
             * value is used) says what the limit is; a count over 2^31
             * used to be called "not a byte count". */
            l->shared = (size_t)sh;
        } else if (kl == 6 && memcmp(key, "stream", 6) == 0) {
            l_stream *st = l_testudstream(L, v);
            if (!st)
                luaL_error(L, "bad argument #1 to 'launch' (option 'stream' must be a " L_STREAM
                              ", not %s)",
                           l_pushtyped(L, v));
            if (!st->ref)
                luaL_error(L, "attempt to use a closed " L_STREAM);
            l->stream = st->ref->s;
        } else if (kl == 7 && memcmp(key, "threads", 7) == 0) {
            int isint;
            threads = lua_tointegerx(L, v, &isint);
            if (lua_type(L, v) != LUA_TNUMBER || !isint || threads < 1)
                luaL_error(L, "bad argument #1 to 'launch' (option 'threads' must be an integer "
                              ">= 1, got %s)",
                           l_pushtyped(L, v));
            have_threads = 1;
        } else {
            luaL_error(L, "bad argument #1 to 'launch' (unknown option %s)", l_pushshown(L, -2));
        }
        lua_pop(L, 1);
    }
    if (have_threads) {
        uint64_t g;
        if (have_grid)
            luaL_error(L, "bad argument #1 to 'launch' (give 'grid' or 'threads', not both)");
        if (block[1] != 1 || block[2] != 1 || block[0] == 0)
            luaL_error(L, "bad argument #1 to 'launch' (with 'threads', 'block' is one integer >= 1)");
        g = ((uint64_t)threads + block[0] - 1) / block[0];
        /* threads is at most 2^63 - 1, so the sum cannot wrap */
        if (g > 0xffffffffULL)
            luaL_error(L, "bad argument #1 to 'launch' (option 'threads': %I threads need %I "
                          "blocks of %d, more than a grid holds)",
                       (lua_Integer)threads, (lua_Integer)g, (int)block[0]);
        l->grid[0] = (unsigned)g;
        l->grid[1] = l->grid[2] = 1;
    } else {
        if (!have_grid)
            luaL_error(L, "bad argument #1 to 'launch' (option 'grid' is required)");
        if (!have_block)
            luaL_error(L, "bad argument #1 to 'launch' (option 'block' is required)");
    }
    memcpy(l->block, block, sizeof block);
}

static int arg_error(lua_State *L, int arg, l_kernel *k, unsigned i, const char *what)
{
    return luaL_error(L, "bad argument #%d to 'launch' (kernel '%s' parameter %d, %s: %s)", arg,
                      k->name, (int)i + 1, cp_ktype_names[k->types[i]], what);
}

/* k:launch({grid=, block=, shared=0, stream=} or {threads=N, block=256}, ...)
 * Argument numbers in messages count the options table as #1, as a method
 * call's do not count the kernel. */
static int kernel_launch(lua_State *L)
{
    l_kernel *k = udkernel(L, 1);
    if (!k->k)
        return luaL_error(L, "attempt to use a closed " L_KERNEL);
    int nargs = lua_gettop(L) - 2;
    cp_klaunch l;
    cp_status st;

    if (lua_type(L, 2) != LUA_TTABLE)
        return luaL_error(L, "bad argument #1 to 'launch' (launch options expected: {grid=, block=} "
                             "or {threads=, block=}, got %s)",
                          l_pushtyped(L, 2));
    if (nargs != (int)k->n)
        return luaL_error(L, "bad argument #%d to 'launch' (kernel '%s' takes %d arguments, got %d)",
                          (nargs < (int)k->n ? nargs : (int)k->n) + 2, k->name, (int)k->n, nargs);
    launch_options(L, &l);

    for (unsigned i = 0; i < k->n; i++) {
        int a = (int)i + 3, arg = (int)i + 2, isint = 0;
        int t = lua_type(L, a);
        lua_Integer v = 0;
        switch (k->types[i]) {
        case CP_KT_PTR:
            if (t == LUA_TUSERDATA) {
                /* a Buffer: its tag, no lookup by name */
                l_buffer *b = l_testudbuffer(L, a);
                if (!b)
                    return arg_error(L, arg, k, i, lua_pushfstring(L, "a cupola.Buffer or an integer address expected, got %s", l_pushtyped(L, a)));
                if (!l_buffer_live(b))
                    return arg_error(L, arg, k, i, "the cupola.Buffer is closed (freed)");
                memcpy(&k->vals[i], &b->ptr, sizeof b->ptr);
            } else if (t == LUA_TNUMBER && (v = lua_tointegerx(L, a, &isint), isint)) {
                k->vals[i] = (uint64_t)v;
            } else {
                return arg_error(L, arg, k, i, lua_pushfstring(L, "a cupola.Buffer or an integer address expected, got %s", l_pushtyped(L, a)));
            }
            break;
        case CP_KT_DEVICE_POOL: {
            void **dp = (void **)luaL_testudata(L, a, L_DEVICEPOOL);
            if (!dp)
                return arg_error(L, arg, k, i, lua_pushfstring(L, "a cupola.DevicePool expected, got %s", l_pushtyped(L, a)));
            if (!*dp)
                return arg_error(L, arg, k, i, "the cupola.DevicePool is closed");
            memcpy(&k->vals[i], dp, sizeof *dp);
            break;
        }
        case CP_KT_F32: {
            float f;
            if (t != LUA_TNUMBER)
                return arg_error(L, arg, k, i, lua_pushfstring(L, "number expected, got %s", l_pushtyped(L, a)));
            f = (float)lua_tonumber(L, a);
            memcpy(&k->vals[i], &f, sizeof f);
            break;
        }
        case CP_KT_F64: {
            double f;
            if (t != LUA_TNUMBER)
                return arg_error(L, arg, k, i, lua_pushfstring(L, "number expected, got %s", l_pushtyped(L, a)));
            f = (double)lua_tonumber(L, a);
            memcpy(&k->vals[i], &f, sizeof f);
            break;
        }
        default:
            if (t != LUA_TNUMBER)
                return arg_error(L, arg, k, i, lua_pushfstring(L, "integer expected, got %s", l_pushtyped(L, a)));
            v = lua_tointegerx(L, a, &isint);
            if (!isint)
                return arg_error(L, arg, k, i, lua_pushfstring(L, "number has no integer representation, got %s", l_pushshown(L, a)));
            if (k->types[i] == CP_KT_I32) {
                int32_t x;
                if (v < INT32_MIN || v > INT32_MAX)
                    return arg_error(L, arg, k, i, lua_pushfstring(L, "%I is out of range -2147483648..2147483647", v));
                x = (int32_t)v;
                memcpy(&k->vals[i], &x, sizeof x);
            } else if (k->types[i] == CP_KT_U32) {
                uint32_t x;
                if (v < 0 || v > (lua_Integer)UINT32_MAX)
                    return arg_error(L, arg, k, i, lua_pushfstring(L, "%I is out of range 0..4294967295", v));
                x = (uint32_t)v;
                memcpy(&k->vals[i], &x, sizeof x);
            } else if (k->types[i] == CP_KT_U64) {
                if (v < 0)
                    return arg_error(L, arg, k, i, lua_pushfstring(L, "%I is negative", v));
                k->vals[i] = (uint64_t)v;
            } else {
                k->vals[i] = (uint64_t)v;
            }
            break;
        }
    }
    st = cp_kernel_launch(k->k, &l, k->argp);
    if (st == CP_ERR_INVALID)
        return luaL_error(L, "bad argument #1 to 'launch' (%s)", cp_error_msg());
    l_check(L, st);
    return 0;
}

/* cupola._launch_repeat(k, opts, n, ...): k:launch(opts, ...) n times from
 * C, the options and arguments marshalled once: for bench/launch.lua, which
 * sets the binding's cost apart from the core's and the driver's. */
static int launch_repeat(lua_State *L)
{
    lua_Integer n = l_checkinteger(L, 3);
    l_kernel *k = tokernel(L, 1);
    cp_klaunch l;
    double t0, t1;
    struct timespec ts;
    lua_remove(L, 3);
    if (lua_type(L, 2) != LUA_TTABLE)
        return luaL_argerror(L, 2, "launch options expected");
    luaL_argcheck(L, lua_gettop(L) - 2 == (int)k->n, 4, "wrong number of kernel arguments");
    launch_options(L, &l);
    for (unsigned i = 0; i < k->n; i++) {
        lua_Integer v;
        if (k->types[i] == CP_KT_PTR && l_testudbuffer(L, (int)i + 3)) {
            void *p = l_checkbuffer(L, (int)i + 3)->ptr;
            memcpy(&k->vals[i], &p, sizeof p);
        } else if (k->types[i] == CP_KT_F32) {
            float f = (float)l_checknumber(L, (int)i + 3);
            memcpy(&k->vals[i], &f, sizeof f);
        } else if (k->types[i] == CP_KT_F64) {
            double f = (double)l_checknumber(L, (int)i + 3);
            memcpy(&k->vals[i], &f, sizeof f);
        } else {
            v = l_checkinteger(L, (int)i + 3);
            memcpy(&k->vals[i], &v, cp_ktype_sizes[k->types[i]]);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t0 = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    for (lua_Integer i = 0; i < n; i++)
        l_check(L, cp_kernel_launch(k->k, &l, k->argp));
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t1 = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    lua_pushnumber(L, (lua_Number)(t1 - t0));
    return 1;
}

/* cupola.module_cache_stats() -> {memory_hits=, disk_hits=, misses=, ...} */
static int cache_stats(lua_State *L)
{
    cp_cache_stats s;
    cp_cache_get_stats(&s);
    lua_createtable(L, 0, 8);
    lua_pushinteger(L, (lua_Integer)s.memory_hits);
    lua_setfield(L, -2, "memory_hits");
    lua_pushinteger(L, (lua_Integer)s.disk_hits);
    lua_setfield(L, -2, "disk_hits");
    lua_pushinteger(L, (lua_Integer)s.misses);
    lua_setfield(L, -2, "misses");
    lua_pushinteger(L, (lua_Integer)s.stores);
    lua_setfield(L, -2, "stores");
    lua_pushinteger(L, (lua_Integer)s.rebuilt);
    lua_setfield(L, -2, "rebuilt");
    lua_pushboolean(L, s.disk);
    lua_setfield(L, -2, "disk");
    lua_pushstring(L, s.dir);
    lua_setfield(L, -2, "dir");
    if (!s.disk) {
        lua_pushstring(L, s.why);
        lua_setfield(L, -2, "why");
    }
    return 1;
}

/* cupola.module_cache_forget(): drops the in-memory cache (the next compile
 * of the same source reads the disk, as a new process would). */
static int cache_forget(lua_State *L)
{
    (void)L;
    cp_cache_forget_memory();
    return 0;
}

void l_open_module(lua_State *L)
{
    static const luaL_Reg module_meta[] = {{"__index", module_index},
                                           {"__gc", module_release},
                                           {"__close", module_release},
                                           {"__tostring", module_tostring},
                                           {"__newindex", l_readonly_newindex},
                                           {NULL, NULL}};
    static const luaL_Reg module_methods[] = {{"kernel", module_kernel},
                                              {"close", module_release},
                                              {NULL, NULL}};
    /* no __index function: the methods table itself, one lookup per launch */
    static const luaL_Reg kernel_meta[] = {{"__gc", kernel_release},
                                           {"__close", kernel_release},
                                           {"__tostring", kernel_tostring},
                                           {"__newindex", l_readonly_newindex},
                                           {NULL, NULL}};
    static const luaL_Reg kernel_methods[] = {{"launch", kernel_launch},
                                              {"registers", kernel_registers},
                                              {"close", kernel_release},
                                              {NULL, NULL}};
    static const luaL_Reg funcs[] = {{"module", module_new},
                                     {"module_cache_stats", cache_stats},
                                     {"module_cache_forget", cache_forget},
                                     {"_set_include_path", set_include_path},
                                     {"_launch_repeat", launch_repeat},
                                     {"_include_path", get_include_path},
                                     {NULL, NULL}};
    l_newclass(L, L_MODULE, module_meta, module_methods);
    l_newclass(L, L_KERNEL, kernel_meta, kernel_methods);
    /* per-module fields (name, cached, log), weakly keyed by the handle */
    lua_newtable(L);
    lua_newtable(L);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, "cupola.Module.fields");
    luaL_setfuncs(L, funcs, 0);
}
