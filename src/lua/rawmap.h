/*
 * rawmap.h: a Pool's map of the blocks it handed out as bare addresses
 * (p:alloc_raw), the one place free_raw and buffer() learn a block's size and
 * stream from, and so the check that the address is one the pool gave.
 *
 * Open addressing with linear probing, keyed by the block's address (never 0:
 * 0 marks an empty slot).  A block given back keeps its slot, marked with how
 * it went (freed by free_raw, handed to a Buffer by buffer(), freed by an
 * arena's reset()): a later free_raw of that address then says which misuse
 * it is, a double free or a block a Buffer owns, instead of "never given";
 * and the pair alloc_raw + free_raw of one address, the common loop, finds
 * its slot at once and rewrites it in place.  Those marked slots are dropped
 * when the map would pass half full: it is rebuilt with the live blocks only,
 * at a capacity where they fill at most a quarter, so a rebuild comes at most
 * once per (capacity / 4) insertions and the marks of recent misuse survive
 * until then.  (An address freed long ago is then reported as never given.)
 *
 * Plain C, never sees Lua; the streams are the binding's (l_streamref),
 * opaque here.
 */
#ifndef CUPOLA_RAWMAP_H
#define CUPOLA_RAWMAP_H

#include <stdint.h>
#include <stdlib.h>

/* What became of a block (the state of its slot). */
enum {
    L_RAW_LIVE = 1, /* handed out by alloc_raw, not given back */
    L_RAW_FREED,    /* given back by free_raw */
    L_RAW_BUFFER,   /* wrapped by buffer(): the Buffer owns it now */
    L_RAW_RESET     /* freed with every other block by an arena's reset() */
};

typedef struct l_rawblock {
    uint64_t addr;  /* 0: empty */
    uint64_t size;  /* as requested (what the pool's free is given back) */
    void *stream;   /* while live: its stream (the binding holds one reference) */
    uint32_t state; /* L_RAW_* */
    uint32_t pad;
} l_rawblock;

typedef struct l_rawmap {
    l_rawblock *slots; /* NULL until the first block */
    uint64_t mask;     /* capacity - 1 */
    unsigned shift;    /* 64 - log2(capacity) */
    uint64_t used;     /* slots not empty (live and marked) */
    uint64_t live;     /* slots L_RAW_LIVE */
} l_rawmap;

static inline uint64_t l_rawmap_home(const l_rawmap *m, uint64_t addr)
{
    return (addr * UINT64_C(0x9E3779B97F4A7C15)) >> m->shift;
}

/* The slot of addr, or NULL (always for 0, which marks an empty slot). */
static inline l_rawblock *l_rawmap_find(const l_rawmap *m, uint64_t addr)
{
    uint64_t i;
    if (!m->slots || addr == 0)
        return NULL;
    for (i = l_rawmap_home(m, addr);; i = (i + 1) & m->mask) {
        l_rawblock *b = &m->slots[i];
        if (b->addr == addr)
            return b;
        if (b->addr == 0)
            return NULL;
    }
}

/* Rebuilds with the live blocks only, in a capacity they fill at most a
 * quarter of; -1 (the map unchanged) without host memory. */
static inline int l_rawmap_rebuild(l_rawmap *m)
{
    uint64_t cap = 16, i;
    unsigned lg = 4;
    l_rawblock *slots;
    while ((m->live + 1) * 4 > cap) {
        cap <<= 1;
        lg++;
    }
    slots = (l_rawblock *)calloc((size_t)cap, sizeof *slots);
    if (!slots)
        return -1;
    for (i = 0; m->slots && i <= m->mask; i++) {
        const l_rawblock *b = &m->slots[i];
        if (b->state == L_RAW_LIVE) {
            uint64_t j = (b->addr * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - lg);
            while (slots[j].addr)
                j = (j + 1) & (cap - 1);
            slots[j] = *b;
        }
    }
    free(m->slots);
    m->slots = slots;
    m->mask = cap - 1;
    m->shift = 64 - lg;
    m->used = m->live;
    return 0;
}

/* Makes sure one more block fits without allocating (call before the pool
 * hands the block out, so that a failure here leaks nothing); -1 without
 * host memory. */
static inline int l_rawmap_reserve(l_rawmap *m)
{
    if (m->slots && (m->used + 1) * 2 <= m->mask + 1)
        return 0;
    return l_rawmap_rebuild(m);
}

/* Records a live block at addr (never 0) after l_rawmap_reserve.  Returns
 * its slot; its previous state in *was (0: the address was new to the map). */
static inline l_rawblock *l_rawmap_put(l_rawmap *m, uint64_t addr, uint64_t size, void *stream,
                                       uint32_t *was)
{
    uint64_t i;
    for (i = l_rawmap_home(m, addr);; i = (i + 1) & m->mask) {
        l_rawblock *b = &m->slots[i];
        if (b->addr == addr) {
            *was = b->state;
            break;
        }
        if (b->addr == 0) {
            *was = 0;
            b->addr = addr;
            m->used++;
            break;
        }
    }
    m->slots[i].size = size;
    m->slots[i].stream = stream;
    if (*was != L_RAW_LIVE) /* (live twice: the caller raises, the count stays true) */
        m->live++;
    m->slots[i].state = L_RAW_LIVE;
    return &m->slots[i];
}

/* A live block leaves: marked with how (L_RAW_FREED, _BUFFER, _RESET). */
static inline void l_rawmap_mark(l_rawmap *m, l_rawblock *b, uint32_t state)
{
    b->state = state;
    b->stream = NULL;
    m->live--;
}

/* The live block whose bytes hold addr past its start, or NULL (a walk over
 * the map: only for messages). */
static inline const l_rawblock *l_rawmap_containing(const l_rawmap *m, uint64_t addr)
{
    uint64_t i;
    for (i = 0; m->slots && i <= m->mask; i++) {
        const l_rawblock *b = &m->slots[i];
        if (b->state == L_RAW_LIVE && addr > b->addr && addr - b->addr < (b->size ? b->size : 1))
            return b;
    }
    return NULL;
}

static inline void l_rawmap_fini(l_rawmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->mask = m->used = m->live = 0;
}

#endif /* CUPOLA_RAWMAP_H */
