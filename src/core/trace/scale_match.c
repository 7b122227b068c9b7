/*
 * scale_match.c: which allocation of one recording is which of another's
 * (scale.h states the rules; scale_impl.h the interface).
 *
 * Two passes over the two allocation sequences:
 *   1. A shortest edit script (Myers' O(ND) difference algorithm, linear
 *      space, split at the middle snake, bounded as GNU diff bounds it)
 *      under strict equality: the same key (stack, stream, device) and
 *      sizes that follow a growth law between the two sizes (equal, or in
 *      proportion to the size, its square or its cube).  Recordings of one
 *      program are the same sequence but for a few requests, so the script
 *      is short and the work near linear.
 *   2. In each gap the script leaves (requests of one side between two
 *      strict matches), requests of the same key are paired in order: the
 *      same stack whose size follows no law (an affine size, a workspace),
 *      or, without frames, the same place in a run of frame-less requests.
 *      Then, in the gaps left, the same by the coarse key (Python frames
 *      alone): a tensor whose C++ path changed with the size.
 * The work is per request; nothing here allocates per comparison.
 */
#include "scale_impl.h"

#include <stdlib.h>
#include <string.h>

/* k such that y1 / s1^k == y2 / s2^k for k in 0..3 (the size held, or
 * grown with the size, its square, its cube), -1 when none.  With g the
 * gcd of the sizes, a = s1/g and b = s2/g are coprime, so the equality
 * holds exactly when a^k divides y1, b^k divides y2 and the quotients are
 * equal: all in 64 bits. */
int cp_scale_growth(uint64_t y1, uint64_t s1, uint64_t y2, uint64_t s2)
{
    uint64_t a = s1, b = s2, g, pa = 1, pb = 1;
    int k;
    if (y1 == y2)
        return 0;
    for (g = a; b;) {
        uint64_t r = g % b;
        g = b;
        b = r;
    }
    a = s1 / g;
    b = s2 / g;
    for (k = 1; k <= 3; k++) {
        if (__builtin_mul_overflow(pa, a, &pa) || __builtin_mul_overflow(pb, b, &pb))
            return -1;
        if (y1 % pa == 0 && y2 % pb == 0 && y1 / pa == y2 / pb)
            return k;
    }
    return -1;
}

/* A request as the edit script compares it: its key, and its size over
 * the k-th power of its side's part of the two sizes (cp_scale_growth's
 * quotients, k in 0..3), or a value no quotient of the other side takes
 * where it does not divide: two requests follow a law exactly when one
 * quotient is equal, so the script's inner loop divides nothing. */
typedef struct law {
    uint64_t key;
    uint64_t q[4];
} law;

typedef struct differ {
    const cp_scale_seq *a, *b;
    law *la, *lb;      /* a's and b's requests as compared */
    long *fd, *bd;     /* furthest points per diagonal, offset to allow negatives */
    long too_expensive;
    uint32_t *match;   /* a's index -> b's index + 1 (0: none) */
    uint8_t *taken;    /* b's index: paired */
} differ;

static int same(const differ *d, long i, long j)
{
    const law *x = &d->la[i], *y = &d->lb[j];
    return x->key == y->key && (x->q[0] == y->q[0] || x->q[1] == y->q[1] ||
                                x->q[2] == y->q[2] || x->q[3] == y->q[3]);
}

/* The quotients of both sides (above); sizes are below 2^63, so a
 * quotient never takes the two values that mark "does not divide". */
static cp_status laws(differ *d)
{
    const cp_scale_seq *a = d->a, *b = d->b;
    uint64_t pa[4] = {1, 0, 0, 0}, pb[4] = {1, 0, 0, 0}, ga = a->s, gb = b->s, g;
    size_t i;
    int k;
    d->la = (law *)malloc((a->n + b->n) * sizeof *d->la);
    if (!d->la)
        return cp_error_set(CP_ERR_OOM, "out of host memory matching recordings");
    d->lb = d->la + a->n;
    for (g = ga; gb;) {
        uint64_t r = g % gb;
        g = gb;
        gb = r;
    }
    ga = a->s / g;
    gb = b->s / g;
    /* as cp_scale_growth: a power that overflows ends the laws tried */
    for (k = 1; k <= 3; k++)
        if (!pa[k - 1] || __builtin_mul_overflow(pa[k - 1], ga, &pa[k]) ||
            __builtin_mul_overflow(pb[k - 1], gb, &pb[k]))
            pa[k] = pb[k] = 0;
    for (i = 0; i < a->n; i++) {
        d->la[i].key = a->key[i];
        d->la[i].q[0] = a->size[i];
        for (k = 1; k <= 3; k++)
            d->la[i].q[k] = pa[k] && a->size[i] % pa[k] == 0 ? a->size[i] / pa[k] : UINT64_MAX;
    }
    for (i = 0; i < b->n; i++) {
        d->lb[i].key = b->key[i];
        d->lb[i].q[0] = b->size[i];
        for (k = 1; k <= 3; k++)
            d->lb[i].q[k] =
                pb[k] && b->size[i] % pb[k] == 0 ? b->size[i] / pb[k] : UINT64_MAX - 1;
    }
    return CP_OK;
}

/* The heuristic split when the search costs too much: the forward
 * diagonal furthest along or the backward one, whichever went further. */
static void split_expensive(const differ *d, long xoff, long xlim, long yoff, long ylim,
                            long fmin, long fmax, long bmin, long bmax, long *xm, long *ym)
{
    long k, fxy = -1, fx = xoff, bxy = LONG_MAX, bx = xlim;
    for (k = fmax; k >= fmin; k -= 2) {
        long x = d->fd[k] < xlim ? d->fd[k] : xlim, y = x - k;
        if (ylim < y) {
            x = ylim + k;
            y = ylim;
        }
        if (fxy < x + y) {
            fxy = x + y;
            fx = x;
        }
    }
    for (k = bmax; k >= bmin; k -= 2) {
        long x = d->bd[k] > xoff ? d->bd[k] : xoff, y = x - k;
        if (y < yoff) {
            x = yoff + k;
            y = yoff;
        }
        if (x + y < bxy) {
            bxy = x + y;
            bx = x;
        }
    }
    if ((xlim + ylim) - bxy < fxy - (xoff + yoff)) {
        *xm = fx;
        *ym = fxy - fx;
    } else {
        *xm = bx;
        *ym = bxy - bx;
    }
}

/* The middle of a shortest edit script of a[xoff, xlim) and b[yoff, ylim),
 * both non-empty and differing in their first and last elements. */
static void middle(const differ *d, long xoff, long xlim, long yoff, long ylim, long *xm,
                   long *ym)
{
    long *fd = d->fd, *bd = d->bd;
    long dmin = xoff - ylim, dmax = xlim - yoff;
    long fmid = xoff - yoff, bmid = xlim - ylim;
    long fmin = fmid, fmax = fmid, bmin = bmid, bmax = bmid, cost, k;
    int odd = (int)((fmid - bmid) & 1);

    fd[fmid] = xoff;
    bd[bmid] = xlim;
    for (cost = 1;; cost++) {
        if (fmin > dmin)
            fd[--fmin - 1] = -1;
        else
            ++fmin;
        if (fmax < dmax)
            fd[++fmax + 1] = -1;
        else
            --fmax;
        for (k = fmax; k >= fmin; k -= 2) {
            long lo = fd[k - 1], hi = fd[k + 1];
            long x = lo >= hi ? lo + 1 : hi, y = x - k;
            while (x < xlim && y < ylim && same(d, x, y))
                x++, y++;
            fd[k] = x;
            if (odd && bmin <= k && k <= bmax && bd[k] <= x) {
                *xm = x;
                *ym = y;
                return;
            }
        }
        if (bmin > dmin)
            bd[--bmin - 1] = LONG_MAX;
        else
            ++bmin;
        if (bmax < dmax)
            bd[++bmax + 1] = LONG_MAX;
        else
            --bmax;
        for (k = bmax; k >= bmin; k -= 2) {
            long lo = bd[k - 1], hi = bd[k + 1];
            long x = lo < hi ? lo : hi - 1, y = x - k;
            while (x > xoff && y > yoff && same(d, x - 1, y - 1))
                x--, y--;
            bd[k] = x;
            if (!odd && fmin <= k && k <= fmax && x <= fd[k]) {
                *xm = x;
                *ym = y;
                return;
            }
        }
        if (cost >= d->too_expensive) {
            split_expensive(d, xoff, xlim, yoff, ylim, fmin, fmax, bmin, bmax, xm, ym);
            return;
        }
    }
}

typedef struct span {
    long xoff, xlim, yoff, ylim;
} span;

/* Pass 1: the strict matches, into d->match.  An explicit stack of spans
 * (a hostile pair of recordings cannot exhaust the C stack). */
static cp_status strict_matches(differ *d)
{
    span *stack;
    size_t top = 0, cap = 64;
    stack = (span *)malloc(cap * sizeof *stack);
    if (!stack)
        return cp_error_set(CP_ERR_OOM, "out of host memory matching recordings");
    stack[top].xoff = 0;
    stack[top].xlim = (long)d->a->n;
    stack[top].yoff = 0;
    stack[top].ylim = (long)d->b->n;
    top++;
    while (top) {
        span s = stack[--top];
        long xm, ym;
        while (s.xoff < s.xlim && s.yoff < s.ylim && same(d, s.xoff, s.yoff)) {
            d->match[s.xoff] = (uint32_t)s.yoff + 1;
            s.xoff++, s.yoff++;
        }
        while (s.xlim > s.xoff && s.ylim > s.yoff && same(d, s.xlim - 1, s.ylim - 1)) {
            d->match[s.xlim - 1] = (uint32_t)s.ylim;
            s.xlim--, s.ylim--;
        }
        if (s.xoff == s.xlim || s.yoff == s.ylim)
            continue;
        middle(d, s.xoff, s.xlim, s.yoff, s.ylim, &xm, &ym);
        if (top + 2 > cap) {
            span *ns = (span *)realloc(stack, 2 * cap * sizeof *ns);
            if (!ns) {
                free(stack);
                return cp_error_set(CP_ERR_OOM, "out of host memory matching recordings");
            }
            stack = ns;
            cap *= 2;
        }
        stack[top].xoff = xm;
        stack[top].xlim = s.xlim;
        stack[top].yoff = ym;
        stack[top].ylim = s.ylim;
        top++;
        stack[top].xoff = s.xoff;
        stack[top].xlim = xm;
        stack[top].yoff = s.yoff;
        stack[top].ylim = ym;
        top++;
    }
    free(stack);
    return CP_OK;
}

typedef struct kj {
    uint64_t key;
    uint32_t j;
} kj;

static int by_key(const void *p, const void *q)
{
    const kj *x = (const kj *)p, *y = (const kj *)q;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->j < y->j ? -1 : x->j > y->j;
}

/* Pass 2, one gap a[i1, i2) b[j1, j2) of requests not yet paired: each
 * request of a takes the first request of b of its key (ka / kb) after the
 * last one taken. */
static void pair_gap(differ *d, const uint64_t *ka, const uint64_t *kb, size_t i1, size_t i2,
                     size_t j1, size_t j2, kj *buf)
{
    size_t n = 0, i, j;
    uint32_t last = (uint32_t)j1; /* b's next index that may be taken */
    if (i1 == i2 || j1 == j2)
        return;
    for (j = j1; j < j2; j++) {
        if (d->taken[j])
            continue;
        buf[n].key = kb[j];
        buf[n].j = (uint32_t)j;
        n++;
    }
    if (n > 1)
        qsort(buf, n, sizeof *buf, by_key);
    for (i = i1; i < i2; i++) {
        uint64_t key = ka[i];
        size_t lo = 0, hi = n;
        if (d->match[i])
            continue;
        while (lo < hi) { /* the first entry >= (key, last) */
            size_t mid = lo + (hi - lo) / 2;
            if (buf[mid].key < key || (buf[mid].key == key && buf[mid].j < last))
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < n && buf[lo].key == key) {
            d->match[i] = buf[lo].j + 1;
            d->taken[buf[lo].j] = 1;
            last = buf[lo].j + 1;
        }
    }
}

/* Every gap between two pairs made so far, paired by the keys given. */
static void gap_pairs(differ *d, const uint64_t *ka, const uint64_t *kb, kj *buf)
{
    size_t i = 0, j = 0, na = d->a->n;
    while (i < na) {
        size_t i2 = i, j2;
        while (i2 < na && !d->match[i2])
            i2++;
        j2 = i2 < na ? d->match[i2] - 1 : d->b->n;
        pair_gap(d, ka, kb, i, i2, j, j2, buf);
        /* the gap's own pairs split it no further: step past the next pair
         * made before this pass */
        if (i2 < na) {
            i = i2 + 1;
            j = j2 + 1;
        } else {
            i = i2;
        }
    }
}

cp_status cp_scale_match(const cp_scale_seq *a, const cp_scale_seq *b, uint32_t *match,
                         size_t *strict, size_t *first_a, size_t *first_b)
{
    differ d;
    kj *buf;
    long total = (long)(a->n + b->n), bits = 0;
    size_t i;
    cp_status st;

    memset(match, 0, (a->n ? a->n : 1) * sizeof *match);
    *strict = 0;
    *first_a = 0;
    *first_b = 0;
    if (!a->n || !b->n)
        return CP_OK;
    d.a = a;
    d.b = b;
    d.match = match;
    if ((st = laws(&d)) != CP_OK)
        return st;
    d.fd = (long *)malloc(2 * ((size_t)total + 3) * sizeof *d.fd);
    if (!d.fd) {
        free(d.la);
        return cp_error_set(CP_ERR_OOM, "out of host memory matching recordings");
    }
    d.bd = d.fd + total + 3;
    /* offsets so that diagonals from -(b->n + 1) to a->n + 1 are indices */
    d.fd += b->n + 1;
    d.bd += b->n + 1;
    /* GNU diff's bound: about the square root of the total, at least 4096 */
    for (; total >> bits; bits++)
        ;
    d.too_expensive = 1L << (bits / 2 + 1);
    if (d.too_expensive < 4096)
        d.too_expensive = 4096;
    st = strict_matches(&d);
    free(d.fd - (b->n + 1));
    free(d.la);
    if (st != CP_OK)
        return st;
    for (i = 0; i < a->n; i++)
        *strict += match[i] != 0;
    /* the first place the strict script is not a plain step of both */
    for (i = 0; i < a->n && match[i] == *first_b + 1; i++)
        (*first_b)++;
    *first_a = i;
    /* then the gaps: by the whole key, then by the coarse one */
    d.taken = (uint8_t *)calloc(b->n, 1);
    buf = (kj *)malloc(b->n * sizeof *buf);
    if (!d.taken || !buf) {
        free(d.taken);
        free(buf);
        return cp_error_set(CP_ERR_OOM, "out of host memory matching recordings");
    }
    for (i = 0; i < a->n; i++)
        if (match[i])
            d.taken[match[i] - 1] = 1;
    gap_pairs(&d, a->key, b->key, buf);
    gap_pairs(&d, a->coarse, b->coarse, buf);
    free(d.taken);
    free(buf);
    return CP_OK;
}
