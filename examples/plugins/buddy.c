/*
 * buddy.c: a binary buddy allocator written as a cupola plugin
 * (<cupola/allocator.h>); examples/own_allocator.lua replays a trace on it.
 *
 *   cupola.pool{kind = "plugin", source = io.open("examples/plugins/buddy.c"):read "a",
 *               symbol = "buddy_allocator", options = "chunk=64MiB,min=512,reserve"}
 *
 * Policy, exactly:
 *  - Memory comes from the upstream in chunks of a power of two bytes: the
 *    `chunk` option (default 64 MiB), or the request rounded up to a power of
 *    two when it is larger; when the upstream refuses a chunk (the pool's
 *    max), the smallest power of two that holds the request is tried.  With
 *    the `reserve` option the first chunk is taken at creation (a pool with
 *    grow = false then serves from it alone).
 *  - A chunk is split into blocks of power-of-two sizes from `min` (default
 *    512 bytes, raised so that a chunk has at most 2^12 of them, which keeps
 *    a chunk's bookkeeping small enough to make and drop cheaply) up to the
 *    chunk.  A request takes the smallest order that holds it: the first free
 *    block of that order, else the smallest larger free block (newest chunk
 *    first), halved until it fits; the halves not taken are free buddies.
 *  - A freed block merges with its buddy while the buddy is free and whole,
 *    up to the chunk.  A chunk that becomes entirely free goes back to the
 *    upstream at once, unless it is the only chunk or the only entirely free
 *    one (one spare chunk is kept: a workload that frees its last block and
 *    allocates again does not pay for a chunk each time).
 *  - Blocks are aligned to their size (at least `min`) from a chunk start the
 *    upstream aligns to 256 bytes or more.
 *  - Every piece of bookkeeping is host memory (the blocks may be device
 *    memory the host cannot touch): per chunk, one state byte and two links
 *    per `min` unit.  Not thread-safe: cupola calls it under the pool's lock.
 */
#include <cupola/allocator.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_UNITS_LOG 12
#define FREE_BIT 0x80

typedef struct chunk {
    char *base;
    unsigned k;       /* log2 of the chunk's size */
    unsigned u;       /* log2 of the smallest block */
    unsigned levels;  /* orders 0 .. levels-1, block size 2^(u + order) */
    int32_t *next, *prev;
    uint8_t *state;   /* at a block's first unit: order, | FREE_BIT when free */
    int32_t heads[64];
    size_t free_bytes;
    struct chunk *link;
} chunk;

typedef struct buddy {
    cupola_upstream *up;
    unsigned chunk_log, min_log;
    chunk *chunks;
    size_t nchunks;
} buddy;

static unsigned log2_ceil(size_t n)
{
    unsigned l = 0;
    /* Past the largest power of two a size_t holds no order fits: say so
     * (the loop below would shift by the type's width, which C leaves
     * undefined; under valgrind it never ended). */
    if (n > (size_t)1 << (sizeof(size_t) * 8 - 1))
        return sizeof(size_t) * 8;
    while (((size_t)1 << l) < n)
        l++;
    return l;
}

static size_t parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (strncmp(end, "KiB", 3) == 0)
        v <<= 10;
    else if (strncmp(end, "MiB", 3) == 0)
        v <<= 20;
    else if (strncmp(end, "GiB", 3) == 0)
        v <<= 30;
    return (size_t)v;
}

static void push(chunk *c, unsigned o, int32_t i)
{
    c->state[i] = (uint8_t)(o | FREE_BIT);
    c->prev[i] = -1;
    c->next[i] = c->heads[o];
    if (c->heads[o] >= 0)
        c->prev[c->heads[o]] = i;
    c->heads[o] = i;
    c->free_bytes += (size_t)1 << (c->u + o);
}

static void unlink_block(chunk *c, unsigned o, int32_t i)
{
    if (c->prev[i] >= 0)
        c->next[c->prev[i]] = c->next[i];
    else
        c->heads[o] = c->next[i];
    if (c->next[i] >= 0)
        c->prev[c->next[i]] = c->prev[i];
    c->state[i] = (uint8_t)o;
    c->free_bytes -= (size_t)1 << (c->u + o);
}

static chunk *chunk_new(buddy *b, unsigned k, void *stream)
{
    chunk *c = calloc(1, sizeof *c);
    size_t units;
    unsigned o;
    if (!c)
        return NULL;
    c->k = k;
    c->u = b->min_log;
    if (k > MAX_UNITS_LOG && c->u < k - MAX_UNITS_LOG)
        c->u = k - MAX_UNITS_LOG;
    if (c->u > k)
        c->u = k;
    c->levels = k - c->u + 1;
    units = (size_t)1 << (k - c->u);
    c->next = malloc(units * sizeof *c->next);
    c->prev = malloc(units * sizeof *c->prev);
    c->state = calloc(units, 1);
    c->base = b->up->allocate(b->up, (size_t)1 << k, stream);
    if (!c->next || !c->prev || !c->state || !c->base) {
        if (c->base)
            b->up->deallocate(b->up, c->base, (size_t)1 << k, stream);
        free(c->next);
        free(c->prev);
        free(c->state);
        free(c);
        return NULL;
    }
    for (o = 0; o < 64; o++)
        c->heads[o] = -1;
    push(c, c->levels - 1, 0);
    c->link = b->chunks;
    b->chunks = c;
    b->nchunks++;
    return c;
}

static void chunk_free(buddy *b, chunk *c, void *stream)
{
    b->up->deallocate(b->up, c->base, (size_t)1 << c->k, stream);
    free(c->next);
    free(c->prev);
    free(c->state);
    free(c);
}

/* A block of order >= o (in units of the chunk) from c, split down to o. */
static void *take(chunk *c, unsigned o)
{
    unsigned j;
    int32_t i;
    for (j = o; j < c->levels && c->heads[j] < 0; j++)
        ;
    if (j >= c->levels)
        return NULL;
    i = c->heads[j];
    unlink_block(c, j, i);
    while (j > o) {
        j--;
        push(c, j, i + ((int32_t)1 << j)); /* the upper half stays free */
    }
    c->state[i] = (uint8_t)o;
    return c->base + ((size_t)i << c->u);
}

static void *create(cupola_upstream *up, const char *options)
{
    buddy *b = calloc(1, sizeof *b);
    const char *p;
    size_t chunk_bytes = (size_t)64 << 20, min_bytes = 512;
    if (!b)
        return NULL;
    if ((p = strstr(options, "chunk=")) != NULL)
        chunk_bytes = parse_size(p + 6);
    if ((p = strstr(options, "min=")) != NULL)
        min_bytes = parse_size(p + 4);
    if (chunk_bytes < 4096 || min_bytes < 1 || min_bytes > chunk_bytes) {
        free(b);
        return NULL; /* cupola reports that create failed */
    }
    b->up = up;
    b->chunk_log = log2_ceil(chunk_bytes);
    b->min_log = log2_ceil(min_bytes);
    if (strstr(options, "reserve") && !chunk_new(b, b->chunk_log, NULL)) {
        free(b);
        return NULL;
    }
    return b;
}

static void destroy(void *state)
{
    buddy *b = state;
    while (b->chunks) {
        chunk *c = b->chunks;
        b->chunks = c->link;
        chunk_free(b, c, NULL);
    }
    free(b);
}

static void *allocate(void *state, size_t bytes, void *stream)
{
    buddy *b = state;
    unsigned need = log2_ceil(bytes), k;
    chunk *c;
    void *p;
    for (c = b->chunks; c; c = c->link) {
        unsigned o = need > c->u ? need - c->u : 0;
        if (o < c->levels && (p = take(c, o)) != NULL)
            return p;
    }
    k = need > b->chunk_log ? need : b->chunk_log;
    if (k >= sizeof(size_t) * 8 - 1)
        return NULL;
    if (!(c = chunk_new(b, k, stream)) && (k == need || !(c = chunk_new(b, need, stream))))
        return NULL;
    return take(c, need > c->u ? need - c->u : 0);
}

/* Another chunk than c is entirely free. */
static int spare(const buddy *b, const chunk *c)
{
    const chunk *d;
    for (d = b->chunks; d; d = d->link)
        if (d != c && d->heads[d->levels - 1] >= 0)
            return 1;
    return 0;
}

static void deallocate(void *state, void *ptr, size_t bytes, void *stream)
{
    buddy *b = state;
    chunk *c, **at;
    int32_t i;
    unsigned o;
    (void)bytes;
    for (at = &b->chunks; (c = *at) != NULL; at = &c->link)
        if ((char *)ptr >= c->base && (char *)ptr < c->base + ((size_t)1 << c->k))
            break;
    if (!c)
        return;
    i = (int32_t)(((char *)ptr - c->base) >> c->u);
    o = c->state[i] & ~FREE_BIT;
    while (o + 1 < c->levels) {
        int32_t buddy_i = i ^ ((int32_t)1 << o);
        if (c->state[buddy_i] != (FREE_BIT | o))
            break;
        unlink_block(c, o, buddy_i);
        if (buddy_i < i)
            i = buddy_i;
        o++;
    }
    push(c, o, i);
    if (o == c->levels - 1 && b->nchunks > 1 && spare(b, c)) {
        unlink_block(c, o, i);
        *at = c->link;
        b->nchunks--;
        chunk_free(b, c, stream);
    }
}

static void stats(void *state, size_t *largest_free, size_t *free_bytes)
{
    const buddy *b = state;
    const chunk *c;
    *largest_free = *free_bytes = 0;
    for (c = b->chunks; c; c = c->link) {
        int o;
        *free_bytes += c->free_bytes;
        for (o = (int)c->levels - 1; o >= 0; o--)
            if (c->heads[o] >= 0) {
                size_t sz = (size_t)1 << (c->u + (unsigned)o);
                if (sz > *largest_free)
                    *largest_free = sz;
                break;
            }
    }
}

const cupola_allocator buddy_allocator = {
    .version = CUPOLA_ALLOCATOR_VERSION,
    .create = create,
    .destroy = destroy,
    .allocate = allocate,
    .deallocate = deallocate,
    .stats = stats,
};
