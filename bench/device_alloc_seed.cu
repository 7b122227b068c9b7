// bench/device_alloc_seed.cu: the seed's in-kernel allocation written
// directly in CUDA C, beside the Lua benchmark (bench/device_alloc.lua):
// one atomicAdd of 16 bytes per thread on a device offset (seed 001), each
// thread writing its 16 bytes; and CUDA's in-kernel malloc/free of 16 bytes.
// Prints "name threads per_second" lines (median of 5 after a warm-up).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                         \
    do {                                                                                 \
        cudaError_t e_ = (x);                                                            \
        if (e_ != cudaSuccess) {                                                         \
            std::fprintf(stderr, "%s: %s (%s)\n", cudaGetErrorName(e_), cudaGetErrorString(e_), #x); \
            std::exit(1);                                                                \
        }                                                                                \
    } while (0)

__global__ void seed_bump(unsigned char *base, unsigned long long *offset, unsigned long long cap,
                          unsigned long long n)
{
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    unsigned long long old = atomicAdd(offset, 16ull);
    if (old + 16 <= cap) {
        unsigned long long *p = (unsigned long long *)(base + old);
        p[0] = i;
        p[1] = ~i;
    }
}

__global__ void cuda_malloc_free(unsigned long long n, unsigned long long *failed)
{
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    unsigned long long *p = (unsigned long long *)malloc(16);
    if (!p) {
        atomicAdd(failed, 1ull);
        return;
    }
    p[0] = i;
    p[1] = ~i;
    free(p);
}

template <class F> static double median_ms(F launch)
{
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    launch();
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::vector<float> t;
    for (int r = 0; r < 5; r++) {
        float ms;
        CHECK(cudaEventRecord(a));
        launch();
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return t[t.size() / 2];
}

int main()
{
    const unsigned long long counts[] = {10000ull, 100000ull, 1000000ull, 10000000ull};
    unsigned long long *off, *failed;
    unsigned char *base;
    const unsigned long long cap = 10000000ull * 16;
    CHECK(cudaMalloc(&base, cap));
    CHECK(cudaMalloc(&off, 8));
    CHECK(cudaMalloc(&failed, 8));
    CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 256u << 20));
    for (unsigned long long n : counts) {
        unsigned grid = (unsigned)((n + 255) / 256);
        double ms = median_ms([&] {
            cudaMemsetAsync(off, 0, 8);
            seed_bump<<<grid, 256>>>(base, off, cap, n);
        });
        std::printf("c_seed_bump_16 %llu %.6g\n", n, n / (ms * 1e-3));
    }
    for (unsigned long long n : {10000ull, 100000ull, 1000000ull}) {
        unsigned grid = (unsigned)((n + 255) / 256);
        CHECK(cudaMemset(failed, 0, 8));
        double ms = median_ms([&] { cuda_malloc_free<<<grid, 256>>>(n, failed); });
        unsigned long long f = 0;
        CHECK(cudaMemcpy(&f, failed, 8, cudaMemcpyDeviceToHost));
        std::printf("c_malloc_free_16 %llu %.6g failed=%llu\n", n, n / (ms * 1e-3), f);
    }
    return 0;
}
