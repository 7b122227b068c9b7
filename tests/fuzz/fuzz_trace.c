/*
 * fuzz_trace.c: libFuzzer harness for the trace loader.
 *
 * cp_trace_load reads a path (plain CSV or gzip), so each input is written
 * to one temporary file and loaded from there.  Whatever the bytes, the
 * loader must either fail with CP_ERR_INVALID and a message, or return a
 * trace whose figures agree with its rows; a trace that loads is then read
 * row by row and replayed against a virtual-upstream pool (addresses only),
 * so the replay's bookkeeping sees the same hostile sizes and pointers.
 * AddressSanitizer and UBSan (make fuzz-trace) turn any memory error into a
 * crash that libFuzzer saves as a reproducer.
 *
 * PyTorch snapshots: an input starting with a pickle's PROTO
 * opcode goes through the snapshot path of cp_trace_load; every input is
 * also handed to the pickle reader directly (behind a PROTO 4 header when it
 * has none), and a tree that parses is walked, boundedly, to check that its
 * values are well formed.
 *
 *   make fuzz-trace                       bounded run over tests/fuzz/corpus
 *   build-fuzz/fuzz_trace crash-<sha1>    replays one input
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "artifact.h"

#include "backend/backend.h"
#include "error.h"
#include "pool/bfc.h"
#include "pool/resource.h"
#include "trace/advise.h"
#include "trace/pickle.h"
#include "trace/trace.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];
static cp_resource *pool;

/* A violated expectation is a crash libFuzzer keeps, with the reason. */
#define EXPECT(cond, ...)                                   \
    do {                                                    \
        if (!(cond)) {                                      \
            fprintf(stderr, "fuzz_trace: " __VA_ARGS__);    \
            fprintf(stderr, " (%s)\n", #cond);              \
            abort();                                        \
        }                                                   \
    } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    cp_pool_opts o;
    int fd;
    fuzz_artifacts_beside(argc, argv);
    snprintf(path, sizeof path, "/tmp/cupola-fuzz-trace-XXXXXX");
    fd = mkstemp(path);
    if (fd < 0 || cp_backend_select("host") != CP_OK) {
        perror("fuzz_trace: setup");
        exit(1);
    }
    close(fd);
    memset(&o, 0, sizeof o);
    o.kind = "tlsf";
    o.upstream = CP_UP_VIRTUAL;
    o.grow = 1;
    o.alignment = 256;
    o.reuse = CP_REUSE_STREAM;
    if (cp_pool_create(&pool, &o) != CP_OK) {
        fprintf(stderr, "fuzz_trace: pool: %s\n", cp_error_msg());
        exit(1);
    }
    return 0;
}

/* Walks at most `budget` values (trees may share values or hold cycles). */
static void walk(const cp_pk_value *v, size_t depth, size_t *budget)
{
    size_t i, n;
    if (!*budget || depth > 64)
        return;
    (*budget)--;
    EXPECT(v != NULL, "a NULL value in the tree");
    EXPECT(v->type <= CP_PK_DICT, "value of unknown type %d", v->type);
    switch (v->type) {
    case CP_PK_STR:
    case CP_PK_BYTES:
        EXPECT(v->n == 0 || v->v.s != NULL, "string without data");
        break;
    case CP_PK_TUPLE:
    case CP_PK_LIST:
    case CP_PK_DICT:
        n = v->type == CP_PK_DICT ? 2 * v->n : v->n;
        EXPECT(n <= v->cap || n == 0, "container of %zu items in %zu slots", n, v->cap);
        for (i = 0; i < n && *budget; i++)
            walk(v->v.items[i], depth + 1, budget);
        break;
    default:
        break;
    }
}

static void fuzz_pickle(const uint8_t *data, size_t size)
{
    static uint8_t buf[1 << 16];
    const uint8_t *p = data;
    size_t n = size;
    cp_pickle *pk = NULL;
    cp_pk_value *root = NULL;
    size_t budget = 100000;
    if (!(size >= 1 && data[0] == 0x80)) {
        if (size + 2 > sizeof buf)
            return;
        buf[0] = 0x80;
        buf[1] = 4;
        memcpy(buf + 2, data, size);
        p = buf;
        n = size + 2;
    }
    if (cp_pickle_parse(p, n, &pk, &root) != CP_OK) {
        EXPECT(pk == NULL && root == NULL, "a failed parse returned a tree");
        EXPECT(strncmp(cp_error_msg(), "offset ", 7) == 0 ||
                   strncmp(cp_error_msg(), "out of host memory", 18) == 0,
               "a failed parse without its offset: %s", cp_error_msg());
        return;
    }
    EXPECT(root != NULL, "a parse without a root");
    walk(root, 0, &budget);
    (void)cp_pk_get(root, "device_traces");
    cp_pickle_free(pk);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    cp_trace *t = NULL;
    cp_trace_info in;
    cp_trace_row row;
    cp_status st;
    size_t i, n, allocs = 0;

    fuzz_pickle(data, size);
    if (!f || (size && fwrite(data, 1, size, f) != size)) {
        perror("fuzz_trace: write");
        abort();
    }
    fclose(f);

    st = cp_trace_load(path, &t);
    if (st != CP_OK) {
        EXPECT(t == NULL, "a failed load returned a trace");
        EXPECT(*cp_error_msg() != '\0', "a failed load gave no message");
        return 0;
    }
    EXPECT(t != NULL, "a successful load returned no trace");
    cp_trace_info_get(t, &in);
    n = cp_trace_events(t);
    EXPECT(n == in.events, "events %zu, info says %zu", n, in.events);
    EXPECT(in.allocs + in.frees == in.events, "allocs + frees != events");
    for (i = 0; i < n; i++) {
        EXPECT(cp_trace_event(t, i, &row) == CP_OK, "row %zu of %zu unreadable", i, n);
        allocs += !row.is_free;
        EXPECT(row.size <= in.max_size || row.is_free, "row %zu larger than max_size", i);
        EXPECT(!row.label || strlen(row.label) < 400, "row %zu: a label of %zu bytes", i,
               strlen(row.label));
    }
    EXPECT(allocs == in.allocs, "counted %zu allocs, info says %zu", allocs, in.allocs);
    EXPECT(cp_trace_event(t, n, &row) != CP_OK, "row past the end was readable");
    EXPECT(cp_trace_path(t) != NULL, "no path");

    /* Replay on the default stream only: streams are threads on the host
     * backend, too slow to create per input. */
    if (n <= 4096) {
        cp_replay_opts o;
        cp_replay_result res;
        cp_stats s;
        memset(&o, 0, sizeof o);
        o.single_stream = 1;
        o.synchronize = 1;
        memset(&res, 0, sizeof res);
        if (cp_trace_replay(t, pool, &o, &res) == CP_OK) {
            EXPECT(res.events == n, "replayed %llu of %zu events", (unsigned long long)res.events, n);
        }
        cp_resource_stats(pool, &s);
        EXPECT(s.used == 0, "the replay left %llu bytes in use", (unsigned long long)s.used);
        cp_resource_trim(pool, 0);
    }
    /* XLA's BFC model with the recorded addresses, as JAX profiles replay */
    if (n <= 4096) {
        cp_pool_opts bo;
        cp_resource *bp = NULL;
        memset(&bo, 0, sizeof bo);
        bo.kind = "bfc";
        bo.upstream = CP_UP_VIRTUAL;
        bo.grow = 1;
        bo.alignment = 256;
        {
            cp_bfc_opts *b = (cp_bfc_opts *)cp_pool_own(&bo);
            b->memory_limit = (uint64_t)1 << 40;
            b->allow_growth = (int)(n & 1); /* preallocated (and partitioned) or growing */
        }
        if (cp_pool_create(&bp, &bo) == CP_OK) {
            cp_replay_opts o;
            cp_replay_result res;
            cp_stats s;
            memset(&o, 0, sizeof o);
            o.single_stream = 1;
            o.recorded_addresses = 1;
            memset(&res, 0, sizeof res);
            if (cp_trace_replay(t, bp, &o, &res) == CP_OK)
                EXPECT(res.events == n, "bfc replayed %llu of %zu events",
                       (unsigned long long)res.events, n);
            cp_resource_stats(bp, &s);
            EXPECT(s.used == 0, "the bfc replay left %llu bytes in use", (unsigned long long)s.used);
            cp_resource_destroy(bp);
        }
    }
    /* A CuPy hook log through CuPy's pool, with the recorded addresses
     * and without, under a limit that makes it free and retry. */
    if (n <= 4096 && strcmp(cp_trace_format(t), "cupy_hook") == 0) {
        int k;
        for (k = 0; k < 2; k++) {
            cp_pool_opts po;
            cp_resource *cp = NULL;
            cp_replay_opts o;
            cp_replay_result res;
            memset(&po, 0, sizeof po);
            po.kind = "cupy";
            po.upstream = CP_UP_VIRTUAL;
            po.grow = 1;
            po.alignment = 256;
            po.max = k ? in.peak_live / 2 + 4096 : 0;
            EXPECT(cp_pool_create(&cp, &po) == CP_OK, "cupy pool: %s", cp_error_msg());
            memset(&o, 0, sizeof o);
            o.recorded_addresses = !k;
            memset(&res, 0, sizeof res);
            if (cp_trace_replay(t, cp, &o, &res) == CP_OK)
                EXPECT(res.cupy.on, "a CuPy log's replay through kind cupy is not the model's");
            cp_replay_result_fini(&res);
            cp_resource_destroy(cp);
        }
    }
    /* cupola.advise's replays (advise.h) on two threads: PyTorch's model
     * under its defaults (with the recorded addresses where the snapshot has
     * PyTorch's device calls), and under a limit with a search for the least
     * one.  Torch pools only: they need no streams. */
    if (n <= 2048) {
        cp_advise_job jobs[2];
        memset(jobs, 0, sizeof jobs);
        for (i = 0; i < 2; i++) {
            jobs[i].pool.kind = "torch";
            jobs[i].pool.upstream = CP_UP_VIRTUAL;
            jobs[i].pool.grow = 1;
            jobs[i].pool.alignment = 256;
        }
        ((cp_torch_opts *)cp_pool_own(&jobs[0].pool))->conf = "";
        jobs[0].recorded = cp_trace_torch_calls(t) > 0;
        ((cp_torch_opts *)cp_pool_own(&jobs[1].pool))->conf =
            "expandable_segments:True,garbage_collection_threshold:0.5";
        jobs[1].limit = in.peak_live / 2 + (UINT64_C(1) << 20);
        jobs[1].search = 1;
        EXPECT(cp_advise_run(t, jobs, 2, 2, NULL, NULL) == CP_OK, "advise_run failed");
        for (i = 0; i < 2; i++) {
            if (jobs[i].st != CP_OK) {
                EXPECT(jobs[i].msg[0] != '\0', "job %zu failed without a message", i);
                continue;
            }
            EXPECT(jobs[i].res.events <= in.events + in.ooms + 4 * in.events + 16,
                   "job %zu replayed %llu events", i, (unsigned long long)jobs[i].res.events);
            EXPECT(!jobs[i].res.stopped || jobs[i].limit, "job %zu stopped without a limit", i);
            EXPECT(!jobs[i].searched || jobs[i].min_limit >= in.peak_live / 2,
                   "job %zu: a least limit of %llu below what lives", i,
                   (unsigned long long)jobs[i].min_limit);
        }
        cp_advise_jobs_fini(jobs, 2);
    }
    cp_trace_free(t);
    return 0;
}
