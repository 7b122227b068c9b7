/*
 * record_cost.cu: the seeds' benchmark (bench/seed000.cu: allocate 4 MiB,
 * sqrt_index kernel, free, on one stream) as timed windows of at least a
 * given length, for bench/record_cost.sh, which runs it alternately without
 * and with the recorder (and its empty-callback floor) in fresh processes.
 *
 *   record_cost SECONDS [MODE...]     MODE: malloc (cudaMalloc/cudaFree),
 *                                     async (cudaMallocAsync/cudaFreeAsync),
 *                                     kernels (the kernels alone); default
 *                                     malloc async
 * For each mode, after a warm-up of 200 iterations, iterations run in
 * batches of 100 until SECONDS of host wall time (CLOCK_MONOTONIC, inside
 * the process: its start and CUDA's are not timed) have passed, then the
 * stream is synchronized and the clock read once more.  One line per mode:
 *   cost mode=malloc iters=N seconds=S us_per_iter=X cpu=C
 * (C: the CPU the loop ended on).  Exit status 1 on any CUDA error or a
 * wrong result.
 *
 * Build: nvcc -O3 -arch=sm_90 -o build/bench/record_cost bench/record_cost.cu
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <sched.h>

#include <cuda_runtime.h>

#include "../cuda/kernel_body.h"

namespace {

constexpr size_t N = (size_t)1 << 20; /* float elements: 4 MiB */
constexpr unsigned BLOCK = 256;
constexpr int BATCH = 100;

void die_on(cudaError_t e, const char *what, int line)
{
    if (e != cudaSuccess) {
        std::fprintf(stderr, "record_cost: %s failed at line %d: %s: %s\n", what, line,
                     cudaGetErrorName(e), cudaGetErrorString(e));
        std::exit(1);
    }
}
#define CK(call) die_on((call), #call, __LINE__)

__global__ void sqrt_index(float *p, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = cp_body_sqrt_index((uint64_t)i);
}

enum Mode { MALLOC, ASYNC, KERNELS };

double now_s()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void iterations(Mode m, int n, cudaStream_t s, unsigned grid, float *fixed)
{
    for (int it = 0; it < n; it++) {
        float *p = fixed;
        if (m == MALLOC)
            CK(cudaMalloc(&p, N * sizeof(float)));
        else if (m == ASYNC)
            CK(cudaMallocAsync(&p, N * sizeof(float), s));
        sqrt_index<<<grid, BLOCK, 0, s>>>(p, N);
        CK(cudaGetLastError());
        if (m == MALLOC)
            CK(cudaFree(p));
        else if (m == ASYNC)
            CK(cudaFreeAsync(p, s));
    }
}

} // namespace

int main(int argc, char **argv)
{
    const char *names[3] = {"malloc", "async", "kernels"};
    double seconds = argc > 1 ? std::atof(argv[1]) : 1.0;
    int modes[8], nmodes = 0, sms = 0;
    cudaStream_t s;
    float *fixed;
    static float host[N];

    for (int i = 2; i < argc && nmodes < 8; i++)
        for (int m = 0; m < 3; m++)
            if (std::strcmp(argv[i], names[m]) == 0)
                modes[nmodes++] = m;
    if (argc <= 2) {
        modes[nmodes++] = MALLOC;
        modes[nmodes++] = ASYNC;
    }
    if (!(seconds > 0) || nmodes == 0) {
        std::fprintf(stderr, "usage: record_cost SECONDS [malloc|async|kernels ...]\n");
        return 2;
    }
    CK(cudaSetDevice(0));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const size_t want = (N + BLOCK - 1) / BLOCK, cap = (size_t)sms * 32u;
    const unsigned grid = (unsigned)(want < cap ? want : cap);
    CK(cudaStreamCreate(&s));
    CK(cudaMalloc(&fixed, N * sizeof(float)));
    for (int k = 0; k < nmodes; k++) {
        Mode m = (Mode)modes[k];
        long iters = 0;
        iterations(m, 200, s, grid, fixed); /* warm-up: module, pool */
        CK(cudaStreamSynchronize(s));
        double t0 = now_s(), t1;
        do {
            iterations(m, BATCH, s, grid, fixed);
            iters += BATCH;
        } while (now_s() - t0 < seconds);
        CK(cudaStreamSynchronize(s));
        t1 = now_s();
        std::printf("cost mode=%s iters=%ld seconds=%.6f us_per_iter=%.4f cpu=%d\n", names[m], iters,
                    t1 - t0, (t1 - t0) * 1e6 / (double)iters, sched_getcpu());
        std::fflush(stdout);
    }
    /* the kernels computed what the shared body says */
    iterations(KERNELS, 1, s, grid, fixed);
    CK(cudaMemcpyAsync(host, fixed, sizeof host, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (size_t i = 0; i < N; i++)
        if (host[i] != cp_body_sqrt_index((uint64_t)i)) {
            std::fprintf(stderr, "record_cost: element %zu wrong\n", i);
            return 1;
        }
    CK(cudaFree(fixed));
    CK(cudaStreamDestroy(s));
    return 0;
}
