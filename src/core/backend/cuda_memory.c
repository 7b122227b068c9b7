/*
 * cuda_memory.c: the CUDA backend's raw memory (cudaMalloc and its kinds,
 * cudaMallocAsync from the current pool) and copies (policy in cuda.c).
 */
#include "cuda_impl.h"

/* ---- raw memory --------------------------------------------------------------------- */

cp_status cp_cuda_mem_alloc_on(int dev, void **out, size_t bytes, cp_memkind kind)
{
    CP_GUARD();
    void *p = NULL;
    cp_status st;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mem_alloc: out is NULL");
    *out = NULL;
    if ((st = cp_cuda_check_device(dev)) != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    switch (kind) {
    case CP_MEM_DEVICE: CHECK(cudaMalloc(&p, bytes), "cudaMalloc"); break;
    case CP_MEM_MANAGED:
        CHECK(cudaMallocManaged(&p, bytes, cudaMemAttachGlobal), "cudaMallocManaged");
        break;
    case CP_MEM_PINNED: CHECK(cudaMallocHost(&p, bytes), "cudaMallocHost"); break;
    default: return cp_error_set(CP_ERR_INVALID, "mem_alloc: unknown memory kind %d", (int)kind);
    }
    *out = p;
    return CP_OK;
}

cp_status cp_cuda_mem_alloc(void **out, size_t bytes, cp_memkind kind)
{
    CP_GUARD();
    return cp_cuda_mem_alloc_on(CP_DEVICE, out, bytes, kind);
}

cp_status cp_cuda_mem_free_on(int dev, void *p, cp_memkind kind)
{
    CP_GUARD();
    if (!p)
        return CP_OK;
    if (dev >= 0 && dev < cp_cuda_device_count() && cp_cuda_use_device(dev) != CP_OK)
        (void)cudaGetLastError(); /* shutting down: the free tolerates it */
    switch (kind) {
    case CP_MEM_DEVICE:
    case CP_MEM_MANAGED: return cp_cuda_release_result(cudaFree(p), "cudaFree");
    case CP_MEM_PINNED: return cp_cuda_release_result(cudaFreeHost(p), "cudaFreeHost");
    default: return cp_error_set(CP_ERR_INVALID, "mem_free: unknown memory kind %d", (int)kind);
    }
}

/* Frees where the memory lives: cudaFree synchronizes that device. */
cp_status cp_cuda_mem_free(void *p, cp_memkind kind)
{
    CP_GUARD();
    struct cudaPointerAttributes a;
    int dev = CP_DEVICE;
    if (!p)
        return CP_OK;
    if (cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeDevice)
        dev = a.device;
    (void)cudaGetLastError();
    return cp_cuda_mem_free_on(dev, p, kind);
}

cp_status cp_cuda_mem_alloc_async(void **out, size_t bytes, cp_stream *s)
{
    CP_GUARD();
    void *p = NULL;
    if (!out)
        return cp_error_set(CP_ERR_INVALID, "mem_alloc_async: out is NULL");
    *out = NULL;
    ENTER_STREAM(s); /* the current pool of the stream's device */
    CHECK(cudaMallocAsync(&p, bytes, cp_cuda_stream_handle(s)), "cudaMallocAsync");
    *out = p;
    return CP_OK;
}

cp_status cp_cuda_mem_free_async(void *p, cp_stream *s)
{
    CP_GUARD();
    if (!p)
        return CP_OK;
    if (cp_cuda_use_device(cp_cuda_stream_dev(s)) != CP_OK)
        (void)cudaGetLastError(); /* shutting down: the free tolerates it */
    return cp_cuda_release_result(cudaFreeAsync(p, cp_cuda_stream_handle(s)), "cudaFreeAsync");
}

/* ---- copies ------------------------------------------------------------------------ */

cp_status cp_cuda_memcpy_async(void *dst, const void *src, size_t bytes, cp_stream *s)
{
    CP_GUARD();
    if (bytes == 0)
        return CP_OK;
    if (!dst || !src)
        return cp_error_set(CP_ERR_INVALID, "memcpy_async: dst or src is NULL");
    ENTER_STREAM(s);
    /* cudaMemcpyDefault: unified addressing tells the direction. */
    CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cp_cuda_stream_handle(s)),
          "cudaMemcpyAsync");
    return CP_OK;
}

cp_status cp_cuda_memset_async(void *dst, int byte, size_t bytes, cp_stream *s)
{
    CP_GUARD();
    if (bytes == 0)
        return CP_OK;
    if (!dst)
        return cp_error_set(CP_ERR_INVALID, "memset_async: dst is NULL");
    ENTER_STREAM(s);
    CHECK(cudaMemsetAsync(dst, byte, bytes, cp_cuda_stream_handle(s)), "cudaMemsetAsync");
    return CP_OK;
}

cp_status cp_cuda_memcpy_peer_async(void *dst, int dst_dev, const void *src, int src_dev,
                                           size_t bytes, cp_stream *s)
{
    CP_GUARD();
    cp_status st;
    if ((st = cp_cuda_check_device(dst_dev)) != CP_OK ||
        (st = cp_cuda_check_device(src_dev)) != CP_OK)
        return st;
    if (bytes == 0)
        return CP_OK;
    if (!dst || !src)
        return cp_error_set(CP_ERR_INVALID, "memcpy_peer_async: dst or src is NULL");
    ENTER_STREAM(s);
    CHECK(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, cp_cuda_stream_handle(s)),
          "cudaMemcpyPeerAsync");
    return CP_OK;
}
