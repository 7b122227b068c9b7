/*
 * trace_advise.c: what cupola.advise asks of the core besides a replay: its
 * jobs replayed on threads (advise_run), the serving policy of a framework's
 * pool (serving), and what it reads of a trace (advise_facts, alloc_event)
 * (trace_binding.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_binding.h"
#include "trace/advise.h"

/* ---- cupola.core.trace.advise_run: the replays of cupola.advise ----------
 * advise_run(t, jobs, {threads = 0, progress = fn}) -> list of results: each
 * job {kind = "torch", conf = C, device_memory = N} or {spec = "KIND,..."}
 * (a pool as CUPOLA_TORCH_POOL names it), with limit = N, recorded = bool,
 * search = bool; each result is what cupola.trace.replay returns for the
 * job's main replay, plus min_limit and search_steps (search), oom_message
 * (where a limited run stopped) and seconds_total, or {error = msg} for a
 * job whose replay failed.  The replays run on threads (advise.h); progress
 * is called here, between, with (done, total). */
typedef struct advise_progress {
    lua_State *L;
    int fn;      /* stack index of the progress function, 0: none */
    int failed;  /* it raised: not called again (the error is raised after) */
} advise_progress;

static void advise_report(void *ud, size_t done, size_t total)
{
    advise_progress *ap = (advise_progress *)ud;
    if (!ap->fn || ap->failed)
        return;
    lua_pushvalue(ap->L, ap->fn);
    lua_pushinteger(ap->L, (lua_Integer)done);
    lua_pushinteger(ap->L, (lua_Integer)total);
    if (lua_pcall(ap->L, 2, 0, 0) != LUA_OK) {
        ap->failed = 1; /* its message stays on the stack */
        return;
    }
}

static int advise_jobs_gc(lua_State *L)
{
    size_t n = lua_rawlen(L, 1) / sizeof(cp_advise_job);
    cp_advise_job *jobs = (cp_advise_job *)lua_touserdata(L, 1);
    if (jobs)
        cp_advise_jobs_fini(jobs, n);
    return 0;
}

/* Job k (a table at the top of the stack) into j; its strings go into the
 * anchor table at index anchor, which keeps them while the threads run. */
static void advise_job(lua_State *L, int k, cp_advise_job *j, int anchor)
{
    static const char *const keys[] = {"kind", "conf", "device_memory", "spec", "limit",
                                       "recorded", "search", NULL};
    int idx = lua_gettop(L);
    const char *spec;
    char what[64];
    snprintf(what, sizeof what, "advise_run: job %d", k);
    l_checkoptions(L, idx, what, keys);
    j->limit = l_optsize_field(L, idx, "limit", 0);
    j->recorded = l_optbool_field(L, idx, "recorded", 0);
    j->search = l_optbool_field(L, idx, "search", 0);
    spec = l_optstring_field(L, idx, "spec", NULL);
    if (spec) {
        /* a cupola pool as CUPOLA_TORCH_POOL names it, over no memory */
        if (lua_getfield(L, idx, "kind") != LUA_TNIL)
            luaL_error(L, "advise_run: job %d has both 'spec' and 'kind'", k);
        lua_pop(L, 1);
        if (cp_pool_spec_parse(spec, &j->pool, j->kind_buf, sizeof j->kind_buf) != CP_OK)
            luaL_error(L, "%s", cp_error_msg());
        if (strcmp(j->kind_buf, "plugin") == 0 || strcmp(j->kind_buf, "torch") == 0)
            luaL_error(L, "advise_run: job %d: kind '%s' is not one a spec can name here", k,
                       j->kind_buf);
        j->pool.kind = j->kind_buf;
        cp_pool_spec_serve(&j->pool); /* what the library runs (pool/spec.c) */
        /* (the kinds whose row says so replay the recording's own addresses) */
        if (j->recorded && !(cp_model_find(j->kind_buf)->traits & CP_MODEL_RECORDED)) {
            char kinds[200];
            luaL_error(L, "advise_run: job %d: recorded addresses are for kinds %s", k,
                       cp_model_names(kinds, sizeof kinds, CP_MODEL_RECORDED, '\'', " and "));
        }
    } else {
        const char *kind = l_optstring_field(L, idx, "kind", NULL), *conf;
        cp_torch_conf c;
        cp_torch_opts *to;
        if (!kind || strcmp(kind, "torch") != 0)
            luaL_error(L, "advise_run: job %d needs kind = \"torch\" or a spec", k);
        cp_pool_opts_init(&j->pool, "torch");
        to = (cp_torch_opts *)cp_pool_own(&j->pool);
        conf = l_optstring_field(L, idx, "conf", "");
        if (cp_torch_conf_parse(conf, strlen(conf), &c) != CP_OK) {
            const char *m = cp_error_msg();
            luaL_error(L, "advise_run: job %d: conf '%s': %s", k,
                       (l_pushcut(L, conf, strlen(conf)), lua_tostring(L, -1)),
                       strncmp(m, "conf: ", 6) == 0 ? m + 6 : m);
        }
        if (lua_getfield(L, idx, "conf") == LUA_TSTRING)
            lua_rawseti(L, anchor, (lua_Integer)lua_rawlen(L, anchor) + 1);
        else
            lua_pop(L, 1);
        to->conf = conf; /* the anchor keeps the string */
        to->device_memory = l_optsize_field(L, idx, "device_memory", 0);
    }
    j->pool.upstream = CP_UP_VIRTUAL;
}

int l_trace_advise_run(lua_State *L)
{
    static const char *const opts[] = {"threads", "progress", NULL};
    l_trace *tr = l_totrace(L, 1);
    lua_Integer n, k, threads;
    cp_advise_job *jobs;
    advise_progress ap;
    size_t i;
    int anchor;

    luaL_checktype(L, 2, LUA_TTABLE);
    l_checkoptions(L, 3, "advise_run", opts);
    threads = l_optint_field(L, 3, "threads", 0);
    if (threads < 0 || threads > 256)
        luaL_argerror(L, 3, lua_pushfstring(L, "option 'threads' must be in 0..256, got %I",
                                            (LUAI_UACINT)threads));
    ap.L = L;
    ap.fn = 0;
    ap.failed = 0;
    if (lua_istable(L, 3)) {
        lua_getfield(L, 3, "progress");
        if (!lua_isnil(L, -1)) {
            luaL_argcheck(L, lua_isfunction(L, -1), 3, "option 'progress' must be a function");
            ap.fn = lua_gettop(L);
        } else {
            lua_pop(L, 1);
        }
    }
    n = (lua_Integer)lua_rawlen(L, 2);
    if (n > 100000)
        luaL_argerror(L, 2, "at most 100000 jobs");
    /* the jobs' storage, freed by the GC whatever happens below */
    jobs = (cp_advise_job *)lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *jobs, 0);
    memset(jobs, 0, (size_t)(n ? n : 1) * sizeof *jobs);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, advise_jobs_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_newtable(L); /* the anchor of the jobs' strings */
    anchor = lua_gettop(L);
    for (k = 1; k <= n; k++) {
        if (lua_rawgeti(L, 2, k) != LUA_TTABLE)
            luaL_argerror(L, 2, lua_pushfstring(L, "job %I is not a table", (LUAI_UACINT)k));
        advise_job(L, (int)k, &jobs[k - 1], anchor);
        lua_pop(L, 1);
    }
    tr->busy++; /* the progress function may not close it under the threads */
    cp_advise_run(tr->t, jobs, (size_t)n, (unsigned)threads, advise_report, &ap);
    tr->busy--;
    if (ap.failed)
        return lua_error(L); /* the progress function's error, on top */
    lua_createtable(L, (int)n, 0);
    for (i = 0; i < (size_t)n; i++) {
        cp_advise_job *j = &jobs[i];
        if (j->st != CP_OK) {
            lua_createtable(L, 0, 1);
            lua_pushstring(L, j->msg);
            lua_setfield(L, -2, "error");
        } else {
            l_trace_push_result(L, 1, tr->t, &j->res, 0);
            if (j->searched) {
                lua_pushinteger(L, (lua_Integer)j->min_limit);
                lua_setfield(L, -2, "min_limit");
            }
            if (j->search) {
                lua_pushinteger(L, (lua_Integer)j->steps);
                lua_setfield(L, -2, "search_steps");
            }
            if (j->res.stopped || j->res.failed) {
                lua_pushstring(L, j->oom);
                lua_setfield(L, -2, "oom_message");
            }
        }
        lua_pushnumber(L, j->seconds);
        lua_setfield(L, -2, "seconds_total");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* cupola.core.trace.serving(opts) -> opts: cupola.pool options (a table
 * with `kind`) given the policy of a pool serving a framework, the one
 * libcupola_torch.so, libcupola_cupy.so and advise's replays apply
 * (cp_pool_spec_serve, pool/spec.c): where the table has no
 * release_threshold and the kind keeps its idle memory when serving, sets
 * it.  For replays of CUPOLA_TORCH_POOL rows built from Lua. */
int l_trace_serving(lua_State *L)
{
    cp_pool_opts o;
    luaL_checktype(L, 1, LUA_TTABLE);
    memset(&o, 0, sizeof o);
    if (lua_getfield(L, 1, "kind") != LUA_TSTRING)
        luaL_argerror(L, 1, "field 'kind' must be a pool kind (a string)");
    o.kind = lua_tostring(L, -1);
    o.release_threshold_set = lua_getfield(L, 1, "release_threshold") != LUA_TNIL;
    lua_pop(L, 1);
    cp_pool_spec_serve(&o);
    if (o.release_threshold) {
        lua_pushinteger(L, (lua_Integer)o.release_threshold);
        lua_setfield(L, 1, "release_threshold");
    }
    lua_pop(L, 1);
    lua_settop(L, 1);
    return 1;
}

/* cupola.core.trace.advise_facts(t, min_size) -> what cupola.advise reads
 * of a trace besides its replays: {sizes = {count =, max =, q50 =, q75 =,
 * q90 =, q99 =} (allocations of min_size bytes or more, by count),
 * last_alloc = the event of the last allocation (0: none), ooms = {{event =,
 * size =, stream =, survived =}, ...}} (survived: an allocation follows the
 * `oom` entry, so the program went on after PyTorch refused it). */
int l_trace_advise_facts(lua_State *L)
{
    l_trace *tr = l_totrace(L, 1);
    uint64_t min = (uint64_t)l_checksize(L, 2);
    size_t n = cp_trace_events(tr->t), i, m = 0, last = SIZE_MAX;
    cp_trace_info in;
    uint64_t *v;
    cp_trace_row row;

    cp_trace_info_get(tr->t, &in);
    v = (uint64_t *)lua_newuserdatauv(L, (in.allocs ? in.allocs : 1) * sizeof *v, 0);
    for (i = 0; i < n; i++) {
        if (cp_trace_event(tr->t, i, &row) != CP_OK || row.is_free)
            continue;
        last = i;
        if (row.size >= min && m < in.allocs)
            v[m++] = row.size;
    }
    qsort(v, m, sizeof *v, cmp_u64);
    lua_createtable(L, 0, 3);
    lua_createtable(L, 0, 6);
    lua_pushinteger(L, (lua_Integer)m);
    lua_setfield(L, -2, "count");
    if (m) {
        static const struct { const char *name; double q; } qs[] = {
            {"q50", 0.50}, {"q75", 0.75}, {"q90", 0.90}, {"q99", 0.99}};
        size_t k;
        lua_pushinteger(L, (lua_Integer)v[m - 1]);
        lua_setfield(L, -2, "max");
        for (k = 0; k < sizeof qs / sizeof qs[0]; k++) {
            size_t at = (size_t)(qs[k].q * (double)(m - 1) + 0.5);
            lua_pushinteger(L, (lua_Integer)v[at < m ? at : m - 1]);
            lua_setfield(L, -2, qs[k].name);
        }
    }
    lua_setfield(L, -2, "sizes");
    lua_pushinteger(L, last == SIZE_MAX ? 0 : (lua_Integer)last + 1);
    lua_setfield(L, -2, "last_alloc");
    lua_pushinteger(L, (lua_Integer)cp_trace_torch_calls(tr->t));
    lua_setfield(L, -2, "torch_calls");
    lua_createtable(L, (int)(in.ooms < 1000 ? in.ooms : 1000), 0);
    for (i = 0; i < in.ooms; i++) {
        size_t at;
        uint64_t size, stream;
        if (cp_trace_oom_entry(tr->t, i, &at, &size, &stream) != CP_OK)
            break;
        lua_createtable(L, 0, 4);
        lua_pushinteger(L, (lua_Integer)at + 1);
        lua_setfield(L, -2, "event");
        lua_pushinteger(L, (lua_Integer)size);
        lua_setfield(L, -2, "size");
        lua_pushinteger(L, (lua_Integer)stream);
        lua_setfield(L, -2, "stream");
        lua_pushboolean(L, last != SIZE_MAX && at <= last);
        lua_setfield(L, -2, "survived");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "ooms");
    return 1;
}

/* cupola.core.trace.oom_frames(t, k) -> the label of the k-th `oom` entry
 * (1-based) and {label =, python_frame =, stack =}, or nil where it has no
 * frames: where a run ran out, in its program's words. */
int l_trace_oom_frames(lua_State *L)
{
    l_trace *tr = l_totrace(L, 1);
    lua_Integer k = l_checkinteger(L, 2);
    const char *label = k >= 1 ? cp_trace_oom_label(tr->t, (size_t)k - 1) : NULL;
    if (!label) {
        lua_pushnil(L);
        return 1;
    }
    lua_createtable(L, 0, 3);
    l_trace_push_label(L, label, lua_gettop(L));
    lua_getfield(L, -1, "label");
    lua_insert(L, -2);
    return 2;
}

/* cupola.core.trace.alloc_event(t, k) -> the event (1-based) of the k-th
 * allocation, and its label (snapshots with frames); nil past the last. */
int l_trace_alloc_event(lua_State *L)
{
    l_trace *tr = l_totrace(L, 1);
    lua_Integer k = l_checkinteger(L, 2);
    size_t n = cp_trace_events(tr->t), i;
    lua_Integer seen = 0;
    cp_trace_row row;
    for (i = 0; k >= 1 && i < n; i++) {
        if (cp_trace_event(tr->t, i, &row) != CP_OK || row.is_free)
            continue;
        if (++seen == k) {
            lua_pushinteger(L, (lua_Integer)i + 1);
            if (!row.label)
                return 1;
            lua_createtable(L, 0, 3);
            l_trace_push_label(L, row.label, lua_gettop(L));
            lua_getfield(L, -1, "label");
            lua_insert(L, -2);
            return 3; /* event, label, {label =, python_frame =, stack =} */
        }
    }
    lua_pushnil(L);
    return 1;
}

