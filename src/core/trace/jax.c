/*
 * trace/jax.c: JAX's memory events (jax.h): what the two parsers share (the
 * allocator names, the choice of one allocator) and the JSON lines; the
 * profile itself is jax_xspace.c.
 */
#include "jax.h"

#include "json.h"
#include "text.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const cp_jax_stat_names[CP_JAX_K_N] = {"allocator_name", "addr", "requested_bytes",
                                                   "allocation_bytes", "bytes_allocated",
                                                   "peak_bytes_in_use"};

static size_t name_hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    while (len--)
        h = (h ^ (unsigned char)*s++) * 1099511628211u;
    return (size_t)h;
}

static int name_rehash(cp_jax_names *nm, size_t nslot)
{
    uint32_t *slot = calloc(nslot, sizeof *slot);
    size_t k;
    if (!slot)
        return -1;
    for (k = 0; k < nm->n; k++) {
        size_t i = name_hash(nm->s[k], strlen(nm->s[k])) & (nslot - 1);
        while (slot[i])
            i = (i + 1) & (nslot - 1);
        slot[i] = (uint32_t)(k + 1);
    }
    free(nm->slot);
    nm->slot = slot;
    nm->nslot = nslot;
    return 0;
}

int cp_jax_name_index(cp_jax_names *nm, const char *s, size_t len)
{
    size_t i, mask;
    if (len > 127)
        len = 127;
    if (nm->n >= INT32_MAX - 1)
        return -1;
    if (2 * (nm->n + 1) >= nm->nslot && name_rehash(nm, nm->nslot ? 2 * nm->nslot : 64) != 0)
        return -1;
    mask = nm->nslot - 1;
    for (i = name_hash(s, len) & mask; nm->slot[i]; i = (i + 1) & mask) {
        const char *x = nm->s[nm->slot[i] - 1];
        if (strlen(x) == len && memcmp(x, s, len) == 0)
            return (int)(nm->slot[i] - 1);
    }
    if (nm->n == nm->cap) {
        size_t nc = nm->cap ? 2 * nm->cap : 8;
        void *p = realloc(nm->s, nc * sizeof *nm->s);
        if (!p)
            return -1;
        nm->s = p;
        nm->cap = nc;
    }
    memcpy(nm->s[nm->n], s, len);
    nm->s[nm->n][len] = '\0';
    nm->slot[i] = (uint32_t)(nm->n + 1);
    return (int)nm->n++;
}

long long cp_jax_gpu_number(const char *s)
{
    const char *p;
    long long n = 0;
    if (strncmp(s, "GPU_", 4) != 0)
        return -1;
    for (p = s + 4; *p >= '0' && *p <= '9'; p++)
        n = n > (LLONG_MAX - 9) / 10 ? LLONG_MAX : n * 10 + (*p - '0');
    return p > s + 4 && strcmp(p, "_bfc") == 0 ? n : -1;
}

cp_status cp_jax_raw_push(cp_jax_raw *r, const cp_jax_event *ev, int alloc, const char *path)
{
    cp_jax_events *e = r->e;
    if (e->n == e->cap) {
        size_t nc = e->cap ? 2 * e->cap : 4096;
        cp_jax_event *p = realloc(e->ev, nc * sizeof *p);
        int *a;
        if (!p)
            return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", path);
        e->ev = p;
        a = realloc(r->alloc, nc * sizeof *a);
        if (!a)
            return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", path);
        r->alloc = a;
        e->cap = nc;
    }
    e->ev[e->n] = *ev;
    e->ev[e->n].seq = (uint32_t)e->n;
    r->alloc[e->n++] = alloc;
    return CP_OK;
}

/* Keeps the events of the allocator asked, or of the device allocator of
 * the lowest number (GPU_0_bfc where it is there): not the first in the
 * file, whose order among several GPUs' events is the order of the
 * profiler's threads (an XSpace's lines), not of anything the run did. */
cp_status cp_jax_choose(cp_jax_raw *r, const char *path, const char *want)
{
    cp_jax_events *e = r->e;
    int pick = -1;
    long long best = -1;
    size_t i, k = 0;
    if (want) {
        for (i = 0; i < r->nm.n; i++)
            if (strcmp(r->nm.s[i], want) == 0)
                pick = (int)i;
    } else {
        for (i = 0; i < e->n; i++) {
            long long g = r->alloc[i] >= 0 ? cp_jax_gpu_number(r->nm.s[r->alloc[i]]) : -1;
            if (g >= 0 && (best < 0 || g < best)) {
                best = g;
                pick = r->alloc[i];
            }
        }
    }
    for (i = 0; pick >= 0 && i < e->n; i++)
        k += r->alloc[i] == pick;
    if (pick < 0 || !k) {
        char list[512];
        size_t n = 0;
        list[0] = '\0';
        for (i = 0; i < r->nm.n && n < sizeof list - 1; i++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", r->nm.s[i]);
        if (!e->n)
            return cp_error_set(CP_ERR_INVALID, "%s: no memory events (MemoryAllocation / "
                                "MemoryDeallocation): was the profile taken with the host "
                                "tracer on (jax.profiler.trace's default)?", path);
        return cp_error_set(CP_ERR_INVALID, "%s: no memory events of allocator %s%s (the "
                            "profile's: %s)", path, want ? want : "GPU_<n>_bfc",
                            "", n ? list : "none named");
    }
    k = 0;
    for (i = 0; i < e->n; i++)
        if (r->alloc[i] == pick) {
            e->ev[k] = e->ev[i];
            e->ev[k].seq = (uint32_t)k;
            k++;
        }
    e->n = k;
    snprintf(e->allocator, sizeof e->allocator, "%s", r->nm.s[pick]);
    return CP_OK;
}

void cp_jax_raw_fini(cp_jax_raw *r)
{
    free(r->alloc);
    free(r->nm.s);
    free(r->nm.slot);
}

/* ---- JSON lines ------------------------------------------------------- */

/* Lines of any length to 1 GiB and more (the buffer doubles from 64 KiB, once
 * more past 1 GiB); the gzip stream checked after every line. */
static const cp_line_rule lines = {(size_t)1 << 16, (size_t)1 << 31, "a line longer than 1 GiB",
                                   CP_CUT_NEVER, CP_LINE_NUL_ANY | CP_LINE_GZ_EACH};

/* An unsigned integer value: a JSON number (no fraction) or a string of
 * decimal or 0x-hex digits.  0 ok, -1 not one. */
static int json_u64(const char *p, const char *end, uint64_t *out)
{
    size_t n;
    if (*p == '"') {
        p++;
        end--;
    }
    n = (size_t)(end - p);
    if (n >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        return cp_parse_hex(p, n, 0, out) == CP_NUM_OK ? 0 : -1;
    return cp_parse_dec(p, n, UINT64_MAX, out) == CP_NUM_OK ? 0 : -1;
}

static cp_status jbad(const char *path, size_t line, const char *why)
{
    return cp_error_set(CP_ERR_INVALID, "%s:%zu: %s", path, line, why);
}

/* One member, its value [vs, ve): into ev (or the event's kind, allocator). */
static cp_status member(cp_jax_raw *r, const char *path, size_t line, const cp_json_obj *o,
                        const char *vs, const char *ve, cp_jax_event *ev, int *kind,
                        int *alloc, int *has_ts)
{
    static const char *const nk[] = {"addr", "requested_bytes", "allocation_bytes",
                                     "bytes_allocated", "peak_bytes_in_use"};
    uint64_t *dst[] = {&ev->addr, &ev->requested, &ev->chunk, &ev->in_use, &ev->peak};
    const char *k = o->key;
    size_t klen = o->klen, i;
    uint64_t v;
#define KEY(s) (klen == sizeof(s) - 1 && memcmp(k, s, sizeof(s) - 1) == 0)
    if (KEY("event")) {
        if ((size_t)(ve - vs) == 18 && memcmp(vs, "\"MemoryAllocation\"", 18) == 0)
            *kind = 0;
        else if ((size_t)(ve - vs) == 20 && memcmp(vs, "\"MemoryDeallocation\"", 20) == 0)
            *kind = 1;
        else
            return jbad(path, line, "'event' must be \"MemoryAllocation\" or "
                        "\"MemoryDeallocation\"");
    } else if (KEY("allocator_name")) {
        if (*vs != '"')
            return jbad(path, line, "'allocator_name' must be a string");
        if ((*alloc = cp_jax_name_index(&r->nm, vs + 1, (size_t)(ve - vs - 2))) < 0)
            return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", path);
    } else if (KEY("ts")) {
        char *e2;
        long double d = strtold(*vs == '"' ? vs + 1 : vs, &e2);
        if (e2 == vs || !(d == d) || d > 1e300L || d < -1e300L)
            return jbad(path, line, "'ts' must be a finite number");
        ev->ts = d;
        *has_ts = 1;
    } else {
        for (i = 0; i < 5; i++)
            if (klen == strlen(nk[i]) && memcmp(k, nk[i], klen) == 0)
                break;
        if (i < 5) {
            if (json_u64(vs, ve, &v) != 0) {
                char why[96];
                snprintf(why, sizeof why, "'%s' must be a non-negative integer", nk[i]);
                return jbad(path, line, why);
            }
            *dst[i] = v;
        }
        /* any other key: ignored */
    }
#undef KEY
    return CP_OK;
}

static cp_status parse_line(cp_jax_raw *r, const char *path, size_t line, const char *p)
{
    static const char *const why[] = {
        "", "expected a JSON object ({...}) a line", "expected a key in quotes",
        "a key without its closing quote", "expected ':' after a key", "expected ',' or '}'",
        "more after the object"};
    cp_jax_event ev;
    cp_json_obj o;
    int kind = -1, alloc = -1, has_ts = 0, rc;
    memset(&ev, 0, sizeof ev);
    ev.addr = ev.requested = ev.chunk = ev.in_use = ev.peak = CP_JAX_NONE;
    rc = cp_json_open(&o, p, CP_JSON_PYTHON);
    if (rc == CP_JSON_EMPTY)
        return jbad(path, line, "an empty object (no 'event')");
    while (rc == CP_JSON_MEMBER) {
        const char *vs = o.p, *ve = cp_json_skip(vs, CP_JSON_PYTHON);
        cp_status st;
        if (!ve)
            return jbad(path, line, "a value that is not JSON");
        st = member(r, path, line, &o, vs, ve, &ev, &kind, &alloc, &has_ts);
        if (st != CP_OK)
            return st;
        o.p = ve;
        rc = cp_json_next(&o);
    }
    if (rc < 0)
        return jbad(path, line, why[-rc]);
    if (kind < 0)
        return jbad(path, line, "no 'event' key");
    if (alloc < 0)
        return jbad(path, line, "no 'allocator_name' key");
    if (ev.addr == CP_JAX_NONE)
        return jbad(path, line, "no 'addr' key");
    if (!kind && ev.requested == CP_JAX_NONE && ev.chunk == CP_JAX_NONE)
        return jbad(path, line, "an allocation without 'requested_bytes'");
    if (ev.requested == CP_JAX_NONE)
        ev.requested = ev.chunk;
    ev.is_free = (uint8_t)kind;
    if (!has_ts)
        r->e->has_ts = 0;
    return cp_jax_raw_push(r, &ev, alloc, path);
}

cp_status cp_jax_read_lines(gzFile gz, const char *path, const char *allocator,
                            cp_jax_events *out)
{
    cp_jax_raw r;
    cp_lines l;
    cp_status st;
    int rc;
    memset(&r, 0, sizeof r);
    memset(out, 0, sizeof *out);
    out->has_ts = 1;
    r.e = out;
    if ((st = cp_lines_init(&l, gz, path, &lines)) != CP_OK)
        return st;
    while ((rc = cp_lines_next(&l)) == CP_LINE_OK) {
        if (*cp_json_ws(l.buf) == '\0')
            continue;
        if ((st = parse_line(&r, path, l.line, l.buf)) != CP_OK)
            break;
    }
    if (rc == CP_LINE_ERROR)
        st = l.st;
    else if (st == CP_OK)
        st = cp_jax_choose(&r, path, allocator);
    cp_lines_fini(&l);
    cp_jax_raw_fini(&r);
    if (st != CP_OK)
        cp_jax_events_free(out);
    return st;
}

void cp_jax_events_free(cp_jax_events *e)
{
    free(e->ev);
    e->ev = NULL;
    e->n = e->cap = 0;
}
