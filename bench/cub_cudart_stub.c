/*
 * cub_cudart_stub.c: a stand-in for the CUDA runtime (libcudart.so.13) with
 * just what bench/cub_replay.cu calls, so that CUB's real
 * CachingDeviceAllocator runs on a machine without a GPU
 * (bench/cub-host-check.sh).  Nothing of it is a device:
 *   - cudaMalloc hands out increasing addresses that are never touched (CUB
 *     never touches them); CUB_STUB_LIMIT=N makes it fail with
 *     cudaErrorMemoryAllocation once the bytes held would pass N, as a full
 *     device does;
 *   - every event is complete when queried, as on a GPU synchronized before
 *     each allocation (cub_replay's "sync" mode); CUB_STUB_EVENTS=never makes
 *     every query answer cudaErrorNotReady (streams that never catch up);
 *   - streams are numbers; synchronization does nothing.
 * Built as libcudart.so.13 with the runtime's symbol version
 * (bench/cub_cudart_stub.map) and found first through LD_LIBRARY_PATH.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

static uint64_t next_addr = (uint64_t)1 << 40, held, limit;
static int never, limit_read;
static cudaError_t last = cudaSuccess;

typedef struct blk {
    uint64_t addr, size;
    struct blk *next;
} blk;
static blk *blocks; /* a list is enough: the replayer calls cudaFree rarely */

static void read_env(void)
{
    const char *l = getenv("CUB_STUB_LIMIT"), *e = getenv("CUB_STUB_EVENTS");
    if (limit_read)
        return;
    limit_read = 1;
    limit = l ? strtoull(l, NULL, 10) : 0;
    never = e && strcmp(e, "never") == 0;
}

cudaError_t cudaMalloc(void **p, size_t size)
{
    blk *b;
    read_env();
    if ((limit && (size > limit || held > limit - size)) || !(b = malloc(sizeof *b))) {
        last = cudaErrorMemoryAllocation;
        return last;
    }
    b->addr = next_addr;
    b->size = size;
    b->next = blocks;
    blocks = b;
    next_addr += (size + 4095) / 4096 * 4096 + 4096;
    held += size;
    *p = (void *)(uintptr_t)b->addr;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    blk **pp, *b;
    if (!p)
        return cudaSuccess;
    for (pp = &blocks; (b = *pp) != NULL; pp = &b->next) {
        if (b->addr == (uint64_t)(uintptr_t)p) {
            *pp = b->next;
            held -= b->size;
            free(b);
            return cudaSuccess;
        }
    }
    return cudaErrorInvalidValue;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    (void)flags;
    *e = (cudaEvent_t)malloc(1);
    return *e ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    (void)e;
    (void)s;
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    (void)e;
    read_env();
    return never ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    static uintptr_t n = 0x100;
    (void)flags;
    *s = (cudaStream_t)(n += 0x100);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    (void)s;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
    *d = 0;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d)
{
    return d == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
    (void)d;
    memset(p, 0, sizeof *p);
    strcpy(p->name, "no GPU: the CUDA runtime stand-in of bench/cub_cudart_stub.c");
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = 13000;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last;
    last = cudaSuccess;
    return e;
}

const char *cudaGetErrorName(cudaError_t e)
{
    return e == cudaErrorMemoryAllocation ? "cudaErrorMemoryAllocation" : "cudaError (stub)";
}

const char *cudaGetErrorString(cudaError_t e)
{
    return e == cudaErrorMemoryAllocation ? "out of memory" : "error (stub)";
}

/* What nvcc's generated code registers at start-up (no kernels here). */
void **__cudaRegisterFatBinary(void *fat);
void __cudaRegisterFatBinaryEnd(void **h);
void __cudaUnregisterFatBinary(void **h);
void __cudaRegisterVar(void **h, char *host, char *dev, const char *name, int ext, size_t size,
                       int constant, int global);
static void *fat_handle;
void **__cudaRegisterFatBinary(void *fat)
{
    (void)fat;
    return &fat_handle;
}
void __cudaRegisterFatBinaryEnd(void **h)
{
    (void)h;
}
void __cudaUnregisterFatBinary(void **h)
{
    (void)h;
}
void __cudaRegisterVar(void **h, char *host, char *dev, const char *name, int ext, size_t size,
                       int constant, int global)
{
    (void)h, (void)host, (void)dev, (void)name, (void)ext, (void)size, (void)constant, (void)global;
}
