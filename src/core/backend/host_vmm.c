/*
 * host_vmm.c: the host backend's virtual memory management (backend.h's
 * vm_* entries, for the vmm pool): real pages under PROT_NONE reservations.
 */
#include "host_impl.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

/* ---- virtual memory management (the vmm pool) -------------------------- */

/* The GPU's granule (cuMemGetAllocationGranularity on current devices), so
 * that a pool's page accounting on the host is what the GPU would map. */
#define HOST_VM_GRANULE ((size_t)2 << 20)

static atomic_uint_least64_t next_vm_handle = 1;

cp_status cp_host_vm_granularity(int dev, size_t *out)
{
    CP_GUARD();
    cp_status st = cp_host_check_device(dev);
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
cp_status cp_host_vm_reserve(int dev, void **out, size_t bytes)
{
    CP_GUARD();
    size_t span;
    uintptr_t base, start;
    void *p;
    cp_status st = cp_host_check_device(dev);
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

cp_status cp_host_vm_free_range(int dev, void *p, size_t bytes)
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
cp_status cp_host_vm_create(int dev, uint64_t *handle, size_t bytes)
{
    CP_GUARD();
    cp_status st = cp_host_check_device(dev);
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

cp_status cp_host_vm_release(int dev, uint64_t handle, size_t bytes)
{
    CP_GUARD();
    if (!handle)
        return cp_error_set(CP_ERR_INVALID, "vm_release: no such handle");
    cp_host_mem_uncharge(dev, bytes);
    return CP_OK;
}

cp_status cp_host_vm_map(int dev, void *p, size_t bytes, uint64_t handle)
{
    (void)dev;
    CP_GUARD();
    if (!vm_aligned(p, bytes) || !handle)
        return cp_error_set(CP_ERR_INVALID, "vm_map: %p, %zu bytes: not granule-aligned", p,
                            bytes);
    return CP_OK; /* accessible only after vm_set_access, as on the GPU */
}

cp_status cp_host_vm_unmap(int dev, void *p, size_t bytes)
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

cp_status cp_host_vm_set_access(int dev, void *p, size_t bytes)
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
