/*
 * advise.c: cp_advise_run (advise.h), the replays of cupola.advise on
 * threads of their own.
 *
 * Each worker takes the next job from a shared counter and runs it to the
 * end (its main replay, then its search), so a job's replays are in order
 * and its figures do not depend on the number of threads.  The calling
 * thread waits on a condition variable and reports progress between.
 */
#include "advise.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "pool/bfc.h"
#include "pool/model.h"
#include "replay_time.h"

typedef struct run_state {
    const cp_trace *t;
    cp_advise_job *jobs;
    size_t n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t next;   /* the next job to take */
    size_t done;   /* jobs finished */
} run_state;

static void copy_msg(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", src && *src ? src : "");
}

/* One replay of job j's pool under `limit` (0: none).  stop: stop at the
 * first refusal the program needed.  *fits: it served everything needed. */
static cp_status replay_once(const cp_trace *t, cp_advise_job *j, uint64_t limit, int stop,
                             cp_replay_result *res, int *fits, char *oom, size_t oomlen)
{
    cp_pool_opts o = j->pool;
    cp_replay_opts ro;
    cp_resource *r = NULL;
    cp_status st;

    o.upstream = CP_UP_VIRTUAL;
    o.max = limit;
    if (o.kind && strcmp(o.kind, "bfc") == 0) {
        /* BFC's limit is its memory_limit: the job's own (a fraction's
         * limit), or the run's limit where that is less */
        cp_bfc_opts *bo = (cp_bfc_opts *)cp_pool_own(&o);
        if (limit && (!bo->memory_limit || limit < bo->memory_limit))
            bo->memory_limit = limit;
        o.max = 0;
    }
    memset(&ro, 0, sizeof ro);
    ro.repeat = 1;
    ro.synchronize = 1;
    ro.recorded_addresses = j->recorded;
    /* the pool is this replay's, over the virtual upstream, and nothing
     * runs on its streams: every event it records is complete */
    ro.idle_streams = 1;
    /* cupola's pools decide by time on the recording's clock, the
     * program's (vmm's decay): on the replay's own, a run of milliseconds,
     * their rows followed the host's speed.  The frameworks' models decide
     * nothing by time (their rows' trait, pool/model.h). */
    ro.trace_clock = !(cp_model_find(o.kind) &&
                       (cp_model_find(o.kind)->traits & CP_MODEL_OWN_CLOCK));
    /* and from its creation: a wall clock would have run from then to the
     * replay's start, a time that differs from run to run */
    if (ro.trace_clock)
        o.clock = CP_CLOCK_MANUAL;
    ro.stop_at_oom = stop ? CP_STOP_NEEDED : CP_STOP_NONE;
    memset(res, 0, sizeof *res);
    st = cp_pool_create(&r, &o);
    if (st != CP_OK)
        return st;
    if (oom)
        oom[0] = '\0';
    st = cp_trace_replay(t, r, &ro, res);
    if (st == CP_OK && oom && (res->stopped || res->failed))
        copy_msg(oom, oomlen, cp_error_msg()); /* the refusal's own message */
    cp_resource_destroy(r);
    if (st != CP_OK)
        return st;
    /* Needed: every allocation, and the `oom` entries no allocation follows
     * (a refusal of one of those stopped the replay when stop was set). */
    *fits = !res->stopped && res->failed == 0;
    return CP_OK;
}

/* The least limit job j fits in (advise.h has the method).  main_fits: the
 * main replay (under j->limit, or unlimited) served every request needed. */
static cp_status search(const cp_trace *t, cp_advise_job *j, int main_fits)
{
    cp_replay_result res;
    uint64_t lo = 0, hi;
    int fits = 0, exact_drop;
    cp_status st;
    int is_torch = j->pool.kind && strcmp(j->pool.kind, "torch") == 0;
    int exact = 0;

    if (is_torch) {
        /* cudaMalloc's check is the segment's own size against the limit;
         * collection by threshold acts at a fraction of the limit, and an
         * expandable segment's check counts its whole request where only
         * the pages missing are mapped: those two bisect on L itself */
        cp_torch_conf c;
        const cp_torch_opts *to = (const cp_torch_opts *)cp_pool_own_const(&j->pool);
        const char *conf = to->conf ? to->conf : "";
        if (cp_torch_conf_parse(conf, strlen(conf), &c) == CP_OK)
            exact = c.gc_threshold <= 0.0 && !c.expandable_segments;
    }
    exact_drop = exact;
    if (main_fits) {
        res = j->res; /* a run that fits: its figures bound the search */
        hi = j->limit && !exact_drop ? j->limit : res.peak_reserved;
    } else {
        /* unlimited, for the upper bound */
        st = replay_once(t, j, 0, 1, &res, &fits, NULL, 0);
        cp_replay_result_fini(&res);
        j->steps++;
        if (st != CP_OK)
            return st;
        if (!fits)
            return CP_OK; /* even unlimited it does not run: nothing to search */
        hi = res.peak_reserved;
        if (!exact_drop && hi) {
            /* cupola's pools and collection by threshold act otherwise
             * under a limit: find one that fits from the unlimited peak up
             * (a threshold collects at a fraction of the limit, so a limit
             * just at the peak may be too tight for it) */
            cp_replay_result r2;
            int tries;
            for (tries = 0; tries < 6; tries++) {
                st = replay_once(t, j, hi, 1, &r2, &fits, NULL, 0);
                cp_replay_result_fini(&r2);
                j->steps++;
                if (st != CP_OK)
                    return st;
                if (fits)
                    break;
                lo = hi; /* kept below as the lower bound */
                if (hi > UINT64_MAX / 2)
                    return CP_OK;
                hi += hi / 4;
                hi += CP_ADVISE_STEP - hi % CP_ADVISE_STEP;
            }
            if (!fits)
                return CP_OK;
        }
    }
    /* Below what the blocks themselves take nothing fits: the allocated
     * bytes (PyTorch's rounded sizes; the same in every run that serves the
     * same requests), or the live bytes where `oom` entries were served
     * (their blocks count in the allocated peak and are freed at once). */
    {
        uint64_t floor = res.oom_attempts == 0 && res.peak_allocated ? res.peak_allocated
                                                                     : res.peak_live;
        floor = floor ? floor - 1 : 0;
        if (floor > lo)
            lo = floor;
    }
    if (j->limit && !main_fits && j->limit > lo && j->limit < hi)
        lo = j->limit; /* it did not fit there */
    while (hi > lo + CP_ADVISE_STEP) {
        uint64_t mid = lo + (hi - lo) / 2;
        mid -= mid % CP_ADVISE_STEP;
        if (mid <= lo)
            mid = lo + 1;
        st = replay_once(t, j, mid, 1, &res, &fits, NULL, 0);
        cp_replay_result_fini(&res);
        j->steps++;
        if (st != CP_OK)
            return st;
        if (fits)
            hi = exact_drop && res.peak_reserved < mid && res.peak_reserved > lo ? res.peak_reserved
                                                                                 : mid;
        else
            lo = mid;
    }
    j->searched = 1;
    j->min_limit = hi;
    return CP_OK;
}

static void run_job(const cp_trace *t, cp_advise_job *j)
{
    double t0 = replay_now();
    int fits = 0;
    cp_status st = replay_once(t, j, j->limit, j->limit != 0, &j->res, &fits, j->oom,
                               sizeof j->oom);
    if (st == CP_OK && j->search)
        st = search(t, j, fits);
    j->st = st;
    if (st != CP_OK)
        copy_msg(j->msg, sizeof j->msg, cp_error_msg());
    j->seconds = replay_now() - t0;
}

static void *worker(void *arg)
{
    run_state *rs = (run_state *)arg;
    for (;;) {
        size_t k;
        pthread_mutex_lock(&rs->mu);
        k = rs->next < rs->n ? rs->next++ : SIZE_MAX;
        pthread_mutex_unlock(&rs->mu);
        if (k == SIZE_MAX)
            break;
        run_job(rs->t, &rs->jobs[k]);
        pthread_mutex_lock(&rs->mu);
        rs->done++;
        pthread_cond_signal(&rs->cv);
        pthread_mutex_unlock(&rs->mu);
    }
    return NULL;
}

cp_status cp_advise_run(const cp_trace *t, cp_advise_job *jobs, size_t n, unsigned threads,
                        void (*progress)(void *ud, size_t done, size_t total), void *ud)
{
    run_state rs;
    pthread_t tid[256];
    size_t nt = 0, i;
    cp_status st = CP_OK;

    for (i = 0; i < n; i++) {
        jobs[i].st = CP_OK;
        jobs[i].msg[0] = jobs[i].oom[0] = '\0';
        jobs[i].searched = 0;
        jobs[i].steps = 0;
        jobs[i].min_limit = 0;
        memset(&jobs[i].res, 0, sizeof jobs[i].res);
    }
    if (threads == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        threads = c > 0 ? (unsigned)c : 1;
    }
    if (threads > n)
        threads = (unsigned)n;
    if (threads > sizeof tid / sizeof tid[0])
        threads = sizeof tid / sizeof tid[0];
    memset(&rs, 0, sizeof rs);
    rs.t = t;
    rs.jobs = jobs;
    rs.n = n;
    pthread_mutex_init(&rs.mu, NULL);
    pthread_cond_init(&rs.cv, NULL);
    /* The caller's thread waits and reports progress; the workers are made
     * here (with one job, or none made, the jobs run on the caller's). */
    for (nt = 0; threads > 1 && nt < threads; nt++)
        if (pthread_create(&tid[nt], NULL, worker, &rs) != 0)
            break; /* the threads made run every job */
    if (nt == 0) {
        /* no threads: the jobs run here, one by one */
        for (i = 0; i < n; i++) {
            run_job(t, &jobs[i]);
            if (progress)
                progress(ud, i + 1, n);
        }
    } else {
        pthread_mutex_lock(&rs.mu);
        while (rs.done < n) {
            struct timespec ts;
            size_t done;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&rs.cv, &rs.mu, &ts);
            done = rs.done;
            if (progress) {
                pthread_mutex_unlock(&rs.mu);
                progress(ud, done, n);
                pthread_mutex_lock(&rs.mu);
            }
        }
        pthread_mutex_unlock(&rs.mu);
        for (i = 0; i < nt; i++)
            pthread_join(tid[i], NULL);
    }
    pthread_cond_destroy(&rs.cv);
    pthread_mutex_destroy(&rs.mu);
    return st;
}

void cp_advise_jobs_fini(cp_advise_job *jobs, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        cp_replay_result_fini(&jobs[i].res);
}
