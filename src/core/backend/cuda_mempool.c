/*
 * cuda_mempool.c: the CUDA backend's native pools (policy in cuda.c):
 * cudaMemPool_t behind a cp_mempool, the default and current pools, their
 * attributes, trimming and the access of other devices.
 */
#include "cuda_impl.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- native pools --------------------------------------------------------------------- */

/* The default pool's wrapper (a singleton, never destroyed) and the list of
 * pools created here, so that get_current can hand back the very cp_mempool
 * that was made current.  One lock: pools are created rarely. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cp_mempool default_pool[CP_MAX_DEVICES];
static int default_pool_ready[CP_MAX_DEVICES];
static struct cp_mempool *live_pools;
/* Pools destroyed while frees on them may still be queued.  CUDA documents
 * that cudaMemPoolDestroy returns at once and releases the memory when the
 * outstanding frees are done, but with CUDA 13.0 / driver 580 it crashes
 * libcuda later (in a stream synchronize) when frees are still queued; the
 * reliability fuzz finds it.  So the handle is kept here and destroyed at the
 * next device synchronization, when nothing can be queued on it. */
static struct cp_mempool *retired_pools;

/* Adds a pool made here (created or imported) to the registry. */
void cp_cuda_mempool_register(cp_mempool *p)
{
    pthread_mutex_lock(&pool_lock);
    p->next = live_pools;
    live_pools = p;
    pthread_mutex_unlock(&pool_lock);
}

static const char *const pool_attr_names[CP_POOL_ATTR_COUNT] = {
    "release_threshold", "reuse_follow_event_dependencies", "reuse_allow_opportunistic",
    "reuse_allow_internal_dependencies", "reserved_current", "reserved_high", "used_current",
    "used_high",
};

cp_status cp_cuda_mempool_default_on(int dev, cp_mempool **out)
{
    CP_GUARD();
    cp_status st;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mempool_default: out is NULL");
    *out = NULL;
    if ((st = cp_cuda_check_device(dev)) != CP_OK || dev >= CP_MAX_DEVICES)
        return st != CP_OK ? st : cp_error_set(CP_ERR_INVALID, "device %d: too many devices", dev);
    pthread_mutex_lock(&pool_lock);
    if (!default_pool_ready[dev]) {
        cudaMemPool_t h;
        cudaError_t e = cudaDeviceGetDefaultMemPool(&h, dev);
        if (e != cudaSuccess) {
            st = cp_cuda_fail(e, "cudaDeviceGetDefaultMemPool");
        } else {
            default_pool[dev].h = h;
            default_pool[dev].is_default = 1;
            default_pool[dev].location_host = 0;
            default_pool[dev].dev = dev;
            default_pool[dev].imported = 0;
            default_pool[dev].next = NULL;
            default_pool_ready[dev] = 1;
        }
    }
    pthread_mutex_unlock(&pool_lock);
    *out = st == CP_OK ? &default_pool[dev] : NULL;
    return st;
}

cp_status cp_cuda_mempool_default(cp_mempool **out)
{
    CP_GUARD();
    return cp_cuda_mempool_default_on(CP_DEVICE, out);
}

static cp_status device_attr_on(int dev, enum cudaDeviceAttr a, int *v, const char *what)
{
    CP_GUARD();
    CHECK(cudaDeviceGetAttribute(v, a, dev), what);
    return CP_OK;
}
#define device_attr(a, v, what) device_attr_on(props->device, a, v, what)

cp_status cp_cuda_mempool_create(cp_mempool **out, const cp_mempool_props *props)
{
    CP_GUARD();
    static const cp_mempool_props defaults = {0, 0, 0, 0};
    struct cudaMemPoolProps pp;
    cp_mempool *p;
    cudaError_t e;
    cp_status st;
    int v = 0;

    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mempool_create: out is NULL");
    *out = NULL;
    if (!props)
        props = &defaults;
    if ((st = cp_cuda_check_device(props->device)) != CP_OK)
        return st;
    if (props->location_host && props->handle_posix_fd)
        return cp_cuda_refuse(cudaErrorInvalidValue,
                              "a host-memory pool cannot be exported: CUDA allows no handle types "
                              "for location host");
    if (props->location_host) {
        if ((st = device_attr(cudaDevAttrHostMemoryPoolsSupported, &v,
                              "cudaDeviceGetAttribute(cudaDevAttrHostMemoryPoolsSupported)")))
            return st;
        if (!v)
            return cp_error_set(CP_ERR_UNSUPPORTED,
                                "this device or driver does not support host-memory pools "
                                "(cudaDevAttrHostMemoryPoolsSupported is 0)");
    }
    if (props->handle_posix_fd) {
        if ((st = device_attr(cudaDevAttrMemoryPoolSupportedHandleTypes, &v,
                              "cudaDeviceGetAttribute(cudaDevAttrMemoryPoolSupportedHandleTypes)")))
            return st;
        if (!(v & cudaMemHandleTypePosixFileDescriptor))
            return cp_error_set(CP_ERR_UNSUPPORTED,
                                "this device or driver cannot export pool memory as POSIX file "
                                "descriptors");
    }

    memset(&pp, 0, sizeof pp); /* every reserved field must be 0 */
    pp.allocType = cudaMemAllocationTypePinned;
    pp.handleTypes =
        props->handle_posix_fd ? cudaMemHandleTypePosixFileDescriptor : cudaMemHandleTypeNone;
    pp.location.type = props->location_host ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    pp.location.id = props->location_host ? 0 : props->device; /* ignored for host */
    pp.maxSize = props->max_size;

    if (!(p = malloc(sizeof *p)))
        return cp_error_set(CP_ERR_OOM, "mempool_create: out of host memory");
    if ((e = cudaMemPoolCreate(&p->h, &pp)) != cudaSuccess) {
        free(p);
        return cp_cuda_fail(e, "cudaMemPoolCreate");
    }
    if (props->location_host) {
        /* A host pool is reachable only from the CPU until the device is
         * granted access; cupola's kernels and copies need the device. */
        struct cudaMemAccessDesc access;
        memset(&access, 0, sizeof access);
        access.location.type = cudaMemLocationTypeDevice;
        access.location.id = props->device;
        access.flags = cudaMemAccessFlagsProtReadWrite;
        if ((e = cudaMemPoolSetAccess(p->h, &access, 1)) != cudaSuccess) {
            st = cp_cuda_fail(e, "cudaMemPoolSetAccess");
            (void)cudaMemPoolDestroy(p->h);
            (void)cudaGetLastError();
            free(p);
            return st;
        }
    }
    p->is_default = 0;
    p->location_host = props->location_host != 0;
    p->dev = props->device;
    p->imported = 0;
    cp_cuda_mempool_register(p);
    *out = p;
    return CP_OK;
}

cp_status cp_cuda_mempool_destroy(cp_mempool *p)
{
    CP_GUARD();
    cp_mempool **link;

    if (!p)
        return CP_OK;
    if (p->is_default)
        return cp_cuda_refuse(cudaErrorInvalidValue,
                              "the device's default pool cannot be destroyed");
    pthread_mutex_lock(&pool_lock);
    for (link = &live_pools; *link; link = &(*link)->next) {
        if (*link == p) {
            *link = p->next;
            break;
        }
    }
    /* Destroying never synchronizes (it may run in a finalizer): the pool
     * waits in retired_pools for the next device synchronization.  A pool
     * that is current must not stay current meanwhile. */
    {
        cudaMemPool_t cur = NULL, def = NULL;
        if (!p->location_host && !p->imported &&
            cudaDeviceGetMemPool(&cur, p->dev) == cudaSuccess && cur == p->h &&
            cudaDeviceGetDefaultMemPool(&def, p->dev) == cudaSuccess)
            (void)cudaDeviceSetMemPool(p->dev, def);
        (void)cudaGetLastError();
    }
    p->next = retired_pools;
    retired_pools = p;
    pthread_mutex_unlock(&pool_lock);
    return CP_OK;
}

/* Pools of dev whose frees are done once dev is idle; host pools (whose
 * frees may be queued on any device) wait for every device's sync... which
 * cupola never does at once, so they go with the device they were made on. */
void cp_cuda_reap_retired_pools(int dev)
{
    cp_mempool *p, *next, **pp, *mine = NULL;
    pthread_mutex_lock(&pool_lock);
    pp = &retired_pools;
    while ((p = *pp) != NULL) {
        if (p->dev == dev) {
            *pp = p->next;
            p->next = mine;
            mine = p;
        } else {
            pp = &p->next;
        }
    }
    pthread_mutex_unlock(&pool_lock);
    for (p = mine; p; p = next) {
        next = p->next;
        (void)cp_cuda_release_result(cudaMemPoolDestroy(p->h), "cudaMemPoolDestroy");
        free(p);
    }
}

cp_status cp_cuda_mempool_alloc(cp_mempool *p, void **out, size_t bytes, cp_stream *s)
{
    CP_GUARD();
    void *ptr = NULL;
    if (!p || !out)
        return cp_error_set(CP_ERR_INVALID, "mempool_alloc: pool or out is NULL");
    *out = NULL;
    if (p->imported)
        return cp_cuda_refuse(cudaErrorInvalidValue,
                              "an imported pool only maps the exporter's buffers (import them); it "
                              "cannot allocate");
    ENTER_STREAM(s);
    CHECK(cudaMallocFromPoolAsync(&ptr, bytes, p->h, cp_cuda_stream_handle(s)),
          "cudaMallocFromPoolAsync");
    *out = ptr;
    return CP_OK;
}

/* CUDA's pool attributes come in two value types: the reuse flags are int,
 * the threshold and the byte counters cuuint64_t. */
static enum cudaMemPoolAttr pool_attr_cuda(cp_pool_attr a)
{
    switch (a) {
    case CP_POOL_RELEASE_THRESHOLD: return cudaMemPoolAttrReleaseThreshold;
    case CP_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES: return cudaMemPoolReuseFollowEventDependencies;
    case CP_POOL_REUSE_ALLOW_OPPORTUNISTIC: return cudaMemPoolReuseAllowOpportunistic;
    case CP_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        return cudaMemPoolReuseAllowInternalDependencies;
    case CP_POOL_RESERVED_MEM_CURRENT: return cudaMemPoolAttrReservedMemCurrent;
    case CP_POOL_RESERVED_MEM_HIGH: return cudaMemPoolAttrReservedMemHigh;
    case CP_POOL_USED_MEM_CURRENT: return cudaMemPoolAttrUsedMemCurrent;
    case CP_POOL_USED_MEM_HIGH: return cudaMemPoolAttrUsedMemHigh;
    default: return (enum cudaMemPoolAttr)0;
    }
}

static int pool_attr_is_int(cp_pool_attr a)
{
    return a == CP_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES || a == CP_POOL_REUSE_ALLOW_OPPORTUNISTIC ||
           a == CP_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

cp_status cp_cuda_mempool_get_attr(cp_mempool *p, cp_pool_attr a, uint64_t *v)
{
    CP_GUARD();
    if (!p || !v)
        return cp_error_set(CP_ERR_INVALID, "mempool_get_attr: pool or v is NULL");
    if ((unsigned)a >= CP_POOL_ATTR_COUNT)
        return cp_cuda_refuse(cudaErrorInvalidValue, "unknown pool attribute %d", (int)a);
    if (pool_attr_is_int(a)) {
        int x = 0;
        CHECK(cudaMemPoolGetAttribute(p->h, pool_attr_cuda(a), &x), "cudaMemPoolGetAttribute");
        *v = x != 0;
    } else {
        uint64_t x = 0; /* cuuint64_t */
        CHECK(cudaMemPoolGetAttribute(p->h, pool_attr_cuda(a), &x), "cudaMemPoolGetAttribute");
        *v = x;
    }
    return CP_OK;
}

cp_status cp_cuda_mempool_set_attr(cp_mempool *p, cp_pool_attr a, uint64_t v)
{
    CP_GUARD();
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "mempool_set_attr: pool is NULL");
    switch (a) {
    case CP_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CP_POOL_REUSE_ALLOW_OPPORTUNISTIC:
    case CP_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES: {
        int x = v != 0;
        CHECK(cudaMemPoolSetAttribute(p->h, pool_attr_cuda(a), &x), "cudaMemPoolSetAttribute");
        return CP_OK;
    }
    case CP_POOL_RELEASE_THRESHOLD: {
        uint64_t x = v;
        CHECK(cudaMemPoolSetAttribute(p->h, pool_attr_cuda(a), &x), "cudaMemPoolSetAttribute");
        return CP_OK;
    }
    case CP_POOL_RESERVED_MEM_HIGH:
    case CP_POOL_USED_MEM_HIGH: {
        /* CUDA accepts only 0 here, meaning "reset the watermark to the
         * current value". */
        uint64_t x = 0;
        if (v != 0)
            return cp_cuda_refuse(cudaErrorInvalidValue,
                                  "pool attribute %s can only be reset: set it to 0 and it becomes "
                                  "the current value",
                                  pool_attr_names[a]);
        CHECK(cudaMemPoolSetAttribute(p->h, pool_attr_cuda(a), &x), "cudaMemPoolSetAttribute");
        return CP_OK;
    }
    case CP_POOL_RESERVED_MEM_CURRENT:
    case CP_POOL_USED_MEM_CURRENT:
        return cp_cuda_refuse(cudaErrorInvalidValue, "pool attribute %s is read-only",
                              pool_attr_names[a]);
    default: return cp_cuda_refuse(cudaErrorInvalidValue, "unknown pool attribute %d", (int)a);
    }
}

cp_status cp_cuda_mempool_trim(cp_mempool *p, size_t keep_bytes)
{
    CP_GUARD();
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "mempool_trim: pool is NULL");
    CHECK(cudaMemPoolTrimTo(p->h, keep_bytes), "cudaMemPoolTrimTo");
    return CP_OK;
}

cp_status cp_cuda_mempool_set_current(cp_mempool *p)
{
    CP_GUARD();
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "mempool_set_current: pool is NULL");
    if (p->location_host)
        return cp_cuda_refuse(cudaErrorInvalidValue,
                              "a host-memory pool cannot be the device's current pool");
    if (p->imported)
        return cp_cuda_refuse(cudaErrorInvalidValue,
                              "an imported pool cannot be the device's current pool");
    CHECK(cudaDeviceSetMemPool(p->dev, p->h), "cudaDeviceSetMemPool");
    return CP_OK;
}

cp_status cp_cuda_mempool_get_current_on(int dev, cp_mempool **out)
{
    CP_GUARD();
    cudaMemPool_t h;
    cp_mempool *def, *p;
    cp_status st;

    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mempool_get_current: out is NULL");
    *out = NULL;
    if ((st = cp_cuda_mempool_default_on(dev, &def)) != CP_OK)
        return st;
    CHECK(cudaDeviceGetMemPool(&h, dev), "cudaDeviceGetMemPool");
    if (h == def->h) {
        *out = def;
        return CP_OK;
    }
    pthread_mutex_lock(&pool_lock);
    for (p = live_pools; p && p->h != h; p = p->next)
        ;
    pthread_mutex_unlock(&pool_lock);
    if (!p)
        return cp_error_set(CP_ERR_UNSUPPORTED,
                            "the device's current pool was made current outside cupola");
    *out = p;
    return CP_OK;
}

cp_status cp_cuda_mempool_get_current(cp_mempool **out)
{
    CP_GUARD();
    return cp_cuda_mempool_get_current_on(CP_DEVICE, out);
}

/* ---- several devices and processes (multigpu) ------------------------------------------ */

int cp_cuda_mempool_device(const cp_mempool *p)
{
    return p ? p->dev : 0;
}

cp_status cp_cuda_mempool_set_access(cp_mempool *p, int dev, cp_access a)
{
    CP_GUARD();
    struct cudaMemAccessDesc d;
    cp_status st;
    if (!p)
        return cp_error_set(CP_ERR_INVALID, "mempool_set_access: pool is NULL");
    if ((st = cp_cuda_check_device(dev)) != CP_OK)
        return st;
    memset(&d, 0, sizeof d);
    d.location.type = cudaMemLocationTypeDevice;
    d.location.id = dev;
    d.flags = a == CP_ACCESS_READWRITE ? cudaMemAccessFlagsProtReadWrite
              : a == CP_ACCESS_READ    ? cudaMemAccessFlagsProtRead
                                       : cudaMemAccessFlagsProtNone;
    CHECK(cudaMemPoolSetAccess(p->h, &d, 1), "cudaMemPoolSetAccess");
    return CP_OK;
}

cp_status cp_cuda_mempool_get_access(cp_mempool *p, int dev, cp_access *a)
{
    CP_GUARD();
    struct cudaMemLocation loc;
    enum cudaMemAccessFlags f = cudaMemAccessFlagsProtNone;
    cp_status st;
    if (!p || !a)
        return cp_error_set(CP_ERR_INVALID, "mempool_get_access: NULL argument");
    if ((st = cp_cuda_check_device(dev)) != CP_OK)
        return st;
    memset(&loc, 0, sizeof loc);
    loc.type = cudaMemLocationTypeDevice;
    loc.id = dev;
    CHECK(cudaMemPoolGetAccess(&f, p->h, &loc), "cudaMemPoolGetAccess");
    *a = f == cudaMemAccessFlagsProtReadWrite ? CP_ACCESS_READWRITE
         : f == cudaMemAccessFlagsProtRead    ? CP_ACCESS_READ
                                              : CP_ACCESS_NONE;
    return CP_OK;
}
