/*
 * host_sched.c: the host backend's scheduler (policy in host.c): work items,
 * the registry of streams, one worker thread per stream, enqueueing with the
 * legacy stream's dependencies, and the drain of every worker at exit.
 */
#include "host_impl.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

host_sched_state G = {.mu = PTHREAD_MUTEX_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static _Thread_local cp_stream *tl_worker;

cp_stream *cp_host_worker_stream(void)
{
    return tl_worker;
}

/* A stream's sticky fault, as an error (CP_OK when it has none). */
cp_status cp_host_fault_error_locked(const cp_stream *s)
{
    if (!s || !s->fault_set)
        return CP_OK;
    return cp_error_set(CP_ERR_BACKEND, "%s", s->fault);
}

void cp_host_sched_lock(void)
{
    pthread_mutex_lock(&G.mu);
}

void cp_host_sched_unlock(void)
{
    pthread_mutex_unlock(&G.mu);
}

/* A failed host task's message, returned (once) by the next synchronization
 * as a fault on the GPU would be. */
cp_status cp_host_take_kernel_error_locked(void)
{
    if (!G.kerr_set)
        return CP_OK;
    G.kerr_set = 0;
    return cp_error_set(CP_ERR_BACKEND, "cupolaErrorHostKernel: %s", G.kerr);
}

/* ---- work items --------------------------------------------------------- */

static hwork *work_new(void (*run)(hwork *))
{
    hwork *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->run = run;
    w->deps = w->inline_deps;
    w->capdeps = sizeof w->inline_deps / sizeof w->inline_deps[0];
    return w;
}

void cp_host_work_free(hwork *w)
{
    if (w->deps != w->inline_deps)
        free(w->deps);
    free(w);
}

int cp_host_work_add_dep(hwork *w, uint64_t sid, uint64_t ticket)
{
    if (ticket == 0)
        return 1;
    if (w->ndeps == w->capdeps) {
        size_t cap = (size_t)w->capdeps * 2;
        hdep *d = cap <= UINT32_MAX ? malloc(cap * sizeof *d) : NULL;
        if (!d)
            return 0;
        memcpy(d, w->deps, w->ndeps * sizeof *d);
        if (w->deps != w->inline_deps)
            free(w->deps);
        w->deps = d;
        w->capdeps = (uint32_t)cap;
    }
    w->deps[w->ndeps].sid = sid;
    w->deps[w->ndeps].ticket = ticket;
    w->ndeps++;
    return 1;
}

/* ---- the stream registry ------------------------------------------------ */

/* Drops the streams' index for good (the list is walked from then on): when
 * it cannot take a stream (out of memory), and at exit, since the module's
 * unmapping at the state's close would leave its table unreachable (a leak
 * under valgrind). */
static void byid_free_locked(void)
{
    if (G.byid_ok)
        cp_ptrmap_fini(&G.byid);
    G.byid_ok = 0;
    G.byid_failed = 1;
}

cp_stream *cp_host_find_locked(uint64_t sid)
{
    if (G.byid_ok)
        return (cp_stream *)cp_ptrmap_get(&G.byid, sid + 1);
    for (cp_stream *s = G.streams; s; s = s->next)
        if (s->id == sid)
            return s;
    return NULL;
}

void cp_host_registry_add_locked(cp_stream *s)
{
    s->prev = NULL;
    s->next = G.streams;
    if (G.streams)
        G.streams->prev = s;
    G.streams = s;
    if (s->blocking && !s->legacy)
        G.nblocking++;
    /* the index is made with the first stream, so it holds every one */
    if (!G.byid_ok && !G.byid_failed && cp_ptrmap_init(&G.byid, 64) == 0)
        G.byid_ok = 1;
    if (!G.byid_ok || cp_ptrmap_put(&G.byid, s->id + 1, s) != 0)
        byid_free_locked();
}

void cp_host_registry_remove_locked(cp_stream *s)
{
    if (G.byid_ok)
        cp_ptrmap_del(&G.byid, s->id + 1);
    if (s->blocking && !s->legacy)
        G.nblocking--;
    if (s->prev)
        s->prev->next = s->next;
    else
        G.streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->next = s->prev = NULL;
}

int cp_host_sched_done_locked(uint64_t sid, uint64_t ticket)
{
    cp_stream *s;
    if (ticket == 0)
        return 1;
    s = cp_host_find_locked(sid);
    return !s || s->completed >= ticket;
}

void cp_host_sched_wait_done_locked(uint64_t sid, uint64_t ticket)
{
    while (!cp_host_sched_done_locked(sid, ticket))
        pthread_cond_wait(&G.done, &G.mu);
}

static int deps_done_locked(const hwork *w)
{
    for (size_t i = 0; i < w->ndeps; i++)
        if (!cp_host_sched_done_locked(w->deps[i].sid, w->deps[i].ticket))
            return 0;
    return 1;
}

int cp_host_idle_locked(const cp_stream *s)
{
    return s->completed == s->enqueued;
}

/* ---- workers ------------------------------------------------------------ */

static void *worker_main(void *arg)
{
    cp_stream *s = arg;

    tl_worker = s;
    pthread_mutex_lock(&G.mu);
    G.starting--; /* the thread's start-up is over (fork_prepare) */
    pthread_cond_broadcast(&G.done);
    for (;;) {
        hwork *w;
        while ((!s->head || G.forking) && !s->destroyed && !s->stop)
            pthread_cond_wait(&s->work_cv, &G.mu);
        w = s->head;
        if (!w)
            break;
        while (!deps_done_locked(w) || G.forking)
            pthread_cond_wait(G.forking ? &s->work_cv : &G.done, &G.mu);
        G.running++;
        pthread_mutex_unlock(&G.mu);
        /* after a fault nothing more runs on the stream (its tasks are
         * cancelled by run_task); the items still complete in order */
        if (w->run && (!s->fault_set || w->always_run))
            w->run(w);
        pthread_mutex_lock(&G.mu);
        G.running--;
        if (w->done_locked)
            w->done_locked(w);
        s->head = w->next;
        if (!s->head)
            s->tail = NULL;
        s->completed = w->ticket;
        pthread_cond_broadcast(&G.done);
        cp_host_work_free(w);
    }
    G.nworkers--;
    if (s->destroyed) {
        cp_host_registry_remove_locked(s);
        s->next = G.zombies;
        G.zombies = s;
    }
    pthread_cond_broadcast(&G.done);
    pthread_mutex_unlock(&G.mu);
    return NULL;
}

/* fork(): the child has only the forking thread, and inherits every lock
 * as it was.  A worker (or a kernel thread serving it) stopped by the fork
 * in the middle of an item may hold any lock: the scheduler's, the memory
 * registry's, a pool's, the C library's or a sanitizer's allocator (GCC
 * 12's AddressSanitizer does not take its own around fork), and the child
 * then waits for ever the first time it needs that lock, at the latest at
 * exit (LeakSanitizer's check locks the allocator): the child of a
 * `make test-asan` run printed its last line and never exited.  So before
 * the fork no worker takes a new item and the running ones finish (the
 * kernel threads only run blocks for a running item); the scheduler's lock
 * is then held across the fork, and released in both processes (cp_forked
 * then refuses every entry point in the child; backend.h).  Threads starting
 * or ending hold the allocator's locks too (a new thread fills its caches,
 * an exiting one gives them back): workers just created are waited for
 * until they run, workers that exited are joined, and the kernel threads
 * are waited for by the launch that starts them (kernel/host_module.c).  A
 * running item that would not finish (a user kernel that loops) is waited
 * for at most FORK_WAIT_S seconds, then the fork goes ahead as before.
 * Registered when the first worker starts. */
#define FORK_WAIT_S 10

static int time_left(const struct timespec *until)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return now.tv_sec < until->tv_sec || (now.tv_sec == until->tv_sec && now.tv_nsec < until->tv_nsec);
}

static void fork_prepare(void)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += FORK_WAIT_S;
    for (;;) {
        /* workers of destroyed streams that exited: joined, so their exit
         * (which gives their allocator caches back) is over */
        cp_host_reap_zombies();
        pthread_mutex_lock(&G.mu);
        G.forking = 1;
        while (G.running > 0 || G.starting > 0)
            if (pthread_cond_timedwait(&G.done, &G.mu, &until) != 0)
                break;
        /* a worker that exits adds itself to the zombies under mu: with mu
         * held and none there, no worker is between its last unlock and
         * its end */
        if (!G.zombies || !time_left(&until))
            return;
        pthread_mutex_unlock(&G.mu);
    }
}

static void fork_release_parent(void)
{
    G.forking = 0;
    for (cp_stream *s = G.streams; s; s = s->next)
        pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&G.mu);
}

static void fork_release_child(void)
{
    G.forking = 0;
    pthread_mutex_unlock(&G.mu);
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_register(void)
{
    pthread_atfork(fork_prepare, fork_release_parent, fork_release_child);
}

cp_status cp_host_start_worker_locked(cp_stream *s)
{
    int rc;
    pthread_once(&fork_once, fork_register);
    rc = pthread_create(&s->thread, NULL, worker_main, s);
    if (rc != 0)
        return cp_error_set(CP_ERR_BACKEND, "host backend: cannot start a stream worker: %s",
                            strerror(rc));
    G.nworkers++;
    G.starting++;
    G.used = 1;
    return CP_OK;
}

void cp_host_stream_free(cp_stream *s)
{
    pthread_cond_destroy(&s->work_cv);
    free(s->known);
    free(s);
}

/* Joins the workers of destroyed streams that have drained; never called
 * with the lock held, since a join may wait for a worker's last unlock. */
void cp_host_reap_zombies(void)
{
    cp_stream *z;
    pthread_mutex_lock(&G.mu);
    z = G.zombies;
    G.zombies = NULL;
    pthread_mutex_unlock(&G.mu);
    while (z) {
        cp_stream *next = z->next;
        pthread_join(z->thread, NULL);
        cp_host_stream_free(z);
        z = next;
    }
}

/* The legacy stream, its worker started on first use. */
static cp_stream *legacy_locked(void)
{
    if (!G.legacy_started) {
        if (G.shutdown) {
            cp_error_set(CP_ERR_BACKEND, "host backend: the process is shutting down");
            return NULL;
        }
        G.legacy.id = 0;
        G.legacy.device = -1;
        G.legacy.legacy = 1;
        G.legacy.blocking = 1;
        pthread_cond_init(&G.legacy.work_cv, NULL);
        if (cp_host_start_worker_locked(&G.legacy) != CP_OK) {
            pthread_cond_destroy(&G.legacy.work_cv);
            return NULL;
        }
        cp_host_registry_add_locked(&G.legacy);
        G.legacy_started = 1;
    }
    return &G.legacy;
}

cp_stream *cp_host_resolve_locked(cp_stream *s)
{
    return s ? s : legacy_locked();
}

/* Appends w to s, adding the legacy-stream dependencies; *ticket (optional)
 * gets its place.  Takes w: frees it on error, or at once when it is an
 * empty marker with nothing to wait for on an idle stream, which is then
 * complete on the spot (cheap frees for allocation-heavy replays). */
cp_status cp_host_enqueue_locked(cp_stream *s, hwork *w, uint64_t *ticket)
{
    if (s->fault_set) {
        cp_host_work_free(w);
        return cp_host_fault_error_locked(s);
    }
    if (s->stop || s->joined || s->destroyed) {
        cp_host_work_free(w);
        return cp_error_set(CP_ERR_BACKEND, s->destroyed
                                                ? "host backend: stream used after destroy"
                                                : "host backend: the process is shutting down");
    }
    if (s->legacy) {
        for (cp_stream *o = G.nblocking ? G.streams : NULL; o; o = o->next)
            if (o != s && o->blocking && !cp_host_idle_locked(o) &&
                !cp_host_work_add_dep(w, o->id, o->enqueued))
                goto oom;
    } else if (s->blocking && G.legacy_started && !cp_host_idle_locked(&G.legacy)) {
        if (!cp_host_work_add_dep(w, G.legacy.id, G.legacy.enqueued))
            goto oom;
    }
    w->ticket = ++s->enqueued;
    if (ticket)
        *ticket = w->ticket;
    if (!w->run && w->ndeps == 0 && !s->head) {
        /* Nothing to run and nothing before it (an event's marker, a wait
         * already satisfied, on an idle stream): complete now.  A worker
         * would do the same at once; doing it here keeps the answer of a
         * query that follows from depending on when the worker wakes (a
         * replay's cross-stream reuse was decided by the host's load). */
        if (w->done_locked)
            w->done_locked(w);
        s->completed = w->ticket;
        cp_host_work_free(w);
        return CP_OK;
    }
    w->next = NULL;
    if (s->tail)
        s->tail->next = w;
    else
        s->head = w;
    s->tail = w;
    pthread_cond_signal(&s->work_cv);
    return CP_OK;
oom:
    cp_host_work_free(w);
    return cp_error_set(CP_ERR_OOM, "host backend: out of memory for a work item");
}

/* Enqueues w on s (NULL: legacy); sid and ticket (optional) get its place. */
cp_status cp_host_enqueue(cp_stream *s, hwork *w, uint64_t *sid, uint64_t *ticket)
{
    cp_status st;
    cp_stream *hs;
    pthread_mutex_lock(&G.mu);
    hs = cp_host_resolve_locked(s);
    if (!hs) {
        cp_host_work_free(w);
        pthread_mutex_unlock(&G.mu);
        return CP_ERR_BACKEND;
    }
    st = cp_host_enqueue_locked(hs, w, ticket);
    if (st == CP_OK && sid)
        *sid = hs->id;
    pthread_mutex_unlock(&G.mu);
    return st;
}

/* Enqueues w and waits until it has run: the synchronous kernels and copies. */
cp_status cp_host_enqueue_and_wait(cp_stream *s, hwork *w)
{
    uint64_t sid = 0, ticket = 0;
    cp_status st = cp_host_enqueue(s, w, &sid, &ticket);
    if (st != CP_OK)
        return st;
    pthread_mutex_lock(&G.mu);
    cp_host_sched_wait_done_locked(sid, ticket);
    /* a fault before the item on its stream: it did not run */
    st = cp_host_fault_error_locked(cp_host_find_locked(sid));
    pthread_mutex_unlock(&G.mu);
    return st;
}

hwork *cp_host_work_or_oom(void (*run)(hwork *))
{
    hwork *w = work_new(run);
    if (!w)
        cp_error_set(CP_ERR_OOM, "host backend: out of memory for a work item");
    return w;
}

/* Remembers that work enqueued on s from now on follows (sid, ticket). */
void cp_host_known_note_locked(cp_stream *s, uint64_t sid, uint64_t ticket)
{
    for (size_t i = 0; i < s->nknown; i++)
        if (s->known[i].sid == sid) {
            if (s->known[i].ticket < ticket)
                s->known[i].ticket = ticket;
            return;
        }
    if (s->nknown == s->capknown) {
        size_t cap = s->capknown ? s->capknown * 2 : 4;
        hdep *k = realloc(s->known, cap * sizeof *k);
        if (!k)
            return; /* only an optimisation for pool reuse is lost */
        s->known = k;
        s->capknown = cap;
    }
    s->known[s->nknown].sid = sid;
    s->known[s->nknown].ticket = ticket;
    s->nknown++;
}

uint64_t cp_host_sched_known_locked(cp_stream *s, uint64_t sid)
{
    const cp_stream *hs = s ? s : (G.legacy_started ? &G.legacy : NULL);
    if (!hs)
        return 0;
    for (size_t i = 0; i < hs->nknown; i++)
        if (hs->known[i].sid == sid)
            return hs->known[i].ticket;
    return 0;
}

cp_status cp_host_sched_enqueue_wait_locked(cp_stream *s, uint64_t sid, uint64_t ticket)
{
    cp_stream *hs = cp_host_resolve_locked(s);
    hwork *w;
    if (!hs)
        return CP_ERR_BACKEND;
    if (hs->id == sid || cp_host_sched_done_locked(sid, ticket))
        return CP_OK;
    w = cp_host_work_or_oom(NULL);
    if (!w)
        return CP_ERR_OOM;
    if (!cp_host_work_add_dep(w, sid, ticket)) {
        cp_host_work_free(w);
        return cp_error_set(CP_ERR_OOM, "host backend: out of memory for a work item");
    }
    cp_host_known_note_locked(hs, sid, ticket);
    return cp_host_enqueue_locked(hs, w, NULL);
}

cp_status cp_host_sched_enqueue_mark_locked(cp_stream *s, uint64_t *sid, uint64_t *ticket)
{
    cp_stream *hs = cp_host_resolve_locked(s);
    hwork *w;
    cp_status st;
    if (!hs)
        return CP_ERR_BACKEND;
    w = cp_host_work_or_oom(NULL);
    if (!w)
        return CP_ERR_OOM;
    st = cp_host_enqueue_locked(hs, w, ticket);
    if (st == CP_OK)
        *sid = hs->id;
    return st;
}

int cp_host_sched_too_big(size_t bytes)
{
    /* RAM + swap, read once: a syscall per allocation would show in replays */
    static _Atomic unsigned long long limit;
    unsigned long long lim = atomic_load(&limit);
    if (bytes > SIZE_MAX - HOST_ALIGN)
        return 1;
    if (lim == 0) {
        struct sysinfo si;
        if (sysinfo(&si) != 0)
            return 0;
        lim = ((unsigned long long)si.totalram + si.totalswap) * (si.mem_unit ? si.mem_unit : 1);
        atomic_store(&limit, lim);
    }
    return (unsigned long long)bytes > lim;
}

/* ---- process exit --------------------------------------------------------- */

/* Drains and joins every worker: at exit the threads must not outlive the
 * module's code (dlclose unmaps it).  Streams the owner never destroyed keep
 * their struct, marked joined, so a late stream_destroy is still safe. */
__attribute__((destructor)) static void host_shutdown(void)
{
    cp_stream *live = NULL;
    if (cp_forked)
        return; /* a child of fork(): the workers are the parent's */
    pthread_mutex_lock(&G.mu);
    if (!G.used) {
        G.shutdown = 1;
        byid_free_locked();
        pthread_mutex_unlock(&G.mu);
        return;
    }
    G.shutdown = 1;
    for (cp_stream *s = G.streams; s; s = s->next) {
        s->stop = 1;
        pthread_cond_signal(&s->work_cv);
    }
    while (G.nworkers > 0)
        pthread_cond_wait(&G.done, &G.mu);
    for (cp_stream *s = G.streams; s; s = s->next)
        s->joined = 1;
    live = G.streams;
    pthread_mutex_unlock(&G.mu);
    cp_host_reap_zombies();
    /* no worker runs now and none can start: join without the lock */
    for (cp_stream *s = live; s; s = s->next)
        pthread_join(s->thread, NULL);
    pthread_mutex_lock(&G.mu);
    if (G.legacy_started) {
        cp_host_registry_remove_locked(&G.legacy);
        free(G.legacy.known);
        G.legacy.known = NULL;
        G.legacy.nknown = G.legacy.capknown = 0;
    }
    byid_free_locked();
    pthread_mutex_unlock(&G.mu);
    cp_host_pool_shutdown();
}
