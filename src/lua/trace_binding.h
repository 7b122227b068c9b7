/*
 * trace_binding.h: what the files of cupola.Trace's binding share:
 *   trace.c           the Trace object (load, info, event, close) and the
 *                     cupola.core.trace table
 *   trace_replay.c    replays and their results (the figures every pool
 *                     has, then PyTorch's, BFC's and CuPy's sections)
 *   trace_advise.c    cupola.advise's jobs on threads, and what it reads of
 *                     a trace besides its replays
 *   trace_timeline.c  the timeline's data (cupola.timeline)
 *   trace_scale.c     cupola.trace.scale's predictions and their `scaled`
 */
#ifndef CUPOLA_TRACE_BINDING_H
#define CUPOLA_TRACE_BINDING_H

#include "binding.h"
#include "trace/trace.h"

typedef struct l_trace {
    cp_trace *t; /* NULL once closed */
    int busy;    /* advise_runs replaying it on threads: close() must wait */
} l_trace;

/* Replay results recorded with record = true -> their Trace, weak keys:
 * cupola.timeline draws a result from it, and the result stays plain data.
 * Kept here so that t:replay and cupola.trace.replay both register (a Lua
 * wrapper did it once, and moved every error's position into itself). */
#define L_SOURCES "cupola.trace.sources"

cp_resource *l_checkresource(lua_State *L, int arg); /* pool.c */

/* The open Trace at arg (an error when closed). */
l_trace *l_totrace(lua_State *L, int arg);
/* A new Trace pushed in its released state: its slot takes the trace once
 * made (an error before leaves nothing to free). */
cp_trace **l_trace_new(lua_State *L);
/* A label of the trace's into the table at index t: label, python_frame,
 * stack = {...} (trace.c). */
void l_trace_push_label(lua_State *L, const char *label, int t);
/* A replay's result as the table cupola.trace.replay returns (its recording
 * with record, registered with the Trace at trace_arg as its source). */
void l_trace_push_result(lua_State *L, int trace_arg, const cp_trace *t,
                         const cp_replay_result *res, int record);

/* The functions of cupola.core.trace besides load (and the Trace's replay). */
int l_trace_replay(lua_State *L);
int l_trace_advise_run(lua_State *L);
int l_trace_advise_facts(lua_State *L);
int l_trace_serving(lua_State *L);
int l_trace_alloc_event(lua_State *L);
int l_trace_oom_frames(lua_State *L);
int l_trace_timeline_data(lua_State *L);
int l_trace_scale(lua_State *L);
int l_trace_rescale(lua_State *L);
/* A scaled trace's `scaled` table set in the table at the top of the stack
 * (nothing for another trace; trace_scale.c). */
void l_trace_push_scaled(lua_State *L, const cp_trace *t);

#endif /* CUPOLA_TRACE_BINDING_H */
