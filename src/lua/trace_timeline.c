/*
 * trace_timeline.c: cupola.core.timeline_data, a trace's timeline
 * (trace/timeline.h) as base64 arrays for the page cupola.timeline writes
 * (trace_binding.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_binding.h"
#include "trace/timeline.h"

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
int l_trace_timeline_data(lua_State *L)
{
    l_trace *tr = l_totrace(L, 1);
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

