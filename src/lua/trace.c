/*
 * trace.c: cupola.Trace.  cupola.trace.load(path) parses an RMM
 * logging-adaptor CSV (plain or gzip) in C; cupola.trace.replay(t, pool,
 * opts) replays it against a Pool entirely in C and returns the figures.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "binding.h"
#include "trace/advise.h"
#include "trace/timeline.h"
#include "trace/trace.h"

typedef struct l_trace {
    cp_trace *t; /* NULL once closed */
    int busy;    /* advise_runs replaying it on threads: close() must wait */
} l_trace;

cp_resource *l_checkresource(lua_State *L, int arg); /* pool.c */

static l_trace *totrace(lua_State *L, int arg)
{
    l_trace *tr = (l_trace *)l_checkudata(L, arg, L_TRACE);
    if (!tr->t)
        luaL_error(L, "attempt to use a closed " L_TRACE);
    return tr;
}

/* Replay results recorded with record = true -> their Trace, weak keys:
 * cupola.timeline draws a result from it, and the result stays plain data.
 * Kept here so that t:replay and cupola.trace.replay both register (a Lua
 * wrapper did it once, and moved every error's position into itself). */
#define L_SOURCES "cupola.trace.sources"

static int trace_load(lua_State *L)
{
    static const char *const opts[] = {"device", "allocator", NULL};
    size_t plen;
    const char *allocator;
    const char *path = l_checklstring(L, 1, &plen);
    l_trace *tr;
    cp_trace *t = NULL;
    cp_status st;
    lua_Integer device;
    /* C sees the path up to its first NUL: "a\0b" would open "a". */
    if (strlen(path) != plen)
        return luaL_argerror(L, 1, lua_pushfstring(L, "path contains a NUL byte, got %s", l_pushshown(L, 1)));
    l_checkoptions(L, 2, "cupola.trace.load", opts);
    device = l_optint_field(L, 2, "device", -1);
    if (lua_istable(L, 2)) {
        int given = lua_getfield(L, 2, "device") != LUA_TNIL;
        lua_pop(L, 1);
        if (given && (device < 0 || device > 65535))
            return luaL_argerror(L, 2, lua_pushfstring(L, "option 'device' must be in 0..65535, "
                                                        "got %I", (LUAI_UACINT)device));
    }
    allocator = l_optstring_field(L, 2, "allocator", NULL);
    tr = (l_trace *)lua_newuserdatauv(L, sizeof *tr, 0);
    tr->t = NULL;
    tr->busy = 0;
    luaL_setmetatable(L, L_TRACE);
    st = cp_trace_load_opts(path, (int)device, allocator, &t);
    if (st == CP_ERR_OOM)
        return l_alloc_result(L, st);
    l_check(L, st);
    tr->t = t;
    return 1;
}

static int trace_close(lua_State *L)
{
    l_trace *tr = (l_trace *)l_checkudata(L, 1, L_TRACE);
    /* advise_run's progress function runs while its threads read the
     * trace (never from __gc: the call holds the trace on its stack) */
    if (tr->busy)
        return luaL_error(L, "attempt to close a " L_TRACE " while advise_run replays it");
    if (tr->t) {
        cp_trace_free(tr->t);
        tr->t = NULL;
    }
    return 0;
}

static void push_info(lua_State *L, const cp_trace *t)
{
    cp_trace_info in;
    cp_trace_info_get(t, &in);
    lua_createtable(L, 0, 11);
#define SETI(f)                              \
    lua_pushinteger(L, (lua_Integer)in.f);   \
    lua_setfield(L, -2, #f)
    SETI(events);
    SETI(allocs);
    SETI(frees);
    SETI(streams);
    SETI(threads);
    SETI(leaked);
    SETI(peak_live);
    SETI(total_bytes);
    SETI(max_size);
    lua_pushnumber(L, in.duration_us);
    lua_setfield(L, -2, "duration_us");
    lua_pushstring(L, cp_trace_path(t));
    lua_setfield(L, -2, "path");
    lua_pushstring(L, cp_trace_format(t));
    lua_setfield(L, -2, "format");
    if (strcmp(cp_trace_format(t), "cupola_record") == 0 ||
        strcmp(cp_trace_format(t), "cupy_hook") == 0) {
        /* a recording or log cut by a killed program loaded what was whole */
        lua_pushboolean(L, cp_trace_warning(t) != NULL);
        lua_setfield(L, -2, "cut");
        if (cp_trace_warning(t)) {
            lua_pushstring(L, cp_trace_warning(t));
            lua_setfield(L, -2, "warning");
        }
    }
    SETI(devices);
    SETI(ignored);
    SETI(unmatched);
    SETI(ooms);
    {
        const char *env = cp_trace_torch_conf(t, 0), *set = cp_trace_torch_conf(t, 1);
        if (env) {
            /* PyTorch's own view of its settings: the env string as read,
             * and the effective settings as a conf string */
            lua_pushstring(L, env);
            lua_setfield(L, -2, "torch_conf");
            lua_pushstring(L, set);
            lua_setfield(L, -2, "torch_settings");
        }
    }
    if (cp_trace_allocator(t)) {
        lua_pushstring(L, cp_trace_allocator(t));
        lua_setfield(L, -2, "allocator");
        SETI(reordered);
        if (in.bfc_peak_bytes_in_use) {
            SETI(bfc_peak_bytes_in_use);
        }
    }
    if (in.torch_reserved) {
        SETI(torch_reserved_end);
        SETI(torch_peak_reserved);
    }
#undef SETI
    {
        /* a CuPy hook log: what it says beyond its rows */
        cp_trace_cupy_info ci;
        if (cp_trace_cupy_info_get(t, &ci)) {
            lua_createtable(L, 0, 9);
#define SETC(f, name)                          \
    do {                                       \
        lua_pushinteger(L, (lua_Integer)ci.f); \
        lua_setfield(L, -2, name);             \
    } while (0)
            SETC(device_allocs, "device_allocs");
            SETC(device_alloc_failures, "device_alloc_failures");
            SETC(zero_mallocs, "zero_mallocs");
            SETC(gc_frees, "gc_frees");
            SETC(free_all_blocks, "free_all_blocks");
            if (ci.total_bytes)
                SETC(peak_total_bytes, "peak_total_bytes");
#undef SETC
            lua_pushboolean(L, ci.stream);
            lua_setfield(L, -2, "has_stream");
            lua_pushboolean(L, ci.malloc_preprocess);
            lua_setfield(L, -2, "has_malloc_preprocess");
            lua_pushboolean(L, ci.total_bytes);
            lua_setfield(L, -2, "has_total_bytes");
            lua_setfield(L, -2, "cupy");
        }
    }
}

static int trace_info(lua_State *L)
{
    push_info(L, totrace(L, 1)->t);
    return 1;
}

/* t:event(i) -> {action=, pointer=, size=, stream=, thread=, time_us=}, 1-based */
/* A label of the trace's (trace.h: its first line the frame people
 * recognise, its second the innermost Python frame where that is another,
 * then the whole stack, one frame a line; other formats' labels are one
 * line) into the table at index t: label, python_frame, stack = {...}. */
static void push_label(lua_State *L, const char *label, int t)
{
    const char *nl = strchr(label, '\n'), *p;
    lua_Integer k = 0;
    lua_pushlstring(L, label, nl ? (size_t)(nl - label) : strlen(label));
    lua_setfield(L, t, "label");
    if (!nl)
        return;
    p = nl + 1;
    nl = strchr(p, '\n');
    if ((nl ? (size_t)(nl - p) : strlen(p)) > 0) {
        lua_pushlstring(L, p, nl ? (size_t)(nl - p) : strlen(p));
        lua_setfield(L, t, "python_frame");
    }
    lua_newtable(L);
    while (nl) {
        p = nl + 1;
        nl = strchr(p, '\n');
        lua_pushlstring(L, p, nl ? (size_t)(nl - p) : strlen(p));
        lua_rawseti(L, -2, ++k);
    }
    lua_setfield(L, t, "stack");
}

static int trace_event(lua_State *L)
{
    l_trace *tr = totrace(L, 1);
    lua_Integer i = l_checkinteger(L, 2);
    cp_trace_row row;
    if (i < 1 || (size_t)i > cp_trace_events(tr->t))
        return luaL_argerror(L, 2, lua_pushfstring(L, "event %I out of range 1..%I", i,
                                                    (lua_Integer)cp_trace_events(tr->t)));
    l_check(L, cp_trace_event(tr->t, (size_t)(i - 1), &row));
    lua_createtable(L, 0, 6);
    lua_pushstring(L, row.is_free ? "free" : "allocate");
    lua_setfield(L, -2, "action");
    lua_pushinteger(L, (lua_Integer)row.pointer);
    lua_setfield(L, -2, "pointer");
    lua_pushinteger(L, (lua_Integer)row.size);
    lua_setfield(L, -2, "size");
    lua_pushinteger(L, (lua_Integer)row.stream);
    lua_setfield(L, -2, "stream");
    lua_pushinteger(L, (lua_Integer)row.thread);
    lua_setfield(L, -2, "thread");
    lua_pushnumber(L, row.time_us);
    lua_setfield(L, -2, "time_us");
    lua_pushinteger(L, (lua_Integer)row.device);
    lua_setfield(L, -2, "device");
    if (row.label)
        push_label(L, row.label, lua_gettop(L));
    {
        /* JAX: BFC's chunk and its bytes_in_use after the event, as recorded */
        uint64_t chunk, in_use;
        if (cp_trace_jax_row(tr->t, (size_t)(i - 1), &chunk, &in_use)) {
            if (chunk != UINT64_MAX) {
                lua_pushinteger(L, (lua_Integer)chunk);
                lua_setfield(L, -2, "allocation_bytes");
            }
            if (in_use != UINT64_MAX) {
                lua_pushinteger(L, (lua_Integer)in_use);
                lua_setfield(L, -2, "bytes_in_use");
            }
        }
    }
    return 1;
}

/* The progress line: on stderr, only when it is a terminal, only
 * once the replay has run two seconds; erased at the end. */
typedef struct progress_state {
    double t0;
    int shown;
} progress_state;

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void replay_progress(void *ud, uint64_t done, uint64_t total)
{
    progress_state *ps = (progress_state *)ud;
    double el = mono_s() - ps->t0;
    if (done >= total) {
        if (ps->shown)
            fputs("\r\033[K", stderr);
        return;
    }
    if (el < 2.0)
        return;
    ps->shown = 1;
    fprintf(stderr, "\rcupola replay: %llu / %llu events (%.0f%%), %.1f s",
            (unsigned long long)done, (unsigned long long)total,
            total ? 100.0 * (double)done / (double)total : 100.0, el);
    fflush(stderr);
}

static void push_u64s(lua_State *L, const uint64_t *v, size_t n, uint64_t add)
{
    size_t i;
    lua_createtable(L, (int)(n < INT32_MAX ? n : 0), 0);
    for (i = 0; i < n; i++) {
        lua_pushinteger(L, (lua_Integer)(v[i] + add));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

/* One of PyTorch's device calls as a table {call=, address=, size=, entry=}. */
static void push_devcall(lua_State *L, const cp_torch_segev *e, int with_entry)
{
    static const char *const names[] = {"segment_alloc", "segment_free", "segment_map",
                                        "segment_unmap"};
    lua_createtable(L, 0, 4);
    lua_pushstring(L, e->call < 4 ? names[e->call] : "none");
    lua_setfield(L, -2, "call");
    if (e->call < 4) {
        if (e->addr) {
            lua_pushinteger(L, (lua_Integer)e->addr);
            lua_setfield(L, -2, "address");
        }
        lua_pushinteger(L, (lua_Integer)e->size);
        lua_setfield(L, -2, "size");
        if (with_entry) {
            lua_pushinteger(L, (lua_Integer)e->entry + 1);
            lua_setfield(L, -2, "entry");
        }
    }
}

/* With addresses = "recorded": result.divergence is false when the model
 * made PyTorch's device calls all through, else where they first differed. */
static void push_divergence(lua_State *L, const cp_replay_result *res)
{
    const cp_torch_divergence *d = &res->divergence;
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "recorded");
    if (!d->diverged) {
        lua_pushboolean(L, 0);
        lua_setfield(L, -2, "divergence");
        return;
    }
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, (lua_Integer)res->divergence_event + 1);
    lua_setfield(L, -2, "event");
    lua_pushinteger(L, (lua_Integer)d->at + 1);
    lua_setfield(L, -2, "call");
    push_devcall(L, &d->torch, 1);
    lua_setfield(L, -2, "torch");
    push_devcall(L, &d->model, 0);
    lua_setfield(L, -2, "model");
    lua_setfield(L, -2, "divergence");
}

/* A CuPy log replayed through kind "cupy": result.recorded, and
 * result.cupy = {exact = bool, mismatch = false | {line=, what=, model=,
 * log=}, divergence = false | {call=, line=, model=, log=}, peak_used_bytes,
 * used_bytes_at_peak, free_all_blocks_at_peak}: the first
 * disagreement with the log (a malloc served or refused the other way, or
 * total_bytes) and the first cudaMalloc that differed from its alloc line. */
static void push_cupy(lua_State *L, const cp_replay_result *res)
{
    static const char *const what[] = {"", "served", "refused", "total_bytes"};
    lua_pushboolean(L, res->recorded);
    lua_setfield(L, -2, "recorded");
    lua_createtable(L, 0, 3);
    lua_pushboolean(L, !res->cupy_mismatch && !res->cupy_diverged);
    lua_setfield(L, -2, "exact");
    if (res->cupy_mismatch) {
        lua_createtable(L, 0, 5);
        lua_pushinteger(L, (lua_Integer)res->cupy_mismatch_line);
        lua_setfield(L, -2, "line");
        lua_pushinteger(L, (lua_Integer)res->cupy_mismatch_op + 1);
        lua_setfield(L, -2, "operation");
        lua_pushstring(L, what[res->cupy_mismatch < 4 ? res->cupy_mismatch : 0]);
        lua_setfield(L, -2, "what");
        lua_pushinteger(L, (lua_Integer)res->cupy_mismatch_model);
        lua_setfield(L, -2, "model");
        lua_pushinteger(L, (lua_Integer)res->cupy_mismatch_log);
        lua_setfield(L, -2, "log");
    } else {
        lua_pushboolean(L, 0);
    }
    lua_setfield(L, -2, "mismatch");
    if (res->cupy_diverged) {
        lua_createtable(L, 0, 4);
        lua_pushinteger(L, (lua_Integer)res->cupy_div_call + 1);
        lua_setfield(L, -2, "call");
        lua_pushinteger(L, (lua_Integer)res->cupy_div_line);
        lua_setfield(L, -2, "line");
        lua_pushinteger(L, (lua_Integer)res->cupy_div_model);
        lua_setfield(L, -2, "model");
        lua_pushinteger(L, (lua_Integer)res->cupy_div_log);
        lua_setfield(L, -2, "log");
    } else {
        lua_pushboolean(L, 0);
    }
    lua_setfield(L, -2, "divergence");
    lua_pushinteger(L, (lua_Integer)res->cupy_used_peak);
    lua_setfield(L, -2, "peak_used_bytes");
    lua_pushinteger(L, (lua_Integer)res->cupy_used_at_peak);
    lua_setfield(L, -2, "used_bytes_at_peak");
    lua_pushinteger(L, (lua_Integer)res->cupy_free_all_at_peak);
    lua_setfield(L, -2, "free_all_blocks_at_peak");
    lua_setfield(L, -2, "cupy");
}

/* A replay's result as the table cupola.trace.replay returns (its
 * recording with record; the Trace at trace_arg is then registered as the
 * result's source).  The same function serves every replay, so a figure
 * of cupola.advise is a figure of cupola.trace.replay. */
static void push_replay_result(lua_State *L, int trace_arg, const cp_trace *t,
                               const cp_replay_result *res, int record)
{
    cp_trace_info in;
    lua_createtable(L, 0, 12);
    if (record) {
        /* The pool's reserved bytes over the replay, and where it put each
         * block: what cupola.timeline draws for a replay. */
        char *packed;
        size_t i;
        lua_createtable(L, 0, 3);
        push_u64s(L, res->rec_event, res->nrec, 1);
        lua_setfield(L, -2, "events");
        push_u64s(L, res->rec_reserved, res->nrec, 0);
        lua_setfield(L, -2, "reserved");
        /* Addresses as a packed string of little-endian uint64: compact for
         * millions of allocations. */
        packed = (char *)lua_newuserdatauv(L, res->naddr * 8 + 1, 0);
        for (i = 0; i < res->naddr; i++) {
            int k;
            for (k = 0; k < 8; k++)
                packed[i * 8 + (size_t)k] = (char)((res->rec_addr[i] >> (8 * k)) & 0xff);
        }
        lua_pushlstring(L, packed, res->naddr * 8);
        lua_remove(L, -2);
        lua_setfield(L, -2, "addresses");
        lua_setfield(L, -2, "recording");
        lua_getfield(L, LUA_REGISTRYINDEX, L_SOURCES);
        lua_pushvalue(L, -2);
        lua_pushvalue(L, trace_arg);
        lua_rawset(L, -3);
        lua_pop(L, 1);
    }
    cp_trace_info_get(t, &in);
    if (in.torch_reserved) {
        lua_pushinteger(L, (lua_Integer)in.torch_peak_reserved);
        lua_setfield(L, -2, "torch_peak_reserved");
        lua_pushnumber(L, res->peak_live ? (double)in.torch_peak_reserved / (double)res->peak_live
                                        : 0.0);
        lua_setfield(L, -2, "torch_reserved_over_live");
    }
    lua_pushinteger(L, (lua_Integer)res->events);
    lua_setfield(L, -2, "events");
    lua_pushnumber(L, res->ns_per_event);
    lua_setfield(L, -2, "ns_per_event");
    lua_pushnumber(L, res->seconds);
    lua_setfield(L, -2, "seconds");
    lua_pushinteger(L, (lua_Integer)res->peak_live);
    lua_setfield(L, -2, "peak_live");
    lua_pushinteger(L, (lua_Integer)res->peak_reserved);
    lua_setfield(L, -2, "peak_reserved");
    lua_pushnumber(L, res->reserved_over_live);
    lua_setfield(L, -2, "reserved_over_live");
    lua_pushinteger(L, (lua_Integer)res->failed);
    lua_setfield(L, -2, "failed");
    /* A replay whose pool refused allocations did not run the trace: its
     * peaks cover only what was served, so reserved_over_live can look
     * perfect.  Say so in the result itself, where every reader looks. */
    lua_pushboolean(L, res->failed == 0 && !res->stopped);
    lua_setfield(L, -2, "complete");
    if (res->stopped && !res->failed) {
        /* stop_at_oom at an `oom` entry: nothing was refused but the rest */
        lua_pushfstring(L,
                        "incomplete replay: it stopped at event %I, an `oom` entry the pool "
                        "refused; the figures cover only the events before it",
                        (lua_Integer)res->stop_event + 1);
        lua_setfield(L, -2, "warning");
    } else if (res->failed) {
        lua_pushfstring(L,
                        "incomplete replay: the pool refused %I of the trace's allocations%s; "
                        "peak_reserved and reserved_over_live cover only what was served",
                        (lua_Integer)res->failed,
                        res->stopped ? " and the replay stopped at the first" : "");
        lua_setfield(L, -2, "warning");
    }
    lua_pushinteger(L, (lua_Integer)res->live_at_peak);
    lua_setfield(L, -2, "live_at_peak");
    lua_pushinteger(L, (lua_Integer)res->skipped_frees);
    lua_setfield(L, -2, "skipped_frees");
    lua_pushinteger(L, (lua_Integer)res->maps);
    lua_setfield(L, -2, "maps");
    lua_pushinteger(L, (lua_Integer)res->unmaps);
    lua_setfield(L, -2, "unmaps");
    lua_pushinteger(L, (lua_Integer)res->peak_allocated);
    lua_setfield(L, -2, "peak_allocated");
    lua_pushinteger(L, (lua_Integer)res->device_allocs);
    lua_setfield(L, -2, "device_allocs");
    lua_pushinteger(L, (lua_Integer)res->device_frees);
    lua_setfield(L, -2, "device_frees");
    lua_pushinteger(L, (lua_Integer)res->retries);
    lua_setfield(L, -2, "retries");
    lua_pushinteger(L, (lua_Integer)res->ooms);
    lua_setfield(L, -2, "ooms");
    lua_pushinteger(L, (lua_Integer)res->oom_attempts);
    lua_setfield(L, -2, "oom_attempts");
    lua_pushinteger(L, (lua_Integer)res->oom_served);
    lua_setfield(L, -2, "oom_served");
    if (res->torch) {
        lua_pushinteger(L, (lua_Integer)res->segments);
        lua_setfield(L, -2, "segments");
    }
    if (res->bfc) {
        /* BFC: the recording's addresses, and frees it wrote late */
        lua_pushinteger(L, (lua_Integer)res->reordered_frees);
        lua_setfield(L, -2, "reordered_frees");
        if (res->recorded) {
            lua_pushboolean(L, 1);
            lua_setfield(L, -2, "recorded");
            lua_pushinteger(L, (lua_Integer)res->addr_mismatches);
            lua_setfield(L, -2, "address_mismatches");
            if (res->addr_mismatches) {
                lua_pushinteger(L, (lua_Integer)res->first_mismatch + 1);
                lua_setfield(L, -2, "first_mismatch");
            }
            if (res->checked_chunks) {
                lua_pushinteger(L, (lua_Integer)res->chunk_mismatches);
                lua_setfield(L, -2, "chunk_mismatches");
                if (res->chunk_mismatches) {
                    lua_pushinteger(L, (lua_Integer)res->first_chunk_mismatch + 1);
                    lua_setfield(L, -2, "first_chunk_mismatch");
                }
            }
        }
    } else if (res->recorded && !res->cupy)
        push_divergence(L, res);
    if (res->cupy)
        push_cupy(L, res);
    if (res->stopped) {
        /* stop_at_oom: where the program would have raised */
        lua_createtable(L, 0, 3);
        lua_pushinteger(L, (lua_Integer)res->stop_event + 1);
        lua_setfield(L, -2, "event");
        if (res->stop_alloc != UINT64_MAX) {
            lua_pushinteger(L, (lua_Integer)res->stop_alloc + 1);
            lua_setfield(L, -2, "allocation");
        }
        lua_pushinteger(L, (lua_Integer)res->stop_size);
        lua_setfield(L, -2, "size");
        if (res->cupy_stop_line) {
            lua_pushinteger(L, (lua_Integer)res->cupy_stop_line);
            lua_setfield(L, -2, "line");
        }
        lua_setfield(L, -2, "stopped");
    }
    lua_pushnumber(L, res->reserved_byte_seconds);
    lua_setfield(L, -2, "reserved_byte_seconds");
    lua_pushnumber(L, res->live_byte_seconds);
    lua_setfield(L, -2, "live_byte_seconds");
}

/* replay(t, pool, {single_stream=false, ["repeat"]=1, synchronize=true,
 * record=false, progress=true, clock="pool", addresses="model", stop_at_oom=false,
 * idle_streams=false}) */
static int trace_replay(lua_State *L)
{
    static const char *const opts[] = {"single_stream", "repeat", "synchronize", "record",
                                       "progress", "clock", "addresses", "stop_at_oom",
                                       "idle_streams", NULL};
    l_trace *tr = totrace(L, 1);
    cp_resource *r = l_checkresource(L, 2);
    cp_replay_opts o;
    cp_replay_result res;
    progress_state ps;
    lua_Integer rep;
    cp_status st;

    l_checkoptions(L, 3, "cupola.trace.replay", opts);
    memset(&o, 0, sizeof o);
    o.single_stream = l_optbool_field(L, 3, "single_stream", 0);
    o.synchronize = l_optbool_field(L, 3, "synchronize", 1);
    rep = l_optint_field(L, 3, "repeat", 1);
    if (rep < 1 || rep > 1000000)
        luaL_argerror(L, 3, lua_pushfstring(L, "option 'repeat' must be in 1..1000000, got %I", (LUAI_UACINT)rep));
    o.repeat = (int)rep;
    o.record = l_optbool_field(L, 3, "record", 0);
    {
        /* "pool": the pool keeps its own clock; "trace": it reads the
         * trace's timestamps for the replay */
        const char *ck = l_optstring_field(L, 3, "clock", "pool");
        if (strcmp(ck, "trace") == 0)
            o.trace_clock = 1;
        else if (strcmp(ck, "pool") != 0)
            return luaL_error(L, "cupola.trace.replay: option 'clock' must be one of pool, trace, "
                                 "not '%s'", (l_pushcut(L, ck, strlen(ck)), lua_tostring(L, -1)));
    }
    {
        const char *a = l_optstring_field(L, 3, "addresses", "model");
        if (strcmp(a, "recorded") == 0)
            o.recorded_addresses = 1;
        else if (strcmp(a, "model") != 0)
            return luaL_error(L, "cupola.trace.replay: option 'addresses' must be one of model, "
                                 "recorded, not '%s'", (l_pushcut(L, a, strlen(a)), lua_tostring(L, -1)));
    }
    if (lua_istable(L, 3) && lua_getfield(L, 3, "stop_at_oom") == LUA_TSTRING) {
        /* "needed": only at a request the program needed (trace.h) */
        if (strcmp(lua_tostring(L, -1), "needed") != 0)
            return luaL_error(L, "cupola.trace.replay: option 'stop_at_oom' must be a boolean or "
                                 "\"needed\", not %s", l_pushshown(L, -1));
        o.stop_at_oom = CP_STOP_NEEDED;
        lua_pop(L, 1);
    } else {
        if (lua_istable(L, 3))
            lua_pop(L, 1);
        o.stop_at_oom = l_optbool_field(L, 3, "stop_at_oom", 0) ? CP_STOP_ANY : CP_STOP_NONE;
    }
    ps.t0 = mono_s();
    ps.shown = 0;
    if (l_optbool_field(L, 3, "progress", 1) && isatty(2)) {
        o.progress = replay_progress;
        o.progress_ud = &ps;
    }
    /* nothing runs on the replay's streams (trace.h; advise's replays run so) */
    o.idle_streams = l_optbool_field(L, 3, "idle_streams", 0);
    memset(&res, 0, sizeof res);
    st = cp_trace_replay(tr->t, r, &o, &res);
    if (st != CP_OK) {
        cp_replay_result_fini(&res);
        l_check(L, st);
    }
    push_replay_result(L, 1, tr->t, &res, o.record);
    cp_replay_result_fini(&res);
    return 1;
}

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

static int trace_advise_run(lua_State *L)
{
    static const char *const opts[] = {"threads", "progress", NULL};
    l_trace *tr = totrace(L, 1);
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
            push_replay_result(L, 1, tr->t, &j->res, 0);
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
static int trace_serving(lua_State *L)
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
static int trace_advise_facts(lua_State *L)
{
    l_trace *tr = totrace(L, 1);
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

/* cupola.core.trace.alloc_event(t, k) -> the event (1-based) of the k-th
 * allocation, and its label (snapshots with frames); nil past the last. */
static int trace_alloc_event(lua_State *L)
{
    l_trace *tr = totrace(L, 1);
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
            push_label(L, row.label, lua_gettop(L));
            lua_getfield(L, -1, "label");
            lua_insert(L, -2);
            return 3; /* event, label, {label =, python_frame =, stack =} */
        }
    }
    lua_pushnil(L);
    return 1;
}

/* Base64 of n bytes, pushed as a Lua string (the page decodes it into a
 * typed array: the compact way to embed millions of numbers in HTML). */
static void push_b64(lua_State *L, const void *data, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = (const unsigned char *)data;
    luaL_Buffer b;
    size_t i;
    char *out = luaL_buffinitsize(L, &b, (n + 2) / 3 * 4 + 1);
    char *o = out;
    for (i = 0; i + 2 < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
        *o++ = tab[v >> 18];
        *o++ = tab[(v >> 12) & 63];
        *o++ = tab[(v >> 6) & 63];
        *o++ = tab[v & 63];
    }
    if (i < n) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0u);
        *o++ = tab[v >> 18];
        *o++ = tab[(v >> 12) & 63];
        *o++ = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    luaL_pushresultsize(&b, (size_t)(o - out));
}

/* Sets field key of the table on top to the base64 of bytes at p. */
static void set_b64(lua_State *L, const char *key, const void *p, size_t bytes)
{
    push_b64(L, p, bytes);
    lua_setfield(L, -2, key);
}

/* The timeline's data as a to-be-closed box, so an error while pushing the
 * strings frees it (a Lua memory error unwinds through here). */
static int timeline_box_gc(lua_State *L)
{
    cp_timeline *tl = (cp_timeline *)lua_touserdata(L, 1);
    if (tl)
        cp_timeline_fini(tl);
    return 0;
}

/* cupola.core.timeline_data(trace [, addresses]) -> table of base64 arrays
 * (timeline.h): addresses is a replay's recording.addresses string. */
static int trace_timeline_data(lua_State *L)
{
    l_trace *tr = totrace(L, 1);
    size_t alen = 0, i;
    const char *addrs = l_optlstring(L, 2, NULL, &alen);
    uint64_t *byord = NULL;
    cp_timeline *tl;
    cp_status st;
    cp_trace_info in;
    const double *st_time;
    const uint64_t *st_res;
    size_t nst;

    tl = (cp_timeline *)lua_newuserdatauv(L, sizeof *tl, 0);
    memset(tl, 0, sizeof *tl);
    lua_newtable(L);
    lua_pushcfunction(L, timeline_box_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, timeline_box_gc);
    lua_setfield(L, -2, "__close");
    lua_setmetatable(L, -2);
    lua_toclose(L, -1);
    if (addrs) {
        luaL_argcheck(L, alen % 8 == 0, 2, "addresses must be packed uint64 values");
        byord = (uint64_t *)lua_newuserdatauv(L, alen ? alen : 1, 0);
        for (i = 0; i < alen / 8; i++) {
            uint64_t v = 0;
            int k;
            for (k = 7; k >= 0; k--)
                v = (v << 8) | (unsigned char)addrs[i * 8 + (size_t)k];
            byord[i] = v;
        }
    }
    st = cp_timeline_build(tr->t, byord, alen / 8, tl);
    l_check(L, st);
    lua_createtable(L, 0, 24);
    lua_pushinteger(L, (lua_Integer)tl->n);
    lua_setfield(L, -2, "n");
    lua_pushinteger(L, (lua_Integer)tl->nb);
    lua_setfield(L, -2, "blocks");
    lua_pushinteger(L, (lua_Integer)tl->peak_live);
    lua_setfield(L, -2, "peak_live");
    lua_pushinteger(L, (lua_Integer)tl->peak_index + 1);
    lua_setfield(L, -2, "peak_event");
    lua_pushnumber(L, tl->height);
    lua_setfield(L, -2, "height");
    lua_pushinteger(L, (lua_Integer)tl->nregions);
    lua_setfield(L, -2, "regions");
    lua_pushnumber(L, tl->t0_us);
    lua_setfield(L, -2, "t0_us");
    set_b64(L, "time", tl->time, tl->n * sizeof *tl->time);
    set_b64(L, "live", tl->live, tl->n * sizeof *tl->live);
    set_b64(L, "b_start", tl->b_start, tl->nb * sizeof *tl->b_start);
    set_b64(L, "b_end", tl->b_end, tl->nb * sizeof *tl->b_end);
    set_b64(L, "b_y", tl->b_y, tl->nb * sizeof *tl->b_y);
    set_b64(L, "b_size", tl->b_size, tl->nb * sizeof *tl->b_size);
    set_b64(L, "b_addr", tl->b_addr, tl->nb * sizeof *tl->b_addr);
    set_b64(L, "b_stream", tl->b_stream, tl->nb * sizeof *tl->b_stream);
    if (tl->nlabels) {
        set_b64(L, "b_label", tl->b_label, tl->nb * sizeof *tl->b_label);
    }
    lua_createtable(L, (int)tl->nlabels, 0);
    for (i = 0; i < tl->nlabels; i++) {
        lua_pushstring(L, tl->labels[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "labels");
    lua_createtable(L, (int)tl->nstreams, 0);
    for (i = 0; i < tl->nstreams; i++) {
        char hex[24];
        snprintf(hex, sizeof hex, "0x%llx", (unsigned long long)tl->streams[i]);
        lua_pushstring(L, hex);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "streams");
    /* PyTorch's own reserved bytes (snapshots): points as (event, bytes),
     * the event being the first whose time is at or after the point's. */
    cp_trace_info_get(tr->t, &in);
    nst = cp_trace_torch_reserved(tr->t, &st_time, &st_res);
    if (in.torch_reserved && nst) {
        size_t e = 0;
        const float *tm = tl->time;
        lua_createtable(L, 0, 2);
        lua_createtable(L, (int)nst, 0);
        lua_createtable(L, (int)nst, 0);
        for (i = 0; i < nst; i++) {
            double rel = st_time[i] - tl->t0_us;
            while (e < tl->n && (double)tm[e] < rel)
                e++;
            lua_pushinteger(L, (lua_Integer)e + 1);
            lua_rawseti(L, -3, (lua_Integer)i + 1);
            lua_pushinteger(L, (lua_Integer)st_res[i]);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        lua_setfield(L, -3, "reserved");
        lua_setfield(L, -2, "events");
        lua_setfield(L, -2, "torch_reserved");
    }
    return 1;
}

static int trace_index(lua_State *L)
{
    l_trace *tr = (l_trace *)l_checkudata(L, 1, L_TRACE);
    const char *k = l_checkstring(L, 2);
    if (l_getmethod(L, 1, k))
        return 1;
    if (!tr->t) {
        lua_pushnil(L);
        return 1;
    }
    push_info(L, tr->t);
    lua_getfield(L, -1, k);
    return 1;
}

static int trace_len(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)cp_trace_events(totrace(L, 1)->t));
    return 1;
}

static int trace_tostring(lua_State *L)
{
    l_trace *tr = (l_trace *)l_checkudata(L, 1, L_TRACE);
    if (!tr->t)
        lua_pushliteral(L, L_TRACE " (closed)");
    else
        lua_pushfstring(L, L_TRACE " (%s, %I events)", cp_trace_path(tr->t),
                        (lua_Integer)cp_trace_events(tr->t));
    return 1;
}

void l_open_trace(lua_State *L)
{
    static const luaL_Reg meta[] = {{"__gc", trace_close},         {"__close", trace_close},
                                    {"__index", trace_index},       {"__len", trace_len},
                                    {"__tostring", trace_tostring}, {NULL, NULL}};
    static const luaL_Reg methods[] = {{"info", trace_info},   {"event", trace_event},
                                       {"replay", trace_replay}, {"close", trace_close},
                                       {NULL, NULL}};
    static const luaL_Reg funcs[] = {{"load", trace_load},
                                     {"replay", trace_replay},
                                     {"timeline_data", trace_timeline_data},
                                     {"advise_run", trace_advise_run},
                                     {"advise_facts", trace_advise_facts},
                                     {"serving", trace_serving},
                                     {"alloc_event", trace_alloc_event},
                                     {NULL, NULL}};
    l_newclass(L, L_TRACE, meta, methods);
    luaL_newlib(L, funcs);
    lua_newtable(L); /* the sources, weak keys */
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, L_SOURCES);
    lua_setfield(L, -2, "sources");
    lua_setfield(L, -2, "trace");
}
