/*
 * advise.h: many replays of one trace at once, for cupola.advise: each job
 * is a pool configuration (PyTorch's allocator under one setting, or one of
 * cupola's pools) replayed over the virtual upstream, optionally under a
 * limit, and optionally followed by a search for the least limit it runs
 * in.  The jobs run on a few threads of their own; each replay makes its
 * own pool and destroys it, and the trace is only read, so nothing is
 * shared between threads but the trace and a job counter.
 *
 * Under a limit, a replay stops at the first request the program needed
 * and the pool refused (CP_STOP_NEEDED, trace.h): an allocation, or an
 * `oom` entry the program did not survive.  The job keeps the pool's own
 * message for that refusal.
 *
 * The search for the least limit, by bisection to CP_ADVISE_STEP between
 * bounds a run gives: the main replay where it fits (else an unlimited
 * one).  Below its allocated bytes nothing fits (PyTorch's rounded sizes,
 * the same in every run that serves the same requests); at its peak
 * reserved the run is the one without a limit (no device request passed
 * it).  A run that fits under a limit L and reserves at most R < L runs the
 * same under R (each of its cudaMalloc calls stayed within R), so the
 * upper bound drops to R at once; not so with a garbage_collection_threshold
 * (it acts at a fraction of the limit), with expandable segments (a map is
 * checked against the limit with the request's whole size, though only the
 * pages missing are mapped) or for cupola's pools (a pool's `max` may change
 * what it keeps), which bisect on L itself.  Fitting is not proven
 * monotone in the limit (best fit and collection differ with it): the
 * figure is the least limit the bisection found that fits, not a proof that
 * none below does.
 *
 * Plain C: never includes lua.h.
 */
#ifndef CUPOLA_ADVISE_H
#define CUPOLA_ADVISE_H

#include <stddef.h>
#include <stdint.h>

#include "trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The search's resolution: PyTorch's segments and pages are 2 MiB. */
#define CP_ADVISE_STEP (UINT64_C(2) << 20)

typedef struct cp_advise_job {
    /* in */
    cp_pool_opts pool;      /* the pool every replay gets (upstream: virtual); its
                               strings must outlive the run */
    char kind_buf[32];      /* room for pool.kind where the caller parsed a spec */
    uint64_t limit;         /* the pool's max for the main replay (0: none) */
    int recorded;           /* addresses = "recorded" (kind torch over a snapshot) */
    int search;             /* search for the least limit */
    /* out */
    cp_status st;           /* CP_OK, or why a replay failed (msg) */
    char msg[512];
    cp_replay_result res;   /* the main replay */
    char oom[512];          /* the pool's message where it stopped (res.stopped) */
    int searched;           /* the search ran and found a limit that fits */
    uint64_t min_limit;     /* ... the least one (bytes) */
    unsigned steps;         /* replays the search made */
    double seconds;         /* wall time of the job's replays */
} cp_advise_job;

/* Runs the jobs on `threads` threads (0: one per online processor; never
 * more than jobs; fewer when the system refuses to make more, down to the
 * calling thread alone).  progress, when given, is called on the calling
 * thread about ten times a second with the jobs done and their count, and
 * at the end; it must not touch the jobs.  Every job runs: each job's st
 * says whether its replays did.  Returns CP_OK. */
cp_status cp_advise_run(const cp_trace *t, cp_advise_job *jobs, size_t n, unsigned threads,
                        void (*progress)(void *ud, size_t done, size_t total), void *ud);

/* Frees what the jobs' results hold (safe to call twice). */
void cp_advise_jobs_fini(cp_advise_job *jobs, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_ADVISE_H */
