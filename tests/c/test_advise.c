/*
 * test_advise.c: cp_advise_run (trace/advise.h), the replays of
 * cupola.advise on threads (TAP output).
 *
 *  - PyTorch's model and cupola's pools replayed on four threads give the
 *    same figures as on one (each replay has its own pool; the trace is only
 *    read), the recorded setting PyTorch's own figure;
 *  - the least limit a search finds is one the replay fits in, and the
 *    figures under a limit stop where the program would have raised;
 *  - a job whose replay fails says why, and the others still run.
 * The fake backend makes streams cheap and their events deterministic;
 * make test-tsan runs this under ThreadSanitizer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_backend.h"
#include "tap.h"
#include "trace/advise.h"
#include "trace/trace.h"

#define ok tap_ok
#define NJ 7

static void job_torch(cp_advise_job *j, const char *conf, uint64_t limit, int recorded, int search)
{
    memset(j, 0, sizeof *j);
    j->pool.kind = "torch";
    j->pool.upstream = CP_UP_VIRTUAL;
    j->pool.grow = 1;
    j->pool.alignment = 256;
    ((cp_torch_opts *)cp_pool_own(&j->pool))->conf = conf;
    j->limit = limit;
    j->recorded = recorded;
    j->search = search;
}

static void job_spec(cp_advise_job *j, const char *spec, uint64_t limit, int search)
{
    memset(j, 0, sizeof *j);
    if (cp_pool_spec_parse(spec, &j->pool, j->kind_buf, sizeof j->kind_buf) != CP_OK)
        abort();
    j->pool.kind = j->kind_buf;
    j->pool.upstream = CP_UP_VIRTUAL;
    j->limit = limit;
    j->search = search;
}

static void fill(cp_advise_job *j)
{
    job_torch(&j[0], "", 0, 1, 0);
    job_torch(&j[1], "expandable_segments:True", 0, 1, 1);
    job_torch(&j[2], "max_split_size_mb:64", 900u << 20, 1, 1);
    job_torch(&j[3], "garbage_collection_threshold:0.6", 900u << 20, 1, 1);
    job_spec(&j[4], "tlsf", 0, 1);
    job_spec(&j[5], "vmm", 0, 0);
    job_spec(&j[6], "caching,reuse=stream", 900u << 20, 1);
}

static const char *dir(void)
{
    const char *d = getenv("CUPOLA_TRACES");
    return d ? d : "examples/traces";
}

int main(void)
{
    char path[512];
    cp_trace *t = NULL, *csv = NULL;
    cp_advise_job a[NJ], b[NJ];
    size_t i;
    int same = 1;

    setvbuf(stdout, NULL, _IOLBF, 0);
    cp_be = &fake_backend;
    snprintf(path, sizeof path, "%s/torch/twostream.default.cpsnap.gz", dir());
    ok(cp_trace_load(path, &t) == CP_OK, "the two-stream snapshot loads");
    if (!t)
        return tap_finish();

    fill(a);
    fill(b);
    ok(cp_advise_run(t, a, NJ, 4, NULL, NULL) == CP_OK, "seven jobs on four threads");
    ok(cp_advise_run(t, b, NJ, 1, NULL, NULL) == CP_OK, "the same on one");
    for (i = 0; i < NJ; i++) {
        int eq;
        ok(a[i].st == CP_OK && b[i].st == CP_OK, "job %zu ran (%s)", i, a[i].msg);
        if (i == 5)
            continue; /* vmm's default policy decides by the wall clock: see its header */
        eq = a[i].res.peak_reserved == b[i].res.peak_reserved &&
                a[i].res.device_allocs == b[i].res.device_allocs &&
                a[i].res.retries == b[i].res.retries && a[i].res.failed == b[i].res.failed &&
                a[i].searched == b[i].searched && a[i].min_limit == b[i].min_limit &&
                a[i].steps == b[i].steps;
        if (!eq)
            printf("# job %zu: peak %llu / %llu, least limit %llu / %llu\n", i,
                   (unsigned long long)a[i].res.peak_reserved,
                   (unsigned long long)b[i].res.peak_reserved, (unsigned long long)a[i].min_limit,
                   (unsigned long long)b[i].min_limit);
        same &= eq;
    }
    ok(same, "four threads and one give the same figures, searches included (vmm aside)");
    ok(a[0].res.peak_reserved == 1035993088 && !a[0].res.torch.divergence.diverged,
       "the recorded setting: PyTorch's peak reserved, every device call PyTorch made");
    ok(a[1].searched && a[1].min_limit >= a[1].res.peak_allocated &&
           a[1].min_limit <= a[1].res.peak_reserved,
       "expandable segments: the least limit %llu lies between the allocated peak and the "
       "reserved one", (unsigned long long)a[1].min_limit);
    {
        /* the least limit found is one it runs in */
        cp_advise_job c[1];
        job_torch(&c[0], "expandable_segments:True", a[1].min_limit, 1, 0);
        ok(cp_advise_run(t, c, 1, 1, NULL, NULL) == CP_OK && c[0].st == CP_OK &&
               !c[0].res.stopped && c[0].res.failed == 0,
           "the replay fits under that limit");
        cp_advise_jobs_fini(c, 1);
    }
    ok(a[3].searched && a[3].min_limit > 0, "collection by threshold: a least limit found (%llu)",
       (unsigned long long)a[3].min_limit);
    ok(a[4].searched && a[4].min_limit <= a[4].res.peak_reserved && a[4].steps > 0,
       "a cupola pool searched too (%u replays)", a[4].steps);
    {
        /* under a tight limit: stopped where the program would have raised */
        cp_advise_job c[1];
        job_torch(&c[0], "", 600u << 20, 1, 0);
        ok(cp_advise_run(t, c, 1, 2, NULL, NULL) == CP_OK && c[0].st == CP_OK && c[0].res.stopped &&
               strstr(c[0].oom, "OutOfMemoryError") != NULL,
           "600 MiB: the replay stops with the model's own message: %s", c[0].oom);
        cp_advise_jobs_fini(c, 1);
    }
    cp_advise_jobs_fini(a, NJ);
    cp_advise_jobs_fini(b, NJ);

    /* recorded addresses on an RMM log fail; the job says why */
    snprintf(path, sizeof path, "%s/gpt2_train.csv.gz", dir());
    ok(cp_trace_load(path, &csv) == CP_OK, "an RMM log loads");
    if (csv) {
        cp_advise_job c[2];
        job_torch(&c[0], "", 0, 1, 0);
        job_torch(&c[1], "", 0, 0, 0);
        ok(cp_advise_run(csv, c, 2, 2, NULL, NULL) == CP_OK && c[0].st == CP_ERR_INVALID &&
               strstr(c[0].msg, "segment entries") && c[1].st == CP_OK && c[1].res.peak_reserved > 0,
           "a failed job says why (%s), the other ran", c[0].msg);
        cp_advise_jobs_fini(c, 2);
        cp_trace_free(csv);
    }
    cp_trace_free(t);
    return tap_finish();
}
