/*
 * trace_replay.c: cupola.trace.replay and t:replay, and the table of a
 * replay's result, which every replay shares (cupola.advise's too): the
 * figures every pool has, then the sections of PyTorch's, BFC's and CuPy's
 * models (trace_binding.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trace_binding.h"

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
    const cp_torch_divergence *d = &res->torch.divergence;
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "recorded");
    if (!d->diverged) {
        lua_pushboolean(L, 0);
        lua_setfield(L, -2, "divergence");
        return;
    }
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, (lua_Integer)res->torch.divergence_event + 1);
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
    lua_pushboolean(L, !res->cupy.mismatch && !res->cupy.diverged);
    lua_setfield(L, -2, "exact");
    if (res->cupy.mismatch) {
        lua_createtable(L, 0, 5);
        lua_pushinteger(L, (lua_Integer)res->cupy.mismatch_line);
        lua_setfield(L, -2, "line");
        lua_pushinteger(L, (lua_Integer)res->cupy.mismatch_op + 1);
        lua_setfield(L, -2, "operation");
        lua_pushstring(L, what[res->cupy.mismatch < 4 ? res->cupy.mismatch : 0]);
        lua_setfield(L, -2, "what");
        lua_pushinteger(L, (lua_Integer)res->cupy.mismatch_model);
        lua_setfield(L, -2, "model");
        lua_pushinteger(L, (lua_Integer)res->cupy.mismatch_log);
        lua_setfield(L, -2, "log");
    } else {
        lua_pushboolean(L, 0);
    }
    lua_setfield(L, -2, "mismatch");
    if (res->cupy.diverged) {
        lua_createtable(L, 0, 4);
        lua_pushinteger(L, (lua_Integer)res->cupy.div_call + 1);
        lua_setfield(L, -2, "call");
        lua_pushinteger(L, (lua_Integer)res->cupy.div_line);
        lua_setfield(L, -2, "line");
        lua_pushinteger(L, (lua_Integer)res->cupy.div_model);
        lua_setfield(L, -2, "model");
        lua_pushinteger(L, (lua_Integer)res->cupy.div_log);
        lua_setfield(L, -2, "log");
    } else {
        lua_pushboolean(L, 0);
    }
    lua_setfield(L, -2, "divergence");
    lua_pushinteger(L, (lua_Integer)res->cupy.used_peak);
    lua_setfield(L, -2, "peak_used_bytes");
    lua_pushinteger(L, (lua_Integer)res->cupy.used_at_peak);
    lua_setfield(L, -2, "used_bytes_at_peak");
    lua_pushinteger(L, (lua_Integer)res->cupy.free_all_at_peak);
    lua_setfield(L, -2, "free_all_blocks_at_peak");
    lua_setfield(L, -2, "cupy");
}

/* The pool's reserved bytes over the replay, and where it put each block:
 * what cupola.timeline draws for a replay (result.recording), the Trace at
 * trace_arg registered as the result's source. */
static void push_recording(lua_State *L, int trace_arg, const cp_replay_result *res)
{
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

/* BFC: the recording's addresses, and frees it wrote late. */
static void push_bfc(lua_State *L, const cp_replay_bfc_result *b, int recorded)
{
    lua_pushinteger(L, (lua_Integer)b->reordered_frees);
    lua_setfield(L, -2, "reordered_frees");
    if (!recorded)
        return;
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "recorded");
    lua_pushinteger(L, (lua_Integer)b->addr_mismatches);
    lua_setfield(L, -2, "address_mismatches");
    if (b->addr_mismatches) {
        lua_pushinteger(L, (lua_Integer)b->first_mismatch + 1);
        lua_setfield(L, -2, "first_mismatch");
    }
    if (b->checked_chunks) {
        lua_pushinteger(L, (lua_Integer)b->chunk_mismatches);
        lua_setfield(L, -2, "chunk_mismatches");
        if (b->chunk_mismatches) {
            lua_pushinteger(L, (lua_Integer)b->first_chunk_mismatch + 1);
            lua_setfield(L, -2, "first_chunk_mismatch");
        }
    }
}

/* stop_at_oom: where the program would have raised (result.stopped). */
static void push_stopped(lua_State *L, const cp_trace *t, const cp_replay_result *res)
{
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, (lua_Integer)res->stop_event + 1);
    lua_setfield(L, -2, "event");
    if (res->stop_alloc != UINT64_MAX) {
        lua_pushinteger(L, (lua_Integer)res->stop_alloc + 1);
        lua_setfield(L, -2, "allocation");
    }
    lua_pushinteger(L, (lua_Integer)res->stop_size);
    lua_setfield(L, -2, "size");
    if (res->stop_oom_entry) {
        /* which `oom` entry (trace.oom_frames gives its frames) */
        size_t k, row;
        uint64_t size, stream;
        for (k = 0; cp_trace_oom_entry(t, k, &row, &size, &stream) == CP_OK; k++)
            if (row == res->stop_event && size == res->stop_size) {
                lua_pushinteger(L, (lua_Integer)k + 1);
                lua_setfield(L, -2, "oom_entry");
                break;
            }
    }
    if (res->cupy.stop_line) {
        lua_pushinteger(L, (lua_Integer)res->cupy.stop_line);
        lua_setfield(L, -2, "line");
    }
    lua_setfield(L, -2, "stopped");
}

/* A replay's result as the table cupola.trace.replay returns (its
 * recording with record; the Trace at trace_arg is then registered as the
 * result's source).  The same function serves every replay, so a figure
 * of cupola.advise is a figure of cupola.trace.replay. */
void l_trace_push_result(lua_State *L, int trace_arg, const cp_trace *t,
                               const cp_replay_result *res, int record)
{
    cp_trace_info in;
    lua_createtable(L, 0, 12);
    if (record)
        push_recording(L, trace_arg, res);
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
    if (res->torch.on) {
        lua_pushinteger(L, (lua_Integer)res->torch.segments);
        lua_setfield(L, -2, "segments");
    }
    if (res->bfc.on)
        push_bfc(L, &res->bfc, res->recorded);
    else if (res->recorded && !res->cupy.on)
        push_divergence(L, res);
    if (res->cupy.on)
        push_cupy(L, res);
    if (res->stopped)
        push_stopped(L, t, res);
    lua_pushnumber(L, res->reserved_byte_seconds);
    lua_setfield(L, -2, "reserved_byte_seconds");
    lua_pushnumber(L, res->live_byte_seconds);
    lua_setfield(L, -2, "live_byte_seconds");
}

/* replay(t, pool, {single_stream=false, ["repeat"]=1, synchronize=true,
 * record=false, progress=true, clock="pool", addresses="model", stop_at_oom=false,
 * idle_streams=false}) */
int l_trace_replay(lua_State *L)
{
    static const char *const opts[] = {"single_stream", "repeat", "synchronize", "record",
                                       "progress", "clock", "addresses", "stop_at_oom",
                                       "idle_streams", NULL};
    l_trace *tr = l_totrace(L, 1);
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
    l_trace_push_result(L, 1, tr->t, &res, o.record);
    cp_replay_result_fini(&res);
    return 1;
}

