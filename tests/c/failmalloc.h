/*
 * failmalloc.h: host memory that runs out on cue, for C tests of what the
 * core does when malloc, calloc or realloc return NULL half way through
 * an operation.  The test program defines those three (and free) itself,
 * in front of the C library's (or a sanitizer's, which is what RTLD_NEXT
 * finds under LD_PRELOAD): failmalloc_arm(n) lets n more calls succeed and
 * refuses every one after, until failmalloc_disarm().  A sweep arms n = 0,
 * 1, 2, ... until a run's calls all succeed, so that every allocation of
 * the code under test fails once, each at its own point.
 *
 * Header-only: include it in exactly one test program.
 */
#ifndef CUPOLA_FAILMALLOC_H
#define CUPOLA_FAILMALLOC_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void *(*fm_real_malloc)(size_t);
static void *(*fm_real_calloc)(size_t, size_t);
static void *(*fm_real_realloc)(void *, size_t);
static void (*fm_real_free)(void *);
static int fm_armed;
static long fm_left;       /* calls that may still succeed while armed */
static long fm_refused;    /* calls refused since the last arm */

/* Where dlsym's own allocations go before the real functions are known. */
static _Alignas(16) unsigned char fm_boot[4096];
static size_t fm_boot_used;

static void *fm_boot_alloc(size_t n)
{
    void *p;
    n = (n + 15) & ~(size_t)15;
    if (n > sizeof fm_boot - fm_boot_used)
        return NULL;
    p = fm_boot + fm_boot_used;
    fm_boot_used += n;
    return p;
}

static int fm_is_boot(const void *p)
{
    return (const unsigned char *)p >= fm_boot && (const unsigned char *)p < fm_boot + sizeof fm_boot;
}

static void fm_resolve(void)
{
    static int resolving;
    if (fm_real_free || resolving)
        return;
    resolving = 1;
    void *m = dlsym(RTLD_NEXT, "malloc"), *c = dlsym(RTLD_NEXT, "calloc");
    void *r = dlsym(RTLD_NEXT, "realloc"), *f = dlsym(RTLD_NEXT, "free");
    /* object to function pointers, as POSIX allows */
    memcpy(&fm_real_malloc, &m, sizeof m);
    memcpy(&fm_real_calloc, &c, sizeof c);
    memcpy(&fm_real_realloc, &r, sizeof r);
    memcpy(&fm_real_free, &f, sizeof f);
    resolving = 0;
}

/* Whether this call is refused (armed, none left). */
static int fm_refuse(void)
{
    if (!fm_armed)
        return 0;
    if (fm_left > 0) {
        fm_left--;
        return 0;
    }
    fm_refused++;
    return 1;
}

static inline void failmalloc_arm(long n)
{
    fm_left = n;
    fm_refused = 0;
    fm_armed = 1;
}

/* Disarms; returns how many calls were refused while armed. */
static inline long failmalloc_disarm(void)
{
    fm_armed = 0;
    return fm_refused;
}

void *malloc(size_t n)
{
    fm_resolve();
    if (!fm_real_malloc)
        return fm_boot_alloc(n);
    return fm_refuse() ? NULL : fm_real_malloc(n);
}

void *calloc(size_t n, size_t k)
{
    fm_resolve();
    if (!fm_real_calloc) {
        void *p = k && n > SIZE_MAX / k ? NULL : fm_boot_alloc(n * k);
        if (p)
            memset(p, 0, n * k);
        return p;
    }
    return fm_refuse() ? NULL : fm_real_calloc(n, k);
}

void *realloc(void *p, size_t n)
{
    fm_resolve();
    if (!fm_real_realloc || fm_is_boot(p)) {
        void *q = fm_boot_alloc(n);
        if (q && p) {
            size_t room = (size_t)(fm_boot + sizeof fm_boot - (unsigned char *)p);
            memcpy(q, p, n < room ? n : room);
        }
        return q;
    }
    /* a shrink or a free by realloc never fails in practice: refuse growth only */
    return n && fm_refuse() ? NULL : fm_real_realloc(p, n);
}

void free(void *p)
{
    fm_resolve();
    if (!p || fm_is_boot(p) || !fm_real_free)
        return;
    fm_real_free(p);
}

#endif /* CUPOLA_FAILMALLOC_H */
