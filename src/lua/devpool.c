/*
 * devpool.c: cupola.DevicePool (allocation inside kernels), created by
 * cupola.device_pool{kind=, capacity=}, and cupola.run_concurrent.  The
 * built-in kinds are the backend's (cp_be->dp_*); a plugin pool's
 * allocator is the user's source (kernel/dp_plugin.h), run and checked by
 * the same operations.
 *
 * The userdata's first member is the device address of the pool's
 * device-side state (a cupola_device_pool, <cupola/device.h>): a user kernel
 * gets exactly that pointer for a parameter declared "device_pool".
 *
 * A run is launched and finished inside one call, so nothing the run uses
 * (pool, stream, event) can be collected while it is in flight.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "binding.h"
#include "kernel/compile.h"
#include "kernel/dp_plugin.h"

#define L_DEVPOOL L_DEVICEPOOL /* binding.h */
#define RUN_FN L_DEVPOOL ":run"
#define MAX_CHILDREN 2048u /* CUDA's default pending-launch limit */

typedef struct l_devpool {
    void *dev;       /* first: the device-side state (NULL once closed) */
    cp_devpool *p;   /* a built-in kind's pool, or NULL */
    cp_dplugin *pl;  /* a plugin pool, or NULL */
    int kind;        /* a cp_dp_kind, or KIND_PLUGIN (kind_name) */
    size_t capacity;
    uint64_t runs;   /* default seeds differ from run to run */
} l_devpool;

/* The kinds: the backend's (cp_dp_kind_name), then the plugin. */
#define KIND_PLUGIN CP_DP_KIND_COUNT

static const char *kind_name(int k)
{
    return k == KIND_PLUGIN ? "plugin" : cp_dp_kind_name(k);
}

static l_devpool *todevpool(lua_State *L, int arg)
{
    l_devpool *d = (l_devpool *)l_checkudata(L, arg, L_DEVPOOL);
    if (!d->p && !d->pl)
        luaL_error(L, "attempt to use a closed " L_DEVPOOL);
    return d;
}

static void check_supported(lua_State *L)
{
    if (!cp_be->dp_create)
        luaL_error(L, "cupola.device_pool: not supported by the %s backend of this build",
                   cp_be->name);
}

/* A plugin pool's source: the string of option 'source', or the file of
 * option 'path' (pushed); its name in *name. */
static const char *plugin_source(lua_State *L, size_t *len, const char **name)
{
    static const char *const fn = "cupola.device_pool";
    int ts, tp;
    ts = lua_getfield(L, 1, "source");
    tp = lua_getfield(L, 1, "path");
    if ((ts != LUA_TNIL) == (tp != LUA_TNIL))
        luaL_error(L, "%s: a plugin pool takes exactly one of 'source' and 'path'", fn);
    *name = l_optstring_field(L, 1, "name", NULL);
    if (ts != LUA_TNIL) {
        if (ts != LUA_TSTRING)
            luaL_error(L, "%s: option 'source' must be a string, not %s", fn, lua_typename(L, ts));
        lua_pop(L, 1);
        if (!*name)
            *name = "plugin.cu";
        return lua_tolstring(L, -1, len);
    } else {
        const char *path;
        luaL_Buffer b;
        FILE *f;
        size_t k;
        if (tp != LUA_TSTRING)
            luaL_error(L, "%s: option 'path' must be a string, not %s", fn, lua_typename(L, tp));
        path = lua_tostring(L, -1);
        if (!(f = fopen(path, "rb")))
            luaL_error(L, "%s: option 'path': cannot read '%s' (%s)", fn, path, strerror(errno));
        luaL_buffinit(L, &b);
        do {
            char *q = luaL_prepbuffer(&b);
            k = fread(q, 1, LUAL_BUFFERSIZE, f);
            luaL_addsize(&b, k);
        } while (k == LUAL_BUFFERSIZE);
        if (ferror(f)) {
            int e = errno;
            fclose(f);
            luaL_error(L, "%s: option 'path': cannot read '%s' (%s)", fn, path, strerror(e));
        }
        fclose(f);
        luaL_pushresult(&b);
        if (!*name) {
            const char *slash = strrchr(path, '/');
            *name = slash ? slash + 1 : path;
        }
        return lua_tolstring(L, -1, len);
    }
}

/* option 'capacity' of cupola.device_pool: a positive number of bytes, or a
 * size string ("8GiB") */
static lua_Integer devpool_capacity(lua_State *L)
{
    lua_Integer cap;
    lua_getfield(L, 1, "capacity");
    if (lua_type(L, -1) == LUA_TNUMBER) {
        int isint;
        cap = lua_tointegerx(L, -1, &isint);
        if (!isint || cap <= 0)
            return luaL_error(L, "cupola.device_pool: option 'capacity' must be a positive "
                                 "integer number of bytes, not %s", l_pushshown(L, -1));
    } else if (lua_type(L, -1) == LUA_TSTRING) {
        cap = (lua_Integer)l_optsize_field(L, 1, "capacity", 0);
        if (cap <= 0)
            return luaL_error(L, "cupola.device_pool: option 'capacity' must be positive, got %s",
                              l_pushshown(L, -1));
    } else {
        return luaL_error(L, "cupola.device_pool: option 'capacity' is required (bytes), got %s",
                          l_pushtyped(L, -1));
    }
    lua_pop(L, 1);
    return cap;
}

/* A plugin's compiler options: the user's 'options' (at most 64, each
 * checked), then each folder of 'include' (at most 16) as -I.  The strings
 * stay valid while the values left on the stack do (the options table, then
 * the -I strings, all below the top); returns their count. */
static int plugin_compiler_options(lua_State *L, const char *options[65 + 16])
{
    int nopt = 0, optpos;
    lua_getfield(L, 1, "options"); /* kept on the stack while the strings are used */
    if (!lua_isnil(L, -1)) {
        lua_Integer n;
        if (!lua_istable(L, -1))
            return luaL_error(L, "cupola.device_pool: option 'options' must be a list of strings, not %s",
                              l_pushtyped(L, -1));
        n = luaL_len(L, -1);
        if (n > 64)
            return luaL_error(L, "cupola.device_pool: option 'options': at most 64 compiler options");
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, -1, i);
            if (lua_type(L, -1) != LUA_TSTRING)
                return luaL_error(L, "cupola.device_pool: option 'options': item %d is a %s, not a string%s",
                                  (int)i, luaL_typename(L, -1), l_pushgot(L, -1));
            options[i - 1] = lua_tostring(L, -1);
            if (cp_cc_check_option(options[i - 1]) != CP_OK)
                return luaL_error(L, "cupola.device_pool: %s", cp_error_msg());
            lua_pop(L, 1);
        }
        nopt = (int)n;
    }
    luaL_checkstack(L, 24, "include folders");
    optpos = lua_gettop(L);
    /* include: folders of the user's (a peer's checkout), as -I options */
    lua_getfield(L, 1, "include");
    if (!lua_isnil(L, -1)) {
        lua_Integer n;
        if (!lua_istable(L, -1))
            return luaL_error(L, "cupola.device_pool: option 'include' must be a list of folders, not %s",
                              l_pushtyped(L, -1));
        n = luaL_len(L, -1);
        if (n > 16)
            return luaL_error(L, "cupola.device_pool: option 'include': at most 16 folders");
        for (lua_Integer i = 1; i <= n; i++) {
            const char *dir;
            struct stat sb;
            lua_geti(L, -1, i);
            if (lua_type(L, -1) != LUA_TSTRING)
                return luaL_error(L, "cupola.device_pool: option 'include': item %d is a %s, not a string%s",
                                  (int)i, luaL_typename(L, -1), l_pushgot(L, -1));
            dir = lua_tostring(L, -1);
            if (!*dir || stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
                return luaL_error(L, "cupola.device_pool: option 'include': '%s' is not a folder", dir);
            lua_pushfstring(L, "-I%s", dir); /* kept on the stack */
            options[nopt++] = lua_tostring(L, -1);
            lua_remove(L, -2);
            lua_insert(L, optpos); /* below the include table */
            optpos++;
        }
    }
    lua_pop(L, 1);
    return nopt;
}

/* kind = "plugin": the peer's source compiled and its pool created; pushes
 * the pool (or returns what out of memory returns) */
static int devpool_new_plugin(lua_State *L, lua_Integer cap)
{
    cp_dplugin_desc pd;
    const char *options[65 + 16];
    int nopt, top;
    lua_Integer nthreads = 1024;
    char *log = NULL;
    l_devpool *d;
    cp_status st;
    memset(&pd, 0, sizeof pd);
    pd.source = plugin_source(L, &pd.len, &pd.name); /* at top */
    top = lua_gettop(L);
    lua_getfield(L, 1, "init_threads");
    if (!lua_isnil(L, -1)) {
        int isint;
        nthreads = lua_tointegerx(L, -1, &isint);
        if (!isint || nthreads < 1 || nthreads > (1 << 30))
            return luaL_error(L, "cupola.device_pool: option 'init_threads' must be an integer "
                                 "in 1..2^30, not %s", l_pushtyped(L, -1));
    }
    lua_pop(L, 1);
    nopt = plugin_compiler_options(L, options);
    if (nopt > 0) {
        options[nopt] = NULL;
        pd.options = options;
    }
    {
        const char *c = l_optstring_field(L, 1, "compiler", "nvrtc");
        if (strcmp(c, "nvcc") == 0)
            pd.nvcc = 1;
        else if (strcmp(c, "nvrtc") != 0)
            return luaL_error(L, "cupola.device_pool: option 'compiler' must be \"nvrtc\" or \"nvcc\", not '%s'", c);
    }
    pd.include_dirs = l_include_dirs();
    pd.capacity = (size_t)cap;
    pd.init_threads = (uint64_t)nthreads;
    d = (l_devpool *)lua_newuserdatauv(L, sizeof *d, 1);
    memset(d, 0, sizeof *d);
    luaL_setmetatable(L, L_DEVPOOL);
    /* what the survey needs to compile the plugin into its kernels */
    lua_createtable(L, 0, 4);
    lua_pushvalue(L, top);
    lua_setfield(L, -2, "source");
    lua_pushstring(L, pd.name);
    lua_setfield(L, -2, "name");
    /* the options as compiled: the user's, then the include folders' -I */
    lua_createtable(L, nopt, 0);
    for (int i = 0; i < nopt; i++) {
        lua_pushstring(L, options[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "options");
    lua_pushstring(L, pd.nvcc ? "nvcc" : "nvrtc");
    lua_setfield(L, -2, "compiler");
    lua_setiuservalue(L, -2, 1);
    st = cp_dplugin_create(&pd, &d->pl, &log);
    if (st == CP_ERR_INVALID && log)
        return l_fail_log(L, "cupola.device_pool: ", log);
    free(log);
    if (st == CP_ERR_OOM)
        return l_alloc_result_info(L, st, "plugin", (uint64_t)cap, cp_be->get_device(), NULL);
    if (st != CP_OK)
        return luaL_error(L, "cupola.device_pool: %s", cp_error_msg());
    d->dev = cp_dplugin_state(d->pl);
    d->kind = KIND_PLUGIN;
    d->capacity = (size_t)cap;
    return 1;
}

/* cupola.device_pool{kind=, capacity=} and, for kind = "plugin",
 * source= | path=, name=, options=, init_threads=, include= (folders: -I
 * options after the user's), compiler= ("nvrtc" or "nvcc") */
static int devpool_new(lua_State *L)
{
    static const char *const opts[] = {"kind", "capacity", NULL};
    static const char *const plugin_opts[] = {"kind", "capacity", "source", "path", "name",
                                              "options", "init_threads", "include", "compiler", NULL};
    const char *kname;
    lua_Integer cap;
    int k;
    l_devpool *d;
    cp_status st;
    cp_devpool *p = NULL;

    l_checktable(L, 1);
    kname = l_optstring_field(L, 1, "kind", NULL);
    if (!kname) {
        l_checkoptions(L, 1, "cupola.device_pool", plugin_opts);
        l_pushnames(L, kind_name, " or ");
        return luaL_error(L, "cupola.device_pool: option 'kind' is required (%s)", lua_tostring(L, -1));
    }
    for (k = 0; kind_name(k) && strcmp(kind_name(k), kname) != 0; k++)
        ;
    l_checkoptions(L, 1, "cupola.device_pool", k == KIND_PLUGIN ? plugin_opts : opts);
    if (!kind_name(k)) {
        l_pushnames(L, kind_name, " or ");
        return luaL_error(L, "cupola.device_pool: option 'kind': unknown kind '%s' (%s)", kname,
                          lua_tostring(L, -1));
    }
    cap = devpool_capacity(L);
    check_supported(L);
    if (k == KIND_PLUGIN)
        return devpool_new_plugin(L, cap);
    d = (l_devpool *)lua_newuserdatauv(L, sizeof *d, 1);
    memset(d, 0, sizeof *d);
    luaL_setmetatable(L, L_DEVPOOL);
    st = cp_be->dp_create(&p, (cp_dp_kind)k, (size_t)cap);
    if (st != CP_OK)
        return l_alloc_result_info(L, st, kind_name(k), (uint64_t)cap, cp_be->get_device(), NULL);
    d->p = p;
    d->dev = cp_be->dp_state(p);
    d->kind = k;
    d->capacity = (size_t)cap;
    return 1;
}

static int devpool_close(lua_State *L)
{
    l_devpool *d = (l_devpool *)l_checkudata(L, 1, L_DEVPOOL);
    if (d->p) {
        cp_devpool *p = d->p;
        d->p = NULL;
        d->dev = NULL;
        cp_be->dp_destroy(p);
    }
    if (d->pl) {
        cp_dplugin *pl = d->pl;
        d->pl = NULL;
        d->dev = NULL;
        cp_dplugin_destroy(pl);
    }
    return 0;
}

/* ---- run options ----------------------------------------------------------- */

typedef struct run_req {
    l_devpool *d;
    cp_dp_run_args a;
    l_streamref *stream;
    cp_event *wait, *record;
    cp_dp_run *run;         /* a built-in pool's run */
    cp_dplugin_run *prun;   /* a plugin pool's */
} run_req;

static cp_status req_launch(run_req *q)
{
    if (q->d->pl)
        return cp_dplugin_launch(q->d->pl, &q->a, q->stream->s, &q->prun);
    return cp_be->dp_launch(q->d->p, &q->a, q->stream->s, &q->run);
}

static cp_status req_finish(run_req *q, cp_dp_run_result *res)
{
    if (q->prun)
        return cp_dplugin_finish(q->prun, res);
    return cp_be->dp_finish(q->run, res);
}

static uint64_t positive_field(lua_State *L, int idx, const char *fn, const char *key,
                               lua_Integer def, lua_Integer min)
{
    lua_Integer v;
    lua_getfield(L, idx, key);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        if (def < min)
            luaL_error(L, "%s: option '%s' is required", fn, key);
        return (uint64_t)def;
    }
    if (!lua_isinteger(L, -1)) {
        int isint = 0;
        v = lua_tointegerx(L, -1, &isint);
        if (!isint)
            luaL_error(L, "%s: option '%s' must be an integer, not %s", fn, key,
                       l_pushtyped(L, -1));
    } else {
        v = lua_tointeger(L, -1);
    }
    if (v < min)
        luaL_error(L, "%s: option '%s' must be >= %d, got %I", fn, key, (int)min, (LUAI_UACINT)v);
    lua_pop(L, 1);
    return (uint64_t)v;
}

static cp_event *event_field(lua_State *L, int idx, const char *fn, const char *key)
{
    cp_event *e = NULL;
    lua_getfield(L, idx, key);
    if (!lua_isnil(L, -1)) {
        l_event *ev = (l_event *)luaL_testudata(L, -1, L_EVENT);
        if (!ev)
            luaL_error(L, "%s: option '%s' must be a " L_EVENT ", not %s", fn, key,
                       l_pushtyped(L, -1));
        if (!ev->e)
            luaL_error(L, "%s: option '%s': attempt to use a closed " L_EVENT, fn, key);
        e = ev->e;
    }
    lua_pop(L, 1);
    return e;
}

/* A byte count of a run option at idx: an integer or a size string, >= 1. */
static uint64_t run_size(lua_State *L, int idx, const char *fn, const char *name)
{
    int top = lua_gettop(L);
    uint64_t v;
    idx = lua_absindex(L, idx);
    v = (uint64_t)l_checksize_named(L, idx, lua_pushfstring(L, "%s: %s", fn, name));
    if (v < 1)
        luaL_error(L, "%s: %s must be >= 1, got 0", fn, name);
    lua_settop(L, top);
    return v;
}

/* Reads the run options in the table at idx into q (q->d already set). */
static void parse_run(lua_State *L, int idx, const char *fn, run_req *q, int concurrent)
{
    static const char *const opts[] = {"threads", "bytes", "stream", "free", "block", "verify",
                                       "reset", "hold_us", "seed", "children", NULL};
    static const char *const opts_c[] = {"pool", "threads", "bytes", "stream", "free", "block",
                                         "verify", "reset", "hold_us", "seed", "children", "wait",
                                         "record", NULL};
    cp_dp_run_args *a = &q->a;
    uint64_t mn, mx;

    idx = lua_absindex(L, idx);
    l_checktable(L, idx);
    l_checkoptions(L, idx, fn, concurrent ? opts_c : opts);
    memset(a, 0, sizeof *a);
    a->threads = positive_field(L, idx, fn, "threads", 0, 1);
    lua_getfield(L, idx, "bytes");
    if (lua_istable(L, -1)) {
        int n = 0;
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            n++;
            lua_pop(L, 1);
        }
        lua_rawgeti(L, -1, 1);
        lua_rawgeti(L, -2, 2);
        if (n != 2 || lua_isnil(L, -2) || lua_isnil(L, -1))
            luaL_error(L, "%s: option 'bytes' as a table must be {min, max}: two sizes", fn);
        mn = run_size(L, -2, fn, "option 'bytes' min");
        mx = run_size(L, -1, fn, "option 'bytes' max");
        if (mn > mx)
            luaL_error(L, "%s: option 'bytes': min (%I) > max (%I)", fn, (LUAI_UACINT)mn,
                       (LUAI_UACINT)mx);
        lua_pop(L, 3);
    } else if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        mn = mx = positive_field(L, idx, fn, "bytes", 0, 1); /* raises: required */
    } else {
        mn = mx = run_size(L, -1, fn, "option 'bytes'");
        lua_pop(L, 1);
    }
    if (mx > q->d->capacity)
        luaL_error(L, "%s: option 'bytes' (%I) is more than the pool's capacity (%I)", fn,
                   (LUAI_UACINT)mx, (LUAI_UACINT)q->d->capacity);
    a->min_bytes = mn;
    a->max_bytes = mx;
    a->block = (unsigned)positive_field(L, idx, fn, "block", 256, 1);
    if (a->block > 1024)
        luaL_error(L, "%s: option 'block' must be 1..1024, got %I", fn, (LUAI_UACINT)a->block);
    a->free_blocks = l_optbool_field(L, idx, "free", 0);
    a->verify = l_optbool_field(L, idx, "verify", 1);
    a->reset_first = l_optbool_field(L, idx, "reset", 0);
    a->hold_us = positive_field(L, idx, fn, "hold_us", 0, 0);
    if (a->hold_us > 10u * 1000u * 1000u)
        luaL_error(L, "%s: option 'hold_us' must be at most 10 s, got %I", fn, (LUAI_UACINT)a->hold_us);
    a->seed = positive_field(L, idx, fn, "seed", (lua_Integer)(0x5eed0000u + ++q->d->runs), 0);
    a->children = (unsigned)positive_field(L, idx, fn, "children", 0, 0);
    if (a->children > MAX_CHILDREN || a->children > a->threads)
        luaL_error(L, "%s: option 'children' must be at most min(threads, %d), got %I", fn,
                   (int)MAX_CHILDREN, (LUAI_UACINT)a->children);
    q->stream = l_optstream_field(L, idx);
    q->wait = concurrent ? event_field(L, idx, fn, "wait") : NULL;
    q->record = concurrent ? event_field(L, idx, fn, "record") : NULL;
}

static void push_result(lua_State *L, const run_req *q, const cp_dp_run_result *r)
{
    lua_createtable(L, 0, 8);
    lua_pushinteger(L, (lua_Integer)r->ok);
    lua_setfield(L, -2, "ok");
    lua_pushinteger(L, (lua_Integer)r->failed);
    lua_setfield(L, -2, "failed");
    if (q->a.verify) {
        lua_pushinteger(L, (lua_Integer)r->overlaps);
        lua_setfield(L, -2, "overlaps");
        lua_pushinteger(L, (lua_Integer)r->misaligned);
        lua_setfield(L, -2, "misaligned");
    }
    if (q->a.children) {
        lua_pushinteger(L, (lua_Integer)r->launch_errors);
        lua_setfield(L, -2, "launch_errors");
    }
    lua_pushinteger(L, (lua_Integer)q->a.threads);
    lua_setfield(L, -2, "threads");
    lua_pushnumber(L, r->ms);
    lua_setfield(L, -2, "ms");
    lua_pushnumber(L, r->ms > 0 ? (lua_Number)q->a.threads / (r->ms * 1e-3) : 0);
    lua_setfield(L, -2, "per_second");
}

/* dp:run{threads=, bytes= or {min, max}, stream=, free=, block=, verify=,
 *        reset=, hold_us=, seed=, children=} -> {ok, failed, overlaps, ...} */
static int devpool_run(lua_State *L)
{
    run_req q;
    cp_dp_run_result res;
    cp_status st;

    memset(&q, 0, sizeof q);
    q.d = todevpool(L, 1);
    parse_run(L, 2, RUN_FN, &q, 0);
    st = req_launch(&q);
    if (st != CP_OK)
        return l_alloc_result(L, st);
    l_check(L, req_finish(&q, &res));
    push_result(L, &q, &res);
    return 1;
}

/* cupola.run_concurrent{ {pool=dp, <run options>, wait=ev, record=ev}, ... }:
 * launches every run in order (the stream first waits for `wait`, and
 * `record` is recorded after the run), then waits for all of them. */
static int run_concurrent(lua_State *L)
{
    static const char *const fn = "cupola.run_concurrent";
    lua_Integer n;
    run_req *qs;
    cp_status st = CP_OK;
    lua_Integer launched = 0;

    l_checktable(L, 1);
    n = (lua_Integer)lua_rawlen(L, 1);
    if (n < 1)
        return luaL_error(L, "%s: expects a list of runs, got a table of length 0", fn);
    if (n > 64)
        return luaL_error(L, "%s: at most 64 runs at once, got %I", fn, (LUAI_UACINT)n);
    qs = (run_req *)lua_newuserdatauv(L, (size_t)n * sizeof *qs, 0);
    memset(qs, 0, (size_t)n * sizeof *qs);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, 1, i);
        if (!lua_istable(L, -1))
            return luaL_error(L, "%s: run #%I must be a table, not %s", fn, (LUAI_UACINT)i,
                              l_pushtyped(L, -1));
        lua_getfield(L, -1, "pool");
        if (!luaL_testudata(L, -1, L_DEVPOOL))
            return luaL_error(L, "%s: run #%I: option 'pool' must be a " L_DEVPOOL ", not %s", fn,
                              (LUAI_UACINT)i, l_pushtyped(L, -1));
        qs[i - 1].d = todevpool(L, -1);
        lua_pop(L, 1);
        parse_run(L, -1, fn, &qs[i - 1], 1);
        lua_pop(L, 1);
    }
    for (lua_Integer i = 0; i < n && st == CP_OK; i++) {
        run_req *q = &qs[i];
        if (q->wait && (st = cp_be->stream_wait_event(q->stream->s, q->wait)) != CP_OK)
            break;
        if ((st = req_launch(q)) != CP_OK)
            break;
        launched++;
        if (q->record && (st = cp_be->event_record(q->record, q->stream->s)) != CP_OK)
            break;
    }
    if (st != CP_OK) {
        /* Wait for what was launched, keeping the first failure's message. */
        cp_dp_run_result res;
        char msg[512];
        strncpy(msg, cp_error_msg(), sizeof msg - 1);
        msg[sizeof msg - 1] = '\0';
        for (lua_Integer i = 0; i < launched; i++)
            req_finish(&qs[i], &res);
        if (st == CP_ERR_OOM) {
            lua_pushnil(L);
            lua_pushstring(L, msg);
            lua_pushliteral(L, "out_of_memory");
            return 3;
        }
        return luaL_error(L, "%s: %s", fn, msg);
    }
    lua_createtable(L, (int)n, 0);
    for (lua_Integer i = 0; i < n; i++) {
        cp_dp_run_result res;
        cp_status fst = req_finish(&qs[i], &res);
        if (fst != CP_OK && st == CP_OK)
            st = fst;
        if (fst == CP_OK) {
            push_result(L, &qs[i], &res);
            lua_rawseti(L, -2, i + 1);
        }
    }
    if (st != CP_OK)
        return l_fail(L, st);
    return 1;
}

static int devpool_reset(lua_State *L)
{
    l_devpool *d = todevpool(L, 1);
    cp_stream *s = l_optstream(L, 2)->s;
    l_check(L, d->pl ? cp_dplugin_reset(d->pl, s) : cp_be->dp_reset(d->p, s));
    lua_settop(L, 1);
    return 1;
}

static int devpool_stats(lua_State *L)
{
    l_devpool *d = todevpool(L, 1);
    cp_dp_stats s;
    l_check(L, d->pl ? cp_dplugin_stats(d->pl, &s) : cp_be->dp_stats(d->p, &s));
    lua_createtable(L, 0, 5);
    lua_pushinteger(L, (lua_Integer)s.capacity);
    lua_setfield(L, -2, "capacity");
    if (!d->pl) { /* what a plugin holds is its own business */
        lua_pushinteger(L, (lua_Integer)s.used);
        lua_setfield(L, -2, "used");
        lua_pushinteger(L, (lua_Integer)s.peak);
        lua_setfield(L, -2, "peak");
    }
    lua_pushinteger(L, (lua_Integer)s.failed);
    lua_setfield(L, -2, "failed");
    lua_pushstring(L, kind_name(d->kind));
    lua_setfield(L, -2, "kind");
    return 1;
}

/* dp.kind, dp.capacity, dp.closed; methods. */
static int devpool_index(lua_State *L)
{
    l_devpool *d = (l_devpool *)l_checkudata(L, 1, L_DEVPOOL);
    const char *k = l_checkstring(L, 2);
    if (strcmp(k, "kind") == 0)
        lua_pushstring(L, kind_name(d->kind));
    else if (strcmp(k, "capacity") == 0)
        lua_pushinteger(L, (lua_Integer)d->capacity);
    else if (strcmp(k, "closed") == 0)
        lua_pushboolean(L, d->p == NULL && d->pl == NULL);
    else if (d->kind == KIND_PLUGIN &&
             (strcmp(k, "source") == 0 || strcmp(k, "name") == 0 || strcmp(k, "options") == 0 ||
              strcmp(k, "compiler") == 0)) {
        lua_getiuservalue(L, 1, 1);
        lua_getfield(L, -1, k);
    } else if (!l_getmethod(L, 1, k))
        lua_pushnil(L);
    return 1;
}

static int devpool_tostring(lua_State *L)
{
    l_devpool *d = (l_devpool *)l_checkudata(L, 1, L_DEVPOOL);
    lua_pushfstring(L, L_DEVPOOL " (%s%s, %I bytes)", d->p || d->pl ? "" : "closed, ", kind_name(d->kind),
                    (LUAI_UACINT)d->capacity);
    return 1;
}

void l_open_devpool(lua_State *L)
{
    static const luaL_Reg meta[] = {{"__gc", devpool_close},
                                    {"__close", devpool_close},
                                    {"__tostring", devpool_tostring},
                                    {"__index", devpool_index},
                                    {"__newindex", l_readonly_newindex},
                                    {NULL, NULL}};
    static const luaL_Reg methods[] = {{"run", devpool_run},
                                       {"reset", devpool_reset},
                                       {"stats", devpool_stats},
                                       {"close", devpool_close},
                                       {NULL, NULL}};
    l_newclass(L, L_DEVPOOL, meta, methods);
    lua_pushcfunction(L, devpool_new);
    lua_setfield(L, -2, "device_pool");
    lua_pushcfunction(L, run_concurrent);
    lua_setfield(L, -2, "run_concurrent");
}
