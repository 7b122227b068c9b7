/*
 * test_scale.c: predictions at another size (trace/scale.h), TAP.
 *
 *  - the growth laws: held, proportional, square, cube, exactly, in 64 bits;
 *  - matching: on random sequences with random edits the strict matches are
 *    as many as a longest common subsequence has (a dynamic program checks),
 *    pairs keep their order and their keys; two long unrelated sequences
 *    finish (the search is bounded) and match little;
 *  - whole predictions from CSV traces written here: the sizes of every
 *    law and of a line come out at the size asked, a request found in one
 *    recording keeps its size and counts by rule, the order of the base's
 *    events is kept; the refusals.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tap.h"
#include "trace/scale.h"
#include "trace/scale_impl.h"
#include "trace/trace.h"

#define ok tap_ok

static void growth(void)
{
    ok(cp_scale_growth(100, 2, 100, 4) == 0, "the same size: held");
    ok(cp_scale_growth(100, 2, 200, 4) == 1, "twice at twice the size: proportional");
    ok(cp_scale_growth(100, 2, 400, 4) == 2, "four times at twice: the square");
    ok(cp_scale_growth(100, 2, 800, 4) == 3, "eight times at twice: the cube");
    ok(cp_scale_growth(100, 2, 300, 4) == -1, "three times at twice: no law");
    ok(cp_scale_growth(8208, 2, 16416, 4) == 1, "PyTorch's padded ids: proportional");
    ok(cp_scale_growth(9, 3, 4, 2) == 2, "coprime sizes, the square");
    ok(cp_scale_growth(10, 3, 4, 2) == -1, "coprime sizes, not divisible");
    ok(cp_scale_growth(UINT64_C(1) << 62, 1, UINT64_C(1) << 62, 1u << 30) == 0,
       "large sizes held");
    ok(cp_scale_growth(3, 1u << 30, 5, (1u << 30) - 1) == -1,
       "powers past 64 bits: no law, no overflow");
}

static uint32_t rnd_state = 12345;
static uint32_t rnd(void)
{
    rnd_state = rnd_state * 1103515245u + 12345u;
    return rnd_state >> 8;
}

/* The LCS length of two key sequences. */
static size_t lcs(const uint64_t *a, size_t n, const uint64_t *b, size_t m)
{
    size_t *prev = calloc(m + 1, sizeof *prev), *cur = calloc(m + 1, sizeof *cur), i, j, r;
    for (i = 1; i <= n; i++) {
        for (j = 1; j <= m; j++)
            cur[j] = a[i - 1] == b[j - 1] ? prev[j - 1] + 1
                                           : (prev[j] > cur[j - 1] ? prev[j] : cur[j - 1]);
        memcpy(prev, cur, (m + 1) * sizeof *prev);
    }
    r = prev[m];
    free(prev);
    free(cur);
    return r;
}

/* A tensor whose C++ path changed with the size: its whole key differs,
 * its Python frames (the coarse key) do not; and frame-less requests of
 * two streams pair within their stream. */
static void coarse_keys(void)
{
    uint64_t ka[5] = {1, 2, 3, 4, 5}, kb[5] = {1, 2, 9, 4, 5};
    uint64_t ca[5] = {1, 2, 3, 4, 5}, cb[5] = {1, 2, 3, 4, 5};
    uint64_t sa[5] = {512, 1024, 3000, 512, 512}, sb[5] = {512, 2048, 3100, 512, 512};
    uint32_t match[5];
    size_t strict, fa, fb;
    cp_scale_seq qa = {5, ka, ca, sa, 2}, qb = {5, kb, cb, sb, 4};
    ok(cp_scale_match(&qa, &qb, match, &strict, &fa, &fb) == CP_OK && strict == 4 &&
           match[2] == 3 && fa == 2 && fb == 2,
       "another C++ path for one tensor: paired by its Python frames");
    kb[2] = 3;
    ok(cp_scale_match(&qa, &qb, match, &strict, &fa, &fb) == CP_OK && strict == 4 && match[2] == 3,
       "the same stack, a size of no law: paired by the whole key");
    cb[2] = 7;
    kb[2] = 9;
    ok(cp_scale_match(&qa, &qb, match, &strict, &fa, &fb) == CP_OK && match[2] == 0,
       "another Python line: not paired");
}

/* The laws as the edit script compares them (each side's quotients):
 * held, proportional, the square and no law at coprime sizes, and sizes
 * whose cube passes 64 bits (the square still found). */
static void laws_in_matching(void)
{
    uint64_t k[5] = {1, 1, 1, 1, 1};
    uint64_t sa[5] = {45, 21, 100, 10, 100}, sb[5] = {20, 14, 100, 4, 100};
    uint64_t big = (UINT64_C(1) << 31) - 1;
    uint64_t ba[1] = {big * big}, bb[1] = {(big - 1) * (big - 1)};
    uint32_t match[5];
    size_t strict, fa, fb;
    cp_scale_seq qa = {5, k, k, sa, 3}, qb = {5, k, k, sb, 2};
    ok(cp_scale_match(&qa, &qb, match, &strict, &fa, &fb) == CP_OK && strict == 4 &&
           match[0] == 1 && match[1] == 2 && match[2] == 3 && match[3] == 4 && match[4] == 5,
       "the square, in proportion, held at sizes 3 and 2; no law paired in its gap");
    qa = (cp_scale_seq){1, k, k, ba, big};
    qb = (cp_scale_seq){1, k, k, bb, big - 1};
    ok(cp_scale_match(&qa, &qb, match, &strict, &fa, &fb) == CP_OK && strict == 1 &&
           match[0] == 1 && cp_scale_growth(ba[0], big, bb[0], big - 1) == 2,
       "the square at sizes 2^31-1 and 2^31-2, whose cubes pass 64 bits");
    bb[0]++;
    ok(cp_scale_match(&qa, &qb, match, &strict, &fa, &fb) == CP_OK && strict == 0 &&
           match[0] == 1,
       "a byte off the square: no law, paired in the gap");
}

static void matching(void)
{
    int round, bad_lcs = 0, bad_order = 0;
    for (round = 0; round < 200; round++) {
        size_t n = 1 + rnd() % 300, m = 0, i, strict, fa, fb, last = 0;
        uint64_t a[300], b[700], sa[300], sb[700];
        uint32_t match[300];
        cp_scale_seq qa, qb;
        int alphabet = 1 + (int)(rnd() % 6);
        for (i = 0; i < n; i++) {
            a[i] = rnd() % (uint32_t)alphabet;
            sa[i] = 512;
        }
        for (i = 0; i < n; i++) { /* b: a with insertions, deletions, changes */
            uint32_t r = rnd() % 10;
            if (r == 0)
                continue;
            if (r == 1)
                b[m++] = 100 + rnd() % 3;
            b[m++] = r == 2 ? 200 : a[i];
        }
        for (i = 0; i < m; i++)
            sb[i] = 1024; /* twice at twice the size: every equal key matches */
        qa.n = n;
        qa.key = qa.coarse = a;
        qa.size = sa;
        qa.s = 2;
        qb.n = m;
        qb.key = qb.coarse = b;
        qb.size = sb;
        qb.s = 4;
        if (cp_scale_match(&qa, &qb, match, &strict, &fa, &fb) != CP_OK) {
            bad_lcs++;
            continue;
        }
        if (strict != lcs(a, n, b, m))
            bad_lcs++;
        for (i = 0; i < n; i++) {
            if (!match[i])
                continue;
            if (match[i] <= last || b[match[i] - 1] != a[i])
                bad_order++;
            last = match[i];
        }
    }
    ok(bad_lcs == 0, "strict matches as many as the longest common subsequence (%d of 200 off)",
       bad_lcs);
    ok(bad_order == 0, "pairs in order and of one key (%d wrong)", bad_order);
    {
        /* 50,000 unrelated requests a side: the search stops at its bound */
        size_t n = 50000, i, strict, fa, fb;
        uint64_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *s = malloc(n * sizeof *s);
        uint32_t *match = malloc(n * sizeof *match);
        cp_scale_seq qa, qb;
        for (i = 0; i < n; i++) {
            a[i] = rnd();
            b[i] = rnd();
            s[i] = 4096;
        }
        qa.n = qb.n = n;
        qa.key = qa.coarse = a;
        qb.key = qb.coarse = b;
        qa.size = qb.size = s;
        qa.s = 1;
        qb.s = 2;
        cp_status st = cp_scale_match(&qa, &qb, match, &strict, &fa, &fb);
        ok(st == CP_OK && strict < n / 100 && fa == 0 && fb == 0,
           "unrelated sequences: few matches (%zu), they differ at once", strict);
        free(a);
        free(b);
        free(s);
        free(match);
    }
}

/* A CSV trace of `count` requests: request i asks sizes[i] bytes at size
 * s (sizes given per request as a function of s), each freed at once,
 * except the first, freed at the end; `extra` adds one request (in one
 * recording only) after request 2. */
static const char *write_csv(const char *path, uint64_t s, int extra)
{
    FILE *f = fopen(path, "w");
    int i, row = 0;
    fprintf(f, "Thread,Time,Action,Pointer,Size,Stream\n");
    for (i = 0; i < 6; i++) {
        uint64_t y;
        switch (i) {
        case 0: y = 1000000; break;             /* weights: held */
        case 1: y = 4096 * s; break;             /* activations: proportional */
        case 2: y = 1024 * s * s; break;         /* scores: the square */
        case 3: y = 3 * s * s * s; break;        /* a volume: the cube */
        case 4: y = 5000 + 700 * s; break;       /* a line */
        default: y = 999; break;
        }
        fprintf(f, "0,%d,allocate,%x,%llu,0\n", row++, 0x1000 * (i + 1), (unsigned long long)y);
        if (i)
            fprintf(f, "0,%d,free,%x,%llu,0\n", row++, 0x1000 * (i + 1), (unsigned long long)y);
        if (i == 2 && extra) {
            fprintf(f, "0,%d,allocate,%x,77777,0\n", row++, 0x9000);
            fprintf(f, "0,%d,free,%x,77777,0\n", row++, 0x9000);
        }
    }
    fprintf(f, "0,%d,free,%x,1000000,0\n", row, 0x1000);
    fclose(f);
    return path;
}

static uint64_t alloc_size(const cp_trace *t, size_t k)
{
    size_t i, seen = 0;
    cp_trace_row r;
    for (i = 0; i < cp_trace_events(t); i++) {
        cp_trace_event(t, i, &r);
        if (!r.is_free && seen++ == k)
            return r.size;
    }
    return 0;
}

static void predictions(void)
{
    char p2[64], p4[64], p8[64];
    cp_trace *a = NULL, *b = NULL, *c = NULL, *t = NULL, *u = NULL, *o = NULL;
    const cp_trace *recs[3];
    uint64_t sizes[3] = {2, 4, 8};
    const cp_scale_info *in;
    snprintf(p2, sizeof p2, "/tmp/cupola_scale_%d_2.csv", (int)getpid());
    snprintf(p4, sizeof p4, "/tmp/cupola_scale_%d_4.csv", (int)getpid());
    snprintf(p8, sizeof p8, "/tmp/cupola_scale_%d_8.csv", (int)getpid());
    ok(cp_trace_load(write_csv(p2, 2, 0), &a) == CP_OK &&
           cp_trace_load(write_csv(p4, 4, 1), &b) == CP_OK &&
           cp_trace_load(write_csv(p8, 8, 0), &c) == CP_OK,
       "three recordings load");
    recs[0] = a;
    recs[1] = b;
    ok(cp_trace_scale(recs, sizes, 2, 16, &t) == CP_OK, "two recordings predict size 16");
    if (t) {
        in = cp_trace_scale_info(t);
        ok(in && in->base == 4 && in->at == 16 && in->nfrom == 2, "base 4, at 16");
        ok(alloc_size(t, 0) == 1000000 && alloc_size(t, 1) == 4096 * 16 &&
               alloc_size(t, 2) == 1024 * 16 * 16 && alloc_size(t, 3) == 77777 &&
               alloc_size(t, 4) == 3 * 16 * 16 * 16 && alloc_size(t, 5) == 5000 + 700 * 16,
           "held, proportional, square, cube, the line; the extra request kept");
        ok(in && in->matched == 6 && in->by_rule == 1,
           "six matched, one by rule");
    }
    cp_trace_free(t);
    t = NULL;
    recs[0] = a;
    recs[1] = b;
    recs[2] = c;
    ok(cp_trace_scale(recs, sizes, 3, 32, &t) == CP_OK && cp_trace_scale_info(t)->base == 8 &&
           alloc_size(t, 4) == 5000 + 700 * 32 && alloc_size(t, 2) == 1024 * 32 * 32 &&
           alloc_size(t, 3) == 3 * 32 * 32 * 32,
       "three recordings: base 8, the line, the square and the cube at 32");
    ok(t && cp_trace_rescale(t, 64, &u) == CP_OK && alloc_size(u, 3) == 3 * 64 * 64 * 64 &&
           cp_trace_scale_info(u)->at == 64,
       "made again at 64 from the fits");
    cp_trace_free(t);
    cp_trace_free(u);
    t = u = NULL;
    recs[1] = a;
    ok(cp_trace_scale(recs, sizes, 1, 8, &t) == CP_ERR_INVALID &&
           strstr(cp_error_msg(), "two sizes or more"),
       "one recording refused: %s", cp_error_msg());
    sizes[1] = 2;
    ok(cp_trace_scale(recs, sizes, 2, 8, &t) == CP_ERR_INVALID &&
           strstr(cp_error_msg(), "of one size"),
       "two of one size refused: %s", cp_error_msg());
    sizes[1] = 4;
    ok(cp_trace_load("examples/traces/resnet50_train.csv.gz", &o) == CP_OK, "another program");
    recs[1] = o;
    ok(cp_trace_scale(recs, sizes, 2, 8, &t) == CP_ERR_INVALID &&
           strstr(cp_error_msg(), "not recordings of one program") &&
           strstr(cp_error_msg(), "first differ at allocation"),
       "another program refused: %s", cp_error_msg());
    ok(t == NULL, "nothing made on refusal");
    cp_trace_free(a);
    cp_trace_free(b);
    cp_trace_free(c);
    cp_trace_free(o);
    remove(p2);
    remove(p4);
    remove(p8);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    growth();
    coarse_keys();
    laws_in_matching();
    matching();
    predictions();
    return tap_finish();
}
