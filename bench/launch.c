/*
 * bench/launch.c: the C side of bench/launch.lua.  NVRTC compiles the same
 * empty kernel cupola's benchmark launches, the driver API loads it, and
 * cuLaunchKernel enqueues it back to back on the legacy default stream and
 * on a created stream.  Prints one line per figure, "name value", for the
 * Lua side to read:
 *   nvrtc_ms            NVRTC compile of the empty module, first in this process
 *   launch_ns_legacy    median ns per cuLaunchKernel, legacy stream
 *   launch_ns_stream    median ns per cuLaunchKernel, created stream
 *   launch_ns_legacy_rt the legacy figure again once the runtime (cudart) has
 *                       attached to the context and with a kernelParams
 *                       array, as in a process that loaded cupola
 * Build: make build/bench/launch (nvcc links -lnvrtc -lcuda).
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                                     \
    do {                                                                                          \
        CUresult r_ = (x);                                                                        \
        if (r_ != CUDA_SUCCESS) {                                                                 \
            const char *n_ = "?";                                                                 \
            cuGetErrorName(r_, &n_);                                                              \
            fprintf(stderr, "%s: %s\n", #x, n_);                                                  \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *params[1];

static double launches(CUfunction f, CUstream s, int n)
{
    double t[7];
    for (int rep = 0; rep < 7; rep++) {
        double t0;
        CK(cuCtxSynchronize());
        t0 = now();
        for (int i = 0; i < n; i++)
            CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params[0] ? params : NULL, NULL));
        t[rep] = (now() - t0) / n * 1e9;
        CK(cuCtxSynchronize());
    }
    qsort(t, 7, sizeof t[0], cmp);
    return t[3];
}

int main(int argc, char **argv)
{
    static const char src[] = "extern \"C\" __global__ void empty(void) {}\n";
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    CUstream s;
    nvrtcProgram prog;
    int major, minor;
    char arch[32];
    const char *opts[1];
    size_t len;
    char *img;
    double t0;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%d", major, minor);
    opts[0] = arch;
    t0 = now();
    if (nvrtcCreateProgram(&prog, src, "empty.cu", 0, NULL, NULL) != NVRTC_SUCCESS ||
        nvrtcCompileProgram(prog, 1, opts) != NVRTC_SUCCESS || nvrtcGetCUBINSize(prog, &len) != NVRTC_SUCCESS) {
        fprintf(stderr, "nvrtc failed\n");
        return 1;
    }
    img = malloc(len);
    if (!img || nvrtcGetCUBIN(prog, img) != NVRTC_SUCCESS)
        return 1;
    printf("nvrtc_ms %.2f\n", (now() - t0) * 1e3);
    nvrtcDestroyProgram(&prog);
    CK(cuModuleLoadData(&mod, img));
    CK(cuModuleGetFunction(&f, mod, "empty"));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    launches(f, CU_STREAM_LEGACY, 2000); /* warm-up */
    printf("launch_ns_legacy %.0f\n", launches(f, CU_STREAM_LEGACY, n));
    printf("launch_ns_stream %.0f\n", launches(f, s, n));
    if (cudaFree(NULL) != cudaSuccess) { /* the runtime attaches to the primary context */
        fprintf(stderr, "cudaFree(0) failed\n");
        return 1;
    }
    params[0] = &n; /* a parameter array (the kernel takes none) */
    printf("launch_ns_legacy_rt %.0f\n", launches(f, CU_STREAM_LEGACY, n));
    CK(cuStreamDestroy(s));
    CK(cuModuleUnload(mod));
    free(img);
    return 0;
}
