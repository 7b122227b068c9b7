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

#include "error.h"
#include "trace/pickle.h"
#include "trace/snapshot.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
