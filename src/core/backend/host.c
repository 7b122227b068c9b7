/*
 * backend/host.c: the device emulated on the CPU (cp_backend_host).
 *
 * Every script, example and spec runs on a machine without a GPU with the
 * semantics of CUDA; the work is really asynchronous, timings are the host's.
 *
 * Policy, exactly:
 *  - Memory comes from the OS (posix_memalign, 256-byte aligned, sizes
 *    rounded up to 256).  Device, managed and pinned memory are all host
 *    memory.  A request larger than RAM + swap is refused with CP_ERR_OOM
 *    rather than trusted to overcommit.  mem_alloc and mem_free of any kind
 *    first synchronize the device, as cudaMalloc/cudaFree do implicitly (for
 *    mem_free that is also what keeps queued work off freed memory).
 *  - Streams: each stream is an in-order FIFO of work items run by its own
 *    worker thread.  Item k enqueued on a stream has ticket k; the stream's
 *    `completed` is the ticket of its last finished item.  An item may carry
 *    dependencies (sid, ticket) that its worker waits for before running it.
 *  - The legacy default stream (NULL) is a stream with its own worker and
 *    sid 0.  As in CUDA: an item enqueued on it depends on everything already
 *    enqueued on every blocking stream, and an item enqueued on a blocking
 *    stream depends on everything already enqueued on the legacy stream;
 *    non-blocking streams never wait for it.  Synchronizing or querying the
 *    legacy stream covers the blocking streams' work enqueued before the call.
 *    Dependencies are captured at enqueue time, so they never form a cycle.
 *  - stream_destroy returns at once; the queued work still runs, then the
 *    worker exits and is joined (and the stream freed) by the next
 *    stream_create, stream_destroy or device_synchronize, or at exit.
 *  - Events: record enqueues a marker; when the marker runs it stores the
 *    host's CLOCK_MONOTONIC time.  query/synchronize/stream_wait_event refer
 *    to the most recent record at the time of the call; an event never
 *    recorded is complete and waiting on it is a no-op; elapsed needs both
 *    events created with timing, recorded and complete.
 *  - Copies: memcpy_async enqueues the copy and waits for it, because the
 *    binding passes pageable memory (Lua strings), for which CUDA's copy is
 *    synchronous with the host; the copy is still ordered on the stream.
 *    memset_async is asynchronous.
 *  - Kernels run on the worker with the bodies of cuda/kernel_body.h; launch
 *    shapes are validated as CUDA would (block 1..1024, grid 1..2^31-1, 0 =
 *    choose) and otherwise ignored.  spin sleeps the worker.  Checksums sum
 *    in element order (integers: wrapping 64-bit, i32 sign-extended; floats:
 *    in double), so float checksums agree with the CUDA backend only up to
 *    rounding, since the GPU sums in another order.
 *  - Priorities: the range reported is CUDA's 0 (least) .. -5 (greatest);
 *    one outside it is CP_ERR_INVALID, one inside is accepted and ignored.
 *  - Synchronization points (device, stream and event synchronize) let the
 *    native pools (host_mempool.c) return memory above their release threshold.
 *  - Thread safety: one global mutex protects every stream, event and pool;
 *    workers hold it only to take and retire items, never while running one.
 *  - Process exit (or dlclose of the module): a destructor drains and joins
 *    every worker, so no thread runs the module's code once it is unmapped,
 *    and frees what the backend itself owns.
 *  - Several devices: CUPOLA_HOST_DEVICES=N (1..64, default 1; anything
 *    else counts as 1) emulated devices share the CPU and the workers.  Each
 *    has its own memory account (device memory of mem_alloc and the chunks of
 *    its pools; with N > 1 each device gets 1/N of the host's memory and
 *    refuses more as out of memory), its own default and current pool, and
 *    its streams.  The legacy stream is shared by all of them (CUDA has one
 *    per device; the emulation orders more, never less).  The current device
 *    is per thread, as in CUDA.  Every device can access every other one
 *    (can_access_peer is 1 for i != j); enabling is recorded.  Synchronizing
 *    one device waits for all of them.
 *  - A host task that returns 2 (a user kernel's hardware fault, see
 *    kernel/host_fault.h) leaves its stream in error, as a fault leaves a
 *    CUDA context: the stream's synchronizations and events recorded on it
 *    return the message, new work on it is refused with it, queued work is
 *    skipped (queued tasks are cancelled), and the first device
 *    synchronization after the fault returns it once.  Other streams live on.
 *  - Errors: a refusal that stands for a CUDA error (an invalid value,
 *    handle or device ordinal, an event not ready, a kernel's illegal
 *    address) carries the CUDA error name and text, as the CUDA backend's
 *    does, with the host's explanation after it (cp_cuda_error, backend.h).
 *    Misuse of the C interface (NULL arguments), out of memory and the
 *    host's own conditions (the process shutting down, OS failures) do not.
 *  - fork(): the scheduler's lock is taken around fork (pthread_atfork) so
 *    the child never inherits it held; in the child every entry point fails
 *    at once (CP_GUARD, backend.h) and the exit destructors do nothing.
 *  - mem_alloc memory is mapped from the OS (mmap, whole pages), so that the
 *    legacy IPC path can later turn it into a shared file mapping at the same
 *    address (ipc_get_handle: the bytes are copied into a memfd which is
 *    mapped over them, MAP_FIXED); the fd then travels to another process.
 */
#include "backend.h"
#include "host_devpool.h"
#include "host_mempool.h"
#include "kernel_body.h"

#include "ptrmap.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#define HOST_ALIGN 256u
/* CUDA's range on current GPUs (lower is higher priority), so scripts that
 * set priorities run unchanged; the host ignores them. */
#define HOST_PRIO_LEAST 0
#define HOST_PRIO_GREATEST (-5)

typedef struct hdep {
    uint64_t sid, ticket;
} hdep;

typedef struct hwork hwork;
struct hwork {
    hwork *next;
    void (*run)(hwork *w);         /* the work itself, run without the lock */
    void (*done_locked)(hwork *w); /* bookkeeping under the lock, before completion */
    uint64_t ticket;
    hdep inline_deps[2];
    hdep *deps;
    size_t ndeps, capdeps;
    union {
        struct { void *dst; const void *src; size_t n; } copy;
        struct { void *dst; int byte; size_t n; } set;
        struct { void *p; size_t count; cp_dtype t; cp_scalar v; } fill;
        struct { float *p; size_t count; } sqrt;
        struct { const void *p; size_t bytes; cp_dtype t; cp_scalar *out; } sum;
        struct { uint64_t us; } spin;
        struct { void *p; size_t bytes; uint64_t seed; uint64_t *bad; } pat;
        struct { cp_event *e; uint64_t gen; } mark;
        struct { int (*fn)(void *, char *, size_t); void *data; } task;
        struct { void (*fn)(void *); void *arg; } call; /* device pools (host_devpool.c) */
    } u;
};

struct cp_stream {
    uint64_t id; /* 0 for the legacy stream */
    int device;  /* -1 for the legacy stream: whichever is current */
    int blocking;
    int legacy;
    hwork *head, *tail;
    uint64_t enqueued, completed;
    pthread_t thread;
    pthread_cond_t work_cv; /* signalled when an item is queued or the worker must exit */
    int destroyed;          /* the owner gave it up: exit when drained, become a zombie */
    int stop;               /* process shutdown: exit when drained, stay registered */
    int joined;             /* worker joined at shutdown; only the struct remains */
    cp_stream *next, *prev; /* registry (or zombie list through next) */
    hdep *known;            /* per other stream: highest ticket this one has waited for */
    size_t nknown, capknown;
    /* A user kernel faulted on this stream (host_task returned 2): like a
     * CUDA context after a fault, the stream stays in error.  Set by its
     * worker under G.mu; read by the worker without it. */
    int fault_set;
    int fault_told; /* a device synchronization has reported it */
    char fault[512];
};

struct cp_event {
    int timing;
    int recorded;
    uint64_t sid, ticket; /* the most recent record */
    uint64_t gen;         /* bumped by each record; a marker of an older one stores nothing */
    struct timespec at;   /* when the marker of generation gen ran */
    int refs;             /* the owner and each pending marker */
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t done;   /* broadcast when any item completes or a worker exits */
    cp_stream *streams;    /* every stream whose worker has not exited, legacy included */
    cp_stream *zombies;    /* destroyed streams whose worker exited, waiting to be joined */
    cp_stream legacy;
    int legacy_started;
    int nworkers;
    int used;     /* any stream was ever started: the destructor has work */
    int kerr_set; /* a host task (user kernel) failed: the next sync reports it */
    char kerr[512];
    int shutdown; /* the destructor ran: no new workers */
    /* The registry by id (key id + 1), so that finding a stream
     * (every event query and synchronization does) does not walk every
     * stream: a replay of a trace of 20,000 streams spent a third of its
     * loop in that walk.  byid_ok is 0 until the map exists and for good
     * once an insertion failed (out of memory): the walk is then used. */
    cp_ptrmap byid;
    int byid_ok, byid_failed;
    /* Registered blocking streams other than the legacy one: work on the
     * legacy stream looks for them only when there are some (it walked
     * every stream for each item). */
    int nblocking;
} G = {.mu = PTHREAD_MUTEX_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static _Atomic uint64_t next_sid = 1;

/* The stream whose worker the calling thread is (NULL elsewhere). */
static _Thread_local cp_stream *tl_worker;

/* A stream's sticky fault, as an error (CP_OK when it has none). */
static cp_status fault_error_locked(const cp_stream *s)
{
    if (!s || !s->fault_set)
        return CP_OK;
    return cp_error_set(CP_ERR_BACKEND, "%s", s->fault);
}

static void sched_lock(void)
{
    pthread_mutex_lock(&G.mu);
}

static void sched_unlock(void)
{
    pthread_mutex_unlock(&G.mu);
}

/* A failed host task's message, returned (once) by the next synchronization
 * as a fault on the GPU would be. */
static cp_status take_kernel_error_locked(void)
{
    if (!G.kerr_set)
        return CP_OK;
    G.kerr_set = 0;
    return cp_error_set(CP_ERR_BACKEND, "cupolaErrorHostKernel: %s", G.kerr);
}

/* ---- devices ---------------------------------------------------------------- */

static _Thread_local int tl_device; /* the calling thread's current device */
static pthread_once_t devices_once = PTHREAD_ONCE_INIT;

static void devices_init(void)
{
    const char *e = getenv("CUPOLA_HOST_DEVICES");
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    size_t ram = (pages > 0 && psize > 0) ? (size_t)pages * (size_t)psize : 0;
    int n = 1;
    if (e && *e) {
        char *end = NULL;
        long v = strtol(e, &end, 10);
        if (end && *end == '\0' && v >= 1 && v <= CP_MAX_DEVICES)
            n = (int)v;
    }
    cp_host_devices_init(n, ram / (size_t)n);
}

static int h_device_count(void)
{
    pthread_once(&devices_once, devices_init);
    return cp_host_device_count();
}

static cp_status check_device(int dev)
{
    int n = h_device_count();
    if (dev < 0 || dev >= n)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_DEVICE,
                             "device %d does not exist (the host backend "
                             "emulates %d; CUPOLA_HOST_DEVICES sets how many)",
                             dev, n);
    return CP_OK;
}

static cp_status h_set_device(int dev)
{
    CP_GUARD();
    cp_status st = check_device(dev);
    if (st == CP_OK)
        tl_device = dev;
    return st;
}

static int h_get_device(void)
{
    return tl_device;
}

static int h_stream_device(const cp_stream *s)
{
    return s && s->device >= 0 ? s->device : tl_device;
}

static cp_stream *h_stream_legacy(int dev)
{
    (void)dev; /* one legacy stream serves every emulated device */
    return NULL;
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

static void work_free(hwork *w)
{
    if (w->deps != w->inline_deps)
        free(w->deps);
    free(w);
}

static int work_add_dep(hwork *w, uint64_t sid, uint64_t ticket)
{
    if (ticket == 0)
        return 1;
    if (w->ndeps == w->capdeps) {
        size_t cap = w->capdeps * 2;
        hdep *d = malloc(cap * sizeof *d);
        if (!d)
            return 0;
        memcpy(d, w->deps, w->ndeps * sizeof *d);
        if (w->deps != w->inline_deps)
            free(w->deps);
        w->deps = d;
        w->capdeps = cap;
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

static cp_stream *find_locked(uint64_t sid)
{
    if (G.byid_ok)
        return (cp_stream *)cp_ptrmap_get(&G.byid, sid + 1);
    for (cp_stream *s = G.streams; s; s = s->next)
        if (s->id == sid)
            return s;
    return NULL;
}

static void registry_add_locked(cp_stream *s)
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

static void registry_remove_locked(cp_stream *s)
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

static int sched_done_locked(uint64_t sid, uint64_t ticket)
{
    cp_stream *s;
    if (ticket == 0)
        return 1;
    s = find_locked(sid);
    return !s || s->completed >= ticket;
}

static void sched_wait_done_locked(uint64_t sid, uint64_t ticket)
{
    while (!sched_done_locked(sid, ticket))
        pthread_cond_wait(&G.done, &G.mu);
}

static int deps_done_locked(const hwork *w)
{
    for (size_t i = 0; i < w->ndeps; i++)
        if (!sched_done_locked(w->deps[i].sid, w->deps[i].ticket))
            return 0;
    return 1;
}

static int idle_locked(const cp_stream *s)
{
    return s->completed == s->enqueued;
}

/* ---- workers ------------------------------------------------------------ */

static void run_task(hwork *w);

static void *worker_main(void *arg)
{
    cp_stream *s = arg;

    tl_worker = s;
    pthread_mutex_lock(&G.mu);
    for (;;) {
        hwork *w;
        while (!s->head && !s->destroyed && !s->stop)
            pthread_cond_wait(&s->work_cv, &G.mu);
        w = s->head;
        if (!w)
            break;
        while (!deps_done_locked(w))
            pthread_cond_wait(&G.done, &G.mu);
        pthread_mutex_unlock(&G.mu);
        /* after a fault nothing more runs on the stream (its tasks are
         * cancelled by run_task); the items still complete in order */
        if (w->run && (!s->fault_set || w->run == run_task))
            w->run(w);
        pthread_mutex_lock(&G.mu);
        if (w->done_locked)
            w->done_locked(w);
        s->head = w->next;
        if (!s->head)
            s->tail = NULL;
        s->completed = w->ticket;
        pthread_cond_broadcast(&G.done);
        work_free(w);
    }
    G.nworkers--;
    if (s->destroyed) {
        registry_remove_locked(s);
        s->next = G.zombies;
        G.zombies = s;
    }
    pthread_cond_broadcast(&G.done);
    pthread_mutex_unlock(&G.mu);
    return NULL;
}

/* fork(): the child must not inherit the scheduler's lock held by a worker
 * (cp_forked then refuses every entry point; backend.h).  Registered when the
 * first worker starts. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&G.mu);
}

static void fork_release(void)
{
    pthread_mutex_unlock(&G.mu);
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_register(void)
{
    pthread_atfork(fork_prepare, fork_release, fork_release);
}

static cp_status start_worker_locked(cp_stream *s)
{
    int rc;
    pthread_once(&fork_once, fork_register);
    rc = pthread_create(&s->thread, NULL, worker_main, s);
    if (rc != 0)
        return cp_error_set(CP_ERR_BACKEND, "host backend: cannot start a stream worker: %s",
                            strerror(rc));
    G.nworkers++;
    G.used = 1;
    return CP_OK;
}

static void stream_free(cp_stream *s)
{
    pthread_cond_destroy(&s->work_cv);
    free(s->known);
    free(s);
}

/* Joins the workers of destroyed streams that have drained; never called
 * with the lock held, since a join may wait for a worker's last unlock. */
static void reap_zombies(void)
{
    cp_stream *z;
    pthread_mutex_lock(&G.mu);
    z = G.zombies;
    G.zombies = NULL;
    pthread_mutex_unlock(&G.mu);
    while (z) {
        cp_stream *next = z->next;
        pthread_join(z->thread, NULL);
        stream_free(z);
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
        if (start_worker_locked(&G.legacy) != CP_OK) {
            pthread_cond_destroy(&G.legacy.work_cv);
            return NULL;
        }
        registry_add_locked(&G.legacy);
        G.legacy_started = 1;
    }
    return &G.legacy;
}

static cp_stream *resolve_locked(cp_stream *s)
{
    return s ? s : legacy_locked();
}

/* Appends w to s, adding the legacy-stream dependencies; *ticket (optional)
 * gets its place.  Takes w: frees it on error, or at once when it is an
 * empty marker with nothing to wait for on an idle stream, which is then
 * complete on the spot (cheap frees for allocation-heavy replays). */
static cp_status enqueue_locked(cp_stream *s, hwork *w, uint64_t *ticket)
{
    if (s->fault_set) {
        work_free(w);
        return fault_error_locked(s);
    }
    if (s->stop || s->joined || s->destroyed) {
        work_free(w);
        return cp_error_set(CP_ERR_BACKEND, s->destroyed
                                                ? "host backend: stream used after destroy"
                                                : "host backend: the process is shutting down");
    }
    if (s->legacy) {
        for (cp_stream *o = G.nblocking ? G.streams : NULL; o; o = o->next)
            if (o != s && o->blocking && !idle_locked(o) && !work_add_dep(w, o->id, o->enqueued))
                goto oom;
    } else if (s->blocking && G.legacy_started && !idle_locked(&G.legacy)) {
        if (!work_add_dep(w, G.legacy.id, G.legacy.enqueued))
            goto oom;
    }
    w->ticket = ++s->enqueued;
    if (ticket)
        *ticket = w->ticket;
    if (!w->run && !w->done_locked && w->ndeps == 0 && !s->head) {
        s->completed = w->ticket;
        work_free(w);
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
    work_free(w);
    return cp_error_set(CP_ERR_OOM, "host backend: out of memory for a work item");
}

/* Enqueues w on s (NULL: legacy); sid and ticket (optional) get its place. */
static cp_status enqueue(cp_stream *s, hwork *w, uint64_t *sid, uint64_t *ticket)
{
    cp_status st;
    cp_stream *hs;
    pthread_mutex_lock(&G.mu);
    hs = resolve_locked(s);
    if (!hs) {
        work_free(w);
        pthread_mutex_unlock(&G.mu);
        return CP_ERR_BACKEND;
    }
    st = enqueue_locked(hs, w, ticket);
    if (st == CP_OK && sid)
        *sid = hs->id;
    pthread_mutex_unlock(&G.mu);
    return st;
}

/* Enqueues w and waits until it has run: the synchronous kernels and copies. */
static cp_status enqueue_and_wait(cp_stream *s, hwork *w)
{
    uint64_t sid = 0, ticket = 0;
    cp_status st = enqueue(s, w, &sid, &ticket);
    if (st != CP_OK)
        return st;
    pthread_mutex_lock(&G.mu);
    sched_wait_done_locked(sid, ticket);
    /* a fault before the item on its stream: it did not run */
    st = fault_error_locked(find_locked(sid));
    pthread_mutex_unlock(&G.mu);
    return st;
}

static hwork *work_or_oom(void (*run)(hwork *))
{
    hwork *w = work_new(run);
    if (!w)
        cp_error_set(CP_ERR_OOM, "host backend: out of memory for a work item");
    return w;
}

/* Remembers that work enqueued on s from now on follows (sid, ticket). */
static void known_note_locked(cp_stream *s, uint64_t sid, uint64_t ticket)
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

static uint64_t sched_known_locked(cp_stream *s, uint64_t sid)
{
    const cp_stream *hs = s ? s : (G.legacy_started ? &G.legacy : NULL);
    if (!hs)
        return 0;
    for (size_t i = 0; i < hs->nknown; i++)
        if (hs->known[i].sid == sid)
            return hs->known[i].ticket;
    return 0;
}

static cp_status sched_enqueue_wait_locked(cp_stream *s, uint64_t sid, uint64_t ticket)
{
    cp_stream *hs = resolve_locked(s);
    hwork *w;
    if (!hs)
        return CP_ERR_BACKEND;
    if (hs->id == sid || sched_done_locked(sid, ticket))
        return CP_OK;
    w = work_or_oom(NULL);
    if (!w)
        return CP_ERR_OOM;
    if (!work_add_dep(w, sid, ticket)) {
        work_free(w);
        return cp_error_set(CP_ERR_OOM, "host backend: out of memory for a work item");
    }
    known_note_locked(hs, sid, ticket);
    return enqueue_locked(hs, w, NULL);
}

static cp_status sched_enqueue_mark_locked(cp_stream *s, uint64_t *sid, uint64_t *ticket)
{
    cp_stream *hs = resolve_locked(s);
    hwork *w;
    cp_status st;
    if (!hs)
        return CP_ERR_BACKEND;
    w = work_or_oom(NULL);
    if (!w)
        return CP_ERR_OOM;
    st = enqueue_locked(hs, w, ticket);
    if (st == CP_OK)
        *sid = hs->id;
    return st;
}

static int sched_too_big(size_t bytes)
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

/* ---- device --------------------------------------------------------------- */

static cp_status h_device_info_on(int dev, cp_device_info *out)
{
    CP_GUARD();
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cp_status st;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "device_info: out is NULL");
    if ((st = check_device(dev)) != CP_OK)
        return st;
    memset(out, 0, sizeof *out);
    strcpy(out->name, "host");
    out->index = dev;
    out->memory = (pages > 0 && psize > 0) ? (uint64_t)pages * (uint64_t)psize : 0;
    if (cp_host_mem_total())
        out->memory = cp_host_mem_total();
    out->sms = cpus > 0 ? (int)cpus : 1;
    out->cc_major = 0;
    out->cc_minor = 0;
    out->mempools = 1;
    out->driver = 0;
    out->runtime = 0;
    out->priority_least = HOST_PRIO_LEAST;
    out->priority_greatest = HOST_PRIO_GREATEST;
    return CP_OK;
}

static cp_status h_device_info(cp_device_info *out)
{
    CP_GUARD();
    return h_device_info_on(tl_device, out);
}

/* Waits for every stream.  report: return (and consume) a pending kernel
 * error and each stream's fault not yet reported; 0 for the waits cupola
 * makes on its own (mem_alloc, mem_free, IPC), which must leave them for the
 * user's next synchronization. */
static cp_status device_wait(int report);

static cp_status h_device_synchronize(void)
{
    CP_GUARD();
    return device_wait(1);
}

static cp_status device_wait(int report)
{
    cp_status st = CP_OK;
    hdep *snap = NULL;
    size_t n = 0, cap = 0;

    reap_zombies();
    pthread_mutex_lock(&G.mu);
    /* Snapshot what is enqueued now, so that work submitted meanwhile by
     * other threads cannot keep this call waiting forever. */
    for (cp_stream *s = G.streams; s; s = s->next)
        cap++;
    snap = cap ? malloc(cap * sizeof *snap) : NULL;
    if (cap && !snap) {
        /* no memory for the snapshot: wait until every stream is idle */
        for (;;) {
            cp_stream *busy = NULL;
            for (cp_stream *s = G.streams; s && !busy; s = s->next)
                if (!idle_locked(s))
                    busy = s;
            if (!busy)
                break;
            pthread_cond_wait(&G.done, &G.mu);
        }
    } else {
        for (cp_stream *s = G.streams; s; s = s->next)
            if (!idle_locked(s)) {
                snap[n].sid = s->id;
                snap[n].ticket = s->enqueued;
                n++;
            }
        for (size_t i = 0; i < n; i++)
            sched_wait_done_locked(snap[i].sid, snap[i].ticket);
    }
    cp_host_pool_release_locked();
    if (report)
        st = take_kernel_error_locked();
    /* each stream's fault once (the stream itself keeps reporting it) */
    for (cp_stream *s = G.streams; report && s && st == CP_OK; s = s->next)
        if (s->fault_set && !s->fault_told) {
            s->fault_told = 1;
            st = fault_error_locked(s);
        }
    pthread_mutex_unlock(&G.mu);
    free(snap);
    reap_zombies();
    return st;
}

/* One device: the host's memory as the OS reports it.  Several: each
 * device's share, less what is charged to it (and never more than the host
 * has available). */
static cp_status h_mem_get_info_on(int dev, size_t *free_bytes, size_t *total_bytes)
{
    CP_GUARD();
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
    long psize = sysconf(_SC_PAGESIZE);
    size_t share;
    cp_status st;
    if (!free_bytes || !total_bytes)
        return cp_error_set(CP_ERR_INVALID, "mem_get_info: NULL argument");
    if ((st = check_device(dev)) != CP_OK)
        return st;
    *total_bytes = (pages > 0 && psize > 0) ? (size_t)pages * (size_t)psize : 0;
    *free_bytes = (avail > 0 && psize > 0) ? (size_t)avail * (size_t)psize : 0;
    if ((share = cp_host_mem_total()) != 0) {
        /* Emulated devices report their own account only: the OS's free
         * memory moves with every other process, and an experiment (or a
         * spec) that compares two readings must see its own allocations. */
        size_t used = cp_host_mem_used(dev);
        *total_bytes = share;
        *free_bytes = used < share ? share - used : 0;
    }
    return CP_OK;
}

static cp_status h_mem_get_info(size_t *free_bytes, size_t *total_bytes)
{
    CP_GUARD();
    return h_mem_get_info_on(tl_device, free_bytes, total_bytes);
}

static cp_status h_device_synchronize(void);

static cp_status h_device_synchronize_on(int dev)
{
    CP_GUARD();
    cp_status st = check_device(dev);
    return st == CP_OK ? h_device_synchronize() : st;
}

/* ---- streams ------------------------------------------------------------ */

static cp_status h_stream_create_on(cp_stream **out, int dev, int priority, int blocking)
{
    CP_GUARD();
    cp_stream *s;
    cp_status st;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "stream_create: out is NULL");
    *out = NULL;
    if ((st = check_device(dev)) != CP_OK)
        return st;
    /* validated like the CUDA backend does, then ignored: one worker per
     * stream already gives each stream its own share of the CPU */
    if (priority > HOST_PRIO_LEAST || priority < HOST_PRIO_GREATEST)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "stream priority %d is outside the device's range "
                             "%d (least) .. %d (greatest)",
                             priority, HOST_PRIO_LEAST, HOST_PRIO_GREATEST);
    reap_zombies();
    s = calloc(1, sizeof *s);
    if (!s)
        return cp_error_set(CP_ERR_OOM, "host backend: out of memory for a stream");
    s->id = atomic_fetch_add(&next_sid, 1);
    s->device = dev;
    s->blocking = blocking != 0;
    pthread_cond_init(&s->work_cv, NULL);
    pthread_mutex_lock(&G.mu);
    if (G.shutdown) {
        st = cp_error_set(CP_ERR_BACKEND, "host backend: the process is shutting down");
    } else {
        registry_add_locked(s);
        st = start_worker_locked(s);
        if (st != CP_OK)
            registry_remove_locked(s);
    }
    pthread_mutex_unlock(&G.mu);
    if (st != CP_OK) {
        stream_free(s);
        return st;
    }
    *out = s;
    return CP_OK;
}

static cp_status h_stream_create(cp_stream **out, int priority, int blocking)
{
    CP_GUARD();
    return h_stream_create_on(out, tl_device, priority, blocking);
}

/* No native streams on the host: a new stream stands for the handle (0 and
 * 1, the legacy stream's handles, are the legacy stream). */
static cp_status h_stream_wrap(cp_stream **out, void *native, int dev)
{
    CP_GUARD();
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "stream_wrap: out is NULL");
    *out = NULL;
    if ((uintptr_t)native <= 1)
        return check_device(dev);
    return h_stream_create_on(out, dev, 0, 0);
}

static cp_status h_stream_destroy(cp_stream *s)
{
    CP_GUARD();
    if (!s)
        return cp_error_set(CP_ERR_INVALID, "stream_destroy: the default stream cannot be destroyed");
    pthread_mutex_lock(&G.mu);
    if (s->joined) {
        /* its worker was stopped at process exit: only the struct is left */
        registry_remove_locked(s);
        pthread_mutex_unlock(&G.mu);
        stream_free(s);
        return CP_OK;
    }
    s->destroyed = 1;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&G.mu);
    reap_zombies();
    return CP_OK;
}

/* Waits for what is enqueued on s now; for the legacy stream, also for the
 * blocking streams' work, which anything enqueued on it would wait for. */
static cp_status h_stream_synchronize(cp_stream *s)
{
    CP_GUARD();
    cp_status st;
    pthread_mutex_lock(&G.mu);
    if (s) {
        sched_wait_done_locked(s->id, s->enqueued);
    } else {
        hwork probe;
        int complete = 1;
        memset(&probe, 0, sizeof probe);
        probe.deps = probe.inline_deps;
        probe.capdeps = sizeof probe.inline_deps / sizeof probe.inline_deps[0];
        for (cp_stream *o = G.streams; o && complete; o = o->next)
            if ((o->blocking || o->legacy) && !idle_locked(o) &&
                !work_add_dep(&probe, o->id, o->enqueued))
                complete = 0;
        for (size_t i = 0; i < probe.ndeps; i++)
            sched_wait_done_locked(probe.deps[i].sid, probe.deps[i].ticket);
        if (probe.deps != probe.inline_deps)
            free(probe.deps);
        while (!complete) {
            /* no memory for the snapshot: wait until they are all idle */
            complete = 1;
            for (cp_stream *o = G.streams; o && complete; o = o->next)
                if ((o->blocking || o->legacy) && !idle_locked(o))
                    complete = 0;
            if (!complete)
                pthread_cond_wait(&G.done, &G.mu);
        }
    }
    cp_host_pool_release_locked();
    st = fault_error_locked(s ? s : (G.legacy_started ? &G.legacy : NULL));
    if (st != CP_OK) {
        if (s)
            s->fault_told = 1;
    } else {
        st = take_kernel_error_locked();
    }
    pthread_mutex_unlock(&G.mu);
    return st;
}

static cp_status h_stream_query(cp_stream *s, int *idle)
{
    CP_GUARD();
    if (!idle)
        return cp_error_set(CP_ERR_INVALID, "stream_query: idle is NULL");
    pthread_mutex_lock(&G.mu);
    if (s) {
        *idle = idle_locked(s);
    } else {
        *idle = 1;
        for (cp_stream *o = G.streams; o; o = o->next)
            if ((o->blocking || o->legacy) && !idle_locked(o))
                *idle = 0;
    }
    pthread_mutex_unlock(&G.mu);
    return CP_OK;
}

static cp_status h_stream_wait_event(cp_stream *s, cp_event *e)
{
    CP_GUARD();
    cp_status st = CP_OK;
    cp_stream *hs;
    if (!e)
        return cp_error_set(CP_ERR_INVALID, "stream_wait_event: event is NULL");
    pthread_mutex_lock(&G.mu);
    if (e->recorded) {
        hs = resolve_locked(s);
        if (!hs) {
            st = CP_ERR_BACKEND;
        } else {
            known_note_locked(hs, e->sid, e->ticket);
            if (hs->id != e->sid && !sched_done_locked(e->sid, e->ticket)) {
                hwork *w = work_or_oom(NULL);
                if (!w)
                    st = CP_ERR_OOM;
                else if (!work_add_dep(w, e->sid, e->ticket)) {
                    work_free(w);
                    st = cp_error_set(CP_ERR_OOM, "host backend: out of memory for a work item");
                } else {
                    st = enqueue_locked(hs, w, NULL);
                }
            }
        }
    }
    pthread_mutex_unlock(&G.mu);
    return st;
}

static uint64_t h_stream_id(const cp_stream *s)
{
    return s ? s->id : 0;
}

/* ---- events ------------------------------------------------------------- */

static cp_status h_event_create(cp_event **out, int timing)
{
    CP_GUARD();
    cp_event *e;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "event_create: out is NULL");
    e = calloc(1, sizeof *e);
    if (!e) {
        *out = NULL;
        return cp_error_set(CP_ERR_OOM, "host backend: out of memory for an event");
    }
    e->timing = timing != 0;
    e->refs = 1;
    *out = e;
    return CP_OK;
}

static void event_unref_locked(cp_event *e)
{
    if (--e->refs == 0)
        free(e);
}

/* As cudaEventDestroy: returns at once; a pending marker keeps the struct. */
static cp_status h_event_destroy(cp_event *e)
{
    CP_GUARD();
    if (!e)
        return cp_error_set(CP_ERR_INVALID, "event_destroy: event is NULL");
    pthread_mutex_lock(&G.mu);
    event_unref_locked(e);
    pthread_mutex_unlock(&G.mu);
    return CP_OK;
}

static void mark_done_locked(hwork *w)
{
    cp_event *e = w->u.mark.e;
    if (w->u.mark.gen == e->gen)
        clock_gettime(CLOCK_MONOTONIC, &e->at);
    event_unref_locked(e);
}

static cp_status h_event_record(cp_event *e, cp_stream *s)
{
    CP_GUARD();
    uint64_t ticket = 0;
    cp_stream *hs;
    hwork *w;
    cp_status st;
    if (!e)
        return cp_error_set(CP_ERR_INVALID, "event_record: event is NULL");
    w = work_or_oom(NULL);
    if (!w)
        return CP_ERR_OOM;
    w->done_locked = mark_done_locked;
    pthread_mutex_lock(&G.mu);
    hs = resolve_locked(s);
    if (!hs) {
        work_free(w);
        pthread_mutex_unlock(&G.mu);
        return CP_ERR_BACKEND;
    }
    w->u.mark.e = e;
    w->u.mark.gen = e->gen + 1;
    st = enqueue_locked(hs, w, &ticket);
    if (st == CP_OK) {
        /* the marker cannot have run yet: we hold the lock */
        e->refs++;
        e->gen++;
        e->recorded = 1;
        e->sid = hs->id;
        e->ticket = ticket;
    }
    pthread_mutex_unlock(&G.mu);
    return st;
}

static cp_status h_event_synchronize(cp_event *e)
{
    CP_GUARD();
    cp_status st;
    if (!e)
        return cp_error_set(CP_ERR_INVALID, "event_synchronize: event is NULL");
    pthread_mutex_lock(&G.mu);
    if (e->recorded)
        sched_wait_done_locked(e->sid, e->ticket);
    cp_host_pool_release_locked();
    st = e->recorded ? fault_error_locked(find_locked(e->sid)) : CP_OK;
    if (st == CP_OK)
        st = take_kernel_error_locked();
    pthread_mutex_unlock(&G.mu);
    return st;
}

static cp_status h_event_query(cp_event *e, int *done)
{
    CP_GUARD();
    if (!e || !done)
        return cp_error_set(CP_ERR_INVALID, "event_query: NULL argument");
    pthread_mutex_lock(&G.mu);
    *done = !e->recorded || sched_done_locked(e->sid, e->ticket);
    pthread_mutex_unlock(&G.mu);
    return CP_OK;
}

static cp_status h_event_elapsed(cp_event *start, cp_event *end, float *ms)
{
    CP_GUARD();
    cp_status st = CP_OK;
    if (!start || !end || !ms)
        return cp_error_set(CP_ERR_INVALID, "event_elapsed: NULL argument");
    pthread_mutex_lock(&G.mu);
    if (!start->timing || !end->timing)
        st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_HANDLE,
                           "elapsed time needs timing events: the %s event was created without "
                           "timing (timing=false)",
                           !start->timing ? "start" : "end");
    else if (!start->recorded || !end->recorded)
        st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_HANDLE,
                           "elapsed time: the %s event was not recorded",
                           !start->recorded ? "start" : "end");
    else if (!sched_done_locked(start->sid, start->ticket) ||
             !sched_done_locked(end->sid, end->ticket))
        st = cp_cuda_error(CP_ERR_NOT_READY, CP_CUDA_NOT_READY,
                           "elapsed time: an event has not completed yet; synchronize on it "
                           "first");
    else
        *ms = (float)((double)(end->at.tv_sec - start->at.tv_sec) * 1e3 +
                      (double)(end->at.tv_nsec - start->at.tv_nsec) / 1e6);
    pthread_mutex_unlock(&G.mu);
    return st;
}

/* ---- raw memory ------------------------------------------------------------ */

/* What mem_alloc handed out: the mapping's length, its device and kind, and
 * the memfd behind it once exported (legacy IPC), or memory mapped from
 * another process (ipc_open_handle). */
typedef struct hmem {
    size_t len;
    int dev;
    cp_memkind kind;
    int fd;       /* -1 until exported */
    int imported; /* ipc_open_handle: not charged, unmapped by ipc_close_handle */
    uint64_t uid; /* names the export */
} hmem;

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static cp_ptrmap mem_map;

static size_t page_round(size_t bytes)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + pg - 1) / pg * pg;
}

static int mem_register(void *p, hmem *m)
{
    int rc;
    pthread_mutex_lock(&mem_lock);
    rc = (mem_map.slots || cp_ptrmap_init(&mem_map, 64) == 0) &&
         cp_ptrmap_put(&mem_map, (uint64_t)(uintptr_t)p, m) == 0;
    pthread_mutex_unlock(&mem_lock);
    return rc;
}

static hmem *mem_lookup(const void *p, int remove)
{
    hmem *m = NULL;
    pthread_mutex_lock(&mem_lock);
    if (mem_map.slots)
        m = remove ? (hmem *)cp_ptrmap_del(&mem_map, (uint64_t)(uintptr_t)p)
                   : (hmem *)cp_ptrmap_get(&mem_map, (uint64_t)(uintptr_t)p);
    pthread_mutex_unlock(&mem_lock);
    return m;
}

/* Process exit (or dlclose): the registry's entries go; memory still mapped
 * goes with the process. */
__attribute__((destructor)) static void mem_registry_free(void)
{
    if (cp_forked)
        return; /* a child of fork(): mem_lock may be held by a thread it lacks */
    pthread_mutex_lock(&mem_lock);
    if (mem_map.slots) {
        for (uint64_t i = 0; i <= mem_map.mask; i++)
            if (mem_map.slots[i].key)
                free(mem_map.slots[i].val);
        cp_ptrmap_fini(&mem_map);
    }
    pthread_mutex_unlock(&mem_lock);
}

static cp_status h_mem_alloc_on(int dev, void **out, size_t bytes, cp_memkind kind)
{
    CP_GUARD();
    void *p;
    size_t len;
    hmem *m;
    cp_status st;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mem_alloc: out is NULL");
    *out = NULL;
    if ((st = check_device(dev)) != CP_OK)
        return st;
    if (kind != CP_MEM_DEVICE && kind != CP_MEM_MANAGED && kind != CP_MEM_PINNED)
        return cp_error_set(CP_ERR_INVALID, "mem_alloc: unknown memory kind %d", (int)kind);
    if (bytes == 0)
        return CP_OK; /* cudaMalloc(0) succeeds with NULL */
    if (sched_too_big(bytes))
        return cp_error_set(CP_ERR_OOM,
                            "out of memory: %zu bytes exceed the host's memory and swap", bytes);
    len = page_round(bytes);
    if (kind == CP_MEM_DEVICE) {
        (void)device_wait(0);
        if (!cp_host_mem_charge(dev, len))
            return cp_error_set(CP_ERR_OOM,
                                "out of memory: %zu bytes exceed what is left of device %d's "
                                "share of the host's memory",
                                bytes, dev);
    }
    m = malloc(sizeof *m);
    p = m ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
          : MAP_FAILED;
    if (p == MAP_FAILED || !mem_register(p, m)) {
        if (p != MAP_FAILED)
            munmap(p, len);
        free(m);
        if (kind == CP_MEM_DEVICE)
            cp_host_mem_uncharge(dev, len);
        return cp_error_set(CP_ERR_OOM, "out of memory: cannot allocate %zu bytes of host memory",
                            bytes);
    }
    m->len = len;
    m->dev = dev;
    m->kind = kind;
    m->fd = -1;
    m->imported = 0;
    m->uid = 0;
    *out = p;
    return CP_OK;
}

static cp_status h_mem_alloc(void **out, size_t bytes, cp_memkind kind)
{
    CP_GUARD();
    return h_mem_alloc_on(tl_device, out, bytes, kind);
}

static cp_status h_mem_free(void *p, cp_memkind kind)
{
    CP_GUARD();
    hmem *m;
    (void)kind;
    if (!p)
        return CP_OK;
    (void)device_wait(0);
    m = mem_lookup(p, 0);
    if (!m || m->imported)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "%p was not allocated by mem_alloc (or was already "
                             "freed)",
                             p);
    mem_lookup(p, 1);
    munmap(p, m->len);
    if (m->kind == CP_MEM_DEVICE)
        cp_host_mem_uncharge(m->dev, m->len);
    if (m->fd >= 0)
        close(m->fd);
    free(m);
    return CP_OK;
}

static cp_status h_mem_free_on(int dev, void *p, cp_memkind kind)
{
    CP_GUARD();
    (void)dev; /* the registry knows the device */
    return h_mem_free(p, kind);
}

/* ---- copies and kernels ------------------------------------------------------ */

static void run_copy(hwork *w)
{
    memmove(w->u.copy.dst, w->u.copy.src, w->u.copy.n);
}

static void run_set(hwork *w)
{
    memset(w->u.set.dst, w->u.set.byte, w->u.set.n);
}

static void run_fill(hwork *w)
{
    size_t n = w->u.fill.count;
    cp_scalar v = w->u.fill.v;
    switch (w->u.fill.t) {
    case CP_F32: {
        float *p = w->u.fill.p, x = (float)v.f;
        for (size_t i = 0; i < n; i++)
            p[i] = x;
        break;
    }
    case CP_F64: {
        double *p = w->u.fill.p;
        for (size_t i = 0; i < n; i++)
            p[i] = v.f;
        break;
    }
    case CP_I32: {
        int32_t *p = w->u.fill.p, x = (int32_t)v.i;
        for (size_t i = 0; i < n; i++)
            p[i] = x;
        break;
    }
    case CP_U32: {
        uint32_t *p = w->u.fill.p, x = (uint32_t)v.u;
        for (size_t i = 0; i < n; i++)
            p[i] = x;
        break;
    }
    case CP_U8:
        memset(w->u.fill.p, (int)(uint8_t)v.u, n);
        break;
    default:
        break;
    }
}

static void run_sqrt(hwork *w)
{
    for (size_t i = 0; i < w->u.sqrt.count; i++)
        w->u.sqrt.p[i] = cp_body_sqrt_index(i);
}

static void run_sum(hwork *w)
{
    const void *p = w->u.sum.p;
    cp_scalar *out = w->u.sum.out;
    switch (w->u.sum.t) {
    case CP_F32: {
        const float *a = p;
        size_t n = w->u.sum.bytes / sizeof *a;
        double acc = 0;
        for (size_t i = 0; i < n; i++)
            acc += (double)a[i];
        out->f = acc;
        break;
    }
    case CP_F64: {
        const double *a = p;
        size_t n = w->u.sum.bytes / sizeof *a;
        double acc = 0;
        for (size_t i = 0; i < n; i++)
            acc += a[i];
        out->f = acc;
        break;
    }
    case CP_I32: {
        const int32_t *a = p;
        size_t n = w->u.sum.bytes / sizeof *a;
        uint64_t acc = 0;
        for (size_t i = 0; i < n; i++)
            acc += (uint64_t)(int64_t)a[i];
        memcpy(&out->i, &acc, sizeof acc); /* wrapping, as the GPU's unsigned sum */
        break;
    }
    case CP_U32: {
        const uint32_t *a = p;
        size_t n = w->u.sum.bytes / sizeof *a;
        uint64_t acc = 0;
        for (size_t i = 0; i < n; i++)
            acc += a[i];
        out->u = acc;
        break;
    }
    case CP_U8: {
        const uint8_t *a = p;
        uint64_t acc = 0;
        for (size_t i = 0; i < w->u.sum.bytes; i++)
            acc += a[i];
        out->u = acc;
        break;
    }
    default:
        break;
    }
}

static void run_spin(hwork *w)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += (time_t)(w->u.spin.us / 1000000u);
    t.tv_nsec += (long)(w->u.spin.us % 1000000u) * 1000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR)
        ;
}

static void run_pattern(hwork *w)
{
    uint8_t *p = w->u.pat.p;
    for (size_t i = 0; i < w->u.pat.bytes; i++)
        p[i] = cp_body_pattern_byte(w->u.pat.seed, i);
}

static void run_verify(hwork *w)
{
    const uint8_t *p = w->u.pat.p;
    uint64_t bad = 0;
    for (size_t i = 0; i < w->u.pat.bytes; i++)
        bad += p[i] != cp_body_pattern_byte(w->u.pat.seed, i);
    *w->u.pat.bad = bad;
}

/* A copy of bytes (> 0) from src to dst, not queued yet; NULL with *st set
 * (a NULL pointer, or no memory for the work item). */
static hwork *copy_work(void *dst, const void *src, size_t bytes, const char *what, cp_status *st)
{
    hwork *w;
    if (!dst || !src) {
        *st = cp_error_set(CP_ERR_INVALID, "%s: NULL pointer", what);
        return NULL;
    }
    if (!(w = work_or_oom(run_copy))) {
        *st = CP_ERR_OOM;
        return NULL;
    }
    w->u.copy.dst = dst;
    w->u.copy.src = src;
    w->u.copy.n = bytes;
    return w;
}

static cp_status h_memcpy_async(void *dst, const void *src, size_t bytes, cp_stream *s)
{
    CP_GUARD();
    hwork *w;
    cp_status st;
    if (bytes == 0)
        return CP_OK;
    if (!(w = copy_work(dst, src, bytes, "memcpy_async", &st)))
        return st;
    /* synchronous for the caller: the source may be a Lua string (pageable) */
    return enqueue_and_wait(s, w);
}

static cp_status h_memset_async(void *dst, int byte, size_t bytes, cp_stream *s)
{
    CP_GUARD();
    hwork *w;
    if (bytes == 0)
        return CP_OK;
    if (!dst)
        return cp_error_set(CP_ERR_INVALID, "memset_async: NULL pointer");
    if (cp_host_pool_check_access(dst, h_stream_device(s), 1) != CP_OK)
        return CP_ERR_INVALID;
    w = work_or_oom(run_set);
    if (!w)
        return CP_ERR_OOM;
    w->u.set.dst = dst;
    w->u.set.byte = byte;
    w->u.set.n = bytes;
    return enqueue(s, w, NULL, NULL);
}

static cp_status check_shape(const cp_shape *sh)
{
    if (!sh)
        return CP_OK;
    if (sh->block > 1024u)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_CONFIG,
                             "block of %u threads (1..1024)", sh->block);
    if (sh->grid > 0x7fffffffu)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_CONFIG,
                             "grid of %u blocks (1..2147483647)", sh->grid);
    return CP_OK;
}

static cp_status check_dtype(cp_dtype t)
{
    if ((unsigned)t >= (unsigned)CP_DTYPE_COUNT)
        return cp_error_set(CP_ERR_INVALID, "unknown element type %d", (int)t);
    return CP_OK;
}

static cp_status h_k_fill(void *p, size_t count, cp_dtype t, cp_scalar v, const cp_shape *sh,
                          cp_stream *s)
{
    CP_GUARD();
    hwork *w;
    cp_status st = check_shape(sh);
    if (st == CP_OK)
        st = check_dtype(t);
    if (st != CP_OK)
        return st;
    if (count == 0)
        return CP_OK;
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "fill: NULL pointer");
    if ((st = cp_host_pool_check_access(p, h_stream_device(s), 1)) != CP_OK)
        return st;
    w = work_or_oom(run_fill);
    if (!w)
        return CP_ERR_OOM;
    w->u.fill.p = p;
    w->u.fill.count = count;
    w->u.fill.t = t;
    w->u.fill.v = v;
    return enqueue(s, w, NULL, NULL);
}

static cp_status h_k_sqrt_index(float *p, size_t count, const cp_shape *sh, cp_stream *s)
{
    CP_GUARD();
    hwork *w;
    cp_status st = check_shape(sh);
    if (st != CP_OK)
        return st;
    if (count == 0)
        return CP_OK;
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "sqrt_index: NULL pointer");
    if ((st = cp_host_pool_check_access(p, h_stream_device(s), 1)) != CP_OK)
        return st;
    w = work_or_oom(run_sqrt);
    if (!w)
        return CP_ERR_OOM;
    w->u.sqrt.p = p;
    w->u.sqrt.count = count;
    return enqueue(s, w, NULL, NULL);
}

static cp_status h_k_checksum(const void *p, size_t bytes, cp_dtype t, const cp_shape *sh,
                              cp_stream *s, cp_scalar *out)
{
    CP_GUARD();
    hwork *w;
    cp_scalar r;
    cp_status st = check_shape(sh);
    if (st == CP_OK)
        st = check_dtype(t);
    if (st != CP_OK)
        return st;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "checksum: out is NULL");
    r.u = 0;
    if (bytes > 0 && !p)
        return cp_error_set(CP_ERR_INVALID, "checksum: NULL pointer");
    if ((st = cp_host_pool_check_access(p, h_stream_device(s), 0)) != CP_OK)
        return st;
    w = work_or_oom(run_sum);
    if (!w)
        return CP_ERR_OOM;
    w->u.sum.p = p;
    w->u.sum.bytes = bytes;
    w->u.sum.t = t;
    w->u.sum.out = &r;
    st = enqueue_and_wait(s, w);
    if (st == CP_OK)
        *out = r;
    return st;
}

static cp_status h_k_spin(uint64_t microseconds, cp_stream *s)
{
    CP_GUARD();
    hwork *w = work_or_oom(run_spin);
    if (!w)
        return CP_ERR_OOM;
    w->u.spin.us = microseconds;
    return enqueue(s, w, NULL, NULL);
}

static cp_status h_k_pattern(void *p, size_t bytes, uint64_t seed, cp_stream *s)
{
    CP_GUARD();
    hwork *w;
    cp_status st;
    if (bytes == 0)
        return CP_OK;
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "pattern: NULL pointer");
    if ((st = cp_host_pool_check_access(p, h_stream_device(s), 1)) != CP_OK)
        return st;
    w = work_or_oom(run_pattern);
    if (!w)
        return CP_ERR_OOM;
    w->u.pat.p = p;
    w->u.pat.bytes = bytes;
    w->u.pat.seed = seed;
    return enqueue(s, w, NULL, NULL);
}

static cp_status h_k_verify(const void *p, size_t bytes, uint64_t seed, cp_stream *s,
                            uint64_t *bad)
{
    CP_GUARD();
    hwork *w;
    uint64_t r = 0;
    cp_status st;
    if (!bad)
        return cp_error_set(CP_ERR_INVALID, "verify: bad is NULL");
    if (bytes > 0 && !p)
        return cp_error_set(CP_ERR_INVALID, "verify: NULL pointer");
    if ((st = cp_host_pool_check_access(p, h_stream_device(s), 0)) != CP_OK)
        return st;
    w = work_or_oom(run_verify);
    if (!w)
        return CP_ERR_OOM;
    /* the union keeps a mutable pointer; verify only reads through it */
    memcpy(&w->u.pat.p, &p, sizeof p);
    w->u.pat.bytes = bytes;
    w->u.pat.seed = seed;
    w->u.pat.bad = &r;
    st = enqueue_and_wait(s, w);
    if (st == CP_OK)
        *bad = r;
    return st;
}

/* ---- run-time compiled kernels (issue 10) ------------------------------------ */

static void run_task(hwork *w)
{
    char err[sizeof G.kerr];
    cp_stream *s = tl_worker;
    int rc;
    if (s && s->fault_set) {
        w->u.task.fn(w->u.task.data, NULL, 0); /* cancelled: release, run nothing */
        return;
    }
    err[0] = '\0';
    rc = w->u.task.fn(w->u.task.data, err, sizeof err);
    if (rc == 2 && s) {
        /* a fault: the stream stays in error (the message is complete) */
        pthread_mutex_lock(&G.mu);
        snprintf(s->fault, sizeof s->fault, "%s", err);
        s->fault_set = 1;
        pthread_mutex_unlock(&G.mu);
    } else if (rc != 0) {
        pthread_mutex_lock(&G.mu);
        if (!G.kerr_set) {
            memcpy(G.kerr, err, sizeof err);
            G.kerr[sizeof G.kerr - 1] = '\0';
            G.kerr_set = 1;
        }
        pthread_mutex_unlock(&G.mu);
    }
}

static cp_status h_host_task(cp_stream *s, int (*fn)(void *, char *, size_t), const void *data,
                             size_t len)
{
    CP_GUARD();
    hwork *w;
    if (!fn)
        return cp_error_set(CP_ERR_INVALID, "host_task: fn is NULL");
    if (len > ((size_t)1 << 20))
        return cp_error_set(CP_ERR_INVALID, "host_task: %zu bytes of data is too much", len);
    /* one allocation: the item and its data, which follows it (8-aligned) */
    w = calloc(1, sizeof *w + ((len + 7) & ~(size_t)7));
    if (!w)
        return cp_error_set(CP_ERR_OOM, "host backend: out of memory for a work item");
    w->run = run_task;
    w->deps = w->inline_deps;
    w->capdeps = sizeof w->inline_deps / sizeof w->inline_deps[0];
    w->u.task.fn = fn;
    w->u.task.data = w + 1;
    if (len)
        memcpy(w + 1, data, len);
    return enqueue(s, w, NULL, NULL);
}

/* ---- peers ------------------------------------------------------------------ */

static unsigned char peer_enabled[CP_MAX_DEVICES][CP_MAX_DEVICES];

static cp_status h_can_access_peer(int dev, int peer, int *yes)
{
    CP_GUARD();
    cp_status st;
    if (!yes)
        return cp_error_set(CP_ERR_INVALID, "can_access_peer: yes is NULL");
    if ((st = check_device(dev)) != CP_OK || (st = check_device(peer)) != CP_OK)
        return st;
    *yes = dev != peer; /* as CUDA: a device is not its own peer */
    return CP_OK;
}

static cp_status h_enable_peer_access(int dev, int peer)
{
    CP_GUARD();
    cp_status st;
    if ((st = check_device(dev)) != CP_OK || (st = check_device(peer)) != CP_OK)
        return st;
    if (dev == peer)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_DEVICE,
                             "device %d cannot enable peer access to itself", dev);
    pthread_mutex_lock(&G.mu);
    peer_enabled[dev][peer] = 1;
    pthread_mutex_unlock(&G.mu);
    return CP_OK;
}

/* Device to device: asynchronous, unlike memcpy_async (no pageable memory). */
static cp_status h_memcpy_peer_async(void *dst, int dst_dev, const void *src, int src_dev,
                                     size_t bytes, cp_stream *s)
{
    CP_GUARD();
    hwork *w;
    cp_status st;
    if ((st = check_device(dst_dev)) != CP_OK || (st = check_device(src_dev)) != CP_OK)
        return st;
    if (bytes == 0)
        return CP_OK;
    if (!(w = copy_work(dst, src, bytes, "memcpy_peer_async", &st)))
        return st;
    return enqueue(s, w, NULL, NULL);
}

static int h_mempool_device(const cp_mempool *p)
{
    return cp_host_pool_device(p);
}

static cp_status h_mempool_default_on(int dev, cp_mempool **out)
{
    CP_GUARD();
    cp_status st = check_device(dev);
    return st == CP_OK ? cp_host_pool_default_on(dev, out) : st;
}

static cp_status h_mempool_get_current_on(int dev, cp_mempool **out)
{
    CP_GUARD();
    cp_status st = check_device(dev);
    return st == CP_OK ? cp_host_pool_get_current_on(dev, out) : st;
}

static cp_status h_mempool_create(cp_mempool **out, const cp_mempool_props *props)
{
    CP_GUARD();
    (void)h_device_count(); /* the device range is known before the pool checks it */
    return cp_host_pool_create(out, props);
}

static cp_status h_mempool_import(int fd, int dev, cp_mempool **out)
{
    CP_GUARD();
    cp_status st = check_device(dev);
    return st == CP_OK ? cp_host_pool_import(fd, dev, out) : st;
}

/* ---- legacy IPC (mem_alloc memory) ---------------------------------------- */

#define HOST_IPC_MAGIC "cpHstMm1"
typedef struct host_ipc_data {
    char magic[8];
    uint64_t len, uid;
} host_ipc_data;

static uint64_t new_uid(void)
{
    static _Atomic uint64_t counter;
    struct timespec ts;
    uint64_t x;
    clock_gettime(CLOCK_REALTIME, &ts);
    x = ((uint64_t)getpid() << 40) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
        (atomic_fetch_add(&counter, 1) * UINT64_C(0x9E3779B97F4A7C15));
    return x ? x : 1;
}

/* Moves the bytes of a private mapping into a memfd mapped at the same
 * address, so the fd can travel; the device is idle meanwhile. */
static cp_status promote_locked(void *p, hmem *m)
{
    void *tmp, *at;
    int fd = memfd_create("cupola-malloc", MFD_CLOEXEC);
    if (fd < 0)
        return cp_error_set(CP_ERR_BACKEND, "memfd_create: %s (exporting a buffer)",
                            strerror(errno));
    if (ftruncate(fd, (off_t)m->len) != 0) {
        close(fd);
        return cp_error_set(CP_ERR_OOM, "out of memory: ftruncate of an exported buffer: %s",
                            strerror(errno));
    }
    tmp = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (tmp == MAP_FAILED) {
        close(fd);
        return cp_error_set(CP_ERR_OOM, "out of memory: mmap of an exported buffer: %s",
                            strerror(errno));
    }
    memcpy(tmp, p, m->len);
    munmap(tmp, m->len);
    at = mmap(p, m->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (at == MAP_FAILED) {
        close(fd); /* MAP_FIXED failing leaves the old mapping in place */
        return cp_error_set(CP_ERR_BACKEND, "mmap (MAP_FIXED) of an exported buffer: %s",
                            strerror(errno));
    }
    m->fd = fd;
    m->uid = new_uid();
    return CP_OK;
}

static cp_status h_ipc_get_handle(void *ptr, size_t bytes, cp_ipc_data *out, int *fd)
{
    CP_GUARD();
    host_ipc_data d;
    hmem *m;
    cp_status st = CP_OK;
    if (!ptr || !out || !fd)
        return cp_error_set(CP_ERR_INVALID, "ipc_get_handle: NULL argument");
    *fd = -1;
    memset(out, 0, sizeof *out);
    (void)device_wait(0); /* nothing may write the bytes while they move */
    pthread_mutex_lock(&mem_lock);
    m = mem_map.slots ? (hmem *)cp_ptrmap_get(&mem_map, (uint64_t)(uintptr_t)ptr) : NULL;
    if (!m || m->imported)
        st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                           "%p is not the start of a mem_alloc allocation", ptr);
    else if (bytes > m->len)
        st = cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE, "%zu bytes exceed the allocation",
                           bytes);
    else if (m->fd < 0)
        st = promote_locked(ptr, m);
    if (st == CP_OK) {
        memset(&d, 0, sizeof d);
        memcpy(d.magic, HOST_IPC_MAGIC, sizeof d.magic);
        d.len = m->len;
        d.uid = m->uid;
        memcpy(out->bytes, &d, sizeof d);
        *fd = m->fd;
    }
    pthread_mutex_unlock(&mem_lock);
    return st;
}

static cp_status h_ipc_open_handle(int dev, const cp_ipc_data *data, int fd, size_t bytes,
                                   void **out)
{
    CP_GUARD();
    host_ipc_data d;
    struct stat sb;
    hmem *m;
    void *p;
    cp_status st;
    if (!data || !out)
        return cp_error_set(CP_ERR_INVALID, "ipc_open_handle: NULL argument");
    *out = NULL;
    if ((st = check_device(dev)) != CP_OK)
        return st;
    memcpy(&d, data->bytes, sizeof d);
    if (memcmp(d.magic, HOST_IPC_MAGIC, sizeof d.magic) != 0)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "the handle is not a host backend allocation");
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != d.len ||
        bytes == 0 || bytes > d.len)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "the received memory does not match the handle "
                             "(%zu bytes asked, %llu described)",
                             bytes, (unsigned long long)d.len);
    m = malloc(sizeof *m);
    p = m ? mmap(NULL, (size_t)d.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (p == MAP_FAILED || !mem_register(p, m)) {
        if (p != MAP_FAILED)
            munmap(p, (size_t)d.len);
        free(m);
        return cp_error_set(CP_ERR_OOM, "out of memory: cannot map an imported buffer");
    }
    m->len = (size_t)d.len;
    m->dev = dev;
    m->kind = CP_MEM_DEVICE;
    m->fd = -1;
    m->imported = 1;
    m->uid = d.uid;
    *out = p;
    return CP_OK;
}

static cp_status h_ipc_close_handle(void *ptr, size_t bytes)
{
    CP_GUARD();
    hmem *m;
    (void)bytes;
    if (!ptr)
        return CP_OK;
    (void)device_wait(0); /* as cudaIpcCloseMemHandle, nothing queued may still touch it */
    m = mem_lookup(ptr, 0);
    if (!m || !m->imported)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "%p was not opened from a handle", ptr);
    mem_lookup(ptr, 1);
    munmap(ptr, m->len);
    free(m);
    return CP_OK;
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
    reap_zombies();
    /* no worker runs now and none can start: join without the lock */
    for (cp_stream *s = live; s; s = s->next)
        pthread_join(s->thread, NULL);
    pthread_mutex_lock(&G.mu);
    if (G.legacy_started) {
        registry_remove_locked(&G.legacy);
        free(G.legacy.known);
        G.legacy.known = NULL;
        G.legacy.nknown = G.legacy.capknown = 0;
    }
    byid_free_locked();
    pthread_mutex_unlock(&G.mu);
    cp_host_pool_shutdown();
}

/* The emulated mempools (host_mempool.c) sit below this file: they get the
 * stream machinery they need as a table, before any backend call can reach
 * them. */
__attribute__((constructor)) static void host_bind_pools(void)
{
    static const cp_host_sched sched = {
        .lock = sched_lock,
        .unlock = sched_unlock,
        .done_locked = sched_done_locked,
        .wait_done_locked = sched_wait_done_locked,
        .known_locked = sched_known_locked,
        .enqueue_wait_locked = sched_enqueue_wait_locked,
        .enqueue_mark_locked = sched_enqueue_mark_locked,
        .too_big = sched_too_big,
        .current_device = h_get_device,
        .stream_device = h_stream_device,
        .stream_id = h_stream_id,
    };
    pthread_once(&devices_once, devices_init);
    cp_host_pool_bind(&sched);
}

/* ---- device pools (host_devpool.c): work items that call a function ---- */

static void run_call(hwork *w)
{
    w->u.call.fn(w->u.call.arg);
}

static cp_status exec_enqueue_call(cp_stream *s, void (*fn)(void *), void *arg, uint64_t *sid,
                                   uint64_t *ticket)
{
    hwork *w = work_or_oom(run_call);
    if (!w)
        return CP_ERR_OOM;
    w->u.call.fn = fn;
    w->u.call.arg = arg;
    return enqueue(s, w, sid, ticket);
}

static void exec_wait(uint64_t sid, uint64_t ticket)
{
    pthread_mutex_lock(&G.mu);
    sched_wait_done_locked(sid, ticket);
    pthread_mutex_unlock(&G.mu);
}

__attribute__((constructor)) static void host_bind_devpools(void)
{
    static const cp_host_exec exec = {exec_enqueue_call, exec_wait, h_device_synchronize,
                                      sched_too_big};
    cp_host_devpool_bind(&exec);
}

/* ---- the table ------------------------------------------------------------ */

/* ---- virtual memory management (the vmm pool) -------------------------- */

/* The GPU's granule (cuMemGetAllocationGranularity on current devices), so
 * that a pool's page accounting on the host is what the GPU would map. */
#define HOST_VM_GRANULE ((size_t)2 << 20)

static atomic_uint_least64_t next_vm_handle = 1;

static cp_status h_vm_granularity(int dev, size_t *out)
{
    CP_GUARD();
    cp_status st = check_device(dev);
    if (st != CP_OK)
        return st;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "vm_granularity: out is NULL");
    *out = HOST_VM_GRANULE;
    return CP_OK;
}

static int vm_aligned(const void *p, size_t bytes)
{
    return p && bytes && ((uintptr_t)p % HOST_VM_GRANULE) == 0 && bytes % HOST_VM_GRANULE == 0;
}

/* A PROT_NONE reservation aligned to the granule: over-reserve, trim both ends. */
static cp_status h_vm_reserve(int dev, void **out, size_t bytes)
{
    CP_GUARD();
    size_t span;
    uintptr_t base, start;
    void *p;
    cp_status st = check_device(dev);
    if (st != CP_OK)
        return st;
    if (!out || !bytes || bytes % HOST_VM_GRANULE)
        return cp_error_set(CP_ERR_INVALID, "vm_reserve: %zu bytes is not a multiple of the "
                            "granularity", bytes);
    *out = NULL;
    span = bytes + HOST_VM_GRANULE;
    if (span < bytes)
        return cp_error_set(CP_ERR_OOM, "vm_reserve: %zu bytes of address space", bytes);
    p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return cp_error_set(CP_ERR_OOM, "vm_reserve: mmap of %zu bytes: %s", span,
                            strerror(errno));
    base = (uintptr_t)p;
    start = (base + HOST_VM_GRANULE - 1) & ~(uintptr_t)(HOST_VM_GRANULE - 1);
    if (start > base)
        munmap(p, start - base);
    if (base + span > start + bytes)
        munmap((void *)(start + bytes), base + span - (start + bytes));
    *out = (void *)start;
    return CP_OK;
}

static cp_status h_vm_free_range(int dev, void *p, size_t bytes)
{
    (void)dev;
    CP_GUARD();
    if (!vm_aligned(p, bytes))
        return cp_error_set(CP_ERR_INVALID, "vm_free_range: %p, %zu bytes: not a reserved "
                            "range", p, bytes);
    if (munmap(p, bytes) != 0)
        return cp_error_set(CP_ERR_BACKEND, "vm_free_range: munmap: %s", strerror(errno));
    return CP_OK;
}

/* Physical memory is the pages the kernel gives on first touch after
 * vm_set_access; a handle only names it, and is charged to its device's
 * memory account from create to release (as cuMemCreate takes the
 * device's memory). */
static cp_status h_vm_create(int dev, uint64_t *handle, size_t bytes)
{
    CP_GUARD();
    cp_status st = check_device(dev);
    if (st != CP_OK)
        return st;
    if (!handle || !bytes || bytes % HOST_VM_GRANULE)
        return cp_error_set(CP_ERR_INVALID, "vm_create: %zu bytes is not a multiple of the "
                            "granularity", bytes);
    if (!cp_host_mem_charge(dev, bytes))
        return cp_error_set(CP_ERR_OOM, "out of memory: %zu bytes exceed what is left of "
                            "device %d's share of the host's memory", bytes, dev);
    *handle = atomic_fetch_add(&next_vm_handle, 1);
    return CP_OK;
}

static cp_status h_vm_release(int dev, uint64_t handle, size_t bytes)
{
    CP_GUARD();
    if (!handle)
        return cp_error_set(CP_ERR_INVALID, "vm_release: no such handle");
    cp_host_mem_uncharge(dev, bytes);
    return CP_OK;
}

static cp_status h_vm_map(int dev, void *p, size_t bytes, uint64_t handle)
{
    (void)dev;
    CP_GUARD();
    if (!vm_aligned(p, bytes) || !handle)
        return cp_error_set(CP_ERR_INVALID, "vm_map: %p, %zu bytes: not granule-aligned", p,
                            bytes);
    return CP_OK; /* accessible only after vm_set_access, as on the GPU */
}

static cp_status h_vm_unmap(int dev, void *p, size_t bytes)
{
    (void)dev;
    CP_GUARD();
    if (!vm_aligned(p, bytes))
        return cp_error_set(CP_ERR_INVALID, "vm_unmap: %p, %zu bytes: not granule-aligned", p,
                            bytes);
    if (madvise(p, bytes, MADV_DONTNEED) != 0 || mprotect(p, bytes, PROT_NONE) != 0)
        return cp_error_set(CP_ERR_BACKEND, "vm_unmap: %s", strerror(errno));
    return CP_OK;
}

static cp_status h_vm_set_access(int dev, void *p, size_t bytes)
{
    (void)dev;
    CP_GUARD();
    if (!vm_aligned(p, bytes))
        return cp_error_set(CP_ERR_INVALID, "vm_set_access: %p, %zu bytes: not "
                            "granule-aligned", p, bytes);
    if (mprotect(p, bytes, PROT_READ | PROT_WRITE) != 0)
        return cp_error_set(CP_ERR_OOM, "vm_set_access: mprotect: %s", strerror(errno));
    return CP_OK;
}

const cp_backend cp_backend_host = {
    .name = "host",
    .device_info = h_device_info,
    .device_synchronize = h_device_synchronize,
    .mem_get_info = h_mem_get_info,
    .stream_create = h_stream_create,
    .stream_destroy = h_stream_destroy,
    .stream_synchronize = h_stream_synchronize,
    .stream_query = h_stream_query,
    .stream_wait_event = h_stream_wait_event,
    .stream_id = h_stream_id,
    .event_create = h_event_create,
    .event_destroy = h_event_destroy,
    .event_record = h_event_record,
    .event_synchronize = h_event_synchronize,
    .event_query = h_event_query,
    .event_elapsed = h_event_elapsed,
    .mem_alloc = h_mem_alloc,
    .mem_free = h_mem_free,
    .mem_alloc_async = cp_host_pool_alloc_current,
    .mem_free_async = cp_host_pool_free,
    .mempool_default = cp_host_pool_default,
    .mempool_create = h_mempool_create,
    .mempool_destroy = cp_host_pool_destroy,
    .mempool_alloc = cp_host_pool_alloc,
    .mempool_get_attr = cp_host_pool_get_attr,
    .mempool_set_attr = cp_host_pool_set_attr,
    .mempool_trim = cp_host_pool_trim,
    .mempool_set_current = cp_host_pool_set_current,
    .mempool_get_current = cp_host_pool_get_current,
    .memcpy_async = h_memcpy_async,
    .memset_async = h_memset_async,
    .k_fill = h_k_fill,
    .k_sqrt_index = h_k_sqrt_index,
    .k_checksum = h_k_checksum,
    .k_spin = h_k_spin,
    .k_pattern = h_k_pattern,
    .k_verify = h_k_verify,
    /* run-time compiled kernels (issue 10) */
    .host_task = h_host_task,
    .stream_native = NULL,

    /* several devices and processes (multigpu) */
    .device_count = h_device_count,
    .set_device = h_set_device,
    .get_device = h_get_device,
    .device_info_on = h_device_info_on,
    .device_synchronize_on = h_device_synchronize_on,
    .mem_get_info_on = h_mem_get_info_on,
    .stream_create_on = h_stream_create_on,
    .stream_device = h_stream_device,
    .stream_legacy = h_stream_legacy,
    .stream_wrap = h_stream_wrap,
    .mem_alloc_on = h_mem_alloc_on,
    .mem_free_on = h_mem_free_on,
    .mempool_default_on = h_mempool_default_on,
    .mempool_get_current_on = h_mempool_get_current_on,
    .mempool_device = h_mempool_device,
    .can_access_peer = h_can_access_peer,
    .enable_peer_access = h_enable_peer_access,
    .mempool_set_access = cp_host_pool_set_access,
    .mempool_get_access = cp_host_pool_get_access,
    .memcpy_peer_async = h_memcpy_peer_async,
    .mempool_export = cp_host_pool_export,
    .mempool_import = h_mempool_import,
    .mempool_export_ptr = cp_host_pool_export_ptr,
    .mempool_import_ptr = cp_host_pool_import_ptr,
    .ipc_get_handle = h_ipc_get_handle,
    .ipc_open_handle = h_ipc_open_handle,
    .ipc_close_handle = h_ipc_close_handle,
    /* virtual memory management (the vmm pool) */
    .vm_granularity = h_vm_granularity,
    .vm_reserve = h_vm_reserve,
    .vm_free_range = h_vm_free_range,
    .vm_create = h_vm_create,
    .vm_release = h_vm_release,
    .vm_map = h_vm_map,
    .vm_unmap = h_vm_unmap,
    .vm_set_access = h_vm_set_access,
    /* ---- device-side (in-kernel) allocation pools (issue 17) ---- */
    .dp_create = cp_host_dp_create,
    .dp_destroy = cp_host_dp_destroy,
    .dp_state = cp_host_dp_state,
    .dp_launch = cp_host_dp_launch,
    .dp_finish = cp_host_dp_finish,
    .dp_reset = cp_host_dp_reset,
    .dp_stats = cp_host_dp_stats,
};
