/*
 * seed000.cu: the benchmark of seed 000 (cudaMalloc vs stream-ordered
 * cudaMallocAsync) as a standalone CUDA program, the reference that cupola's
 * own numbers (examples, Lua bench) are compared against.
 *
 * Each variant runs ITERATIONS x {allocate 4 MiB, sqrt_index kernel, free}
 * on one stream:
 *   malloc        cudaMalloc / cudaFree (both synchronize the device)
 *   async         cudaMallocAsync / cudaFreeAsync on the stream, default pool
 *                 with its default attributes
 *   kernels_only  the same kernels into one buffer allocated beforehand
 * Timing: events recorded on the stream around the loop, after one warm-up
 * run of every variant; each variant is repeated REPS times and the median
 * is reported.  Output: '#' comment lines, then one line
 *   seed000_c malloc_ms=X async_ms=Y kernels_only_ms=Z speedup=W
 * (speedup = malloc / async) for scripts.  Exit status non-zero on any CUDA
 * error or a wrong result.
 *
 * Build: nvcc -O3 -arch=sm_90 -o build/bench/seed000 bench/seed000.cu
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

#include "../cuda/kernel_body.h"

namespace {

constexpr size_t N = (size_t)1 << 20; /* float elements: 4 MiB */
constexpr int ITERATIONS = 100;
constexpr int REPS = 5;
constexpr unsigned BLOCK = 256;

void die_on(cudaError_t e, const char *what, int line)
{
    if (e != cudaSuccess) {
        std::fprintf(stderr, "seed000: %s failed at line %d: %s: %s\n", what, line,
                     cudaGetErrorName(e), cudaGetErrorString(e));
        std::exit(1);
    }
}
#define CK(call) die_on((call), #call, __LINE__)
/* After a launch: the launch's own error, not one left from earlier. */
#define CK_LAUNCH(what) die_on(cudaGetLastError(), what, __LINE__)

__global__ void sqrt_index(float *p, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = cp_body_sqrt_index((uint64_t)i);
}

enum Variant { MALLOC, ASYNC, KERNELS_ONLY };

struct Bench {
    cudaStream_t stream;
    cudaEvent_t start, stop;
    unsigned grid;
    float *fixed; /* the kernels-only buffer */
};

/* One timed run of a variant: milliseconds between the events around the
 * loop, i.e. the wall time the stream needed, host gaps included. */
float run_once(const Bench &b, Variant v)
{
    float ms = 0.0f;
    CK(cudaEventRecord(b.start, b.stream));
    for (int it = 0; it < ITERATIONS; it++) {
        float *p = b.fixed;
        if (v == MALLOC)
            CK(cudaMalloc(&p, N * sizeof(float)));
        else if (v == ASYNC)
            CK(cudaMallocAsync(&p, N * sizeof(float), b.stream));
        sqrt_index<<<b.grid, BLOCK, 0, b.stream>>>(p, N);
        CK_LAUNCH("sqrt_index launch");
        if (v == MALLOC)
            CK(cudaFree(p));
        else if (v == ASYNC)
            CK(cudaFreeAsync(p, b.stream));
    }
    CK(cudaEventRecord(b.stop, b.stream));
    CK(cudaEventSynchronize(b.stop));
    CK(cudaEventElapsedTime(&ms, b.start, b.stop));
    return ms;
}

float median(float *x, int n)
{
    for (int i = 1; i < n; i++) /* insertion sort: n is 5 */
        for (int j = i; j > 0 && x[j - 1] > x[j]; j--) {
            float t = x[j];
            x[j] = x[j - 1];
            x[j - 1] = t;
        }
    return n % 2 ? x[n / 2] : 0.5f * (x[n / 2 - 1] + x[n / 2]);
}

/* The kernel must have computed what the shared body says. */
bool check_result(const Bench &b)
{
    static float host[N];
    size_t wrong = 0;
    CK(cudaMemcpyAsync(host, b.fixed, sizeof host, cudaMemcpyDeviceToHost, b.stream));
    CK(cudaStreamSynchronize(b.stream));
    for (size_t i = 0; i < N; i++)
        if (host[i] != cp_body_sqrt_index((uint64_t)i))
            wrong++;
    if (wrong)
        std::fprintf(stderr, "seed000: %zu of %zu elements wrong\n", wrong, N);
    return wrong == 0;
}

} // namespace

int main()
{
    Bench b;
    cudaDeviceProp prop;
    cudaMemPool_t pool;
    unsigned long long threshold = 0;
    int sms = 0, driver = 0, runtime = 0;
    const char *names[3] = {"malloc", "async", "kernels_only"};
    float result[3];

    CK(cudaSetDevice(0));
    CK(cudaGetDeviceProperties(&prop, 0));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDriverGetVersion(&driver));
    CK(cudaRuntimeGetVersion(&runtime));
    CK(cudaDeviceGetDefaultMemPool(&pool, 0));
    CK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));

    const size_t want = (N + BLOCK - 1) / BLOCK, cap = (size_t)sms * 32u;
    b.grid = (unsigned)(want < cap ? want : cap);
    CK(cudaStreamCreate(&b.stream));
    CK(cudaEventCreate(&b.start));
    CK(cudaEventCreate(&b.stop));
    CK(cudaMalloc(&b.fixed, N * sizeof(float)));

    std::printf("# seed000: %d x {alloc %zu B, sqrt_index<<<%u,%u>>>, free}, median of %d, "
                "after warm-up\n",
                ITERATIONS, N * sizeof(float), b.grid, BLOCK, REPS);
    std::printf("# device: %s (cc %d.%d, %d SMs), driver %d, runtime %d, default pool release "
                "threshold %llu\n",
                prop.name, prop.major, prop.minor, sms, driver, runtime, threshold);

    for (int v = MALLOC; v <= KERNELS_ONLY; v++)
        (void)run_once(b, (Variant)v); /* warm-up: context, module, pool */
    for (int v = MALLOC; v <= KERNELS_ONLY; v++) {
        float t[REPS];
        for (int r = 0; r < REPS; r++)
            t[r] = run_once(b, (Variant)v);
        std::printf("# %-12s", names[v]);
        for (int r = 0; r < REPS; r++)
            std::printf(" %.4f", t[r]);
        std::printf(" ms\n");
        result[v] = median(t, REPS);
    }
    if (!check_result(b))
        return 1;

    std::printf("seed000_c malloc_ms=%.4f async_ms=%.4f kernels_only_ms=%.4f speedup=%.2f\n",
                result[MALLOC], result[ASYNC], result[KERNELS_ONLY],
                result[ASYNC] > 0.0f ? result[MALLOC] / result[ASYNC] : 0.0f);

    CK(cudaFree(b.fixed));
    CK(cudaEventDestroy(b.start));
    CK(cudaEventDestroy(b.stop));
    CK(cudaStreamDestroy(b.stream));
    return 0;
}
