/*
 * fuzz_pickle.c: libFuzzer harness for the snapshot pickle reader alone,
 * in memory: no temporary file and no replay, so it runs
 * thousands of inputs a second where fuzz_trace.c runs hundreds.  Every
 * input is parsed (behind a PROTO 4 header when it has none, unless it is
 * cupola's compact form) and decoded as a snapshot; a snapshot that decodes
 * must have well-formed events: frees only of live addresses, labels that
 * exist, reserved figures that agree, torch operations that name rows.
 *
 *   make fuzz-pickle                      bounded run over tests/fuzz/corpus
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifact.h"

#include "error.h"
#include "trace/pickle.h"
#include "trace/snapshot.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_artifacts_beside(argc, argv);
    return 0;
}

/* The input again as a stream that hands out a few bytes at a time (the
 * window's refills and slides), its chunk sizes drawn from the input. */
typedef struct chunks {
    const uint8_t *p;
    size_t n, at, k;
} chunks;

static long chunk_read(void *ud, unsigned char *buf, size_t n)
{
    chunks *c = (chunks *)ud;
    size_t step = 1 + (c->n ? c->p[c->k++ % c->n] % 13 : 0);
    if (c->at == c->n)
        return 0;
    if (step > n)
        step = n;
    if (step > c->n - c->at)
        step = c->n - c->at;
    memcpy(buf, c->p + c->at, step);
    c->at += step;
    return (long)step;
}

#define EXPECT(cond, ...)                                   \
    do {                                                    \
        if (!(cond)) {                                      \
            fprintf(stderr, "fuzz_pickle: " __VA_ARGS__);   \
            fprintf(stderr, " (%s)\n", #cond);              \
            abort();                                        \
        }                                                   \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t buf[1 << 17];
    const uint8_t *p = data;
    size_t n = size, i;
    cp_snapshot s;
    cp_status st;
    if (!(size >= 1 && data[0] == 0x80) && !cp_snapshot_is_compact(data, size)) {
        if (size + 2 > sizeof buf)
            return 0;
        buf[0] = 0x80;
        buf[1] = 4;
        memcpy(buf + 2, data, size);
        p = buf;
        n = size + 2;
    }
    st = cp_snapshot_read(p, n, &s);
    if (!cp_snapshot_is_compact(p, n)) {
        /* read as a stream: the same outcome, the same snapshot */
        chunks c = {p, n, 0, 0};
        cp_pk_source src = {chunk_read, &c};
        cp_snapshot s2;
        cp_status st2 = cp_snapshot_read_stream(&src, -1, &s2);
        EXPECT(st2 == st, "in memory %d, as a stream %d (%s)", (int)st, (int)st2, cp_error_msg());
        if (st2 == CP_OK) {
            EXPECT(s2.n == s.n && s2.nlabels == s.nlabels && s2.ntop == s.ntop &&
                       s2.reserved_peak == s.reserved_peak && s2.nsegev == s.nsegev,
                   "the stream read another snapshot");
            for (i = 0; i < s.n; i++)
                EXPECT(s2.ev[i].addr == s.ev[i].addr && s2.ev[i].label == s.ev[i].label,
                       "event %zu differs as a stream", i);
            cp_snapshot_fini(&s2);
        }
        if (st == CP_OK && s.devices > 0) {
            /* one device alone: a subset, its operations of its own */
            cp_snapshot s3;
            int dev = (int)(s.devices - 1);
            EXPECT(cp_snapshot_read_device(p, n, dev, &s3) == CP_OK, "device %d unreadable", dev);
            EXPECT(s3.n <= s.n && s3.op_device == dev, "device %d: more than all", dev);
            for (i = 0; i < s3.n; i++)
                EXPECT(s3.ev[i].device == (unsigned)dev, "device %d read another's entry", dev);
            cp_snapshot_fini(&s3);
            EXPECT(cp_snapshot_read_device(p, n, (int)s.devices, &s3) == CP_ERR_INVALID,
                   "a device past the last was read");
        }
    }
    if (st != CP_OK) {
        EXPECT(*cp_error_msg() != '\0', "a failure without a message");
        EXPECT(s.ev == NULL && s.n == 0 && s.labels == NULL, "a failure left a snapshot");
        return 0;
    }
    EXPECT(s.nseg >= 1, "no reserved point");
    for (i = 0; i < s.nseg; i++)
        EXPECT(s.seg_reserved[i] <= s.reserved_peak, "reserved %zu above the peak", i);
    for (i = 0; i < s.n; i++) {
        EXPECT(s.ev[i].addr != 0, "event %zu without an address", i);
        EXPECT(s.ev[i].label <= s.nlabels, "event %zu: label %u of %zu", i, s.ev[i].label,
               s.nlabels);
        EXPECT(s.ev[i].device < s.devices || s.devices == 0, "event %zu: device %u of %zu", i,
               s.ev[i].device, s.devices);
        if (s.ev[i].is_free)
            EXPECT(s.ev[i].label == 0, "a free with a label");
    }
    for (i = 0; i < s.nlabels; i++)
        EXPECT(strlen(s.labels[i]) < 400, "label %zu too long", i);
    for (i = 0; i < s.ntop; i++) {
        const cp_snap_top *o = &s.top[i];
        EXPECT(o->kind <= CP_TOP_RELEASE, "operation %zu of kind %u", i, o->kind);
        if (o->kind == CP_TOP_ALLOC || o->kind == CP_TOP_FREE || o->kind == CP_TOP_DONE) {
            EXPECT(o->ref < s.n, "operation %zu names row %zu of %zu", i, o->ref, s.n);
            EXPECT(s.ev[o->ref].is_free == 0, "operation %zu names a free row", i);
        }
    }
    for (i = 0; i < s.nsegev; i++)
        EXPECT(s.segev[i].call <= CP_TORCH_UNMAP, "device call %zu", i);
    EXPECT(memchr(s.torch_env, '\0', sizeof s.torch_env) != NULL, "env not terminated");
    EXPECT(memchr(s.torch_settings, '\0', sizeof s.torch_settings) != NULL, "settings not "
           "terminated");
    cp_snapshot_fini(&s);
    return 0;
}
