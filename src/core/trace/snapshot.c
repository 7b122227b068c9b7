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
#include "pool/torch.h"
#include "ptrmap.h"

/* mark = role << 28 | value; value 0 means "not decoded". */
enum { M_ENTRY = 1, M_SEGMENT = 2, M_FRAMES = 3, M_FRAME = 4 };
#define MARK(role, v) ((uint32_t)(role) << 28 | (uint32_t)(v))
#define MROLE(m) ((m) >> 28)
#define MVAL(m) ((m) & UINT32_C(0x0fffffff))
#define MMAX UINT32_C(0x0fffffff)

enum { A_OTHER, A_ALLOC, A_FREE_REQ, A_FREE_DONE, A_SEG_UP, A_SEG_DOWN, A_OOM };

typedef struct raw_event {
    uint64_t addr, size, stream;
    double time_us;
    uint32_t label;
    uint16_t device;
    uint8_t action;
    uint8_t use;      /* free_requested: it is the block's free */
    uint8_t call;     /* segment events: cp_torch_devcall */
    uint8_t done;     /* free_completed: taken with its free_requested (torch ops) */
    size_t order;     /* position before the merge, for a stable sort */
    size_t entry;     /* index in its device's list, for messages */
} raw_event;

typedef struct dec {
    cp_snapshot *s;
    raw_event *raw;
    size_t *rawev;      /* per raw event: the row an allocation became (SIZE_MAX: none) */
    size_t n, cap;
    cp_ptrmap labelmap; /* FNV-1a of the label | 1 -> index + 1 */
    int only;           /* the one device whose entries are read; -1: every device */
    uint16_t opdev;     /* the device the torch model's operations are built from */
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

/* What a frame is, as the label needs it (bits, remembered in the frame
 * dict's mark): F_PY a Python frame (its file ends in ".py"), F_LIB one of
 * the Python installation's or PyTorch's own files (a path with
 * "site-packages/", "dist-packages/", "/lib/python" or "/torch/"), F_NOISE
 * the unwinder's own frames, which PyTorch puts first in every C++ stack
 * (torch::unwind::unwind, CapturedTraceback::gather). */
enum { F_PY = 1, F_LIB = 2, F_NOISE = 4, F_KNOWN = 8 };

static int has(const cp_pk_value *v, const char *needle)
{
    size_t i, m = strlen(needle);
    if (!v || v->type != CP_PK_STR)
        return 0;
    for (i = 0; i + m <= v->n; i++)
        if (memcmp(v->v.s + i, needle, m) == 0)
            return 1;
    return 0;
}

/* A file of PyTorch's own Python package outside site-packages (a build
 * from source): "/torch/" followed by one of its modules.  A user's own
 * folder named torch ("tests/torch/record.py") is not one. */
static int torch_source(const cp_pk_value *v)
{
    static const char *const mods[] = {"nn/", "_", "autograd/", "optim/", "cuda/", "utils/",
                                       "distributed/", "fx/", "amp/", "functional.py", "overrides.py",
                                       "serialization.py", "random.py", "storage.py", "testing/",
                                       "jit/", "export/", "profiler/", "sparse/", "linalg/",
                                       "backends/", "nested/", "func/", "library.py", NULL};
    size_t i, j;
    if (!v || v->type != CP_PK_STR)
        return 0;
    for (i = 0; i + 7 <= v->n; i++) {
        if (memcmp(v->v.s + i, "/torch/", 7) != 0)
            continue;
        for (j = 0; mods[j]; j++) {
            size_t m = strlen(mods[j]);
            if (i + 7 + m <= v->n && memcmp(v->v.s + i + 7, mods[j], m) == 0)
                return 1;
        }
    }
    return 0;
}

static int frame_kind(cp_pk_value *f)
{
    const cp_pk_value *file, *name;
    int k = F_KNOWN;
    if (MROLE(f->mark) == M_FRAME && (MVAL(f->mark) & F_KNOWN))
        return (int)MVAL(f->mark);
    file = cp_pk_get(f, "filename");
    name = cp_pk_get(f, "name");
    if (file && file->type == CP_PK_STR && file->n >= 3 && memcmp(file->v.s + file->n - 3, ".py", 3) == 0)
        k |= F_PY;
    if (has(file, "site-packages/") || has(file, "dist-packages/") || has(file, "/lib/python") ||
        torch_source(file))
        k |= F_LIB;
    if (has(name, "unwind::unwind") || has(name, "CapturedTraceback"))
        k |= F_NOISE;
    f->mark = MARK(M_FRAME, k);
    return k;
}

/* A growing string for a label. */
typedef struct lbuf {
    char *s;
    size_t n, cap;
    int failed;
} lbuf;

static void lput(lbuf *b, const char *p, size_t n)
{
    if (b->failed)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *ns;
        while (cap < b->n + n + 1)
            cap *= 2;
        ns = (char *)realloc(b->s, cap);
        if (!ns) {
            b->failed = 1;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = '\0';
}

/* A string of the pickle, cut to max bytes, newlines as spaces (a label's
 * lines are its parts); "?" where it is not a string. */
static void lput_str(lbuf *b, const cp_pk_value *v, size_t max)
{
    size_t i, n;
    if (!v || v->type != CP_PK_STR || !v->n) {
        lput(b, "?", 1);
        return;
    }
    n = v->n > max ? max : v->n;
    for (i = 0; i < n; i++) {
        char c = v->v.s[i] == '\n' || v->v.s[i] == '\r' ? ' ' : v->v.s[i];
        lput(b, &c, 1);
    }
    if (v->n > max)
        lput(b, "...", 3);
}

/* "file:line name" of a frame; short: the file's path after the last
 * "site-packages/" or "dist-packages/" (the package's own path, as in an
 * import), else its last component, which is how people name the files
 * they write. */
static void lput_frame(lbuf *b, const cp_pk_value *f, int shortpath)
{
    const cp_pk_value *file = cp_pk_get(f, "filename"), *line = cp_pk_get(f, "line"),
                      *name = cp_pk_get(f, "name");
    char num[32];
    if (shortpath && file && file->type == CP_PK_STR) {
        cp_pk_value cut = *file;
        size_t i;
        for (i = 0; i < file->n; i++) {
            const char *p = file->v.s + i;
            size_t left = file->n - i;
            if ((left > 14 && memcmp(p, "site-packages/", 14) == 0) ||
                (left > 14 && memcmp(p, "dist-packages/", 14) == 0)) {
                cut.v.s = p + 14;
                cut.n = left - 14;
                i += 13;
            }
        }
        if (cut.v.s == file->v.s) {
            for (i = file->n; i > 0 && file->v.s[i - 1] != '/' && file->v.s[i - 1] != '\\'; i--)
                ;
            if (i < file->n) {
                cut.v.s = file->v.s + i;
                cut.n = file->n - i;
            }
        }
        lput_str(b, &cut, 200);
    } else {
        lput_str(b, file, 400);
    }
    snprintf(num, sizeof num, ":%lld ", (long long)(line && line->type == CP_PK_INT ? line->v.i : 0));
    lput(b, num, strlen(num));
    lput_str(b, name, 200);
}

/* The label of a frame list (snapshot.h says what its lines are): index + 1
 * into s->labels, 0 for none. */
static cp_status frames_label(dec *d, cp_pk_value *frames, uint32_t *out)
{
    enum { STACK_MAX = 96 }; /* frames kept in the stack; the rest counted */
    cp_pk_value *fl = frames; /* the tree is ours: mark it */
    cp_pk_value *user = NULL, *py = NULL, *outside = NULL, *first = NULL;
    lbuf b = {NULL, 0, 0, 0};
    size_t i, len, kept = 0;
    uint64_t h = UINT64_C(14695981039346656037);
    void *v;

    *out = 0;
    if (!frames || (frames->type != CP_PK_LIST && frames->type != CP_PK_TUPLE))
        return CP_OK;
    if (MROLE(fl->mark) == M_FRAMES && MVAL(fl->mark)) {
        /* decoded before (the list may have been emptied then: frames_hook) */
        *out = MVAL(fl->mark) - 1;
        return CP_OK;
    }
    if (!frames->n)
        return CP_OK;
    /* innermost first, as PyTorch writes them */
    for (i = 0; i < frames->n; i++) {
        cp_pk_value *f = frames->v.items[i];
        int k;
        if (f->type != CP_PK_DICT)
            continue;
        k = frame_kind(f);
        if (!first && !(k & F_NOISE))
            first = f;
        if (!outside && !(k & (F_NOISE | F_LIB)) && cp_pk_get(f, "filename") &&
            !has(cp_pk_get(f, "filename"), "??"))
            outside = f;
        if ((k & F_PY) && !py)
            py = f;
        if ((k & F_PY) && !(k & F_LIB) && !user)
            user = f;
    }
    fl->mark = MARK(M_FRAMES, 1);
    if (!first)
        for (i = 0; i < frames->n && !first; i++)
            if (frames->v.items[i]->type == CP_PK_DICT)
                first = frames->v.items[i];
    if (!first)
        return CP_OK;
    /* line 1: the frame people recognise; line 2: the innermost Python
     * frame where it is another; then the whole stack */
    lput_frame(&b, user ? user : py ? py : outside ? outside : first, 1);
    lput(&b, "\n", 1);
    if (py && py != user && user)
        lput_frame(&b, py, 1);
    for (i = 0; i < frames->n; i++) {
        cp_pk_value *f = frames->v.items[i];
        if (f->type != CP_PK_DICT)
            continue;
        if (kept == STACK_MAX) {
            char more[64];
            size_t rest = 0, j;
            for (j = i; j < frames->n; j++)
                rest += frames->v.items[j]->type == CP_PK_DICT;
            snprintf(more, sizeof more, "\n... %zu more frames", rest);
            lput(&b, more, strlen(more));
            break;
        }
        lput(&b, "\n", 1);
        lput_frame(&b, f, 0);
        kept++;
    }
    if (b.failed) {
        free(b.s);
        return oom();
    }
    len = b.n;
    for (i = 0; i < len; i++)
        h = (h ^ (unsigned char)b.s[i]) * UINT64_C(1099511628211);
    h |= 1;
    v = cp_ptrmap_get(&d->labelmap, h);
    if (v && strcmp(d->s->labels[(uintptr_t)v - 1], b.s) == 0) {
        *out = (uint32_t)(uintptr_t)v;
        free(b.s);
    } else {
        char **nl = (char **)realloc(d->s->labels, (d->s->nlabels + 1) * sizeof *nl);
        if (!nl) {
            free(b.s);
            return oom();
        }
        d->s->labels = nl;
        d->s->labels[d->s->nlabels++] = b.s;
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

/* The parse hook (pickle.h): a frame list set in a dict becomes its label
 * at once, remembered in the list's mark, and the list is emptied, so the
 * tree keeps one value per entry's frames however deep the stack was
 * (frame dicts themselves are shared by PyTorch's writers: one per distinct
 * frame).  Every dict's, not only the entries': a list may be shared by a
 * trace entry and a segment's block, and the segments come first. */
static cp_status frames_hook(void *ud, cp_pk_value *dict, cp_pk_value *key, cp_pk_value *value)
{
    dec *d = (dec *)ud;
    uint32_t label;
    cp_status st;
    (void)dict;
    if (value->type != CP_PK_LIST || MROLE(value->mark) == M_FRAMES || !cp_pk_streq(key, "frames"))
        return CP_OK;
    st = frames_label(d, value, &label);
    if (st == CP_OK && MROLE(value->mark) == M_FRAMES && MVAL(value->mark))
        cp_pk_clear(value);
    return st;
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

static cp_status torch_ops(dec *d);

/* From the decoded entries: the rows, PyTorch's reserved bytes over time,
 * and the torch model's operations. */
static cp_status process(dec *d)
{
    cp_snapshot *s = d->s;
    cp_ptrmap m;
    size_t i, nseg = 0;
    int64_t delta = 0, r, peak;
    cp_status st = CP_OK;

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
    d->rawev = (size_t *)malloc((d->n ? d->n : 1) * sizeof *d->rawev);
    if (!d->rawev)
        return oom();
    for (i = 0; i < d->n; i++)
        d->rawev[i] = SIZE_MAX;
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
            d->rawev[i] = s->n;
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
    if (st == CP_OK)
        st = torch_ops(d);
    return st;
}


/* ---- the torch model's operations -----------------------------------------
 * Built from one device's entries (d->opdev: the one read, or device 0).  A call of PyTorch's allocator leaves its
 * entry (alloc, free_requested, oom) after the entries of what it did
 * inside: the run of free_completed (of pending blocks), segment_free /
 * unmap and segment_alloc / map entries between two calls belongs to the
 * second call, or to an empty_cache() (which leaves no entry of its own)
 * between them.  So:
 *   - free_requested followed at once by its block's free_completed is a
 *     plain free; otherwise the block is pending, and its free_completed is
 *     a DONE where it stands.
 *   - A DONE is "later" when a segment_alloc / map follows it before the
 *     next call, or that call is an oom: PyTorch had already failed to find
 *     a block (or synchronized) when it completed, so the malloc must not
 *     see the block; it returns at the next malloc or synchronization.
 *   - Segment frees before a call the model could not have made: an
 *     empty_cache() where the first of them stands (flag 1).  Those before
 *     a malloc that then took a new segment or ran out may be that malloc's
 *     own (garbage collection, a retry under the limit): flag 2, the model
 *     decides. */
typedef struct tmp_op {
    cp_snap_top op;
    uint8_t seg;      /* 0: an operation; 1: segment up; 2: segment down */
} tmp_op;

static int is_call(const tmp_op *o)
{
    return !o->seg && (o->op.kind == CP_TOP_ALLOC || o->op.kind == CP_TOP_FREE ||
                       o->op.kind == CP_TOP_OOM);
}

static cp_status torch_ops(dec *d)
{
    cp_snapshot *s = d->s;
    tmp_op *tmp = NULL;
    size_t nt = 0, i, j, nseg = 0;
    cp_ptrmap live, pend;
    cp_status st = CP_OK;

    for (i = 0; i < d->n; i++)
        nseg += d->raw[i].device == d->opdev && (d->raw[i].action == A_SEG_UP ||
                                          d->raw[i].action == A_SEG_DOWN);
    tmp = (tmp_op *)calloc(d->n ? d->n : 1, sizeof *tmp);
    s->segev = (cp_torch_segev *)malloc((nseg ? nseg : 1) * sizeof *s->segev);
    if (!tmp || !s->segev) {
        free(tmp);
        return oom();
    }
    if (cp_ptrmap_init(&live, 1024) != 0) {
        free(tmp);
        return oom();
    }
    if (cp_ptrmap_init(&pend, 64) != 0) {
        cp_ptrmap_fini(&live);
        free(tmp);
        return oom();
    }
    /* live / pend: address -> the allocation's row + 1 */
    for (i = 0; i < d->n && st == CP_OK; i++) {
        raw_event *e = &d->raw[i];
        tmp_op *o = &tmp[nt];
        void *v;
        if (e->device != d->opdev)
            continue;
        memset(o, 0, sizeof *o);
        o->op.entry = e->entry;
        switch (e->action) {
        case A_ALLOC:
            if (d->rawev[i] == SIZE_MAX)
                continue;
            o->op.kind = CP_TOP_ALLOC;
            o->op.ref = d->rawev[i];
            if (cp_ptrmap_put(&live, e->addr, (void *)(uintptr_t)(d->rawev[i] + 1)) != 0)
                st = oom();
            break;
        case A_FREE_REQ:
            v = cp_ptrmap_del(&live, e->addr);
            if (!v)
                continue;
            o->op.kind = CP_TOP_FREE;
            o->op.ref = (size_t)(uintptr_t)v - 1;
            for (j = i + 1; j < d->n && d->raw[j].device != d->opdev; j++)
                ;
            if (j < d->n && d->raw[j].action == A_FREE_DONE && d->raw[j].addr == e->addr) {
                d->raw[j].done = 1;
            } else {
                o->op.flag = 1;
                if (cp_ptrmap_put(&pend, e->addr, v) != 0)
                    st = oom();
            }
            break;
        case A_FREE_DONE:
            if (e->done)
                continue;
            if ((v = cp_ptrmap_del(&pend, e->addr)) != NULL) {
                o->op.kind = CP_TOP_DONE;
            } else if ((v = cp_ptrmap_del(&live, e->addr)) != NULL) {
                o->op.kind = CP_TOP_FREE; /* a free with no free_requested (older PyTorch) */
            } else {
                continue;
            }
            o->op.ref = (size_t)(uintptr_t)v - 1;
            break;
        case A_OOM:
            o->op.kind = CP_TOP_OOM;
            o->op.size = e->size;
            o->op.stream = e->stream;
            break;
        case A_SEG_UP:
        case A_SEG_DOWN:
            o->seg = e->action == A_SEG_UP ? 1 : 2;
            s->segev[s->nsegev].call = e->call;
            s->segev[s->nsegev].addr = e->addr;
            s->segev[s->nsegev].size = e->size;
            s->segev[s->nsegev].entry = e->entry;
            s->nsegev++;
            break;
        default:
            continue;
        }
        nt++;
    }
    cp_ptrmap_fini(&live);
    cp_ptrmap_fini(&pend);
    if (st != CP_OK) {
        free(tmp);
        return st;
    }
    s->top = (cp_snap_top *)malloc((nt ? nt : 1) * sizeof *s->top);
    if (!s->top) {
        free(tmp);
        return oom();
    }
    /* gap by gap: [a, b) are the entries between calls, b the call (or nt) */
    for (i = 0; i <= nt;) {
        size_t a = i, b = i, k, first_down = SIZE_MAX, last_down = 0;
        int up_after_down = 0, next_kind;
        while (b < nt && !is_call(&tmp[b]))
            b++;
        next_kind = b < nt ? tmp[b].op.kind : -1;
        for (k = a; k < b; k++) {
            if (tmp[k].seg == 2) {
                if (first_down == SIZE_MAX)
                    first_down = k;
                last_down = k;
            }
        }
        for (k = a; k < b; k++)
            if (tmp[k].seg == 1 && first_down != SIZE_MAX && k > last_down)
                up_after_down = 1;
        for (k = a; k < b; k++) {
            if (first_down == k) {
                cp_snap_top *r = &s->top[s->ntop++];
                memset(r, 0, sizeof *r);
                r->kind = CP_TOP_RELEASE;
                r->entry = tmp[k].op.entry;
                r->flag = (next_kind == CP_TOP_OOM ||
                           (next_kind == CP_TOP_ALLOC && up_after_down)) ? 2 : 1;
            }
            if (tmp[k].seg)
                continue;
            if (tmp[k].op.kind == CP_TOP_DONE) {
                size_t q;
                int later = next_kind == CP_TOP_OOM;
                for (q = k + 1; q < b && !later; q++)
                    later = tmp[q].seg == 1;
                tmp[k].op.flag = (uint8_t)later;
            }
            s->top[s->ntop++] = tmp[k].op;
        }
        if (b < nt)
            s->top[s->ntop++] = tmp[b].op;
        i = b + 1;
    }
    free(tmp);
    return CP_OK;
}

/* ---- cupola's compact snapshot ---------------------------------------------
 *   "CPSNAP1\n", then unsigned LEB128 varints:
 *   version (1); the stream values: count, each; PyTorch's env string and
 *   the settings conf string (allocator_settings; empty when absent), each
 *   as length + bytes, with a flag (0/1) for whether the snapshot had
 *   settings before them; the segments: count, each address, total_size,
 *   stream index; the entries: count, each a byte action | stream << 3
 *   (action 0 alloc, 1 free_requested, 2 free_completed, 3 segment_alloc,
 *   4 segment_free, 5 segment_map, 6 segment_unmap, 7 oom; stream index 31:
 *   a varint index follows), then for alloc and segment entries the size and
 *   the address as a zigzag difference from the previous entry's address,
 *   for frees the address difference alone (the size is the allocation's),
 *   for oom the size. */
static const unsigned char compact_magic[8] = {'C', 'P', 'S', 'N', 'A', 'P', '1', '\n'};

int cp_snapshot_is_compact(const unsigned char *buf, size_t len)
{
    return len >= 8 && memcmp(buf, compact_magic, 8) == 0;
}

typedef struct cbuf {
    const unsigned char *p, *end;
} cbuf;

static int cvar(cbuf *b, uint64_t *out)
{
    uint64_t v = 0;
    unsigned shift = 0;
    while (b->p < b->end) {
        unsigned char c = *b->p++;
        if (shift == 63 && (c & 0x7e))
            return -1; /* beyond 64 bits */
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *out = v;
            return 0;
        }
        shift += 7;
        if (shift > 63)
            return -1;
    }
    return -1;
}

static cp_status cbad(const cbuf *b, const unsigned char *start, const char *why)
{
    return cp_error_set(CP_ERR_INVALID, "compact snapshot: offset %zu: %s",
                        (size_t)(b->p - start), why);
}

static cp_status decode_compact(dec *d, const unsigned char *buf, size_t len)
{
    cp_snapshot *s = d->s;
    cbuf b;
    uint64_t ver, nstreams, n, i, v, prev = 0, nsegs;
    uint64_t *streams = NULL;
    cp_status st = CP_OK;

    b.p = buf + 8;
    b.end = buf + len;
    if (cvar(&b, &ver) != 0 || ver != 1)
        return cbad(&b, buf, "not version 1");
    if (cvar(&b, &nstreams) != 0 || nstreams > (uint64_t)(b.end - b.p))
        return cbad(&b, buf, "bad stream count");
    streams = (uint64_t *)malloc((nstreams ? nstreams : 1) * sizeof *streams);
    if (!streams)
        return oom();
    for (i = 0; i < nstreams; i++)
        if (cvar(&b, &streams[i]) != 0) {
            free(streams);
            return cbad(&b, buf, "truncated stream list");
        }
    {
        uint64_t has, l1, l2;
        if (cvar(&b, &has) != 0 || has > 1 || cvar(&b, &l1) != 0 ||
            l1 > (uint64_t)(b.end - b.p)) {
            free(streams);
            return cbad(&b, buf, "bad settings");
        }
        s->has_settings = (int)has;
        {
            size_t k = l1 < sizeof s->torch_env ? (size_t)l1 : sizeof s->torch_env - 1;
            memcpy(s->torch_env, b.p, k);
            s->torch_env[k] = '\0';
            for (i = 0; i < k; i++) /* a NUL inside would cut the string */
                if (!s->torch_env[i])
                    s->torch_env[i] = ' ';
        }
        b.p += l1;
        if (cvar(&b, &l2) != 0 || l2 > (uint64_t)(b.end - b.p)) {
            free(streams);
            return cbad(&b, buf, "bad settings");
        }
        {
            cp_torch_conf c, e;
            char tmp[512];
            size_t k = l2 < sizeof tmp ? (size_t)l2 : sizeof tmp - 1;
            memcpy(tmp, b.p, k);
            tmp[k] = '\0';
            /* kept only when it is a conf string this parser reads; the
             * env string has what the settings leave out */
            if (memchr(tmp, '\0', k) == NULL && cp_torch_conf_parse(tmp, k, &c) == CP_OK) {
                if (cp_torch_conf_parse(s->torch_env, strlen(s->torch_env), &e) == CP_OK) {
                    c.large_segment_size = e.large_segment_size;
                    c.max_non_split_rounding = e.max_non_split_rounding;
                }
                cp_torch_conf_format(&c, s->torch_settings, sizeof s->torch_settings);
            }
            b.p += l2;
        }
    }
    if (cvar(&b, &nsegs) != 0 || nsegs > (uint64_t)(b.end - b.p)) {
        free(streams);
        return cbad(&b, buf, "bad segment count");
    }
    s->has_segments = 1;
    for (i = 0; i < nsegs; i++) {
        uint64_t addr, size, si;
        if (cvar(&b, &addr) != 0 || cvar(&b, &size) != 0 || cvar(&b, &si) != 0 ||
            si >= nstreams || size > (uint64_t)INT64_MAX - s->reserved_end) {
            free(streams);
            return cbad(&b, buf, "bad segment");
        }
        s->reserved_end += size;
    }
    if (cvar(&b, &n) != 0 || n > (uint64_t)(b.end - b.p)) {
        free(streams);
        return cbad(&b, buf, "bad entry count");
    }
    s->devices = 1;
    d->raw = (raw_event *)calloc(n ? (size_t)n : 1, sizeof *d->raw);
    if (!d->raw) {
        free(streams);
        return oom();
    }
    d->cap = (size_t)(n ? n : 1);
    for (i = 0; i < n && st == CP_OK; i++) {
        raw_event *r = &d->raw[d->n];
        unsigned char h;
        uint64_t si, size = 0, dz;
        int a;
        if (b.p >= b.end) {
            st = cbad(&b, buf, "truncated entries");
            break;
        }
        h = *b.p++;
        a = h & 7;
        si = h >> 3;
        if (si == 31 && cvar(&b, &si) != 0) {
            st = cbad(&b, buf, "truncated entry");
            break;
        }
        if (si >= nstreams) {
            st = cbad(&b, buf, "stream index out of range");
            break;
        }
        if ((a == 0 || a >= 3) && cvar(&b, &size) != 0) {
            st = cbad(&b, buf, "truncated entry");
            break;
        }
        if (size > (uint64_t)INT64_MAX || ((a == 0 || a == 7) && size == 0)) {
            st = cbad(&b, buf, "bad size");
            break;
        }
        memset(r, 0, sizeof *r);
        r->size = size;
        r->stream = streams[si];
        r->time_us = (double)i;
        r->order = d->n;
        r->entry = (size_t)i;
        if (a != 7) {
            if (cvar(&b, &dz) != 0) {
                st = cbad(&b, buf, "truncated entry");
                break;
            }
            v = prev + ((dz & 1) ? ~(dz >> 1) : dz >> 1); /* wraps like the writer's */
            prev = v;
            r->addr = v;
        }
        switch (a) {
        case 0: r->action = A_ALLOC; break;
        case 1: r->action = A_FREE_REQ; break;
        case 2: r->action = A_FREE_DONE; break;
        case 3: r->action = A_SEG_UP; r->call = CP_TORCH_MALLOC; break;
        case 4: r->action = A_SEG_DOWN; r->call = CP_TORCH_FREE; break;
        case 5: r->action = A_SEG_UP; r->call = CP_TORCH_MAP; break;
        case 6: r->action = A_SEG_DOWN; r->call = CP_TORCH_UNMAP; break;
        default: r->action = A_OOM; s->ooms++; break;
        }
        if (a != 7 && r->addr == 0) {
            s->ignored++;
            r->action = A_OTHER;
        }
        d->n++;
    }
    if (st == CP_OK && b.p != b.end)
        st = cbad(&b, buf, "trailing bytes");
    free(streams);
    return st;
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
        st = decode_compact(&d, buf, len);
        if (st == CP_OK && device > 0)
            st = cp_error_set(CP_ERR_INVALID, "snapshot: device %d: a compact snapshot holds "
                              "device 0 only", device);
        if (st == CP_OK)
            st = process(&d);
        free(d.raw);
        free(d.rawev);
        if (st != CP_OK)
            cp_snapshot_fini(out);
        return st;
    }
    if (cp_ptrmap_init(&d.labelmap, 64) != 0)
        return oom();
    hooks.setitem = frames_hook;
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
        st = process(&d);
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
