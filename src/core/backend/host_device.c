/*
 * host_device.c: the host backend's emulated devices (policy in host.c): how
 * many, the calling thread's current one, their description, memory and
 * synchronization, peer access, and the native pools of a device.
 */
#include "host_impl.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- how many, and the current one ------------------------------------------ */

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
    cp_host_account_init(n, ram / (size_t)n);
}

int cp_host_device_count(void)
{
    pthread_once(&devices_once, devices_init);
    return cp_host_account_devices();
}

cp_status cp_host_check_device(int dev)
{
    int n = cp_host_device_count();
    if (dev < 0 || dev >= n)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_DEVICE,
                             "device %d does not exist (the host backend "
                             "emulates %d; CUPOLA_HOST_DEVICES sets how many)",
                             dev, n);
    return CP_OK;
}

cp_status cp_host_set_device(int dev)
{
    CP_GUARD();
    cp_status st = cp_host_check_device(dev);
    if (st == CP_OK)
        tl_device = dev;
    return st;
}

int cp_host_get_device(void)
{
    return tl_device;
}

int cp_host_stream_device(const cp_stream *s)
{
    return s && s->device >= 0 ? s->device : tl_device;
}

cp_stream *cp_host_stream_legacy(int dev)
{
    (void)dev; /* one legacy stream serves every emulated device */
    return NULL;
}

/* ---- description, synchronization, memory ---------------------------------- */

cp_status cp_host_device_info_on(int dev, cp_device_info *out)
{
    CP_GUARD();
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cp_status st;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "device_info: out is NULL");
    if ((st = cp_host_check_device(dev)) != CP_OK)
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

cp_status cp_host_device_info(cp_device_info *out)
{
    CP_GUARD();
    return cp_host_device_info_on(tl_device, out);
}

cp_status cp_host_device_synchronize(void)
{
    CP_GUARD();
    return cp_host_device_wait(1);
}

cp_status cp_host_device_wait(int report)
{
    cp_status st = CP_OK;
    hdep *snap = NULL;
    size_t n = 0, cap = 0;

    cp_host_reap_zombies();
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
                if (!cp_host_idle_locked(s))
                    busy = s;
            if (!busy)
                break;
            pthread_cond_wait(&G.done, &G.mu);
        }
    } else {
        for (cp_stream *s = G.streams; s; s = s->next)
            if (!cp_host_idle_locked(s)) {
                snap[n].sid = s->id;
                snap[n].ticket = s->enqueued;
                n++;
            }
        for (size_t i = 0; i < n; i++)
            cp_host_sched_wait_done_locked(snap[i].sid, snap[i].ticket);
    }
    cp_host_pool_release_locked();
    if (report)
        st = cp_host_take_kernel_error_locked();
    /* each stream's fault once (the stream itself keeps reporting it) */
    for (cp_stream *s = G.streams; report && s && st == CP_OK; s = s->next)
        if (s->fault_set && !s->fault_told) {
            s->fault_told = 1;
            st = cp_host_fault_error_locked(s);
        }
    pthread_mutex_unlock(&G.mu);
    free(snap);
    cp_host_reap_zombies();
    return st;
}

/* One device: the host's memory as the OS reports it.  Several: each
 * device's share, less what is charged to it (and never more than the host
 * has available). */
cp_status cp_host_mem_get_info_on(int dev, size_t *free_bytes, size_t *total_bytes)
{
    CP_GUARD();
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
    long psize = sysconf(_SC_PAGESIZE);
    size_t share;
    cp_status st;
    if (!free_bytes || !total_bytes)
        return cp_error_set(CP_ERR_INVALID, "mem_get_info: NULL argument");
    if ((st = cp_host_check_device(dev)) != CP_OK)
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

cp_status cp_host_mem_get_info(size_t *free_bytes, size_t *total_bytes)
{
    CP_GUARD();
    return cp_host_mem_get_info_on(tl_device, free_bytes, total_bytes);
}

cp_status cp_host_device_synchronize_on(int dev)
{
    CP_GUARD();
    cp_status st = cp_host_check_device(dev);
    return st == CP_OK ? cp_host_device_synchronize() : st;
}

/* ---- peers ------------------------------------------------------------------ */

static unsigned char peer_enabled[CP_MAX_DEVICES][CP_MAX_DEVICES];

cp_status cp_host_can_access_peer(int dev, int peer, int *yes)
{
    CP_GUARD();
    cp_status st;
    if (!yes)
        return cp_error_set(CP_ERR_INVALID, "can_access_peer: yes is NULL");
    if ((st = cp_host_check_device(dev)) != CP_OK || (st = cp_host_check_device(peer)) != CP_OK)
        return st;
    *yes = dev != peer; /* as CUDA: a device is not its own peer */
    return CP_OK;
}

cp_status cp_host_enable_peer_access(int dev, int peer)
{
    CP_GUARD();
    cp_status st;
    if ((st = cp_host_check_device(dev)) != CP_OK || (st = cp_host_check_device(peer)) != CP_OK)
        return st;
    if (dev == peer)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_DEVICE,
                             "device %d cannot enable peer access to itself", dev);
    pthread_mutex_lock(&G.mu);
    peer_enabled[dev][peer] = 1;
    pthread_mutex_unlock(&G.mu);
    return CP_OK;
}

int cp_host_mempool_device(const cp_mempool *p)
{
    return cp_host_pool_device(p);
}

cp_status cp_host_mempool_default_on(int dev, cp_mempool **out)
{
    CP_GUARD();
    cp_status st = cp_host_check_device(dev);
    return st == CP_OK ? cp_host_pool_default_on(dev, out) : st;
}

cp_status cp_host_mempool_get_current_on(int dev, cp_mempool **out)
{
    CP_GUARD();
    cp_status st = cp_host_check_device(dev);
    return st == CP_OK ? cp_host_pool_get_current_on(dev, out) : st;
}

cp_status cp_host_mempool_create(cp_mempool **out, const cp_mempool_props *props)
{
    CP_GUARD();
    (void)cp_host_device_count(); /* the device range is known before the pool checks it */
    return cp_host_pool_create(out, props);
}

cp_status cp_host_mempool_import(int fd, int dev, cp_mempool **out)
{
    CP_GUARD();
    cp_status st = cp_host_check_device(dev);
    return st == CP_OK ? cp_host_pool_import(fd, dev, out) : st;
}
