/*
 * scale_impl.h: the parts of a prediction at another size (scale.h) that
 * its files share: matching two recordings' allocations (scale_match.c)
 * and the fits a scaled trace keeps (scale.c).  Internal to trace/.
 */
#ifndef CUPOLA_SCALE_IMPL_H
#define CUPOLA_SCALE_IMPL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "scale.h"

/* One recording's allocations in order, as matching reads them: a key
 * (stack, stream in order of first use, device), a coarse key (the same
 * with the stack's Python frames alone: C++ frames may differ from size to
 * size where a library takes another path for the same tensor) and the
 * size asked, at recorded size s. */
typedef struct cp_scale_seq {
    size_t n;
    const uint64_t *key;
    const uint64_t *coarse;
    const uint64_t *size;
    uint64_t s;
} cp_scale_seq;

/* k in 0..3 with y1 / s1^k == y2 / s2^k (held, proportional, square,
 * cube), or -1. */
int cp_scale_growth(uint64_t y1, uint64_t s1, uint64_t y2, uint64_t s2);

/* match[i] = j + 1 where a's allocation i is b's j, 0 where it has none;
 * *strict: how many of those follow a growth law (the rest paired by key
 * in the gaps).  *first_a, *first_b: where the two first differ (the
 * first request of a not matched strictly in order; a->n when a ends
 * first), for the sentence of a refusal. */
cp_status cp_scale_match(const cp_scale_seq *a, const cp_scale_seq *b, uint32_t *match,
                         size_t *strict, size_t *first_a, size_t *first_b);

/* How a size was fitted (per allocation of the base recording). */
enum {
    CP_FIT_RULE = 0, /* in the base alone: kept as recorded */
    CP_FIT_CONST,    /* the same at every size */
    CP_FIT_POW1,     /* in proportion to the size */
    CP_FIT_POW2,     /* ... to its square */
    CP_FIT_POW3,     /* ... to its cube */
    CP_FIT_AFFINE,   /* a line through two recordings */
    CP_FIT_POLY,     /* the lowest degree through three or more (its points) */
    CP_FIT_KIND = 15,    /* the kind's bits */
    CP_FIT_STEEPER = 16  /* a line through two recordings, steeper than in proportion */
};


/* What a scaled trace keeps to be made again at another size. */
struct cp_scale {
    cp_scale_info info;
    char *path;           /* the base's path: the trace's is "PATH@SIZE" */
    uint64_t *from;       /* the recorded sizes, ascending (info.from) */
    /* per allocation of the base, by ordinal: */
    uint8_t *kind;
    uint8_t *npts;        /* its points: POLY's, AFFINE's two, else the base's */
    uint32_t *first;      /* index of its first point in ps / py */
    uint64_t *ps, *py;
    size_t nallocs;
};

void cp_scale_free(struct cp_scale *s);

/* Allocation o's size at `at` by its fit; *clamped where the fit gave
 * less than a byte (the smallest recorded size is taken); CP_ERR_INVALID
 * past 2^63-1. */
cp_status cp_scale_size_at(const struct cp_scale *sc, size_t o, uint64_t at, uint64_t *out,
                           int *clamped);

/* The trace at `at`: src's events (a recording, or a scaled trace of the
 * same base) with every allocation's size from sc, which the new trace
 * owns (freed here on failure); sc->info's counts of this size are set. */
cp_status cp_scale_build(const struct cp_trace *src, struct cp_scale *sc, uint64_t at,
                         struct cp_trace **out);

#endif /* CUPOLA_SCALE_IMPL_H */
