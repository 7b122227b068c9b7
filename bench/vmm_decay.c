/*
 * bench/vmm_decay.c: the vmm pool's price, per trace: its default policy
 * (decided by time, the pool's clock reading the trace's timestamps) beside
 * a few release_thresholds, tlsf, and PyTorch's expandable segments.
 *
 * Virtual upstream (deterministic, any machine), one pass on a fresh pool:
 * peak reserved / peak live, pages mapped, churn (pages mapped beyond the
 * first mapping of the pool's peak) and its estimated time at 59 us a page
 * (an H100's cost of moving a 2 MiB page) as a share of the trace's
 * recorded duration, and reserved byte-seconds over live byte-seconds (how
 * much memory the pool held over time, not only at its peak).  PyTorch's
 * expandable-segments figure is its peak reserved over peak live, recorded
 * live: for the shipped traces from examples/traces/README.md, for a
 * snapshot NAME.SETTING-TAG.pickle.gz from NAME.SETTING-expandable.pickle.gz
 * beside it, else from NAME.expandable.pickle.gz (the same program's run
 * with expandable segments: its own segments), else "-".  The last columns say whether the
 * default meets the aim: ratio <= 1.05 and <= expandable, churn <= 5 %.
 *
 * CUPOLA_BENCH_UPSTREAM=device: on real memory instead (the backend
 * cp_backend_select picks: the GPU on a GPU machine): per trace, the
 * replay's wall time of the default vmm pool (its own wall clock, and the
 * trace's clock), of vmm with release_threshold = max and of tlsf, beside
 * the trace's recorded duration, with the pages each vmm run mapped.
 *
 * Build and run from the repository root, after `make` (any backend):
 *   make NVCC= BUILD=build-host && cc -O2 -std=c11 -D_GNU_SOURCE -Isrc/core bench/vmm_decay.c \
 *      $(find build-host/obj/core -name '*.o') -lz -lpthread -lm -o build-host/bench_vmm_decay
 *   build-host/bench_vmm_decay [trace ...]     (default: the six in examples/traces)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool/resource.h"
#include "trace/trace.h"

#define PAGE_COST 59e-6 /* seconds to move a 2 MiB page (H100) */

static const struct {
    const char *name;
    double expandable;
} known[] = {
    {"resnet50_train.csv.gz", 1.017},         {"gpt2_train.csv.gz", 1.089},
    {"t5_train_varlen.csv.gz", 1.040},        {"mixtral_moe_train.csv.gz", 1.087},
    {"convnext_multires_train.csv.gz", 1.010}, {"gpt2_beam_search.csv.gz", 1.047},
};

static cp_upstream_kind upstream = CP_UP_VIRTUAL;

typedef struct config {
    const char *label;
    const char *kind;
    int threshold_set;
    uint64_t threshold;
    int trace_clock;
} config;

static cp_resource *fresh(const config *c)
{
    cp_pool_opts o;
    cp_resource *r = NULL;
    memset(&o, 0, sizeof o);
    o.kind = c->kind;
    o.upstream = upstream;
    o.grow = 1;
    o.alignment = 256;
    o.reuse = CP_REUSE_EVENT; /* the Lua default */
    o.release_threshold_set = c->threshold_set;
    o.release_threshold = c->threshold;
    /* on the trace's clock over the virtual upstream: a manual clock, so
     * that the replay starts it at 0 and the figures are the same on every
     * run (a wall clock would start it at the time since creation) */
    if (c->trace_clock && upstream == CP_UP_VIRTUAL)
        o.clock = CP_CLOCK_MANUAL;
    if (cp_pool_create(&r, &o) != CP_OK) {
        fprintf(stderr, "%s: %s\n", c->label, cp_error_msg());
        return NULL;
    }
    return r;
}

static int replay(const cp_trace *t, const config *c, cp_replay_result *res, uint64_t *page)
{
    cp_replay_opts o;
    cp_stats st;
    cp_resource *r = fresh(c);
    memset(&o, 0, sizeof o);
    o.repeat = 1;
    o.synchronize = 1;
    o.trace_clock = c->trace_clock;
    if (!r)
        return -1;
    if (cp_trace_replay(t, r, &o, res) != CP_OK) {
        fprintf(stderr, "%s: %s\n", c->label, cp_error_msg());
        cp_resource_destroy(r);
        return -1;
    }
    cp_resource_stats(r, &st);
    *page = st.page_bytes ? st.page_bytes : UINT64_C(2) << 20;
    cp_resource_destroy(r);
    return 0;
}

/* PyTorch's expandable-segments figure for the trace at path, or 0. */
static double expandable_for(const char *path)
{
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    const char *dot = strchr(base, '.');
    size_t j;
    for (j = 0; j < sizeof known / sizeof known[0]; j++)
        if (strcmp(base, known[j].name) == 0)
            return known[j].expandable;
    if (dot && strstr(dot, ".pickle")) {
        char sib[4096];
        cp_trace *e = NULL;
        cp_trace_info in;
        double x = 0;
        const char *pk = strstr(dot, ".pickle"), *dash = NULL, *q;
        for (q = dot; q < pk; q++)
            if (*q == '-')
                dash = q;
        if (dash) /* the same setting's run (a memory limit, an out of memory) */
            snprintf(sib, sizeof sib, "%.*sexpandable%s", (int)(dash + 1 - path), path, pk);
        if (!dash || cp_trace_load(sib, &e) != CP_OK) {
            snprintf(sib, sizeof sib, "%.*s.expandable%s", (int)(dot - path), path, pk);
            if (cp_trace_load(sib, &e) != CP_OK)
                return 0;
        }
        cp_trace_info_get(e, &in);
        if (in.torch_reserved && in.peak_live)
            x = (double)in.torch_peak_reserved / (double)in.peak_live;
        cp_trace_free(e);
        return x;
    }
    return 0;
}

static void virtual_table(int n, char **paths)
{
    static const config cfgs[] = {
        {"vmm default", "vmm", 0, 0, 1},
        {"vmm thr 0", "vmm", 1, 0, 0},
        {"vmm thr 1 GiB", "vmm", 1, UINT64_C(1) << 30, 0},
        {"vmm thr max", "vmm", 1, UINT64_MAX, 0},
        {"tlsf", "tlsf", 0, 0, 0},
    };
    int i;
    size_t k;
    printf("| trace | duration | pool | reserved/live | maps | churn (pages) | churn x 59 us | "
           "reserved / live byte-seconds |\n| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (i = 0; i < n; i++) {
        cp_trace *t = NULL;
        cp_trace_info in;
        const char *base = strrchr(paths[i], '/') ? strrchr(paths[i], '/') + 1 : paths[i];
        double dur, x = expandable_for(paths[i]), dratio = 0, dchurn = 0;
        if (cp_trace_load(paths[i], &t) != CP_OK) {
            fprintf(stderr, "%s\n", cp_error_msg());
            continue;
        }
        cp_trace_info_get(t, &in);
        dur = in.duration_us * 1e-6;
        for (k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
            cp_replay_result res;
            uint64_t page, peak_pages, churn;
            if (replay(t, &cfgs[k], &res, &page) != 0)
                continue;
            peak_pages = res.peak_reserved / page;
            churn = strcmp(cfgs[k].kind, "vmm") == 0 && res.maps > peak_pages
                        ? res.maps - peak_pages : 0;
            if (k == 0) {
                dratio = res.reserved_over_live;
                dchurn = (double)churn * PAGE_COST / dur;
            }
            printf("| %s | %.2f s | %s | %.4f | %llu | %llu | %.1f %% | %.3f |\n", k ? "" : base,
                   dur, cfgs[k].label, res.reserved_over_live, (unsigned long long)res.maps,
                   (unsigned long long)churn, 100.0 * (double)churn * PAGE_COST / dur,
                   res.live_byte_seconds > 0 ? res.reserved_byte_seconds / res.live_byte_seconds
                                             : 0.0);
            if (res.failed)
                printf("|  |  | (%llu allocations refused) | | | | | |\n",
                       (unsigned long long)res.failed);
        }
        if (x > 0)
            printf("|  |  | PyTorch expandable | %.4f |  |  |  |  |\n", x);
        else
            printf("|  |  | PyTorch expandable | - |  |  |  |  |\n");
        printf("|  |  | **aim (default)** | %s %.4f | | | %s %.1f %% | |\n",
               dratio <= 1.05 && (x == 0 || dratio <= x + 5e-5) ? "met" : "MISSED", dratio,
               dchurn <= 0.05 ? "met" : "MISSED", 100 * dchurn);
        cp_trace_free(t);
    }
}

/* Real memory: the replay's own wall time per pool, beside the trace's. */
static void device_table(int n, char **paths)
{
    static const config cfgs[] = {
        {"vmm default (wall clock)", "vmm", 0, 0, 0},
        {"vmm default (trace clock)", "vmm", 0, 0, 1},
        {"vmm thr max", "vmm", 1, UINT64_MAX, 0},
        {"tlsf", "tlsf", 0, 0, 0},
    };
    int i;
    size_t k;
    printf("| trace | recorded duration | pool | replay wall time | of the duration | "
           "reserved/live | maps | unmaps |\n| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (i = 0; i < n; i++) {
        cp_trace *t = NULL;
        cp_trace_info in;
        const char *base = strrchr(paths[i], '/') ? strrchr(paths[i], '/') + 1 : paths[i];
        double dur;
        if (cp_trace_load(paths[i], &t) != CP_OK) {
            fprintf(stderr, "%s\n", cp_error_msg());
            continue;
        }
        cp_trace_info_get(t, &in);
        dur = in.duration_us * 1e-6;
        for (k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
            cp_replay_result res;
            uint64_t page;
            if (replay(t, &cfgs[k], &res, &page) != 0)
                continue;
            printf("| %s | %.3f s | %s | %.3f s | %.0f %% | %.4f | %llu | %llu |\n", k ? "" : base,
                   dur, cfgs[k].label, res.seconds, 100.0 * res.seconds / dur,
                   res.reserved_over_live, (unsigned long long)res.maps,
                   (unsigned long long)res.unmaps);
            fflush(stdout);
        }
        cp_trace_free(t);
    }
}

int main(int argc, char **argv)
{
    static char defaults[6][128];
    char *def[6];
    const char *up = getenv("CUPOLA_BENCH_UPSTREAM");
    const char *dir = getenv("CUPOLA_TRACES");
    int i;
    if (!dir || !*dir)
        dir = "examples/traces";
    for (i = 0; i < 6; i++) {
        snprintf(defaults[i], sizeof defaults[i], "%s/%s", dir, known[i].name);
        def[i] = defaults[i];
    }
    if (up && strcmp(up, "device") == 0) {
        if (cp_backend_select(NULL) != CP_OK) {
            fprintf(stderr, "%s\n", cp_error_msg());
            return 1;
        }
        upstream = CP_UP_DEVICE;
        printf("# device upstream, backend %s\n\n", cp_be->name);
        device_table(argc > 1 ? argc - 1 : 6, argc > 1 ? argv + 1 : def);
        return 0;
    }
    virtual_table(argc > 1 ? argc - 1 : 6, argc > 1 ? argv + 1 : def);
    return 0;
}
