/*
 * snapshot_frames.c: an entry's frames into its label (snapshot.h says what
 * its lines are), during the parse, so a stream's memory follows the
 * entries and not their frames.
 */
#include "snapshot_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
cp_status cp_snap_frames_label(dec *d, cp_pk_value *frames, uint32_t *out)
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
        return cp_snap_oom();
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
            return cp_snap_oom();
        }
        d->s->labels = nl;
        d->s->labels[d->s->nlabels++] = b.s;
        if (d->s->nlabels >= UINT32_MAX - 2)
            return cp_error_set(CP_ERR_INVALID, "snapshot: too many distinct frames");
        *out = (uint32_t)d->s->nlabels;
        if (!v && cp_ptrmap_put(&d->labelmap, h, (void *)(uintptr_t)*out) != 0)
            return cp_snap_oom();
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
cp_status cp_snap_frames_hook(void *ud, cp_pk_value *dict, cp_pk_value *key, cp_pk_value *value)
{
    dec *d = (dec *)ud;
    uint32_t label;
    cp_status st;
    (void)dict;
    if (value->type != CP_PK_LIST || MROLE(value->mark) == M_FRAMES || !cp_pk_streq(key, "frames"))
        return CP_OK;
    st = cp_snap_frames_label(d, value, &label);
    if (st == CP_OK && MROLE(value->mark) == M_FRAMES && MVAL(value->mark))
        cp_pk_clear(value);
    return st;
}
