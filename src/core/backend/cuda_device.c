/*
 * cuda_device.c: the CUDA backend's devices (policy in cuda.c): how many,
 * the thread's current one and making an object's device current, their
 * description, synchronization and memory figures, peer access, and each
 * device's legacy stream.
 */
#include "cuda_impl.h"

#include <stdio.h>
#include <string.h>

_Thread_local int cp_cuda_tl_device;

static int device_count_cached = -1;

int cp_cuda_device_count(void)
{
    if (device_count_cached < 0) {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) {
            (void)cudaGetLastError();
            n = 0;
        }
        device_count_cached = n;
    }
    return device_count_cached;
}

cp_status cp_cuda_check_device(int dev)
{
    CP_GUARD();
    int n = cp_cuda_device_count();
    if (dev < 0 || dev >= n)
        return cp_error_set(CP_ERR_INVALID,
                            "cudaErrorInvalidDevice: invalid device ordinal (device %d; this "
                            "machine has %d)",
                            dev, n);
    return CP_OK;
}

/* Makes dev the calling thread's CUDA device (only when it is not). */
cp_status cp_cuda_use_device(int dev)
{
    CP_GUARD();
    int cur = -1;
    cudaError_t e = cudaGetDevice(&cur);
    if (e != cudaSuccess)
        return cp_cuda_fail(e, "cudaGetDevice");
    if (cur != dev)
        CHECK(cudaSetDevice(dev), "cudaSetDevice");
    return CP_OK;
}

int cp_cuda_stream_dev(const cp_stream *s)
{
    return s ? s->dev : cp_cuda_tl_device;
}

/* ---- device ----------------------------------------------------------------- */

cp_status cp_cuda_device_info_on(int dev, cp_device_info *out)
{
    CP_GUARD();
    struct cudaDeviceProp prop;
    int v = 0;
    cp_status st;

    if (!out)
        return cp_error_set(CP_ERR_INVALID, "device_info: out is NULL");
    if ((st = cp_cuda_check_device(dev)) != CP_OK)
        return st;
    memset(out, 0, sizeof *out);
    CHECK(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    snprintf(out->name, sizeof out->name, "%s", prop.name);
    out->index = dev;
    out->memory = (uint64_t)prop.totalGlobalMem;
    out->sms = prop.multiProcessorCount;
    out->cc_major = prop.major;
    out->cc_minor = prop.minor;
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, dev),
          "cudaDeviceGetAttribute(cudaDevAttrMemoryPoolsSupported)");
    out->mempools = v != 0;
    CHECK(cudaDriverGetVersion(&out->driver), "cudaDriverGetVersion");
    CHECK(cudaRuntimeGetVersion(&out->runtime), "cudaRuntimeGetVersion");
    ENTER_DEVICE(dev);
    CHECK(cudaDeviceGetStreamPriorityRange(&out->priority_least, &out->priority_greatest),
          "cudaDeviceGetStreamPriorityRange");
    return CP_OK;
}

cp_status cp_cuda_device_info(cp_device_info *out)
{
    CP_GUARD();
    return cp_cuda_device_info_on(CP_DEVICE, out);
}

cp_status cp_cuda_device_synchronize_on(int dev)
{
    CP_GUARD();
    cp_status st = cp_cuda_check_device(dev);
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    CHECK(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    cp_cuda_reap_retired_pools(dev); /* the device is idle: no free is queued on them */
    return CP_OK;
}

cp_status cp_cuda_device_synchronize(void)
{
    CP_GUARD();
    return cp_cuda_device_synchronize_on(CP_DEVICE);
}

cp_status cp_cuda_mem_get_info_on(int dev, size_t *free_bytes, size_t *total_bytes)
{
    CP_GUARD();
    size_t f = 0, t = 0;
    cp_status st = cp_cuda_check_device(dev);
    if (st != CP_OK)
        return st;
    ENTER_DEVICE(dev);
    CHECK(cudaMemGetInfo(&f, &t), "cudaMemGetInfo");
    if (free_bytes)
        *free_bytes = f;
    if (total_bytes)
        *total_bytes = t;
    return CP_OK;
}

cp_status cp_cuda_mem_get_info(size_t *free_bytes, size_t *total_bytes)
{
    CP_GUARD();
    return cp_cuda_mem_get_info_on(CP_DEVICE, free_bytes, total_bytes);
}

cp_status cp_cuda_set_device(int dev)
{
    CP_GUARD();
    cp_status st = cp_cuda_check_device(dev);
    if (st == CP_OK)
        cp_cuda_tl_device = dev;
    return st;
}

int cp_cuda_get_device(void)
{
    return cp_cuda_tl_device;
}

int cp_cuda_stream_device(const cp_stream *s)
{
    return cp_cuda_stream_dev(s);
}

/* Per device, the legacy stream as an object that knows its device; id 0
 * like the NULL stream, and never destroyed (stream_destroy skips id 0). */
static cp_stream legacy_streams[CP_MAX_DEVICES];

cp_stream *cp_cuda_stream_legacy(int dev)
{
    if (dev < 0 || dev >= CP_MAX_DEVICES)
        return NULL;
    legacy_streams[dev].h = cudaStreamLegacy;
    legacy_streams[dev].id = 0;
    legacy_streams[dev].dev = dev;
    return &legacy_streams[dev];
}

cp_status cp_cuda_can_access_peer(int dev, int peer, int *yes)
{
    CP_GUARD();
    cp_status st;
    if (!yes)
        return cp_error_set(CP_ERR_INVALID, "can_access_peer: yes is NULL");
    if ((st = cp_cuda_check_device(dev)) != CP_OK || (st = cp_cuda_check_device(peer)) != CP_OK)
        return st;
    if (dev == peer) {
        *yes = 0;
        return CP_OK;
    }
    CHECK(cudaDeviceCanAccessPeer(yes, dev, peer), "cudaDeviceCanAccessPeer");
    return CP_OK;
}

cp_status cp_cuda_enable_peer_access(int dev, int peer)
{
    CP_GUARD();
    cudaError_t e;
    cp_status st;
    if ((st = cp_cuda_check_device(dev)) != CP_OK || (st = cp_cuda_check_device(peer)) != CP_OK)
        return st;
    if (dev == peer)
        return cp_cuda_refuse(cudaErrorInvalidDevice,
                              "device %d cannot enable peer access to itself", dev);
    ENTER_DEVICE(dev);
    e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
        return CP_OK;
    }
    if (e != cudaSuccess)
        return cp_cuda_fail(e, "cudaDeviceEnablePeerAccess");
    return CP_OK;
}
