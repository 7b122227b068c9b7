/*
 * snapshot.c: a PyTorch memory snapshot to an event list (rules in
 * snapshot.h).
 *
 * The pickle's values may be shared (memo references), so a hostile file
 * could make thousands of entries point at one huge dict or frame list; each
 * entry and each frame list is decoded once and remembered in the value's
 * `mark`, which keeps the work linear in the file's size.  A hostile file may
 * also use one value in two roles (an entry that is a segment, a frame list
 * that is a frame): marks carry their role in the top four bits, and a mark
 * of another role is ignored.
 */
#include "snapshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pickle.h"
#include "ptrmap.h"

/* mark = role << 28 | value; value 0 means "not decoded". */
enum { M_ENTRY = 1, M_SEGMENT = 2, M_FRAMES = 3, M_FRAME = 4 };
#define MARK(role, v) ((uint32_t)(role) << 28 | (uint32_t)(v))
#define MROLE(m) ((m) >> 28)
#define MVAL(m) ((m) & UINT32_C(0x0fffffff))
#define MMAX UINT32_C(0x0fffffff)

enum { A_OTHER, A_ALLOC, A_FREE_REQ, A_FREE_DONE, A_SEG_UP, A_SEG_DOWN };

typedef struct raw_event {
    uint64_t addr, size, stream;
    double time_us;
    uint32_t label;
    uint16_t device;
    uint8_t action;
    uint8_t use;      /* free_requested: it is the block's free */
    size_t order;     /* position before the merge, for a stable sort */
    size_t entry;     /* index in its device's list, for messages */
} raw_event;

typedef struct dec {
    cp_snapshot *s;
    raw_event *raw;
    size_t n, cap;
    cp_ptrmap labelmap; /* FNV-1a of the label | 1 -> index + 1 */
} dec;

static cp_status oom(void)
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
    return A_OTHER;
}

static int is_torch_file(const cp_pk_value *f)
{
    size_t i;
    if (!f || f->type != CP_PK_STR)
        return 0;
    for (i = 0; i + 7 <= f->n; i++)
        if (memcmp(f->v.s + i, "/torch/", 7) == 0)
            return 1;
    return 0;
}

/* The label of a frame list: index + 1 into s->labels, 0 for none. */
static cp_status frames_label(dec *d, cp_pk_value *frames, uint32_t *out)
{
    cp_pk_value *fl = frames; /* the tree is ours: mark it */
    const cp_pk_value *pick = NULL, *file, *line, *name;
    char buf[320];
    size_t i, len;
    uint64_t h = UINT64_C(14695981039346656037);
    void *v;
    int k;

    *out = 0;
    if (!frames || (frames->type != CP_PK_LIST && frames->type != CP_PK_TUPLE) || !frames->n)
        return CP_OK;
    if (MROLE(fl->mark) == M_FRAMES && MVAL(fl->mark)) {
        *out = MVAL(fl->mark) - 1;
        return CP_OK;
    }
    for (i = 0; i < frames->n && i < 32; i++) {
        cp_pk_value *f = frames->v.items[i];
        int torch;
        if (f->type != CP_PK_DICT)
            continue;
        if (!pick)
            pick = f;
        /* Whether a frame dict is PyTorch's own, found once per dict. */
        if (MROLE(f->mark) == M_FRAME) {
            torch = (int)(MVAL(f->mark) & 1);
        } else {
            torch = is_torch_file(cp_pk_get(f, "filename"));
            f->mark = MARK(M_FRAME, torch);
        }
        if (!torch) {
            pick = f;
            break;
        }
    }
    fl->mark = MARK(M_FRAMES, 1);
    if (!pick)
        return CP_OK;
    file = cp_pk_get(pick, "filename");
    line = cp_pk_get(pick, "line");
    name = cp_pk_get(pick, "name");
    k = snprintf(buf, sizeof buf, "%.*s:%lld %.*s",
                 file && file->type == CP_PK_STR ? (int)(file->n > 200 ? 200 : file->n) : 1,
                 file && file->type == CP_PK_STR ? file->v.s : "?",
                 (long long)(line && line->type == CP_PK_INT ? line->v.i : 0),
                 name && name->type == CP_PK_STR ? (int)(name->n > 100 ? 100 : name->n) : 1,
                 name && name->type == CP_PK_STR ? name->v.s : "?");
    len = k < 0 ? 0 : (size_t)k >= sizeof buf ? sizeof buf - 1 : (size_t)k;
    for (i = 0; i < len; i++)
        h = (h ^ (unsigned char)buf[i]) * UINT64_C(1099511628211);
    h |= 1;
    v = cp_ptrmap_get(&d->labelmap, h);
    if (v && strcmp(d->s->labels[(uintptr_t)v - 1], buf) == 0) {
        *out = (uint32_t)(uintptr_t)v;
    } else {
        char **nl = (char **)realloc(d->s->labels, (d->s->nlabels + 1) * sizeof *nl);
        char *copy = (char *)malloc(len + 1);
        if (!nl || !copy) {
            free(copy);
            if (nl)
                d->s->labels = nl;
            return oom();
        }
        memcpy(copy, buf, len);
        copy[len] = '\0';
        d->s->labels = nl;
        d->s->labels[d->s->nlabels++] = copy;
        if (d->s->nlabels >= UINT32_MAX - 2)
            return cp_error_set(CP_ERR_INVALID, "snapshot: too many distinct frames");
        *out = (uint32_t)d->s->nlabels;
        if (!v && cp_ptrmap_put(&d->labelmap, h, (void *)(uintptr_t)*out) != 0)
            return oom();
    }
    if (*out + 1 <= MMAX)
        fl->mark = MARK(M_FRAMES, *out + 1);
    return CP_OK;
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
            return oom();
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
        if (cp_pk_streq(k, "action"))
            r->action = (uint8_t)action_of(v);
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
    } else if (r->addr == 0) {
        d->s->ignored++; /* no address: nothing to pair */
        r->action = A_OTHER;
    }
    /* Sizes of what is replayed or summed must be byte counts; an
     * allocation's must be there and positive.  A free's may be missing or
     * 0: the replay takes the size of its allocation. */
    if (r->action != A_OTHER) {
        int rc = byte_count(size, &r->size);
        if (rc == -1 || (rc == -2 && (r->action == A_ALLOC || size)))
            return bad_size(size, device, entry, "size");
        if (r->action == A_ALLOC && r->size == 0)
            return cp_error_set(CP_ERR_INVALID, "snapshot: device_traces[%u][%zu]: an "
                                "allocation of size 0", (unsigned)device, entry);
    }
    if (r->action == A_ALLOC) {
        st = frames_label(d, frames, &r->label);
        if (st != CP_OK)
            return st;
    }
    if (d->n + 1 <= MMAX)
        em->mark = MARK(M_ENTRY, d->n + 1);
    d->n++;
    return CP_OK;
}

static cp_status seg_overflow(const raw_event *e)
{
    return cp_error_set(CP_ERR_INVALID, "snapshot: device_traces[%u][%zu]: PyTorch's reserved "
                        "bytes pass 2^63-1", (unsigned)e->device, e->entry);
}

static int by_time(const void *a, const void *b)
{
    const raw_event *x = (const raw_event *)a, *y = (const raw_event *)b;
    if (x->time_us != y->time_us)
        return x->time_us < y->time_us ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
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
    memset(s, 0, sizeof *s);
}

static cp_status convert(dec *d, cp_pk_value *root)
{
    cp_snapshot *s = d->s;
    const cp_pk_value *traces, *segs;
    cp_ptrmap m;
    size_t i, j, nseg = 0;
    /* Reserved figures exact, in int64: every size is in 0..2^63-1 and every
     * sum is checked, so a figure either fits a Lua integer or the snapshot
     * is refused (a double lost bytes above 2^53 and a clamp hid wraps). */
    int64_t delta = 0, r, peak;
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
            for (i = 0; i < dl->n; i++) {
                st = add_entry(d, dl->v.items[i], (uint16_t)j, i);
                if (st != CP_OK)
                    return st;
            }
        }
    }
    if (s->devices > 1)
        qsort(d->raw, d->n, sizeof *d->raw, by_time);

    /* Backwards: a free_requested is the free only when no free_completed
     * of the same block follows before the address is allocated again. */
    if (cp_ptrmap_init(&m, 1024) != 0)
        return oom();
    for (i = d->n; i-- > 0;) {
        raw_event *e = &d->raw[i];
        if (e->action == A_FREE_DONE) {
            if (cp_ptrmap_put(&m, e->addr, (void *)1) != 0)
                st = oom();
        } else if (e->action == A_ALLOC) {
            cp_ptrmap_del(&m, e->addr);
        } else if (e->action == A_FREE_REQ) {
            e->use = !cp_ptrmap_get(&m, e->addr);
        }
        if (st != CP_OK)
            break;
        if ((e->action == A_SEG_UP &&
             __builtin_add_overflow(delta, (int64_t)e->size, &delta)) ||
            (e->action == A_SEG_DOWN &&
             __builtin_sub_overflow(delta, (int64_t)e->size, &delta)))
            st = seg_overflow(e);
        if (st != CP_OK)
            break;
    }
    cp_ptrmap_fini(&m);
    if (st != CP_OK)
        return st;

    /* Forwards: pair frees with live allocations; PyTorch's reserved. */
    s->ev = (cp_snap_event *)malloc((d->n ? d->n : 1) * sizeof *s->ev);
    for (i = 0; i < d->n; i++)
        nseg += d->raw[i].action == A_SEG_UP || d->raw[i].action == A_SEG_DOWN;
    s->seg_time = (double *)malloc((nseg + 1) * sizeof *s->seg_time);
    s->seg_reserved = (uint64_t *)malloc((nseg + 1) * sizeof *s->seg_reserved);
    if (!s->ev || !s->seg_time || !s->seg_reserved || cp_ptrmap_init(&m, 1024) != 0)
        return oom();
    if (__builtin_sub_overflow((int64_t)s->reserved_end, delta, &r)) {
        cp_ptrmap_fini(&m);
        return cp_error_set(CP_ERR_INVALID, "snapshot: PyTorch's reserved bytes at the start "
                            "(the segments' total minus the trace's segment events) pass "
                            "2^63-1");
    }
    if (r < 0)
        r = 0; /* no segments list, or one that disagrees with the trace */
    peak = r;
    s->seg_time[0] = d->n ? d->raw[0].time_us : 0.0;
    s->seg_reserved[0] = (uint64_t)r;
    s->nseg = 1;
    for (i = 0; i < d->n && st == CP_OK; i++) {
        raw_event *e = &d->raw[i];
        cp_snap_event *o = &s->ev[s->n];
        switch (e->action) {
        case A_SEG_UP:
        case A_SEG_DOWN:
            /* r >= 0 and size <= 2^63-1: a subtraction cannot overflow. */
            if (e->action == A_SEG_DOWN)
                r -= (int64_t)e->size;
            else if (__builtin_add_overflow(r, (int64_t)e->size, &r)) {
                st = seg_overflow(e);
                continue;
            }
            if (r < 0)
                r = 0;
            if (r > peak)
                peak = r;
            s->seg_time[s->nseg] = e->time_us;
            s->seg_reserved[s->nseg++] = (uint64_t)r;
            continue;
        case A_ALLOC:
            if (cp_ptrmap_get(&m, e->addr)) {
                s->unmatched++;
                continue;
            }
            if (cp_ptrmap_put(&m, e->addr, (void *)1) != 0)
                st = oom();
            o->is_free = 0;
            break;
        case A_FREE_REQ:
        case A_FREE_DONE:
            if (e->action == A_FREE_REQ && !e->use)
                continue;
            if (!cp_ptrmap_del(&m, e->addr)) {
                s->unmatched++;
                continue;
            }
            o->is_free = 1;
            break;
        default:
            continue;
        }
        o->addr = e->addr;
        o->size = e->size;
        o->stream = e->stream;
        o->time_us = e->time_us;
        o->label = e->action == A_ALLOC ? e->label : 0;
        o->device = e->device;
        o->entry = e->entry;
        s->n++;
    }
    cp_ptrmap_fini(&m);
    s->reserved_peak = (uint64_t)peak;
    return st;
}

cp_status cp_snapshot_read(const unsigned char *buf, size_t len, cp_snapshot *out)
{
    cp_pickle *pk = NULL;
    cp_pk_value *root = NULL;
    cp_status st;
    dec d;

    memset(out, 0, sizeof *out);
    memset(&d, 0, sizeof d);
    d.s = out;
    st = cp_pickle_parse(buf, len, &pk, &root);
    if (st != CP_OK)
        return st;
    if (cp_ptrmap_init(&d.labelmap, 64) != 0)
        st = oom();
    else
        st = convert(&d, root);
    cp_ptrmap_fini(&d.labelmap);
    free(d.raw);
    cp_pickle_free(pk);
    if (st != CP_OK)
        cp_snapshot_fini(out);
    return st;
}
