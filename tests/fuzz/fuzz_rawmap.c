/*
 * fuzz_rawmap.c: libFuzzer harness for a Pool's map of raw blocks
 * (src/lua/rawmap.h), the one check between a script's integer and the
 * allocator's free.  Each input is a sequence of operations (one byte of
 * operation, two of address) run against the map and against a plain model
 * (an array indexed by address), and after each one the map must agree:
 *  - every live block is found, with its size and stream;
 *  - a block given back is found with the state it left in, or not at all
 *    (its mark may have been dropped by a rebuild), never as live;
 *  - an address never given is never found;
 *  - the live count is the model's, and the map is at most half full;
 *  - l_rawmap_containing finds a live block exactly when the address lies
 *    strictly inside one (the model's own walk).
 * Addresses fall in a small range (1024 of them, 16 bytes apart, none 0) so
 * that the same ones come back often, as a pool's do.
 *
 *   make fuzz-rawmap                      bounded run over tests/fuzz/corpus-rawmap
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifact.h"

#ifndef CUPOLA_RAWMAP_H /* tests/c/test_rawmap.c includes it by its path */
#include "rawmap.h"
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_artifacts_beside(argc, argv);
    return 0;
}

#define EXPECT(cond, ...)                                  \
    do {                                                   \
        if (!(cond)) {                                     \
            fprintf(stderr, "fuzz_rawmap: " __VA_ARGS__);  \
            fprintf(stderr, " (%s)\n", #cond);             \
            abort();                                       \
        }                                                  \
    } while (0)

#define NADDR 1024
#define STEP 16

typedef struct model_block {
    uint32_t state; /* 0: never given; else the L_RAW_* it is in */
    uint64_t size;
    void *stream;
} model_block;

static uint64_t addr_of(unsigned i)
{
    return (uint64_t)(i + 1) * STEP;
}

static void check_all(const l_rawmap *m, const model_block *mb)
{
    uint64_t live = 0;
    unsigned i;
    for (i = 0; i < NADDR; i++) {
        const l_rawblock *b = l_rawmap_find(m, addr_of(i));
        if (mb[i].state == L_RAW_LIVE) {
            live++;
            EXPECT(b && b->state == L_RAW_LIVE && b->size == mb[i].size && b->stream == mb[i].stream,
                   "live block %u not found as it was put", i);
        } else if (mb[i].state == 0) {
            EXPECT(!b, "address %u never given, but found", i);
        } else {
            EXPECT(!b || b->state == mb[i].state, "block %u found in state %u, not %u", i,
                   b ? b->state : 0, mb[i].state);
        }
    }
    EXPECT(m->live == live, "live %llu, the model has %llu", (unsigned long long)m->live,
           (unsigned long long)live);
    EXPECT(!m->slots || m->used * 2 <= m->mask + 1, "more than half full");
    EXPECT(l_rawmap_find(m, 0) == NULL, "address 0 found");
}

/* The model's own answer to "inside which live block is a?" */
static int model_inside(const model_block *mb, uint64_t a)
{
    unsigned i;
    for (i = 0; i < NADDR; i++)
        if (mb[i].state == L_RAW_LIVE && a > addr_of(i) && a - addr_of(i) < mb[i].size)
            return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static model_block mb[NADDR];
    l_rawmap m;
    size_t k;
    memset(&m, 0, sizeof m);
    memset(mb, 0, sizeof mb);
    for (k = 0; k + 3 <= size; k += 3) {
        unsigned op = data[k] % 6, i = ((unsigned)data[k + 1] << 8 | data[k + 2]) % NADDR;
        uint64_t a = addr_of(i);
        l_rawblock *b;
        uint32_t was;
        switch (op) {
        case 0: /* alloc_raw: a pool never hands out a live address */
        case 1:
            if (mb[i].state == L_RAW_LIVE)
                break;
            EXPECT(l_rawmap_reserve(&m) == 0, "reserve failed");
            mb[i].size = 1 + (data[k] >> 3) * 8; /* 1..249: may cover the next addresses */
            mb[i].stream = (void *)(uintptr_t)(data[k + 2] | 1);
            b = l_rawmap_put(&m, a, mb[i].size, mb[i].stream, &was);
            EXPECT(b && b->addr == a, "put lost the address");
            EXPECT(was == 0 || was == mb[i].state, "put saw state %u, the model %u", was, mb[i].state);
            mb[i].state = L_RAW_LIVE;
            break;
        case 2: /* free_raw, buffer(), or a reset of everything */
        case 3:
        case 4: {
            uint32_t to = op == 2 ? L_RAW_FREED : op == 3 ? L_RAW_BUFFER : L_RAW_RESET;
            if (to == L_RAW_RESET && (data[k + 1] & 1)) { /* reset: every live block */
                unsigned j;
                for (j = 0; j < NADDR; j++)
                    if (mb[j].state == L_RAW_LIVE) {
                        b = l_rawmap_find(&m, addr_of(j));
                        EXPECT(b && b->state == L_RAW_LIVE, "reset: live block %u missing", j);
                        l_rawmap_mark(&m, b, L_RAW_RESET);
                        mb[j].state = L_RAW_RESET;
                    }
                break;
            }
            b = l_rawmap_find(&m, a);
            if (mb[i].state != L_RAW_LIVE) {
                EXPECT(!b || b->state != L_RAW_LIVE, "a block not live is found live");
                break;
            }
            EXPECT(b && b->state == L_RAW_LIVE, "a live block is not found");
            l_rawmap_mark(&m, b, to);
            mb[i].state = to;
            break;
        }
        default: { /* an interior address, as free_raw's message looks for it */
            uint64_t x = a + (data[k] >> 3);
            const l_rawblock *in = l_rawmap_containing(&m, x);
            EXPECT(!in == !model_inside(mb, x), "containing(%llu) disagrees with the model",
                   (unsigned long long)x);
            EXPECT(!in || (in->state == L_RAW_LIVE && x > in->addr && x - in->addr < in->size),
                   "containing gave a block that does not hold the address");
            break;
        }
        }
        if ((k / 3) % 32 == 0 || k + 6 > size)
            check_all(&m, mb);
    }
    check_all(&m, mb);
    l_rawmap_fini(&m);
    return 0;
}
