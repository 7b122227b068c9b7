/*
 * kernel/cuda_module.c: user kernels on the CUDA backend (module.h).
 *
 * Policy, exactly:
 *  - libnvrtc, libnvJitLink and libcuda are opened with dlopen when first
 *    needed ($CUDA_HOME/lib64, $CUDA_PATH/lib64, /usr/local/cuda/lib64, then
 *    the loader's path), so cupola loads and falls back to the host backend
 *    on machines without them; no CUDA header is needed to build this file.
 *  - Compile: NVRTC for --gpu-architecture=sm_<cc> of device 0, with
 *    cupola's include folders (-I) and the user's checked options (-O* and
 *    -g are the host's and dropped).  Relocatable device code (-rdc=true in
 *    the options, or a `<<<` in the source: a kernel launching kernels) is
 *    linked with libcudadevrt.a through nvJitLink.  The image is cached under
 *    a key of the source, options, NVRTC version, architecture and cupola's
 *    headers (compile.h).
 *  - Devices: a CUDA module lives in one context, so a module is loaded
 *    (cuModuleLoadData) into the primary context of the thread's current
 *    cupola device when it is created, and into another device's primary
 *    context the first time one of its kernels is launched on a stream of
 *    that device (the image is kept for that); kernels resolve their function
 *    per device the same way.  As the backend's entry points do (cuda.c), a
 *    launch makes its stream's device current (here: that device's primary
 *    context) and does not restore the previous one.  The image is built for
 *    the architecture of the device current at creation; a device of another
 *    architecture refuses it with the driver's error at the first launch
 *    there.  {ptx=} is loaded as it is (the driver JIT-compiles it for each
 *    device); {cubin=path} reads the file.
 *  - Kernels: cuModuleGetFunction; the declared parameter sizes are checked
 *    with cuFuncGetParamInfo where the driver has it (CUDA 12.4+).
 *  - Launch: the shape against the stream's device's and the function's
 *    limits (dynamic shared memory above 48 KiB is opted into per function
 *    and device, up to the device's opt-in maximum less the static shared
 *    memory), then cuLaunchKernel on the stream's handle.  Its error carries
 *    the driver's error name; a fault surfaces at the next synchronization,
 *    as CUDA's do.
 *  - Unload: cuModuleUnload of every device's copy (in that device's
 *    context, pushed and popped) when the last kernel and the module handle
 *    are gone; errors at process exit are ignored.
 */
#include "kernel/module.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernel/compile.h"
#include "kernel/scan.h"

/* ---- the libraries, by dlopen -------------------------------------------- */

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct nvrtc_prog *nvrtcProgram;
typedef struct nvjl *nvJitLinkHandle;

#define CU_SUCCESS 0
#define CU_ERROR_INVALID_CONTEXT 201
#define CU_ERROR_NOT_FOUND 500
#define NVRTC_OK 0
#define NVJL_INPUT_CUBIN 1
#define NVJL_INPUT_LIBRARY 6

static struct {
    pthread_mutex_t mu;
    int tried_cu, tried_rtc, tried_jl;
    void *cu, *rtc, *jl;
    char why_cu[256], why_rtc[512], why_jl[512], devrt[4200];
    /* driver */
    CUresult (*cuInit)(unsigned);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuCtxPushCurrent_v2)(CUcontext);
    CUresult (*cuCtxPopCurrent_v2)(CUcontext *);
    CUresult (*cuModuleLoadData)(CUmodule *, const void *);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuModuleUnload)(CUmodule);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, CUstream, void **, void **);
    CUresult (*cuFuncGetAttribute)(int *, int, CUfunction);
    CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
    CUresult (*cuFuncGetParamInfo)(CUfunction, size_t, size_t *, size_t *); /* 12.4+ */
    CUresult (*cuGetErrorName)(CUresult, const char **);
    /* NVRTC */
    int (*nvrtcVersion)(int *, int *);
    int (*nvrtcCreateProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                              const char *const *);
    int (*nvrtcCompileProgram)(nvrtcProgram, int, const char *const *);
    int (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t *);
    int (*nvrtcGetProgramLog)(nvrtcProgram, char *);
    int (*nvrtcGetCUBINSize)(nvrtcProgram, size_t *);
    int (*nvrtcGetCUBIN)(nvrtcProgram, char *);
    int (*nvrtcDestroyProgram)(nvrtcProgram *);
    const char *(*nvrtcGetErrorString)(int);
    /* nvJitLink */
    int (*nvJitLinkCreate)(nvJitLinkHandle *, uint32_t, const char **);
    int (*nvJitLinkAddData)(nvJitLinkHandle, int, const void *, size_t, const char *);
    int (*nvJitLinkAddFile)(nvJitLinkHandle, int, const char *);
    int (*nvJitLinkComplete)(nvJitLinkHandle);
    int (*nvJitLinkGetLinkedCubinSize)(nvJitLinkHandle, size_t *);
    int (*nvJitLinkGetLinkedCubin)(nvJitLinkHandle, void *);
    int (*nvJitLinkGetErrorLogSize)(nvJitLinkHandle, size_t *);
    int (*nvJitLinkGetErrorLog)(nvJitLinkHandle, char *);
    int (*nvJitLinkDestroy)(nvJitLinkHandle *);
    /* per device, filled by dev_enter the first time it is used */
    struct {
        atomic_int ready;
        CUcontext ctx; /* its primary context (retained once, for the process) */
        cp_klimits lim;
        int max_shared_optin;
    } dev[CP_MAX_DEVICES];
} X = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *sym(void *lib, const char *name, int *ok)
{
    void *p = dlsym(lib, name);
    if (!p)
        *ok = 0;
    return p;
}

#define SYM(lib, f, ok) (memcpy(&X.f, &(void *){sym(lib, #f, ok)}, sizeof X.f))

/* Opens the first of the toolkit's lib64 folders, then the loader's names. */
static void *open_toolkit_lib(const char *file, const char *const *sonames, char *why, size_t whylen)
{
    const char *roots[3] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
    char p[4200];
    for (int i = 0; i < 3; i++) {
        void *h;
        if (!roots[i] || !*roots[i] || strlen(roots[i]) > 4000)
            continue;
        snprintf(p, sizeof p, "%s/lib64/%s", roots[i], file);
        if ((h = dlopen(p, RTLD_NOW | RTLD_LOCAL)))
            return h;
    }
    for (int i = 0; sonames[i]; i++) {
        void *h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
    }
    snprintf(why, whylen, "%s not found in $CUDA_HOME/lib64, /usr/local/cuda/lib64 or the loader's path",
             file);
    return NULL;
}

static cp_status need_nvrtc(void)
{
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", NULL};
    cp_status st = CP_OK;
    pthread_mutex_lock(&X.mu);
    if (!X.tried_rtc) {
        int ok = 1;
        X.tried_rtc = 1;
        X.rtc = open_toolkit_lib("libnvrtc.so", names, X.why_rtc, sizeof X.why_rtc);
        if (X.rtc) {
            SYM(X.rtc, nvrtcVersion, &ok);
            SYM(X.rtc, nvrtcCreateProgram, &ok);
            SYM(X.rtc, nvrtcCompileProgram, &ok);
            SYM(X.rtc, nvrtcGetProgramLogSize, &ok);
            SYM(X.rtc, nvrtcGetProgramLog, &ok);
            SYM(X.rtc, nvrtcGetCUBINSize, &ok);
            SYM(X.rtc, nvrtcGetCUBIN, &ok);
            SYM(X.rtc, nvrtcDestroyProgram, &ok);
            SYM(X.rtc, nvrtcGetErrorString, &ok);
            if (!ok) {
                snprintf(X.why_rtc, sizeof X.why_rtc, "libnvrtc lacks a function cupola needs");
                dlclose(X.rtc);
                X.rtc = NULL;
            }
        }
    }
    if (!X.rtc)
        st = cp_error_set(CP_ERR_UNSUPPORTED, "NVRTC is not available: %s", X.why_rtc);
    pthread_mutex_unlock(&X.mu);
    return st;
}

static cp_status need_jitlink(void)
{
    static const char *const names[] = {"libnvJitLink.so.13", "libnvJitLink.so.12",
                                        "libnvJitLink.so", NULL};
    cp_status st = CP_OK;
    pthread_mutex_lock(&X.mu);
    if (!X.tried_jl) {
        int ok = 1;
        const char *roots[3] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
        X.tried_jl = 1;
        X.jl = open_toolkit_lib("libnvJitLink.so", names, X.why_jl, sizeof X.why_jl);
        if (X.jl) {
            SYM(X.jl, nvJitLinkCreate, &ok);
            SYM(X.jl, nvJitLinkAddData, &ok);
            SYM(X.jl, nvJitLinkAddFile, &ok);
            SYM(X.jl, nvJitLinkComplete, &ok);
            SYM(X.jl, nvJitLinkGetLinkedCubinSize, &ok);
            SYM(X.jl, nvJitLinkGetLinkedCubin, &ok);
            SYM(X.jl, nvJitLinkGetErrorLogSize, &ok);
            SYM(X.jl, nvJitLinkGetErrorLog, &ok);
            SYM(X.jl, nvJitLinkDestroy, &ok);
            if (!ok) {
                snprintf(X.why_jl, sizeof X.why_jl, "libnvJitLink lacks a function cupola needs");
                dlclose(X.jl);
                X.jl = NULL;
            }
        }
        for (int i = 0; i < 3 && X.jl && !X.devrt[0]; i++) {
            char p[4200];
            struct stat sb;
            if (!roots[i] || !*roots[i] || strlen(roots[i]) > 4000)
                continue;
            snprintf(p, sizeof p, "%s/lib64/libcudadevrt.a", roots[i]);
            if (stat(p, &sb) == 0)
                memcpy(X.devrt, p, strlen(p) + 1);
        }
        if (X.jl && !X.devrt[0]) {
            snprintf(X.why_jl, sizeof X.why_jl, "libcudadevrt.a not found in $CUDA_HOME/lib64");
            dlclose(X.jl);
            X.jl = NULL;
        }
    }
    if (!X.jl)
        st = cp_error_set(CP_ERR_UNSUPPORTED,
                          "relocatable device code needs nvJitLink and libcudadevrt.a: %s", X.why_jl);
    pthread_mutex_unlock(&X.mu);
    return st;
}

static const char *cu_name(CUresult r)
{
    const char *s = NULL;
    if (X.cuGetErrorName && X.cuGetErrorName(r, &s) == CU_SUCCESS && s)
        return s;
    return "CUDA_ERROR_UNKNOWN";
}

/* As cuda.c's fail: an error after which the context is unusable (the
 * driver's codes are the runtime's) is remembered, and every later call of
 * the backend repeats it (backend.h, CP_GUARD). */
static cp_status cu_fail(CUresult r, const char *what)
{
    CP_GUARD();
    switch ((int)r) {
    case 700: /* ILLEGAL_ADDRESS */
    case 702: /* LAUNCH_TIMEOUT */
    case 710: /* ASSERT */
    case 714: /* HARDWARE_STACK_ERROR */
    case 715: /* ILLEGAL_INSTRUCTION */
    case 716: /* MISALIGNED_ADDRESS */
    case 717: /* INVALID_ADDRESS_SPACE */
    case 718: /* INVALID_PC */
    case 719: /* LAUNCH_FAILED */
    {
        char msg[768];
        cp_sticky_message((int)r, cu_name(r), "a kernel faulted", what, msg, sizeof msg);
        cp_mark_sticky(msg);
        return cp_unusable_error();
    }
    default:
        return cp_error_set(r == 2 ? CP_ERR_OOM : CP_ERR_BACKEND, "%s (%s)", cu_name(r), what);
    }
}

/* The driver (opened and initialised once). */
static cp_status need_driver(void)
{
    static const char *const names[] = {"libcuda.so.1", "libcuda.so", NULL};
    cp_status st = CP_OK;
    pthread_mutex_lock(&X.mu);
    if (!X.tried_cu) {
        int ok = 1;
        X.tried_cu = 1;
        for (int i = 0; names[i] && !X.cu; i++)
            X.cu = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (X.cu) {
            SYM(X.cu, cuInit, &ok);
            SYM(X.cu, cuDeviceGet, &ok);
            SYM(X.cu, cuDeviceGetAttribute, &ok);
            SYM(X.cu, cuCtxGetCurrent, &ok);
            SYM(X.cu, cuCtxSetCurrent, &ok);
            SYM(X.cu, cuDevicePrimaryCtxRetain, &ok);
            SYM(X.cu, cuCtxPushCurrent_v2, &ok);
            SYM(X.cu, cuCtxPopCurrent_v2, &ok);
            SYM(X.cu, cuModuleLoadData, &ok);
            SYM(X.cu, cuModuleGetFunction, &ok);
            SYM(X.cu, cuModuleUnload, &ok);
            SYM(X.cu, cuLaunchKernel, &ok);
            SYM(X.cu, cuFuncGetAttribute, &ok);
            SYM(X.cu, cuFuncSetAttribute, &ok);
            SYM(X.cu, cuGetErrorName, &ok);
            {
                int opt = 1;
                SYM(X.cu, cuFuncGetParamInfo, &opt); /* optional */
            }
            if (!ok || X.cuInit(0) != CU_SUCCESS) {
                snprintf(X.why_cu, sizeof X.why_cu, "libcuda lacks a function or cuInit failed");
                X.cu = NULL;
            }
        } else {
            snprintf(X.why_cu, sizeof X.why_cu, "libcuda.so.1 not found");
        }
    }
    if (!X.cu)
        st = cp_error_set(CP_ERR_UNSUPPORTED, "the CUDA driver API is not available: %s", X.why_cu);
    pthread_mutex_unlock(&X.mu);
    return st;
}

/* Makes device dev's primary context current on this thread (as the
 * runtime's cudaSetDevice would), reading the device's limits the first time.
 * The driver must be open (need_driver). */
static cp_status dev_enter(int dev)
{
    CUcontext cur = NULL;
    CUresult r;
    if (dev < 0 || dev >= CP_MAX_DEVICES)
        return cp_error_set(CP_ERR_INVALID, "device %d is out of range", dev);
    if (!atomic_load_explicit(&X.dev[dev].ready, memory_order_acquire)) {
        static const int attrs[7] = {1, 2, 3, 4, 5, 6, 7};
        int v[7], optin = 0;
        CUdevice d = 0;
        CUcontext c = NULL;
        cp_status st = CP_OK;
        pthread_mutex_lock(&X.mu);
        if (!atomic_load_explicit(&X.dev[dev].ready, memory_order_relaxed)) {
            if ((r = X.cuDeviceGet(&d, dev)) != CU_SUCCESS)
                st = cu_fail(r, "cuDeviceGet");
            for (int i = 0; !st && i < 7; i++)
                if ((r = X.cuDeviceGetAttribute(&v[i], attrs[i], d)) != CU_SUCCESS)
                    st = cu_fail(r, "cuDeviceGetAttribute");
            if (!st && (r = X.cuDeviceGetAttribute(&optin, 97, d)) != CU_SUCCESS)
                st = cu_fail(r, "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)");
            if (!st && (r = X.cuDevicePrimaryCtxRetain(&c, d)) != CU_SUCCESS)
                st = cu_fail(r, "cuDevicePrimaryCtxRetain");
            if (!st) {
                X.dev[dev].ctx = c;
                X.dev[dev].lim.max_threads = (unsigned)v[0];
                for (int i = 0; i < 3; i++) {
                    X.dev[dev].lim.max_block[i] = (unsigned)v[1 + i];
                    X.dev[dev].lim.max_grid[i] = (unsigned)v[4 + i];
                }
                X.dev[dev].max_shared_optin = optin;
                X.dev[dev].lim.max_shared = (size_t)optin;
                atomic_store_explicit(&X.dev[dev].ready, 1, memory_order_release);
            }
        }
        pthread_mutex_unlock(&X.mu);
        if (st != CP_OK)
            return st;
    }
    if ((r = X.cuCtxGetCurrent(&cur)) != CU_SUCCESS)
        return cu_fail(r, "cuCtxGetCurrent");
    if (cur != X.dev[dev].ctx && (r = X.cuCtxSetCurrent(X.dev[dev].ctx)) != CU_SUCCESS)
        return cu_fail(r, "making the device's primary context current");
    return CP_OK;
}

/* ---- compiling ------------------------------------------------------------------- */

static int has_rdc(const char *const *opts)
{
    for (const char *const *o = opts; o && *o; o++)
        if (strcmp(*o, "-rdc=true") == 0 || strcmp(*o, "--relocatable-device-code=true") == 0)
            return 1;
    return 0;
}

static void hash_headers(cp_sha256 *h, const char *const *dirs)
{
    static const char *const alloc[] = CP_DEVICE_ALLOC_HEADERS;
    for (int i = 0; dirs && dirs[i] && i < 16; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%.4000s/cupola/device.h", dirs[i]);
        cp_sha256_file(h, p);
        for (int k = 0; k < CP_DEVICE_ALLOC_NHEADERS; k++) {
            snprintf(p, sizeof p, "%.4000s/cupola/%s", dirs[i], alloc[k]);
            cp_sha256_file(h, p);
        }
    }
}

static char *program_log(nvrtcProgram prog)
{
    size_t n = 0;
    char *log;
    if (X.nvrtcGetProgramLogSize(prog, &n) != NVRTC_OK || n == 0)
        return NULL;
    log = malloc(n + 1);
    if (log && X.nvrtcGetProgramLog(prog, log) != NVRTC_OK) {
        free(log);
        return NULL;
    }
    if (log)
        log[n] = '\0';
    return log;
}

static cp_status link_rdc(const char *name, int arch, const void *obj, size_t objlen, void **image,
                          size_t *len, char **log)
{
    nvJitLinkHandle h = NULL;
    char archopt[32];
    const char *opts[1];
    int r;
    cp_status st = CP_OK;
    snprintf(archopt, sizeof archopt, "-arch=sm_%d", arch);
    opts[0] = archopt;
    if ((r = X.nvJitLinkCreate(&h, 1, opts)) != 0)
        return cp_error_set(CP_ERR_BACKEND, "%s: nvJitLinkCreate failed (%d)", name, r);
    if ((r = X.nvJitLinkAddData(h, NVJL_INPUT_CUBIN, obj, objlen, name)) != 0 ||
        (r = X.nvJitLinkAddFile(h, NVJL_INPUT_LIBRARY, X.devrt)) != 0 ||
        (r = X.nvJitLinkComplete(h)) != 0) {
        size_t n = 0;
        char *l = NULL;
        if (X.nvJitLinkGetErrorLogSize(h, &n) == 0 && n && (l = malloc(n + 1))) {
            if (X.nvJitLinkGetErrorLog(h, l) != 0)
                l[0] = '\0';
            l[n] = '\0';
        }
        st = cp_error_set(CP_ERR_INVALID, "%s: link error (nvJitLink %d):\n%s", name, r,
                          l && *l ? l : "(no log)");
        if (log && !*log)
            *log = l;
        else
            free(l);
    } else {
        size_t n = 0;
        void *img;
        if ((r = X.nvJitLinkGetLinkedCubinSize(h, &n)) != 0 || !(img = malloc(n ? n : 1))) {
            st = cp_error_set(CP_ERR_BACKEND, "%s: nvJitLink gave no image (%d)", name, r);
        } else if ((r = X.nvJitLinkGetLinkedCubin(h, img)) != 0) {
            free(img);
            st = cp_error_set(CP_ERR_BACKEND, "%s: nvJitLinkGetLinkedCubin failed (%d)", name, r);
        } else {
            *image = img;
            *len = n;
        }
    }
    X.nvJitLinkDestroy(&h);
    return st;
}

/* NVRTC's options from cupola's: -O* and -g are the host compiler's. */
static const char *nvrtc_option(const char *o)
{
    if (strncmp(o, "-O", 2) == 0 || strcmp(o, "-g") == 0)
        return NULL;
    if (strcmp(o, "-use_fast_math") == 0)
        return "--use_fast_math";
    return o;
}

cp_status cp_nvrtc_build(const cp_kmodule_desc *d, int arch, void **image, size_t *len, int *where,
                         char **log)
{
    cp_sha256 h;
    cp_cache_key key;
    cp_kscan sc;
    cp_status st;
    int major = 0, minor = 0, rdc, nopt = 0, r;
    const char *opts[96];
    char archopt[48], incs[16][4200];
    nvrtcProgram prog = NULL;
    char *src;
    void *obj = NULL;
    size_t objlen = 0;

    *image = NULL;
    *len = 0;
    *where = 0;
    if (log)
        *log = NULL;
    for (const char *const *o = d->options; o && *o; o++)
        if ((st = cp_cc_check_option(*o)) != CP_OK)
            return st;
    if ((st = need_nvrtc()) != CP_OK)
        return st;
    if ((st = cp_kscan_source(d->data, d->len, 0, &sc)) != CP_OK)
        return st;
    rdc = has_rdc(d->options) || sc.launch_line;
    cp_kscan_free(&sc);
    if (rdc && (st = need_jitlink()) != CP_OK)
        return st;
    X.nvrtcVersion(&major, &minor);

    cp_sha256_init(&h);
    cp_sha256_str(&h, "cupola-nvrtc-1");
    cp_sha256_update(&h, &major, sizeof major);
    cp_sha256_update(&h, &minor, sizeof minor);
    cp_sha256_update(&h, &arch, sizeof arch);
    cp_sha256_update(&h, &rdc, sizeof rdc);
    cp_sha256_str(&h, d->name);
    cp_sha256_update(&h, &d->len, sizeof d->len);
    cp_sha256_update(&h, d->data, d->len);
    for (const char *const *o = d->options; o && *o; o++)
        cp_sha256_str(&h, *o);
    cp_sha256_str(&h, "--");
    hash_headers(&h, d->include_dirs);
    if (rdc)
        cp_sha256_file(&h, X.devrt);
    cp_cache_key_of(&h, &key);
    if ((st = cp_cache_lookup(&key, "cubin", 1, image, len, NULL, where)) != CP_OK)
        return st;
    if (*where)
        return CP_OK;

    /* NUL-terminated copy: NVRTC takes a C string */
    src = malloc(d->len + 1);
    if (!src)
        return cp_error_set(CP_ERR_OOM, "out of memory for a module's source");
    memcpy(src, d->data, d->len);
    src[d->len] = '\0';
    snprintf(archopt, sizeof archopt, "--gpu-architecture=sm_%d", arch);
    opts[nopt++] = archopt;
    if (rdc)
        opts[nopt++] = "-rdc=true";
    for (int i = 0; d->include_dirs && d->include_dirs[i] && i < 16; i++) {
        snprintf(incs[i], sizeof incs[i], "-I%.4100s", d->include_dirs[i]);
        opts[nopt++] = incs[i];
    }
    for (const char *const *o = d->options; o && *o && nopt < 90; o++) {
        const char *t = nvrtc_option(*o);
        if (t && !(rdc && has_rdc((const char *const[]){t, NULL})))
            opts[nopt++] = t;
    }
    r = X.nvrtcCreateProgram(&prog, src, d->name, 0, NULL, NULL);
    if (r != NVRTC_OK) {
        free(src);
        return cp_error_set(CP_ERR_BACKEND, "%s: nvrtcCreateProgram: %s", d->name,
                            X.nvrtcGetErrorString(r));
    }
    r = X.nvrtcCompileProgram(prog, nopt, opts);
    {
        char *l = program_log(prog);
        if (r != NVRTC_OK) {
            st = cp_error_set(CP_ERR_INVALID, "%s: compile error (%s):\n%s", d->name,
                              X.nvrtcGetErrorString(r), l && *l ? l : "(no log)");
        }
        if (log)
            *log = l;
        else
            free(l);
    }
    if (st == CP_OK) {
        if (X.nvrtcGetCUBINSize(prog, &objlen) != NVRTC_OK || objlen == 0 ||
            !(obj = malloc(objlen)) || X.nvrtcGetCUBIN(prog, obj) != NVRTC_OK)
            st = cp_error_set(CP_ERR_BACKEND, "%s: NVRTC produced no image", d->name);
    }
    X.nvrtcDestroyProgram(&prog);
    free(src);
    if (st != CP_OK) {
        free(obj);
        return st;
    }
    if (rdc) {
        st = link_rdc(d->name, arch, obj, objlen, image, len, log);
        free(obj);
        if (st != CP_OK)
            return st;
    } else {
        *image = obj;
        *len = objlen;
    }
    cp_cache_store(&key, "cubin", *image, *len, NULL);
    return CP_OK;
}

static char *read_path(const char *path, size_t *len);

/* The bytes an ELF64 file spans (headers, sections, the tables), at most n. */
static size_t elf_extent(const unsigned char *p, size_t n)
{
    uint64_t end = 64, shoff, phoff;
    unsigned shnum, shsize, phnum, phsize;
    if (n < 64 || memcmp(p, "\177ELF", 4) != 0 || p[4] != 2)
        return n;
    memcpy(&phoff, p + 32, 8);
    memcpy(&shoff, p + 40, 8);
    phsize = (unsigned)p[54] | (unsigned)p[55] << 8;
    phnum = (unsigned)p[56] | (unsigned)p[57] << 8;
    shsize = (unsigned)p[58] | (unsigned)p[59] << 8;
    shnum = (unsigned)p[60] | (unsigned)p[61] << 8;
    if (phoff + (uint64_t)phnum * phsize > end)
        end = phoff + (uint64_t)phnum * phsize;
    if (shoff + (uint64_t)shnum * shsize > end)
        end = shoff + (uint64_t)shnum * shsize;
    for (unsigned i = 0; i < shnum && shsize >= 40 && shoff + (uint64_t)(i + 1) * shsize <= n; i++) {
        const unsigned char *sh = p + shoff + (uint64_t)i * shsize;
        uint32_t type;
        uint64_t off, size;
        memcpy(&type, sh + 4, 4);
        memcpy(&off, sh + 24, 8);
        memcpy(&size, sh + 32, 8);
        if (type != 8 /* SHT_NOBITS */ && off + size > end)
            end = off + size;
    }
    return end < n ? (size_t)end : n;
}

/* Whether the user's options name a language standard. */
static int user_std(const char *const *opts)
{
    for (const char *const *o = opts; o && *o; o++)
        if (strncmp(*o, "-std=", 5) == 0 || strncmp(*o, "--std=", 6) == 0)
            return 1;
    return 0;
}

/* nvcc -cubin: the same source, options and include folders as NVRTC would
 * take, for sources NVRTC cannot compile (a peer allocator's headers include
 * host headers and use the whole toolkit).  The user's -I folders are not
 * part of the cache key (compile.h): a changed checkout needs a cleared
 * cache, or another commit's path. */
cp_status cp_nvcc_build(const cp_kmodule_desc *d, int arch, void **image, size_t *len, int *where,
                        char **log)
{
    enum { MAXI = 16 };
    const char *args[12 + MAXI];
    char archopt[48], incs[MAXI][4200];
    int na = 0, ni = 0;
    cp_cc_job job;
    cp_cc_result res;
    cp_status st;
    char hdr[4300];
    const char *deps[CP_DEVICE_ALLOC_NHEADERS + 2];
    char paths[CP_DEVICE_ALLOC_NHEADERS + 1][4300];
    static const char *const hnames[] = CP_DEVICE_ALLOC_HEADERS;
    int nd = 0;

    *image = NULL;
    *len = 0;
    *where = 0;
    if (log)
        *log = NULL;
    snprintf(archopt, sizeof archopt, "-arch=sm_%d", arch);
    args[na++] = "-cubin";
    args[na++] = archopt;
    /* C++17 unless the user names a standard (nvcc refuses two) */
    if (!user_std(d->options))
        args[na++] = "-std=c++17";
    /* peers print from device code and warn loudly: their warnings are not the user's */
    args[na++] = "-w";
    /* peers call constexpr host functions from device code (Ouroboros) */
    args[na++] = "--expt-relaxed-constexpr";
    for (const char *const *i = d->include_dirs; i && *i && ni < MAXI; i++, ni++) {
        snprintf(incs[ni], sizeof incs[ni], "-I%s", *i);
        args[na++] = incs[ni];
    }
    args[na] = NULL;
    /* cupola's own headers (from the first include folder that has device.h) */
    for (const char *const *i = d->include_dirs; i && *i && nd == 0; i++) {
        struct stat sb;
        snprintf(hdr, sizeof hdr, "%.4100s/cupola/device.h", *i);
        if (stat(hdr, &sb) == 0) {
            snprintf(paths[0], sizeof paths[0], "%s", hdr);
            deps[nd++] = paths[0];
            for (int k = 0; k < CP_DEVICE_ALLOC_NHEADERS; k++) {
                snprintf(paths[k + 1], sizeof paths[k + 1], "%.4100s/cupola/%s", *i, hnames[k]);
                deps[nd++] = paths[k + 1];
            }
        }
    }
    deps[nd] = NULL;
    memset(&job, 0, sizeof job);
    job.lang = CP_CC_NVCC;
    job.name = d->name && *d->name ? d->name : "module.cu";
    job.source = d->data;
    job.source_len = d->len;
    job.options = d->options;
    job.args = args;
    job.depends = deps;
    job.salt = "cupola-nvcc-cubin-1";
    st = cp_cc_shared_object(&job, &res);
    if (log)
        *log = res.log;
    else
        free(res.log);
    if (st != CP_OK)
        return st;
    if (!(*image = read_path(res.path, len)))
        return cp_error_set(CP_ERR_BACKEND, "%s: cannot read nvcc's image %s", job.name, res.path);
    /* the cache's entry ends in its trailer (compile.h): the image is the ELF
     * file's own extent */
    *len = elf_extent(*image, *len);
    *where = res.where;
    return CP_OK;
}

/* ---- modules and kernels ------------------------------------------------------------ */

typedef struct cmod {
    atomic_int refs;  /* the module and each kernel */
    pthread_mutex_t mu; /* loads on further devices */
    void *image;      /* what was loaded, for the other devices */
    int home;         /* the device it was loaded on when it was made */
    CUmodule h[CP_MAX_DEVICES]; /* per device; NULL: not loaded there yet */
} cmod;

typedef struct ckern {
    cmod *m;
    char *name;
    unsigned n;
    struct {
        CUfunction f; /* NULL: not resolved on that device yet */
        int max_threads;
        int static_shared;
        size_t dyn_set; /* dynamic shared memory opted into so far */
    } on[CP_MAX_DEVICES];
} ckern;

static void cmod_release(cmod *m)
{
    if (atomic_fetch_sub(&m->refs, 1) == 1) {
        for (int d = 0; d < CP_MAX_DEVICES; d++) {
            CUcontext prev;
            if (!m->h[d])
                continue;
            /* at exit the context may be gone: nothing to do then */
            if (X.cuCtxPushCurrent_v2(X.dev[d].ctx) == CU_SUCCESS) {
                (void)X.cuModuleUnload(m->h[d]);
                (void)X.cuCtxPopCurrent_v2(&prev);
            }
        }
        pthread_mutex_destroy(&m->mu);
        free(m->image);
        free(m);
    }
}

/* m loaded on device dev, whose context is current (dev_enter). */
static cp_status cmod_on(cmod *m, int dev, const char *what, CUmodule *out)
{
    CUresult r = CU_SUCCESS;
    pthread_mutex_lock(&m->mu);
    if (!m->h[dev])
        r = X.cuModuleLoadData(&m->h[dev], m->image);
    *out = m->h[dev];
    pthread_mutex_unlock(&m->mu);
    if (r != CU_SUCCESS)
        return cp_error_set(r == 2 ? CP_ERR_OOM : CP_ERR_INVALID, "%s: %s (cuModuleLoadData, device %d)",
                            what, cu_name(r), dev);
    return CP_OK;
}

static char *read_path(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rbe");
    char *buf = NULL;
    long n;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n))) {
        if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        } else {
            *len = (size_t)n;
        }
    }
    fclose(f);
    return buf;
}

static cp_status c_load(const cp_kmodule_desc *d, void **impl, int *where, char **log)
{
    cp_device_info info;
    void *image = NULL;
    size_t len = 0;
    cmod *m;
    CUmodule h;
    int dev = cp_be->get_device();
    cp_status st;

    *impl = NULL;
    if ((st = need_driver()) != CP_OK || (st = dev_enter(dev)) != CP_OK)
        return st;
    if (d->kind == CP_KSRC_SOURCE) {
        if ((st = cp_be->device_info(&info)) != CP_OK)
            return st;
        st = (d->nvcc ? cp_nvcc_build : cp_nvrtc_build)(d, info.cc_major * 10 + info.cc_minor, &image, &len,
                                                        where, log);
        if (st != CP_OK)
            return st;
    } else if (d->kind == CP_KSRC_PTX) {
        image = malloc(d->len + 1);
        if (!image)
            return cp_error_set(CP_ERR_OOM, "out of memory for PTX");
        memcpy(image, d->data, d->len);
        ((char *)image)[d->len] = '\0';
        *where = -1;
    } else {
        image = read_path(d->data, &len);
        if (!image)
            return cp_error_set(CP_ERR_INVALID, "cubin '%s': cannot read the file", d->data);
        *where = -1;
    }
    m = calloc(1, sizeof *m);
    if (!m) {
        free(image);
        return cp_error_set(CP_ERR_OOM, "out of memory for a module");
    }
    atomic_init(&m->refs, 1);
    pthread_mutex_init(&m->mu, NULL);
    m->image = image;
    m->home = dev;
    if ((st = cmod_on(m, dev, d->name, &h)) != CP_OK) {
        pthread_mutex_destroy(&m->mu);
        free(image);
        free(m);
        return st;
    }
    *impl = m;
    return CP_OK;
}

static void c_unload(void *impl)
{
    cmod_release(impl);
}

/* k's function on device dev (current), resolved the first time. */
static cp_status ckern_on(ckern *k, int dev)
{
    CUmodule h;
    CUfunction f;
    CUresult r;
    cp_status st;
    if ((st = cmod_on(k->m, dev, k->name, &h)) != CP_OK)
        return st;
    if ((r = X.cuModuleGetFunction(&f, h, k->name)) != CU_SUCCESS)
        return cu_fail(r, "cuModuleGetFunction");
    if ((r = X.cuFuncGetAttribute(&k->on[dev].max_threads, 0, f)) != CU_SUCCESS ||
        (r = X.cuFuncGetAttribute(&k->on[dev].static_shared, 1, f)) != CU_SUCCESS)
        return cu_fail(r, "cuFuncGetAttribute");
    k->on[dev].dyn_set = 48 * 1024;
    k->on[dev].f = f;
    return CP_OK;
}

static cp_status c_get(void *impl, const char *mname, const char *name, const cp_ktype *types,
                       unsigned n, void **kimpl)
{
    cmod *m = impl;
    ckern *k;
    CUfunction f;
    CUresult r;
    cp_status st;
    int dev = m->home;
    /* the declaration is checked where the module was loaded when it was made */
    if ((st = dev_enter(dev)) != CP_OK)
        return st;
    /* The driver answers an empty name with CUDA_ERROR_INVALID_VALUE, not
     * NOT_FOUND; it is the same user error as any other unknown name. */
    r = name[0] ? X.cuModuleGetFunction(&f, m->h[dev], name) : CU_ERROR_NOT_FOUND;
    if (r == CU_ERROR_NOT_FOUND)
        return cp_error_set(CP_ERR_INVALID,
                            "no kernel '%s' in module %s (is it declared extern \"C\" __global__?)",
                            name, mname);
    if (r != CU_SUCCESS)
        return cu_fail(r, "cuModuleGetFunction");
    if (X.cuFuncGetParamInfo) {
        size_t off, size;
        for (unsigned i = 0; i <= n; i++) {
            r = X.cuFuncGetParamInfo(f, i, &off, &size);
            if (i == n) {
                if (r == CU_SUCCESS)
                    return cp_error_set(CP_ERR_INVALID,
                                        "kernel '%s' takes more than the %u parameters declared",
                                        name, n);
                break;
            }
            if (r != CU_SUCCESS)
                return cp_error_set(CP_ERR_INVALID, "kernel '%s' takes %u parameters, %u declared",
                                    name, i, n);
            if (size != cp_ktype_sizes[types[i]])
                return cp_error_set(CP_ERR_INVALID,
                                    "kernel '%s': parameter %u is declared %s (%u bytes) but the "
                                    "kernel takes %zu bytes",
                                    name, i + 1, cp_ktype_names[types[i]],
                                    (unsigned)cp_ktype_sizes[types[i]], size);
        }
    }
    k = calloc(1, sizeof *k);
    if (!k || !(k->name = strdup(name))) {
        free(k);
        return cp_error_set(CP_ERR_OOM, "out of memory for a kernel");
    }
    k->m = m;
    k->n = n;
    if ((st = ckern_on(k, dev)) != CP_OK) {
        free(k->name);
        free(k);
        return st;
    }
    atomic_fetch_add(&m->refs, 1);
    *kimpl = k;
    return CP_OK;
}

static void c_put(void *kimpl)
{
    ckern *k = kimpl;
    cmod_release(k->m);
    free(k->name);
    free(k);
}

static cp_status c_launch(void *kimpl, const cp_klaunch *l, void *const *args)
{
    ckern *k = kimpl;
    int dev = cp_be->stream_device(l->stream);
    cp_klimits lim;
    cp_status st;
    CUresult r;
    CUstream s;
    if ((st = dev_enter(dev)) != CP_OK)
        return st;
    if (!k->on[dev].f && (st = ckern_on(k, dev)) != CP_OK)
        return st;
    lim = X.dev[dev].lim;
    if ((unsigned)k->on[dev].max_threads < lim.max_threads)
        lim.max_threads = (unsigned)k->on[dev].max_threads;
    lim.max_shared = (size_t)X.dev[dev].max_shared_optin > (size_t)k->on[dev].static_shared
                         ? (size_t)X.dev[dev].max_shared_optin - (size_t)k->on[dev].static_shared
                         : 0;
    if ((st = cp_klaunch_check(l, &lim)) != CP_OK)
        return st;
    if (l->shared > k->on[dev].dyn_set) {
        r = X.cuFuncSetAttribute(k->on[dev].f, 8, (int)l->shared);
        if (r != CU_SUCCESS)
            return cu_fail(r, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
        k->on[dev].dyn_set = l->shared;
    }
    s = (CUstream)cp_be->stream_native(l->stream);
    r = X.cuLaunchKernel(k->on[dev].f, l->grid[0], l->grid[1], l->grid[2], l->block[0],
                         l->block[1], l->block[2], (unsigned)l->shared, s,
                         (void **)(uintptr_t)args, NULL);
    if (r != CU_SUCCESS)
        return cu_fail(r, "cuLaunchKernel");
    return CP_OK;
}

static cp_status c_registers(void *kimpl, int *out)
{
    ckern *k = kimpl;
    int dev = k->m->home;
    CUresult r;
    cp_status st;
    if ((st = dev_enter(dev)) != CP_OK)
        return st;
    if (!k->on[dev].f && (st = ckern_on(k, dev)) != CP_OK)
        return st;
    /* CU_FUNC_ATTRIBUTE_NUM_REGS */
    if ((r = X.cuFuncGetAttribute(out, 4, k->on[dev].f)) != CU_SUCCESS)
        return cu_fail(r, "cuFuncGetAttribute(NUM_REGS)");
    return CP_OK;
}

const cp_kimpl_ops cp_kimpl_cuda = {
    .load = c_load,
    .unload = c_unload,
    .get = c_get,
    .put = c_put,
    .launch = c_launch,
    .registers = c_registers,
};
