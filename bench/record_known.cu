/*
 * record_known.cu: a CUDA program whose allocations are known, for
 * bench/record_check.sh (cupola record's ground truth on the GPU).
 *
 *   record_known known LOG   every allocation path cupola record claims to
 *                            see, once or more, each logged to LOG as the
 *                            program saw it:
 *                              alloc KIND 0xPTR SIZE 0xSTREAM 0xPOOL CALL
 *                              free 0xPTR
 *                              map 0xPTR SIZE 0xHANDLE / unmap 0xPTR SIZE
 *   record_known loop N      N x {cudaMalloc 1 MiB, cudaFree}, then prints
 *                            "ready N" and sleeps (the script kills it)
 *
 * Every CUDA call is checked; exit status 1 on any error.
 * Build: nvcc -O2 -arch=sm_90 -o build/bench/record_known bench/record_known.cu -lcuda
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime.h>

static FILE *out_log;

static void die(const char *what, int line, const char *err)
{
    std::fprintf(stderr, "record_known: %s failed at line %d: %s\n", what, line, err);
    std::exit(1);
}
#define CK(call)                                                          \
    do {                                                                  \
        cudaError_t e_ = (call);                                          \
        if (e_ != cudaSuccess)                                            \
            die(#call, __LINE__, cudaGetErrorName(e_));                   \
    } while (0)
#define CKD(call)                                                         \
    do {                                                                  \
        CUresult r_ = (call);                                             \
        if (r_ != CUDA_SUCCESS) {                                         \
            const char *s_ = "?";                                         \
            cuGetErrorName(r_, &s_);                                      \
            die(#call, __LINE__, s_);                                     \
        }                                                                 \
    } while (0)

/* glibc prints a null %p as "(nil)": addresses go out as 0x%llx */
static unsigned long long u(const void *p)
{
    return (unsigned long long)(uintptr_t)p;
}
static void alloc(const char *kind, const void *p, size_t size, const void *stream,
                  const void *pool, const char *call)
{
    std::fprintf(out_log, "alloc %s 0x%llx %zu 0x%llx 0x%llx %s\n", kind, u(p), size, u(stream),
                 u(pool), call);
}
static void freed(const void *p)
{
    std::fprintf(out_log, "free 0x%llx\n", u(p));
}

__global__ void touch(char *p, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = (char)i;
}

static int known(const char *path)
{
    static const size_t sizes[] = {256, 4096, 1 << 20, 3 << 20, 64 << 20, 777};
    void *d[6];
    cudaStream_t s;
    cudaMemPool_t pool;
    cudaMemPoolProps props;
    out_log = std::fopen(path, "w");
    if (!out_log)
        die("fopen", __LINE__, path);
    CK(cudaFree(0)); /* the context first: what it allocates comes before */
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    /* cudaMalloc / cudaFree */
    for (int i = 0; i < 6; i++) {
        CK(cudaMalloc(&d[i], sizes[i]));
        alloc("device", d[i], sizes[i], nullptr, nullptr, "cudaMalloc");
    }
    touch<<<64, 256, 0, s>>>((char *)d[4], sizes[4]);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s));
    for (int i = 5; i >= 0; i -= 2) {
        CK(cudaFree(d[i]));
        freed(d[i]);
    }
    /* stream-ordered, default pool, on a stream of its own */
    void *a[4];
    for (int i = 0; i < 4; i++) {
        CK(cudaMallocAsync(&a[i], sizes[i], s));
        alloc("device", a[i], sizes[i], s, nullptr, "cudaMallocAsync");
    }
    for (int i = 0; i < 4; i++) {
        CK(cudaFreeAsync(a[i], s));
        freed(a[i]);
    }
    CK(cudaStreamSynchronize(s));
    /* a pool of its own */
    std::memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    CK(cudaMemPoolCreate(&pool, &props));
    void *pa[2];
    for (int i = 0; i < 2; i++) {
        CK(cudaMallocFromPoolAsync(&pa[i], sizes[2 + i], pool, s));
        alloc("device", pa[i], sizes[2 + i], s, pool, "cudaMallocFromPoolAsync");
    }
    CK(cudaFreeAsync(pa[1], s));
    freed(pa[1]);
    CK(cudaFreeAsync(pa[0], s));
    freed(pa[0]);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemPoolDestroy(pool));
    /* managed and pinned: kept apart */
    void *m, *h1, *h2;
    CK(cudaMallocManaged(&m, 1 << 20));
    alloc("managed", m, 1 << 20, nullptr, nullptr, "cudaMallocManaged");
    CK(cudaMallocHost(&h1, 8192));
    alloc("pinned", h1, 8192, nullptr, nullptr, "cudaMallocHost");
    CK(cudaHostAlloc(&h2, 12288, cudaHostAllocDefault));
    alloc("pinned", h2, 12288, nullptr, nullptr, "cudaHostAlloc");
    CK(cudaFree(m));
    freed(m);
    CK(cudaFreeHost(h1));
    freed(h1);
    CK(cudaFreeHost(h2));
    freed(h2);
    /* the driver directly, as XLA does */
    CUdeviceptr dp;
    CKD(cuMemAlloc(&dp, 5 << 20));
    alloc("device", (void *)dp, 5 << 20, nullptr, nullptr, "cuMemAlloc_v2");
    CKD(cuMemFree(dp));
    freed((void *)dp);
    CUstream cs;
    CKD(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
    CKD(cuMemAllocAsync(&dp, 1 << 16, cs));
    alloc("device", (void *)dp, 1 << 16, cs, nullptr, "cuMemAllocAsync");
    CKD(cuMemFreeAsync(dp, cs));
    freed((void *)dp);
    CKD(cuStreamSynchronize(cs));
    CKD(cuStreamDestroy(cs));
    /* virtual memory: one granule created, mapped, unmapped, released */
    CUmemAllocationProp vp;
    std::memset(&vp, 0, sizeof vp);
    vp.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    vp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    vp.location.id = 0;
    size_t gran = 0;
    CKD(cuMemGetAllocationGranularity(&gran, &vp, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemGenericAllocationHandle hdl;
    CKD(cuMemCreate(&hdl, gran, &vp, 0));
    alloc("vmm", (void *)hdl, gran, nullptr, nullptr, "cuMemCreate");
    CUdeviceptr va;
    CKD(cuMemAddressReserve(&va, gran, 0, 0, 0));
    CKD(cuMemMap(va, gran, 0, hdl, 0));
    std::fprintf(out_log, "map 0x%llx %zu 0x%llx\n", (unsigned long long)va, gran,
                 (unsigned long long)hdl);
    CKD(cuMemUnmap(va, gran));
    std::fprintf(out_log, "unmap 0x%llx %zu\n", (unsigned long long)va, gran);
    CKD(cuMemRelease(hdl));
    freed((void *)hdl);
    CKD(cuMemAddressFree(va, gran));
    /* a request that fails: recorded as a failure, not an allocation */
    void *big = nullptr;
    if (cudaMalloc(&big, (size_t)1 << 50) == cudaSuccess)
        die("a 1 PiB cudaMalloc", __LINE__, "succeeded");
    std::fprintf(out_log, "fail %zu\n", (size_t)1 << 50);
    (void)cudaGetLastError();
    /* the rest of the first six, freed last */
    for (int i = 4; i >= 0; i -= 2) {
        CK(cudaFree(d[i]));
        freed(d[i]);
    }
    CK(cudaStreamDestroy(s));
    std::fclose(out_log);
    return 0;
}

static int loop(int n)
{
    void *p;
    CK(cudaFree(0));
    for (int i = 0; i < n; i++) {
        CK(cudaMalloc(&p, 1 << 20));
        CK(cudaFree(p));
    }
    std::printf("ready %d\n", n);
    std::fflush(stdout);
    /* more, unflushed perhaps, while the script kills it */
    for (;;) {
        CK(cudaMalloc(&p, 1 << 20));
        CK(cudaFree(p));
        usleep(1000);
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && std::strcmp(argv[1], "known") == 0)
        return known(argv[2]);
    if (argc == 3 && std::strcmp(argv[1], "loop") == 0)
        return loop(std::atoi(argv[2]));
    std::fprintf(stderr, "usage: record_known known LOG | loop N\n");
    return 2;
}
