/*
 * scale.c: a program's trace at another size from its recordings (the
 * rules are in scale.h): the checks and their sentences, the keys matching
 * reads, the fit of every matched size, and the trace made from the base's
 * events with the fitted sizes (scale_trace.c).
 */
#include "scale_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_impl.h"

static cp_status nomem(void)
{
    return cp_error_set(CP_ERR_OOM, "out of host memory predicting a trace at another size");
}

void cp_scale_free(struct cp_scale *s)
{
    if (!s)
        return;
    free(s->path);
    free(s->from);
    free(s->kind);
    free(s->npts);
    free(s->first);
    free(s->ps);
    free(s->py);
    free(s);
}

const cp_scale_info *cp_trace_scale_info(const cp_trace *t)
{
    return t->scaled ? &t->scaled->info : NULL;
}

static char *dup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = (char *)malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* ---- the keys ---------------------------------------------------------- */

typedef struct lref {
    const char *s;
    uint32_t rec, idx;
} lref;

static int by_text(const void *p, const void *q)
{
    return strcmp(((const lref *)p)->s, ((const lref *)q)->s);
}

/* The Python frames of a label's stack (its lines from the third on that
 * are "FILE.py:LINE name"), one a line: the coarse key's text ("" for a
 * stack of C++ frames alone). */
static char *python_part(const char *label)
{
    size_t n = strlen(label), k = 0;
    char *out = (char *)malloc(n + 1);
    const char *p = label;
    int line = 0;
    if (!out)
        return NULL;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        const char *py = line >= 2 ? strstr(p, ".py:") : NULL;
        if (py && py < p + len) {
            memcpy(out + k, p, len);
            k += len;
            out[k++] = '\n';
        }
        line++;
        p += len + (e ? 1 : 0);
    }
    out[k] = '\0';
    return out;
}

/* texts[i] numbered by their order (equal texts one number, 1-based; an
 * empty one 0), the numbers into id[rec[i]][idx[i]]. */
static void number(lref *all, size_t total, uint32_t **id)
{
    size_t k;
    uint32_t next = 0;
    qsort(all, total, sizeof *all, by_text);
    for (k = 0; k < total; k++) {
        if (k == 0 || strcmp(all[k].s, all[k - 1].s) != 0)
            next += all[k].s[0] != '\0';
        id[all[k].rec][all[k].idx] = all[k].s[0] ? next : 0;
    }
}

/* Every recording's labels as one numbering (1-based; 0: no frames):
 * gid[r][i] for label i of recording r, and cid[r][i] for its Python
 * frames alone. */
static cp_status label_ids(const cp_trace *const *recs, size_t n, uint32_t **gid, uint32_t **cid)
{
    size_t r, i, total = 0, k = 0;
    lref *all;
    cp_status st = CP_OK;
    for (r = 0; r < n; r++)
        total += recs[r]->nlabels;
    all = (lref *)calloc(total ? total : 1, sizeof *all);
    if (!all)
        return nomem();
    for (r = 0; r < n; r++) {
        gid[r] = (uint32_t *)calloc(recs[r]->nlabels ? recs[r]->nlabels : 1, sizeof **gid);
        cid[r] = (uint32_t *)calloc(recs[r]->nlabels ? recs[r]->nlabels : 1, sizeof **cid);
        if (!gid[r] || !cid[r]) {
            free(all);
            return nomem();
        }
        for (i = 0; i < recs[r]->nlabels; i++) {
            all[k].s = recs[r]->labels[i];
            all[k].rec = (uint32_t)r;
            all[k].idx = (uint32_t)i;
            k++;
        }
    }
    number(all, total, gid);
    for (k = 0; k < total; k++) /* the same labels, now by their Python frames */
        if (!(all[k].s = python_part(all[k].s)))
            st = nomem();
    if (st == CP_OK)
        number(all, total, cid);
    for (k = 0; k < total; k++)
        free((char *)(uintptr_t)all[k].s);
    free(all);
    return st;
}

/* One recording's allocations, by ordinal: keys and size. */
static cp_status sequence(const cp_trace *t, const uint32_t *gid, const uint32_t *cid,
                          uint64_t s, cp_scale_seq *q, uint64_t **key, uint64_t **coarse,
                          uint64_t **size)
{
    size_t i, n = t->nallocs ? t->nallocs : 1;
    *key = (uint64_t *)malloc(n * sizeof **key);
    *coarse = (uint64_t *)malloc(n * sizeof **coarse);
    *size = (uint64_t *)malloc(n * sizeof **size);
    if (!*key || !*coarse || !*size)
        return nomem();
    for (i = 0; i < t->n; i++) {
        uint32_t o = t->ord[i], lab = t->label && !t->is_free[i] ? t->label[i] : 0;
        uint64_t where = (uint64_t)(t->stream[i] & 0xffff) << 16 |
                         (uint64_t)(t->device ? t->device[i] : 0);
        if (t->is_free[i])
            continue;
        (*key)[o] = (uint64_t)(lab ? gid[lab - 1] : 0) << 32 | where;
        (*coarse)[o] = (uint64_t)(lab ? cid[lab - 1] : 0) << 32 | where;
        (*size)[o] = t->size[i];
    }
    q->n = t->nallocs;
    q->key = *key;
    q->coarse = *coarse;
    q->size = *size;
    q->s = s;
    return CP_OK;
}

/* ---- the checks -------------------------------------------------------- */

/* "path (size 8)" for the sentences. */
static const char *named(const cp_trace *t, uint64_t s, char *buf, size_t n)
{
    snprintf(buf, n, "%s (size %llu)", t->path ? t->path : "a trace", (unsigned long long)s);
    return buf;
}

static const char *setting_name(const cp_trace *t)
{
    return t->torch_settings[0] ? t->torch_settings : "PyTorch's defaults";
}

static cp_status check_inputs(const cp_trace *const *recs, const uint64_t *sizes, size_t n,
                              uint64_t at)
{
    size_t i, j;
    char a[600], b[600];
    if (n < 2)
        return cp_error_set(CP_ERR_INVALID, "a prediction at another size needs recordings at "
                            "two sizes or more (got %zu): the sizes show how each request "
                            "grows", n);
    if (n > CP_SCALE_RECORDINGS_MAX)
        return cp_error_set(CP_ERR_INVALID, "a prediction at another size reads at most %d "
                            "recordings, got %zu", CP_SCALE_RECORDINGS_MAX, n);
    if (at < 1 || at > CP_SCALE_SIZE_MAX)
        return cp_error_set(CP_ERR_INVALID, "the size to predict must be an integer in "
                            "1..%llu, got %llu", (unsigned long long)CP_SCALE_SIZE_MAX,
                            (unsigned long long)at);
    for (i = 0; i < n; i++) {
        const cp_trace *t = recs[i];
        if (sizes[i] < 1 || sizes[i] > CP_SCALE_SIZE_MAX)
            return cp_error_set(CP_ERR_INVALID, "%s: a recording's size must be an integer "
                                "in 1..%llu", named(t, sizes[i], a, sizeof a),
                                (unsigned long long)CP_SCALE_SIZE_MAX);
        if (strcmp(t->format, "jax_memory") == 0 || strcmp(t->format, "cupy_hook") == 0)
            return cp_error_set(CP_ERR_INVALID, "%s is a %s: predictions at another size are "
                                "made from PyTorch snapshots and allocation traces (CSV)",
                                named(t, sizes[i], a, sizeof a),
                                t->format[0] == 'j' ? "JAX memory profile" : "CuPy hook log");
        if (t->scaled)
            return cp_error_set(CP_ERR_INVALID, "%s is itself a prediction (at size %llu): "
                                "give the recordings it was made from",
                                named(t, sizes[i], a, sizeof a),
                                (unsigned long long)t->scaled->info.at);
        if (!t->nallocs)
            return cp_error_set(CP_ERR_INVALID, "%s has no allocations to scale",
                                named(t, sizes[i], a, sizeof a));
        for (j = 0; j < i; j++) {
            if (sizes[j] == sizes[i])
                return cp_error_set(CP_ERR_INVALID, "%s and %s are recordings of one size: "
                                    "a prediction needs two different sizes",
                                    named(recs[j], sizes[j], a, sizeof a),
                                    named(t, sizes[i], b, sizeof b));
            if (recs[j]->has_settings && t->has_settings &&
                strcmp(recs[j]->torch_settings, t->torch_settings) != 0)
                return cp_error_set(CP_ERR_INVALID, "%s was recorded under %s and %s under %s: "
                                    "recordings under one setting are needed (advise "
                                    "predicts the other settings from them)",
                                    named(recs[j], sizes[j], a, sizeof a),
                                    setting_name(recs[j]), named(t, sizes[i], b, sizeof b),
                                    setting_name(t));
        }
    }
    return CP_OK;
}

/* "154389504 bytes at module.py:1370 convert" (allocation k of t), or
 * "its end" past the last. */
static const char *request(const cp_trace *t, size_t k, char *buf, size_t n)
{
    size_t i;
    if (k >= t->nallocs) {
        snprintf(buf, n, "its end (%zu allocations)", t->nallocs);
        return buf;
    }
    for (i = 0; i < t->n; i++) {
        if (!t->is_free[i] && t->ord[i] == k) {
            const char *lab = t->label && t->label[i] ? t->labels[t->label[i] - 1] : NULL;
            int len = lab ? (int)strcspn(lab, "\n") : 0;
            if (len > 200)
                len = 200;
            snprintf(buf, n, "allocation %zu, %llu bytes %s%.*s", k + 1,
                     (unsigned long long)t->size[i], lab ? "at " : "without frames", len,
                     lab ? lab : "");
            return buf;
        }
    }
    snprintf(buf, n, "allocation %zu", k + 1);
    return buf;
}

static cp_status differ(const cp_trace *ta, uint64_t sa, const cp_trace *tb, uint64_t sb,
                        size_t strict, size_t fa, size_t fb)
{
    char a[600], b[600], ra[400], rb[400];
    size_t small = ta->nallocs < tb->nallocs ? ta->nallocs : tb->nallocs;
    return cp_error_set(CP_ERR_INVALID, "%s and %s are not recordings of one program at two "
                        "sizes: only %zu of the smaller's %zu allocations match with a size "
                        "that follows a law; they first differ at %s in the first and %s in "
                        "the second", named(ta, sa, a, sizeof a), named(tb, sb, b, sizeof b),
                        strict, small, request(ta, fa, ra, sizeof ra),
                        request(tb, fb, rb, sizeof rb));
}

/* ---- the fits ---------------------------------------------------------- */

typedef struct pt {
    uint64_t s, y;
} pt;

/* PyTorch's rounding of a request (kMinBlockSize): what the allocator
 * sees of a size. */
static uint64_t round512(uint64_t y)
{
    return y < 512 ? 512 : (y + 511) / 512 * 512;
}

static long double lagrange(const uint64_t *s, const uint64_t *y, size_t m, uint64_t x)
{
    long double tot = 0.0L;
    size_t a, b;
    for (a = 0; a < m; a++) {
        long double term = (long double)y[a];
        for (b = 0; b < m; b++)
            if (b != a)
                term *= ((long double)x - (long double)s[b]) /
                        ((long double)s[a] - (long double)s[b]);
        tot += term;
    }
    return tot;
}

/* Does the polynomial through the first m points give all n, each to
 * PyTorch's rounding? */
static int gives_all(const pt *p, size_t m, size_t n)
{
    uint64_t s[CP_SCALE_RECORDINGS_MAX], y[CP_SCALE_RECORDINGS_MAX];
    size_t i;
    for (i = 0; i < m; i++) {
        s[i] = p[i].s;
        y[i] = p[i].y;
    }
    for (i = m; i < n; i++) {
        long double v = lagrange(s, y, m, p[i].s);
        if (!(v >= 0.5L) || v > (long double)CP_TRACE_BYTES_MAX ||
            round512((uint64_t)llroundl(v)) != round512(p[i].y))
            return 0;
    }
    return 1;
}

static uint64_t dist(uint64_t a, uint64_t b)
{
    return a > b ? a - b : b - a;
}

/* The fit of one allocation from its points (p[0] the base's), and how
 * many points it keeps (moved to the front: the base and the recordings
 * nearest it).  *steeper: a line through two recordings that grows faster
 * than the size. */
static int fit(pt *p, size_t n, size_t *keep, int *steeper)
{
    size_t i, j, m;
    int k;
    *steeper = 0;
    *keep = 1;
    if (n == 1)
        return CP_FIT_RULE;
    if (n == 2) {
        const pt *lo = p[0].s < p[1].s ? &p[0] : &p[1], *hi = lo == &p[0] ? &p[1] : &p[0];
        k = cp_scale_growth(p[0].y, p[0].s, p[1].y, p[1].s);
        if (k >= 0)
            return CP_FIT_CONST + k;
        *keep = 2;
        *steeper = (long double)lo->y * (long double)hi->s < (long double)hi->y * (long double)lo->s;
        return CP_FIT_AFFINE;
    }
    for (i = 2; i < n; i++) /* insertion sort of p[1..n) by nearness to the base */
        for (j = i; j > 1; j--) {
            uint64_t dj = dist(p[j].s, p[0].s), dk = dist(p[j - 1].s, p[0].s);
            pt t;
            if (dj > dk || (dj == dk && p[j].s < p[j - 1].s))
                break;
            t = p[j];
            p[j] = p[j - 1];
            p[j - 1] = t;
        }
    /* a law every recording follows exactly: one parameter */
    k = cp_scale_growth(p[0].y, p[0].s, p[1].y, p[1].s);
    for (i = 2; k >= 0 && i < n && cp_scale_growth(p[0].y, p[0].s, p[i].y, p[i].s) == k; i++)
        ;
    if (k >= 0 && i == n)
        return CP_FIT_CONST + k;
    for (m = 1; m < n && !gives_all(p, m, n); m++)
        ;
    *keep = m;
    if (m == 1)
        return CP_FIT_CONST;
    return m == 2 ? CP_FIT_AFFINE : CP_FIT_POLY;
}

/* Allocation o's size at `at` (0 with *clamped set where the fit gives
 * less than a byte: the caller takes the smallest recorded), CP_ERR_INVALID
 * past 2^63-1. */
cp_status cp_scale_size_at(const struct cp_scale *sc, size_t o, uint64_t at, uint64_t *out,
                           int *clamped)
{
    const uint64_t *s = sc->ps + sc->first[o], *y = sc->py + sc->first[o];
    int kind = sc->kind[o] & CP_FIT_KIND;
    long double v;
    size_t i;
    *clamped = 0;
    if (at == sc->info.base || kind == CP_FIT_RULE || kind == CP_FIT_CONST) {
        *out = y[0];
        return CP_OK;
    }
    if (kind >= CP_FIT_POW1 && kind <= CP_FIT_POW3)
        v = (long double)y[0] * powl((long double)at / (long double)s[0], kind - CP_FIT_CONST);
    else
        v = lagrange(s, y, sc->npts[o], at);
    if (v > (long double)CP_TRACE_BYTES_MAX)
        return cp_error_set(CP_ERR_INVALID, "at size %llu an allocation would ask more than "
                            "2^63-1 bytes (its size grows from %llu bytes at size %llu)",
                            (unsigned long long)at, (unsigned long long)y[0],
                            (unsigned long long)s[0]);
    if (!(v >= 0.5L)) {
        *clamped = 1;
        *out = y[0];
        for (i = 1; i < sc->npts[o]; i++)
            if (y[i] < *out)
                *out = y[i];
        return CP_OK;
    }
    *out = (uint64_t)llroundl(v);
    return CP_OK;
}

/* The fits of the base's allocations from the matches (match[r][o]: the
 * ordinal + 1 in recording r; NULL for the base). */
static cp_status make_plan(const cp_scale_seq *seq, uint32_t *const *match, size_t n,
                           size_t base, struct cp_scale *sc)
{
    size_t nb = seq[base].n, o, r, np = 0;
    pt *p = (pt *)malloc(n * sizeof *p);
    sc->kind = (uint8_t *)malloc(nb * sizeof *sc->kind);
    sc->npts = (uint8_t *)malloc(nb * sizeof *sc->npts);
    sc->first = (uint32_t *)malloc(nb * sizeof *sc->first);
    sc->ps = (uint64_t *)malloc(nb * n * sizeof *sc->ps);
    sc->py = (uint64_t *)malloc(nb * n * sizeof *sc->py);
    sc->nallocs = nb;
    if (!p || !sc->kind || !sc->npts || !sc->first || !sc->ps || !sc->py) {
        free(p);
        return nomem();
    }
    for (o = 0; o < nb; o++) {
        size_t m = 1, keep, i;
        int kind, steep;
        p[0].s = seq[base].s;
        p[0].y = seq[base].size[o];
        for (r = 0; r < n; r++)
            if (r != base && match[r][o]) {
                p[m].s = seq[r].s;
                p[m].y = seq[r].size[match[r][o] - 1];
                m++;
            }
        kind = fit(p, m, &keep, &steep);
        sc->kind[o] = (uint8_t)(kind | (steep ? CP_FIT_STEEPER : 0));
        sc->npts[o] = (uint8_t)keep;
        sc->first[o] = (uint32_t)np;
        for (i = 0; i < keep; i++) {
            sc->ps[np] = p[i].s;
            sc->py[np] = p[i].y;
            np++;
        }
        switch (kind) {
        case CP_FIT_RULE: break;
        case CP_FIT_CONST: sc->info.constant++; break;
        case CP_FIT_POW1: sc->info.linear++; break;
        case CP_FIT_POW2: sc->info.square++; break;
        case CP_FIT_POW3: sc->info.cube++; break;
        case CP_FIT_AFFINE: sc->info.affine++; break;
        default: sc->info.polynomial++; break;
        }
        sc->info.matched += kind != CP_FIT_RULE;
        sc->info.steeper += steep != 0;
    }
    free(p);
    return CP_OK;
}

/* Recordings that ask the same bytes in the same order: nothing grows, so
 * they are most likely of one size under two names. */
static cp_status same_requests(const cp_trace *const *recs, const uint64_t *sizes, size_t n)
{
    char a[600], b[600];
    (void)n;
    return cp_error_set(CP_ERR_INVALID, "%s and %s ask for the same bytes in the same order: "
                        "nothing in them grows with the size, so they cannot show how it "
                        "grows (are they recordings of one size?)",
                        named(recs[0], sizes[0], a, sizeof a),
                        named(recs[1], sizes[1], b, sizeof b));
}

/* ---- the entry points -------------------------------------------------- */

/* The recording nearest `at` (the larger of two as near). */
static size_t nearest(const uint64_t *sizes, size_t n, uint64_t at)
{
    size_t i, best = 0;
    for (i = 1; i < n; i++) {
        uint64_t d = dist(sizes[i], at), db = dist(sizes[best], at);
        if (d < db || (d == db && sizes[i] > sizes[best]))
            best = i;
    }
    return best;
}

static int by_u64(const void *p, const void *q)
{
    uint64_t a = *(const uint64_t *)p, b = *(const uint64_t *)q;
    return a < b ? -1 : a > b;
}

typedef struct work {
    uint32_t **gid, **cid, **match;
    uint64_t **key, **coarse, **size;
    cp_scale_seq *seq;
    size_t n;
} work;

static void work_free(work *w)
{
    size_t r;
    for (r = 0; r < w->n; r++) {
        if (w->gid)
            free(w->gid[r]);
        if (w->cid)
            free(w->cid[r]);
        if (w->coarse)
            free(w->coarse[r]);
        if (w->match)
            free(w->match[r]);
        if (w->key)
            free(w->key[r]);
        if (w->size)
            free(w->size[r]);
    }
    free(w->gid);
    free(w->cid);
    free(w->coarse);
    free(w->match);
    free(w->key);
    free(w->size);
    free(w->seq);
}

/* Matches every recording with the base; refuses a pair that is not one
 * program (scale.h). */
static cp_status match_all(const cp_trace *const *recs, const uint64_t *sizes, size_t base,
                           work *w, size_t *left_out)
{
    size_t r, n = w->n;
    cp_status st = label_ids(recs, n, w->gid, w->cid);
    for (r = 0; st == CP_OK && r < n; r++)
        st = sequence(recs[r], w->gid[r], w->cid[r], sizes[r], &w->seq[r], &w->key[r],
                      &w->coarse[r], &w->size[r]);
    *left_out = 0;
    for (r = 0; st == CP_OK && r < n; r++) {
        size_t strict, fa, fb, small, i, got = 0;
        if (r == base)
            continue;
        w->match[r] = (uint32_t *)malloc(w->seq[base].n * sizeof **w->match);
        if (!w->match[r])
            return nomem();
        st = cp_scale_match(&w->seq[base], &w->seq[r], w->match[r], &strict, &fa, &fb);
        if (st != CP_OK)
            return st;
        small = w->seq[base].n < w->seq[r].n ? w->seq[base].n : w->seq[r].n;
        if (2 * strict < small)
            return differ(recs[base], sizes[base], recs[r], sizes[r], strict, fa, fb);
        for (i = 0; i < w->seq[base].n; i++)
            got += w->match[r][i] != 0;
        *left_out += w->seq[r].n - got;
    }
    return st;
}

cp_status cp_trace_scale(const cp_trace *const *recs, const uint64_t *sizes, size_t n,
                         uint64_t at, cp_trace **out)
{
    work w;
    struct cp_scale *sc = NULL;
    size_t base, left_out = 0;
    cp_status st;

    *out = NULL;
    st = check_inputs(recs, sizes, n, at);
    if (st != CP_OK)
        return st;
    memset(&w, 0, sizeof w);
    w.n = n;
    w.gid = (uint32_t **)calloc(n, sizeof *w.gid);
    w.cid = (uint32_t **)calloc(n, sizeof *w.cid);
    w.coarse = (uint64_t **)calloc(n, sizeof *w.coarse);
    w.match = (uint32_t **)calloc(n, sizeof *w.match);
    w.key = (uint64_t **)calloc(n, sizeof *w.key);
    w.size = (uint64_t **)calloc(n, sizeof *w.size);
    w.seq = (cp_scale_seq *)calloc(n, sizeof *w.seq);
    sc = (struct cp_scale *)calloc(1, sizeof *sc);
    if (sc)
        sc->from = (uint64_t *)malloc(n * sizeof *sc->from);
    if (!w.gid || !w.cid || !w.coarse || !w.match || !w.key || !w.size || !w.seq || !sc ||
        !sc->from) {
        work_free(&w);
        cp_scale_free(sc);
        return nomem();
    }
    base = nearest(sizes, n, at);
    st = match_all(recs, sizes, base, &w, &left_out);
    if (st == CP_OK)
        st = make_plan(w.seq, w.match, n, base, sc);
    work_free(&w);
    if (st == CP_OK && sc->info.constant == recs[base]->nallocs && !left_out)
        st = same_requests(recs, sizes, n);
    if (st != CP_OK) {
        cp_scale_free(sc);
        return st;
    }
    memcpy(sc->from, sizes, n * sizeof *sizes);
    qsort(sc->from, n, sizeof *sc->from, by_u64);
    sc->info.from = sc->from;
    sc->info.nfrom = n;
    sc->info.base = sizes[base];
    sc->info.left_out = left_out;
    if (recs[base]->path && !(sc->path = dup(recs[base]->path))) {
        cp_scale_free(sc);
        return nomem();
    }
    return cp_scale_build(recs[base], sc, at, out);
}

cp_status cp_trace_rescale(const cp_trace *scaled, uint64_t at, cp_trace **out)
{
    const struct cp_scale *o = scaled->scaled;
    struct cp_scale *sc;
    size_t np = 0, i;
    *out = NULL;
    if (!o)
        return cp_error_set(CP_ERR_INVALID, "%s is not a prediction at another size",
                            scaled->path ? scaled->path : "the trace");
    if (at < 1 || at > CP_SCALE_SIZE_MAX)
        return cp_error_set(CP_ERR_INVALID, "the size to predict must be an integer in "
                            "1..%llu, got %llu", (unsigned long long)CP_SCALE_SIZE_MAX,
                            (unsigned long long)at);
    for (i = 0; i < o->nallocs; i++)
        np += o->npts[i];
    sc = (struct cp_scale *)calloc(1, sizeof *sc);
    if (!sc)
        return nomem();
    *sc = *o;
    sc->path = NULL;
    sc->from = NULL;
    sc->kind = NULL;
    sc->npts = NULL;
    sc->first = NULL;
    sc->ps = sc->py = NULL;
    if (o->path && !(sc->path = dup(o->path))) {
        cp_scale_free(sc);
        return nomem();
    }
    sc->from = (uint64_t *)malloc(o->info.nfrom * sizeof *sc->from);
    sc->kind = (uint8_t *)malloc((o->nallocs ? o->nallocs : 1) * sizeof *sc->kind);
    sc->npts = (uint8_t *)malloc((o->nallocs ? o->nallocs : 1) * sizeof *sc->npts);
    sc->first = (uint32_t *)malloc((o->nallocs ? o->nallocs : 1) * sizeof *sc->first);
    sc->ps = (uint64_t *)malloc((np ? np : 1) * sizeof *sc->ps);
    sc->py = (uint64_t *)malloc((np ? np : 1) * sizeof *sc->py);
    if (!sc->from || !sc->kind || !sc->npts || !sc->first || !sc->ps || !sc->py) {
        cp_scale_free(sc);
        return nomem();
    }
    memcpy(sc->from, o->from, o->info.nfrom * sizeof *sc->from);
    memcpy(sc->kind, o->kind, o->nallocs * sizeof *sc->kind);
    memcpy(sc->npts, o->npts, o->nallocs * sizeof *sc->npts);
    memcpy(sc->first, o->first, o->nallocs * sizeof *sc->first);
    memcpy(sc->ps, o->ps, np * sizeof *sc->ps);
    memcpy(sc->py, o->py, np * sizeof *sc->py);
    sc->info.from = sc->from;
    return cp_scale_build(scaled, sc, at, out);
}
