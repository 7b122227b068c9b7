/*
 * ptrmap.h: an open-addressing hash map from nonzero 64-bit keys (block
 * addresses) to pointers, used by the pools to find a block from the address
 * being freed, and by the trace loader to pair frees with allocations.
 *
 * Linear probing with a multiplicative hash (addresses are aligned, so the
 * high bits of the product are the well-mixed ones), load kept under 1/2,
 * deletion by backward shift so no tombstones build up over long replays.
 */
#ifndef CUPOLA_PTRMAP_H
#define CUPOLA_PTRMAP_H

#include <stdint.h>
#include <stdlib.h>

typedef struct cp_ptrmap_slot {
    uint64_t key; /* 0: empty */
    void *val;
} cp_ptrmap_slot;

typedef struct cp_ptrmap {
    cp_ptrmap_slot *slots;
    uint64_t mask;  /* capacity - 1 (capacity a power of two) */
    unsigned shift; /* 64 - log2(capacity) */
    uint64_t count;
} cp_ptrmap;

static inline uint64_t cp_ptrmap_hash(const cp_ptrmap *m, uint64_t key)
{
    return (key * UINT64_C(0x9E3779B97F4A7C15)) >> m->shift;
}

static inline int cp_ptrmap_init(cp_ptrmap *m, uint64_t cap)
{
    unsigned lg = 4;
    while ((UINT64_C(1) << lg) < cap)
        lg++;
    m->slots = (cp_ptrmap_slot *)calloc((size_t)1 << lg, sizeof *m->slots);
    if (!m->slots)
        return -1;
    m->mask = (UINT64_C(1) << lg) - 1;
    m->shift = 64 - lg;
    m->count = 0;
    return 0;
}

static inline void cp_ptrmap_fini(cp_ptrmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->count = 0;
}

static inline void *cp_ptrmap_get(const cp_ptrmap *m, uint64_t key)
{
    uint64_t i = cp_ptrmap_hash(m, key);
    for (;;) {
        const cp_ptrmap_slot *sl = &m->slots[i];
        if (sl->key == key)
            return sl->val;
        if (sl->key == 0)
            return NULL;
        i = (i + 1) & m->mask;
    }
}

static inline int cp_ptrmap_grow(cp_ptrmap *m)
{
    cp_ptrmap n;
    uint64_t i;
    if (cp_ptrmap_init(&n, (m->mask + 1) * 2) != 0)
        return -1;
    for (i = 0; i <= m->mask; i++) {
        if (m->slots[i].key) {
            uint64_t j = cp_ptrmap_hash(&n, m->slots[i].key);
            while (n.slots[j].key)
                j = (j + 1) & n.mask;
            n.slots[j] = m->slots[i];
        }
    }
    n.count = m->count;
    free(m->slots);
    *m = n;
    return 0;
}

/* Inserts or replaces; -1 when memory for growing is not there. */
static inline int cp_ptrmap_put(cp_ptrmap *m, uint64_t key, void *val)
{
    uint64_t i;
    if ((m->count + 1) * 2 > m->mask + 1 && cp_ptrmap_grow(m) != 0)
        return -1;
    i = cp_ptrmap_hash(m, key);
    for (;;) {
        cp_ptrmap_slot *sl = &m->slots[i];
        if (sl->key == 0) {
            sl->key = key;
            sl->val = val;
            m->count++;
            return 0;
        }
        if (sl->key == key) {
            sl->val = val;
            return 0;
        }
        i = (i + 1) & m->mask;
    }
}

/* Removes key and returns its value (NULL when absent). */
static inline void *cp_ptrmap_del(cp_ptrmap *m, uint64_t key)
{
    uint64_t i = cp_ptrmap_hash(m, key), j;
    void *val;
    for (;;) {
        if (m->slots[i].key == key)
            break;
        if (m->slots[i].key == 0)
            return NULL;
        i = (i + 1) & m->mask;
    }
    val = m->slots[i].val;
    /* Backward shift: pull later members of the run into the hole when the
     * hole lies between their home slot and where they sit. */
    j = i;
    for (;;) {
        uint64_t home;
        j = (j + 1) & m->mask;
        if (m->slots[j].key == 0)
            break;
        home = cp_ptrmap_hash(m, m->slots[j].key);
        if (((j - home) & m->mask) >= ((j - i) & m->mask)) {
            m->slots[i] = m->slots[j];
            i = j;
        }
    }
    m->slots[i].key = 0;
    m->slots[i].val = NULL;
    m->count--;
    return val;
}

#endif /* CUPOLA_PTRMAP_H */
