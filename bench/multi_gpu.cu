// bench/multi_gpu.cu: the C figures cupola's multi-device paths are held
// against (run beside bench/multi_gpu.lua, same machine, same run).
//   nvcc -O2 -arch=sm_90 -o multi_gpu bench/multi_gpu.cu && ./multi_gpu
// Prints "key value" lines:
//   peer_copy_gbps_0to1 / _1to0   cudaMemcpyPeerAsync of 256 MiB, events, median of 20
//   pair_ns_dev0                  cudaMallocAsync + cudaFreeAsync of 4 KiB on device 0
//                                 (default pool, threshold max), median of 5 x 20000
//   pair_ns_alternating           the same, devices 0 and 1 in turn (cudaSetDevice
//                                 whenever the device changes, as cupola's entry points do)
//   pair_ns_cross_pool            cudaMallocFromPoolAsync from device 1's default pool
//                                 on a stream of device 0 (+ cudaFreeAsync there)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#define CK(x)                                                                                 \
    do {                                                                                      \
        cudaError_t e_ = (x);                                                                 \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_)); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static double now_ns()
{
    return (double)std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

static double peer_gbps(int dst, int src, void *d, void *s, size_t bytes)
{
    cudaStream_t st;
    cudaEvent_t a, b;
    std::vector<double> ms;
    CK(cudaSetDevice(src));
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 25; i++) {
        float t = 0;
        CK(cudaEventRecord(a, st));
        CK(cudaMemcpyPeerAsync(d, dst, s, src, bytes, st));
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&t, a, b));
        if (i >= 5)
            ms.push_back(t);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    CK(cudaStreamDestroy(st));
    return (double)bytes / (median(ms) * 1e-3) / 1e9;
}

int main()
{
    int n = 0, can01 = 0, can10 = 0;
    CK(cudaGetDeviceCount(&n));
    if (n < 2) {
        printf("devices %d\nskipped needs two devices\n", n);
        return 0;
    }
    CK(cudaDeviceCanAccessPeer(&can01, 0, 1));
    CK(cudaDeviceCanAccessPeer(&can10, 1, 0));
    printf("devices %d\ncan_access_peer_0_1 %d\ncan_access_peer_1_0 %d\n", n, can01, can10);
    if (can01) {
        CK(cudaSetDevice(0));
        CK(cudaDeviceEnablePeerAccess(1, 0));
    }
    if (can10) {
        CK(cudaSetDevice(1));
        CK(cudaDeviceEnablePeerAccess(0, 0));
    }
    const size_t bytes = (size_t)256 << 20;
    void *b0, *b1;
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&b0, bytes));
    CK(cudaMemset(b0, 1, bytes));
    CK(cudaSetDevice(1));
    CK(cudaMalloc(&b1, bytes));
    CK(cudaMemset(b1, 2, bytes));
    CK(cudaDeviceSynchronize());
    printf("peer_copy_gbps_0to1 %.1f\n", peer_gbps(1, 0, b1, b0, bytes));
    printf("peer_copy_gbps_1to0 %.1f\n", peer_gbps(0, 1, b0, b1, bytes));
    CK(cudaFree(b1));
    CK(cudaSetDevice(0));
    CK(cudaFree(b0));

    // alloc + free pairs
    cudaStream_t s[2];
    cudaMemPool_t def[2];
    for (int d = 0; d < 2; d++) {
        uint64_t keep = UINT64_MAX;
        CK(cudaSetDevice(d));
        CK(cudaStreamCreateWithFlags(&s[d], cudaStreamNonBlocking));
        CK(cudaDeviceGetDefaultMemPool(&def[d], d));
        CK(cudaMemPoolSetAttribute(def[d], cudaMemPoolAttrReleaseThreshold, &keep));
    }
    {
        cudaMemAccessDesc acc = {};
        acc.location.type = cudaMemLocationTypeDevice;
        acc.location.id = 0;
        acc.flags = cudaMemAccessFlagsProtReadWrite;
        CK(cudaMemPoolSetAccess(def[1], &acc, 1));
    }
    const int N = 20000;
    for (int mode = 0; mode < 3; mode++) {
        std::vector<double> per;
        for (int rep = 0; rep < 6; rep++) {
            int cur = -1;
            CK(cudaGetDevice(&cur));
            double t0 = now_ns();
            for (int i = 0; i < N; i++) {
                void *p;
                int d = mode == 1 ? (i & 1) : 0;
                if (d != cur) {
                    CK(cudaSetDevice(d));
                    cur = d;
                }
                if (mode == 2)
                    CK(cudaMallocFromPoolAsync(&p, 4096, def[1], s[0]));
                else
                    CK(cudaMallocAsync(&p, 4096, s[d]));
                CK(cudaFreeAsync(p, s[d]));
            }
            double t1 = now_ns();
            CK(cudaStreamSynchronize(s[0]));
            CK(cudaStreamSynchronize(s[1]));
            if (rep > 0)
                per.push_back((t1 - t0) / N);
        }
        printf("%s %.0f\n", mode == 0 ? "pair_ns_dev0" : mode == 1 ? "pair_ns_alternating" : "pair_ns_cross_pool",
               median(per));
    }
    for (int d = 0; d < 2; d++)
        CK(cudaStreamDestroy(s[d]));
    return 0;
}
