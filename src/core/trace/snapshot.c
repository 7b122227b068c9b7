/*
 * snapshot.c: a PyTorch memory snapshot to an event list (rules in
 * snapshot.h): the entries and the settings of a pickle, and the entry
 * points (the parts: snapshot_impl.h).
 *
 * The pickle's values may be shared (memo references), so a hostile file
 * could make thousands of entries point at one huge dict or frame list; each
 * entry and each frame list is decoded once and remembered in the value's
 * `mark`, which keeps the work linear in the file's size.  A hostile file may
 * also use one value in two roles (an entry that is a segment, a frame list
 * that is a frame): marks carry their role in the top four bits, and a mark
 * of another role is ignored.
 */
#include "snapshot_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pickle.h"
#include "pool/torch.h"

cp_status cp_snap_oom(void)
{
    return cp_error_set(CP_ERR_OOM, "out of host memory reading a snapshot");
}

static int action_of(const cp_pk_value *a)
{
    if (cp_pk_streq(a, "alloc"))
        return A_ALLOC;
    if (cp_pk_streq(a, "free_requested"))
        return A_FREE_REQ;
    if (cp_pk_streq(a, "free_completed") || cp_pk_streq(a, "free"))
        return A_FREE_DONE;
    if (cp_pk_streq(a, "segment_alloc") || cp_pk_streq(a, "segment_map"))
        return A_SEG_UP;
    if (cp_pk_streq(a, "segment_free") || cp_pk_streq(a, "segment_unmap"))
        return A_SEG_DOWN;
    if (cp_pk_streq(a, "oom"))
        return A_OOM;
    return A_OTHER;
}

/* Which device call a segment action is (cp_torch_devcall). */
static uint8_t call_of(const cp_pk_value *a)
{
    if (cp_pk_streq(a, "segment_free"))
        return CP_TORCH_FREE;
    if (cp_pk_streq(a, "segment_map"))
        return CP_TORCH_MAP;
    if (cp_pk_streq(a, "segment_unmap"))
        return CP_TORCH_UNMAP;
    return CP_TORCH_MALLOC;
}

/* A byte count as the pickle holds it: an int in 0..2^63-1, the range of a
 * signed 64-bit integer (trace.h says why sizes stop there).  -1: negative or
 * above; -2: not an int (a bool is not a size either). */
static int byte_count(const cp_pk_value *v, uint64_t *out)
{
    if (!v || v->type != CP_PK_INT)
        return -2;
    if (v->is_u64 || v->v.i < 0)
        return -1;
    *out = (uint64_t)v->v.i;
    return 0;
}

static cp_status bad_size(const cp_pk_value *v, uint16_t device, size_t entry, const char *key)
{
    if (v && v->type == CP_PK_INT)
        return cp_error_set(CP_ERR_INVALID, "snapshot: device_traces[%u][%zu]: %s %s%llu is "
                            "not in 0..2^63-1", (unsigned)device, entry, key,
                            v->is_u64 ? "" : "-",
                            v->is_u64 ? (unsigned long long)v->v.u
                                      : (unsigned long long)(0 - (uint64_t)v->v.i));
    return cp_error_set(CP_ERR_INVALID, "snapshot: device_traces[%u][%zu]: %s is %s",
                        (unsigned)device, entry, key, v ? "not an integer" : "missing");
}

static cp_status add_entry(dec *d, cp_pk_value *e, uint16_t device, size_t entry)
{
    cp_pk_value *em = e;
    raw_event *r;
    size_t i;
    cp_pk_value *frames = NULL;
    const cp_pk_value *size = NULL;
    cp_status st;

    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 1024;
        raw_event *nr = (raw_event *)realloc(d->raw, cap * sizeof *nr);
        if (!nr)
            return cp_snap_oom();
        d->raw = nr;
        d->cap = cap;
    }
    r = &d->raw[d->n];
    if (e->type == CP_PK_DICT && MROLE(e->mark) == M_ENTRY && MVAL(e->mark) &&
        MVAL(e->mark) - 1 < d->n) {
        /* The same dict again (a memo reference): decoded already. */
        *r = d->raw[MVAL(e->mark) - 1];
        r->device = device;
        r->entry = entry;
        r->order = d->n++;
        return CP_OK;
    }
    memset(r, 0, sizeof *r);
    r->device = device;
    r->entry = entry;
    r->order = d->n;
    if (e->type != CP_PK_DICT)
        return cp_error_set(CP_ERR_INVALID, "snapshot: device_traces[%u][%zu] is not a dict",
                            (unsigned)device, entry);
    /* One pass over the keys (a hostile entry may have very many). */
    for (i = 0; i < e->n; i++) {
        const cp_pk_value *k = e->v.items[2 * i];
        cp_pk_value *v = e->v.items[2 * i + 1];
        if (k->type != CP_PK_STR)
            continue;
        if (cp_pk_streq(k, "action")) {
            r->action = (uint8_t)action_of(v);
            r->call = call_of(v);
        }
        else if (cp_pk_streq(k, "addr"))
            r->addr = cp_pk_u64(v);
        else if (cp_pk_streq(k, "size"))
            size = v;
        else if (cp_pk_streq(k, "stream"))
            r->stream = cp_pk_u64(v);
        else if (cp_pk_streq(k, "time_us"))
            r->time_us = cp_pk_num(v);
        else if (cp_pk_streq(k, "frames"))
            frames = v;
    }
    if (r->time_us != r->time_us)
        r->time_us = 0.0; /* NaN would break the merge's ordering */
    if (r->action == A_OTHER) {
        d->s->ignored++;
        r->action = A_OTHER;
    } else if (r->action == A_OOM) {
        /* a request PyTorch refused: no address (its addr is the device's
         * free memory, or None), a size and a stream */
        r->addr = 0;
        d->s->ooms++;
    } else if (r->addr == 0) {
        d->s->ignored++; /* no address: nothing to pair */
        r->action = A_OTHER;
    }
    /* Sizes of what is replayed or summed must be byte counts; an
     * allocation's must be there and positive.  A free's may be missing or
     * 0: the replay takes the size of its allocation. */
    if (r->action != A_OTHER) {
        int rc = byte_count(size, &r->size);
        if (rc == -1 || (rc == -2 && (r->action == A_ALLOC || r->action == A_OOM || size)))
            return bad_size(size, device, entry, "size");
        if ((r->action == A_ALLOC || r->action == A_OOM) && r->size == 0)
            return cp_error_set(CP_ERR_INVALID, "snapshot: device_traces[%u][%zu]: an "
                                "allocation of size 0", (unsigned)device, entry);
    }
    /* an oom entry's frames too: where the run ran out (advise names them) */
    if (r->action == A_ALLOC || r->action == A_OOM) {
        st = cp_snap_frames_label(d, frames, &r->label);
        if (st != CP_OK)
            return st;
    }
    if (d->n + 1 <= MMAX)
        em->mark = MARK(M_ENTRY, d->n + 1);
    d->n++;
    return CP_OK;
}

void cp_snapshot_fini(cp_snapshot *s)
{
    size_t i;
    for (i = 0; i < s->nlabels; i++)
        free(s->labels[i]);
    free(s->labels);
    free(s->ev);
    free(s->seg_time);
    free(s->seg_reserved);
    free(s->top);
    free(s->segev);
    memset(s, 0, sizeof *s);
}

/* PyTorch's own view of its settings (allocator_settings): the env string
 * as given, and the settings as a conf string of cupola's. */
static void settings_of(dec *d, const cp_pk_value *set)
{
    cp_snapshot *s = d->s;
    cp_torch_conf c;
    const cp_pk_value *v;
    size_t i;
    if (!set || set->type != CP_PK_DICT)
        return;
    s->has_settings = 1;
    cp_torch_conf_default(&c);
    v = cp_pk_get(set, "PYTORCH_CUDA_ALLOC_CONF");
    if (v && v->type == CP_PK_STR) {
        size_t n = v->n < sizeof s->torch_env - 1 ? v->n : sizeof s->torch_env - 1;
        memcpy(s->torch_env, v->v.s, n);
        s->torch_env[n] = '\0';
        for (i = 0; i < n; i++) /* a NUL inside would cut the string */
            if (!s->torch_env[i])
                s->torch_env[i] = ' ';
    }
    v = cp_pk_get(set, "max_split_size");
    /* a size_t written as int64: -1 is unset (2^64 - 1), and a value past
     * 2^63 ("max_split_size_mb:-1" reads as (2^44 - 1) MiB) is negative */
    if (v && v->type == CP_PK_INT &&
        ((uint64_t)v->v.i == CP_TORCH_NO_SPLIT_LIMIT ||
         ((uint64_t)v->v.i % CP_TORCH_MIB == 0 && (uint64_t)v->v.i > 10 * CP_TORCH_MIB)))
        c.max_split_size = (uint64_t)v->v.i;
    v = cp_pk_get(set, "garbage_collection_threshold");
    if (v && (v->type == CP_PK_FLOAT || v->type == CP_PK_INT)) {
        double g = cp_pk_num(v);
        if (g > 0.0 && g < 1.0)
            c.gc_threshold = g;
    }
    v = cp_pk_get(set, "expandable_segments");
    if (v && (v->type == CP_PK_BOOL || v->type == CP_PK_INT))
        c.expandable_segments = v->v.i != 0;
    v = cp_pk_get(set, "release_lock_on_cudamalloc");
    if (v && (v->type == CP_PK_BOOL || v->type == CP_PK_INT))
        c.release_lock_on_cudamalloc = v->v.i != 0;
    v = cp_pk_get(set, "roundup_power2_divisions");
    if (v && v->type == CP_PK_DICT) {
        /* {"1": d, "2": d, ..., "32768": d}: the interval starting at that many MiB */
        for (i = 0; i < v->n; i++) {
            const cp_pk_value *k = v->v.items[2 * i], *x = v->v.items[2 * i + 1];
            uint64_t mb = 0;
            size_t j;
            if (k->type != CP_PK_STR || x->type != CP_PK_INT || k->n == 0 || k->n > 6)
                continue;
            for (j = 0; j < k->n && k->v.s[j] >= '0' && k->v.s[j] <= '9'; j++)
                mb = mb * 10 + (uint64_t)(k->v.s[j] - '0');
            /* divisions are 0 or powers of two (size_t, written as int64) */
            if (j == k->n && mb && !(mb & (mb - 1)) &&
                !((uint64_t)x->v.i & ((uint64_t)x->v.i - 1))) {
                int idx = 63 - __builtin_clzll(mb);
                if (idx < 16)
                    c.roundup_divisions[idx] = (uint64_t)x->v.i;
            }
        }
    } else if (v && v->type == CP_PK_LIST) {
        for (i = 0; i < v->n && i < 16; i++)
            if (v->v.items[i]->type == CP_PK_INT &&
                !((uint64_t)v->v.items[i]->v.i & ((uint64_t)v->v.items[i]->v.i - 1)))
                c.roundup_divisions[i] = (uint64_t)v->v.items[i]->v.i;
    }
    {
        /* large_segment_size and max_non_split_rounding are not among the
         * fields: the env string has them */
        cp_torch_conf e;
        if (cp_torch_conf_parse(s->torch_env, strlen(s->torch_env), &e) == CP_OK) {
            c.large_segment_size = e.large_segment_size;
            c.max_non_split_rounding = e.max_non_split_rounding;
        }
    }
    cp_torch_conf_format(&c, s->torch_settings, sizeof s->torch_settings);
}

/* Reserved figures exact, in int64: every size is in 0..2^63-1 and every
 * sum is checked, so a figure either fits a Lua integer or the snapshot is
 * refused (a double lost bytes above 2^53 and a clamp hid wraps). */
static cp_status decode_pickle(dec *d, cp_pk_value *root)
{
    cp_snapshot *s = d->s;
    const cp_pk_value *traces, *segs;
    size_t i, j;
    cp_status st = CP_OK;

    if (!root || root->type != CP_PK_DICT)
        return cp_error_set(CP_ERR_INVALID, "snapshot: the pickle is not a dict (expected the "
                            "keys 'segments' and 'device_traces')");
    traces = cp_pk_get(root, "device_traces");
    segs = cp_pk_get(root, "segments");
    if (!traces && !segs)
        return cp_error_set(CP_ERR_INVALID, "snapshot: neither 'device_traces' nor 'segments' "
                            "(not a torch.cuda.memory snapshot)");
    if (traces && traces->type != CP_PK_LIST)
        return cp_error_set(CP_ERR_INVALID, "snapshot: 'device_traces' is not a list");
    if (segs && segs->type != CP_PK_LIST)
        return cp_error_set(CP_ERR_INVALID, "snapshot: 'segments' is not a list");
    if (segs) {
        s->has_segments = 1;
        for (i = 0; i < segs->n; i++) {
            cp_pk_value *sg = segs->v.items[i];
            if (sg->type != CP_PK_DICT)
                return cp_error_set(CP_ERR_INVALID, "snapshot: segments[%zu] is not a dict", i);
            if (MROLE(sg->mark) == M_SEGMENT)
                continue; /* the same segment twice: counted once */
            sg->mark = MARK(M_SEGMENT, 1);
            if (d->only >= 0 && cp_pk_u64(cp_pk_get(sg, "device")) != (uint64_t)d->only)
                continue; /* another device's */
            {
                const cp_pk_value *ts = cp_pk_get(sg, "total_size");
                uint64_t sz = 0;
                if (ts && byte_count(ts, &sz) != 0)
                    return cp_error_set(CP_ERR_INVALID, "snapshot: segments[%zu]: total_size "
                                        "is not an integer in 0..2^63-1", i);
                if (sz > (uint64_t)INT64_MAX - s->reserved_end)
                    return cp_error_set(CP_ERR_INVALID, "snapshot: segments[%zu]: the "
                                        "segments' total_size sum passes 2^63-1 bytes", i);
                s->reserved_end += sz;
            }
        }
    }
    if (traces) {
        if (traces->n > UINT16_MAX)
            return cp_error_set(CP_ERR_INVALID, "snapshot: more than 65535 devices");
        s->devices = traces->n;
        for (j = 0; j < traces->n; j++) {
            const cp_pk_value *dl = traces->v.items[j];
            if (dl->type != CP_PK_LIST)
                return cp_error_set(CP_ERR_INVALID, "snapshot: device_traces[%zu] is not a list",
                                    j);
            if (d->only >= 0 && j != (size_t)d->only)
                continue;
            for (i = 0; i < dl->n; i++) {
                st = add_entry(d, dl->v.items[i], (uint16_t)j, i);
                if (st != CP_OK)
                    return st;
            }
        }
    }
    if (root)
        settings_of(d, cp_pk_get(root, "allocator_settings"));
    return CP_OK;
}

/* A snapshot from a buffer (buf) or a stream (src), of every device
 * (device < 0) or one. */
static cp_status read_any(const unsigned char *buf, size_t len, const cp_pk_source *src,
                          int device, cp_snapshot *out)
{
    cp_pickle *pk = NULL;
    cp_pk_value *root = NULL;
    cp_pk_hooks hooks;
    cp_status st;
    dec d;

    memset(out, 0, sizeof *out);
    memset(&d, 0, sizeof d);
    d.s = out;
    d.only = device;
    d.opdev = device > 0 ? (uint16_t)device : 0;
    out->op_device = d.opdev;
    if (buf && cp_snapshot_is_compact(buf, len)) {
        st = cp_snap_decode_compact(&d, buf, len);
        if (st == CP_OK && device > 0)
            st = cp_error_set(CP_ERR_INVALID, "snapshot: device %d: a compact snapshot holds "
                              "device 0 only", device);
        if (st == CP_OK)
            st = cp_snap_process(&d);
        free(d.raw);
        free(d.rawev);
        if (st != CP_OK)
            cp_snapshot_fini(out);
        return st;
    }
    if (cp_ptrmap_init(&d.labelmap, 64) != 0)
        return cp_snap_oom();
    hooks.setitem = cp_snap_frames_hook;
    hooks.ud = &d;
    st = src ? cp_pickle_parse_stream(src, &hooks, &pk, &root)
             : cp_pickle_parse_hooked(buf, len, &hooks, &pk, &root);
    if (st == CP_OK)
        st = decode_pickle(&d, root);
    if (st == CP_OK && device >= 0 && (size_t)device >= out->devices)
        st = cp_error_set(CP_ERR_INVALID, "snapshot: device %d: the snapshot has %zu device%s "
                          "(device_traces lists)", device, out->devices,
                          out->devices == 1 ? "" : "s");
    if (st == CP_OK)
        st = cp_snap_process(&d);
    cp_ptrmap_fini(&d.labelmap);
    free(d.raw);
    free(d.rawev);
    cp_pickle_free(pk);
    if (st != CP_OK)
        cp_snapshot_fini(out);
    return st;
}

cp_status cp_snapshot_read(const unsigned char *buf, size_t len, cp_snapshot *out)
{
    return read_any(buf, len, NULL, -1, out);
}

cp_status cp_snapshot_read_device(const unsigned char *buf, size_t len, int device,
                                  cp_snapshot *out)
{
    return read_any(buf, len, NULL, device, out);
}

cp_status cp_snapshot_read_stream(const cp_pk_source *src, int device, cp_snapshot *out)
{
    return read_any(NULL, 0, src, device, out);
}
