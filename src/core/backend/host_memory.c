/*
 * host_memory.c: the host backend's raw memory, mem_alloc and mem_free
 * (policy in host.c): whole pages mapped from the OS, registered by address
 * so that free, the legacy IPC path (host_ipc.c) and the device accounts know
 * them.
 */
#include "host_impl.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static cp_ptrmap mem_map;

void cp_host_mem_lock(void)
{
    pthread_mutex_lock(&mem_lock);
}

void cp_host_mem_unlock(void)
{
    pthread_mutex_unlock(&mem_lock);
}

hmem *cp_host_mem_get_locked(const void *p)
{
    return mem_map.slots ? (hmem *)cp_ptrmap_get(&mem_map, (uint64_t)(uintptr_t)p) : NULL;
}

static size_t page_round(size_t bytes)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + pg - 1) / pg * pg;
}

int cp_host_mem_register(void *p, hmem *m)
{
    int rc;
    pthread_mutex_lock(&mem_lock);
    rc = (mem_map.slots || cp_ptrmap_init(&mem_map, 64) == 0) &&
         cp_ptrmap_put(&mem_map, (uint64_t)(uintptr_t)p, m) == 0;
    pthread_mutex_unlock(&mem_lock);
    return rc;
}

hmem *cp_host_mem_lookup(const void *p, int remove)
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

cp_status cp_host_mem_alloc_on(int dev, void **out, size_t bytes, cp_memkind kind)
{
    CP_GUARD();
    void *p;
    size_t len;
    hmem *m;
    cp_status st;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mem_alloc: out is NULL");
    *out = NULL;
    if ((st = cp_host_check_device(dev)) != CP_OK)
        return st;
    if (kind != CP_MEM_DEVICE && kind != CP_MEM_MANAGED && kind != CP_MEM_PINNED)
        return cp_error_set(CP_ERR_INVALID, "mem_alloc: unknown memory kind %d", (int)kind);
    if (bytes == 0)
        return CP_OK; /* cudaMalloc(0) succeeds with NULL */
    if (cp_host_sched_too_big(bytes))
        return cp_error_set(CP_ERR_OOM,
                            "out of memory: %zu bytes exceed the host's memory and swap", bytes);
    len = page_round(bytes);
    if (kind == CP_MEM_DEVICE) {
        (void)cp_host_device_wait(0);
        if (!cp_host_mem_charge(dev, len))
            return cp_error_set(CP_ERR_OOM,
                                "out of memory: %zu bytes exceed what is left of device %d's "
                                "share of the host's memory",
                                bytes, dev);
    }
    m = malloc(sizeof *m);
    p = m ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
          : MAP_FAILED;
    if (p == MAP_FAILED || !cp_host_mem_register(p, m)) {
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

cp_status cp_host_mem_alloc(void **out, size_t bytes, cp_memkind kind)
{
    CP_GUARD();
    return cp_host_mem_alloc_on(cp_host_get_device(), out, bytes, kind);
}

cp_status cp_host_mem_free(void *p, cp_memkind kind)
{
    CP_GUARD();
    hmem *m;
    (void)kind;
    if (!p)
        return CP_OK;
    (void)cp_host_device_wait(0);
    m = cp_host_mem_lookup(p, 0);
    if (!m || m->imported)
        return cp_cuda_error(CP_ERR_INVALID, CP_CUDA_INVALID_VALUE,
                             "%p was not allocated by mem_alloc (or was already "
                             "freed)",
                             p);
    cp_host_mem_lookup(p, 1);
    munmap(p, m->len);
    if (m->kind == CP_MEM_DEVICE)
        cp_host_mem_uncharge(m->dev, m->len);
    if (m->fd >= 0)
        close(m->fd);
    free(m);
    return CP_OK;
}

cp_status cp_host_mem_free_on(int dev, void *p, cp_memkind kind)
{
    CP_GUARD();
    (void)dev; /* the registry knows the device */
    return cp_host_mem_free(p, kind);
}
