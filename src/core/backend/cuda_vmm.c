/*
 * cuda_vmm.c: the CUDA backend's virtual memory management (backend.h's vm_*
 * entries, for the vmm pool) over the driver's cuMem* calls.
 */
#include "cuda_impl.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cuda.h>

/* ---- virtual memory management (the vmm pool) ---------------------------- */

/* The driver's VMM calls, found through the runtime (cudaGetDriverEntryPoint
 * ByVersion) so that the module never links libcuda and still loads on a
 * machine without a driver. */
typedef CUresult (*pfn_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*pfn_addr_free)(CUdeviceptr, size_t);
typedef CUresult (*pfn_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                               unsigned long long);
typedef CUresult (*pfn_release)(CUmemGenericAllocationHandle);
typedef CUresult (*pfn_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                            unsigned long long);
typedef CUresult (*pfn_unmap)(CUdeviceptr, size_t);
typedef CUresult (*pfn_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*pfn_gran)(size_t *, const CUmemAllocationProp *,
                             CUmemAllocationGranularity_flags);
typedef CUresult (*pfn_errname)(CUresult, const char **);

static struct {
    pthread_once_t once;
    cp_status st;
    char why[256];
    pfn_reserve reserve;
    pfn_addr_free addr_free;
    pfn_create create;
    pfn_release release;
    pfn_map map;
    pfn_unmap unmap;
    pfn_access access;
    pfn_gran gran;
    pfn_errname errname;
    size_t granularity;
} VM = {PTHREAD_ONCE_INIT, CP_OK, "", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

static void vm_prop(CUmemAllocationProp *prop, int dev)
{
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = dev;
}

static int vm_sym(const char *name, void **fn)
{
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !*fn) {
        (void)cudaGetLastError();
        snprintf(VM.why, sizeof VM.why, "cudaErrorNotSupported: the driver has no %s", name);
        return 0;
    }
    return 1;
}

static void vm_load(void)
{
    CUmemAllocationProp prop;
    int ok = vm_sym("cuMemAddressReserve", (void **)&VM.reserve) &&
             vm_sym("cuMemAddressFree", (void **)&VM.addr_free) &&
             vm_sym("cuMemCreate", (void **)&VM.create) &&
             vm_sym("cuMemRelease", (void **)&VM.release) &&
             vm_sym("cuMemMap", (void **)&VM.map) && vm_sym("cuMemUnmap", (void **)&VM.unmap) &&
             vm_sym("cuMemSetAccess", (void **)&VM.access) &&
             vm_sym("cuMemGetAllocationGranularity", (void **)&VM.gran) &&
             vm_sym("cuGetErrorName", (void **)&VM.errname);
    (void)cudaGetLastError();
    if (ok) {
        vm_prop(&prop, CP_DEVICE);
        if (VM.gran(&VM.granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) !=
                CUDA_SUCCESS || !VM.granularity) {
            snprintf(VM.why, sizeof VM.why, "cuMemGetAllocationGranularity failed");
            ok = 0;
        }
    }
    VM.st = ok ? CP_OK : CP_ERR_UNSUPPORTED;
}

static cp_status vm_ready(void)
{
    CP_GUARD();
    pthread_once(&VM.once, vm_load);
    if (VM.st != CP_OK)
        return cp_error_set(VM.st, "%s", VM.why);
    return CP_OK;
}

static cp_status vm_fail(CUresult r, const char *op)
{
    CP_GUARD();
    const char *name = NULL;
    if (VM.errname)
        VM.errname(r, &name);
    return cp_error_set(r == CUDA_ERROR_OUT_OF_MEMORY ? CP_ERR_OOM
                        : r == CUDA_ERROR_INVALID_VALUE ? CP_ERR_INVALID : CP_ERR_BACKEND,
                        "%s (%s)", name ? name : "CUDA_ERROR_UNKNOWN", op);
}

#define VM_CHECK(call, op)                                                                        \
    do {                                                                                          \
        CUresult vm_r_ = (call);                                                                  \
        if (vm_r_ != CUDA_SUCCESS)                                                                \
            return vm_fail(vm_r_, op);                                                            \
    } while (0)

cp_status cp_cuda_vm_granularity(int dev, size_t *out)
{
    CP_GUARD();
    cp_status st = vm_ready();
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    {
        CUmemAllocationProp prop;
        size_t g = 0;
        vm_prop(&prop, dev);
        VM_CHECK(VM.gran(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
                 "cuMemGetAllocationGranularity");
        *out = g ? g : VM.granularity;
    }
    return CP_OK;
}

cp_status cp_cuda_vm_reserve(int dev, void **out, size_t bytes)
{
    CP_GUARD();
    CUdeviceptr p = 0;
    cp_status st = vm_ready();
    *out = NULL;
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    VM_CHECK(VM.reserve(&p, bytes, VM.granularity, 0, 0), "cuMemAddressReserve");
    *out = (void *)(uintptr_t)p;
    return CP_OK;
}

cp_status cp_cuda_vm_free_range(int dev, void *p, size_t bytes)
{
    CP_GUARD();
    cp_status st = vm_ready();
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    VM_CHECK(VM.addr_free((CUdeviceptr)(uintptr_t)p, bytes), "cuMemAddressFree");
    return CP_OK;
}

cp_status cp_cuda_vm_create(int dev, uint64_t *handle, size_t bytes)
{
    CP_GUARD();
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle h = 0;
    cp_status st = vm_ready();
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    vm_prop(&prop, dev);
    VM_CHECK(VM.create(&h, bytes, &prop, 0), "cuMemCreate");
    *handle = (uint64_t)h;
    return CP_OK;
}

cp_status cp_cuda_vm_release(int dev, uint64_t handle, size_t bytes)
{
    CP_GUARD();
    cp_status st = vm_ready();
    CUresult r;
    (void)bytes;
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    r = VM.release((CUmemGenericAllocationHandle)handle);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED)
        return vm_fail(r, "cuMemRelease");
    return CP_OK;
}

cp_status cp_cuda_vm_map(int dev, void *p, size_t bytes, uint64_t handle)
{
    CP_GUARD();
    cp_status st = vm_ready();
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    VM_CHECK(VM.map((CUdeviceptr)(uintptr_t)p, bytes, 0, (CUmemGenericAllocationHandle)handle, 0),
             "cuMemMap");
    return CP_OK;
}

cp_status cp_cuda_vm_unmap(int dev, void *p, size_t bytes)
{
    CP_GUARD();
    cp_status st = vm_ready();
    CUresult r;
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    r = VM.unmap((CUdeviceptr)(uintptr_t)p, bytes);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED)
        return vm_fail(r, "cuMemUnmap");
    return CP_OK;
}

cp_status cp_cuda_vm_set_access(int dev, void *p, size_t bytes)
{
    CP_GUARD();
    CUmemAccessDesc d;
    cp_status st = vm_ready();
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = dev;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    VM_CHECK(VM.access((CUdeviceptr)(uintptr_t)p, bytes, &d, 1), "cuMemSetAccess");
    return CP_OK;
}
