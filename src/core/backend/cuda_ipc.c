/*
 * cuda_ipc.c: the CUDA backend across processes (policy in cuda.c): a pool
 * exported as a POSIX fd and imported, its blocks' export data, and the
 * legacy cudaIpcMemHandle path for cudaMalloc memory.
 */
#include "cuda_impl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

cp_status cp_cuda_mempool_export(cp_mempool *p, int *fd)
{
    CP_GUARD();
    int h = -1;
    if (!p || !fd)
        return cp_error_set(CP_ERR_INVALID, "mempool_export: NULL argument");
    *fd = -1;
    if (p->imported)
        return cp_cuda_refuse(cudaErrorInvalidValue, "an imported pool cannot be exported again");
    CHECK(cudaMemPoolExportToShareableHandle(&h, p->h, cudaMemHandleTypePosixFileDescriptor, 0),
          "cudaMemPoolExportToShareableHandle");
    *fd = h;
    return CP_OK;
}

cp_status cp_cuda_mempool_import(int fd, int dev, cp_mempool **out)
{
    CP_GUARD();
    struct cudaMemAccessDesc d;
    struct cudaMemLocation loc;
    enum cudaMemAccessFlags f = cudaMemAccessFlagsProtNone;
    cp_mempool *p;
    cudaError_t e;
    cp_status st;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mempool_import: out is NULL");
    *out = NULL;
    if ((st = cp_cuda_check_device(dev)) != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    if (!(p = calloc(1, sizeof *p)))
        return cp_error_set(CP_ERR_OOM, "mempool_import: out of host memory");
    e = cudaMemPoolImportFromShareableHandle(&p->h, (void *)(intptr_t)fd,
                                             cudaMemHandleTypePosixFileDescriptor, 0);
    if (e != cudaSuccess) {
        free(p);
        return cp_cuda_fail(e, "cudaMemPoolImportFromShareableHandle");
    }
    /* as CUDA's IPC sample: the importing device needs read-write access */
    memset(&loc, 0, sizeof loc);
    loc.type = cudaMemLocationTypeDevice;
    loc.id = dev;
    e = cudaMemPoolGetAccess(&f, p->h, &loc);
    if (e == cudaSuccess && f != cudaMemAccessFlagsProtReadWrite) {
        memset(&d, 0, sizeof d);
        d.location = loc;
        d.flags = cudaMemAccessFlagsProtReadWrite;
        e = cudaMemPoolSetAccess(p->h, &d, 1);
    }
    if (e != cudaSuccess) {
        st = cp_cuda_fail(e, "cudaMemPoolSetAccess (imported pool)");
        (void)cudaMemPoolDestroy(p->h);
        (void)cudaGetLastError();
        free(p);
        return st;
    }
    p->dev = dev;
    p->imported = 1;
    cp_cuda_mempool_register(p);
    *out = p;
    return CP_OK;
}

cp_status cp_cuda_mempool_export_ptr(void *ptr, cp_ipc_data *out)
{
    CP_GUARD();
    struct cudaMemPoolPtrExportData d;
    if (!ptr || !out)
        return cp_error_set(CP_ERR_INVALID, "mempool_export_ptr: NULL argument");
    memset(&d, 0, sizeof d);
    CHECK(cudaMemPoolExportPointer(&d, ptr), "cudaMemPoolExportPointer");
    memset(out, 0, sizeof *out);
    memcpy(out->bytes, &d, sizeof d < sizeof out->bytes ? sizeof d : sizeof out->bytes);
    return CP_OK;
}

cp_status cp_cuda_mempool_import_ptr(cp_mempool *p, const cp_ipc_data *data, size_t bytes,
                                            void **out)
{
    CP_GUARD();
    struct cudaMemPoolPtrExportData d;
    void *ptr = NULL;
    (void)bytes;
    if (!p || !data || !out)
        return cp_error_set(CP_ERR_INVALID, "mempool_import_ptr: NULL argument");
    *out = NULL;
    if (!p->imported)
        return cp_cuda_refuse(cudaErrorInvalidValue,
                              "buffers are imported into a pool imported with "
                              "cupola.mempool.import");
    memset(&d, 0, sizeof d);
    memcpy(&d, data->bytes, sizeof d < sizeof data->bytes ? sizeof d : sizeof data->bytes);
    ENTER_DEVICE(p->dev);
    CHECK(cudaMemPoolImportPointer(&ptr, p->h, &d), "cudaMemPoolImportPointer");
    *out = ptr;
    return CP_OK;
}

cp_status cp_cuda_ipc_get_handle(void *ptr, size_t bytes, cp_ipc_data *out, int *fd)
{
    CP_GUARD();
    cudaIpcMemHandle_t h;
    (void)bytes;
    if (!ptr || !out || !fd)
        return cp_error_set(CP_ERR_INVALID, "ipc_get_handle: NULL argument");
    *fd = -1;
    CHECK(cudaIpcGetMemHandle(&h, ptr), "cudaIpcGetMemHandle");
    memset(out, 0, sizeof *out);
    memcpy(out->bytes, &h, sizeof h < sizeof out->bytes ? sizeof h : sizeof out->bytes);
    return CP_OK;
}

cp_status cp_cuda_ipc_open_handle(int dev, const cp_ipc_data *data, int fd, size_t bytes,
                                         void **out)
{
    CP_GUARD();
    cudaIpcMemHandle_t h;
    void *p = NULL;
    cp_status st;
    (void)fd;
    (void)bytes;
    if (!data || !out)
        return cp_error_set(CP_ERR_INVALID, "ipc_open_handle: NULL argument");
    *out = NULL;
    if ((st = cp_cuda_check_device(dev)) != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    memcpy(&h, data->bytes, sizeof h < sizeof data->bytes ? sizeof h : sizeof data->bytes);
    CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
    *out = p;
    return CP_OK;
}

cp_status cp_cuda_ipc_close_handle(void *ptr, size_t bytes)
{
    CP_GUARD();
    (void)bytes;
    if (!ptr)
        return CP_OK;
    return cp_cuda_release_result(cudaIpcCloseMemHandle(ptr), "cudaIpcCloseMemHandle");
}
