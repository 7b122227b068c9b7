/*
 * kernel/module.h: modules of user kernels, compiled at run time, and their
 * launches, on whichever backend is in use (cp_be).
 *
 *  - CUDA: NVRTC compiles the source for the device's architecture (libnvrtc
 *    loaded with dlopen, so the module works without it until a source is
 *    compiled); relocatable code (-rdc=true, or a source that launches
 *    kernels from kernels) is linked with libcudadevrt.a through nvJitLink;
 *    images are loaded and launched with the driver API (libcuda loaded
 *    with dlopen: the static runtime keeps the no-driver fallback).
 *  - Host: the system C++ compiler builds a shared object with cupola's
 *    prelude (cupola/host_prelude.h); launches run on the stream's worker,
 *    blocks spread over a pool of CPU threads created once.
 *  - Compiled code is cached (kernel/compile.h).
 *
 * Modules and kernels are reference counted: a kernel holds its module, and
 * a queued host launch holds its module until it has run.
 */
#ifndef CUPOLA_KERNEL_MODULE_H
#define CUPOLA_KERNEL_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cp_ktype {
    CP_KT_PTR = 0,
    CP_KT_I32,
    CP_KT_U32,
    CP_KT_I64,
    CP_KT_U64,
    CP_KT_F32,
    CP_KT_F64,
    CP_KT_DEVICE_POOL, /* passed as the pointer its device code takes */
    CP_KT_COUNT
} cp_ktype;

extern const char *const cp_ktype_names[CP_KT_COUNT];
extern const unsigned char cp_ktype_sizes[CP_KT_COUNT];

#define CP_KMAX_PARAMS 128

/* The headers under cupola/ that <cupola/device.h> includes (the in-kernel
 * allocators) and those the device pools' run-time compiled kernels include
 * (plugin pools, the survey): part of a module's cache key beside device.h. */
#define CP_DEVICE_ALLOC_HEADERS                                                     \
    {"device_alloc.cuh", "alloc_bump.cuh", "alloc_warp_bump.cuh", "alloc_slab.cuh", \
     "alloc_malloc.cuh", "alloc_heap.cuh", "alloc_heap_variants.cuh",               \
     "alloc_heap_defs.cuh", "alloc_heap_map.cuh", "alloc_heap_slab.cuh",            \
     "alloc_heap_stream.cuh", "alloc_heap_slots.cuh", "alloc_heap_run.cuh",         \
     "pattern.h", "plugin.h", "dp_body.cuh", "dp_harness.cuh", "survey.cuh"}
#define CP_DEVICE_ALLOC_NHEADERS 18

typedef enum cp_ksrc {
    CP_KSRC_SOURCE = 0, /* CUDA C */
    CP_KSRC_PTX,        /* CUDA backend only */
    CP_KSRC_CUBIN       /* CUDA backend only: data is the path of an image file */
} cp_ksrc;

typedef struct cp_kmodule_desc {
    cp_ksrc kind;
    const char *name; /* shown in messages and compiler logs */
    const char *data; /* source, PTX or image */
    size_t len;
    const char *const *options;      /* user options, NULL-terminated or NULL */
    const char *const *include_dirs; /* where cupola/device.h and the prelude are */
    /* CUDA C on the CUDA backend: 0 NVRTC; 1 the toolkit's nvcc (-cubin), for
     * sources NVRTC cannot take (host headers, a peer allocator's checkout on
     * -I).  The host backend compiles either with its C++ compiler. */
    int nvcc;
} cp_kmodule_desc;

typedef struct cp_kmodule cp_kmodule;
typedef struct cp_kernel cp_kernel;

/* Compiles (or finds in the cache) and loads a module.  *where: 0 compiled
 * now, 1 memory cache, 2 disk cache, -1 loaded as given (PTX, image).  *log
 * (optional): the compiler's messages (malloc'd, may be NULL).  A compile
 * error is CP_ERR_INVALID with the log in the message. */
cp_status cp_kmodule_load(const cp_kmodule_desc *d, cp_kmodule **out, int *where, char **log);
void cp_kmodule_retain(cp_kmodule *m);
void cp_kmodule_release(cp_kmodule *m);
/* The names of the kernels the module defines (host: all; CUDA: those the
 * source scan found), for messages. */
const char *cp_kmodule_name(const cp_kmodule *m);
/* A host function defined by the module's source (extern "C"), or NULL: on
 * the host backend, whose modules are shared objects; always NULL on CUDA. */
void *cp_kmodule_symbol(cp_kmodule *m, const char *name);

/* Finds kernel name and checks the declared parameter types against what
 * the compiled code takes (host: the signature; CUDA: the sizes, where the
 * driver reports them).  The kernel holds a reference to m. */
cp_status cp_kernel_get(cp_kmodule *m, const char *name, const cp_ktype *types, unsigned n,
                        cp_kernel **out);
void cp_kernel_release(cp_kernel *k);

typedef struct cp_klaunch {
    unsigned grid[3], block[3];
    size_t shared;
    cp_stream *stream;
} cp_klaunch;

/* Enqueues a launch; args[i] points at parameter i's value (the size of its
 * declared type).  Shapes are checked against the device's limits first
 * (messages name the option: "option 'block' ..."). */
cp_status cp_kernel_launch(cp_kernel *k, const cp_klaunch *l, void *const *args);

/* The registers per thread the compiled kernel uses (CUDA:
 * CU_FUNC_ATTRIBUTE_NUM_REGS on the module's home device); CP_ERR_UNSUPPORTED
 * on the host backend. */
cp_status cp_kernel_registers(cp_kernel *k, int *out);

/* ---- the backends' halves (cuda_module.c, host_module.c) ------------------ */
typedef struct cp_kimpl_ops {
    cp_status (*load)(const cp_kmodule_desc *d, void **impl, int *where, char **log);
    void (*unload)(void *impl);
    cp_status (*get)(void *impl, const char *module_name, const char *name, const cp_ktype *types,
                     unsigned n, void **kimpl);
    void (*put)(void *kimpl);
    cp_status (*launch)(void *kimpl, const cp_klaunch *l, void *const *args);
    /* registers per thread of the compiled kernel (CP_ERR_UNSUPPORTED on
     * the host, which has none to count) */
    cp_status (*registers)(void *kimpl, int *out);
    /* a host function the module's code defines (host backend: dlsym on the
     * module's shared object); NULL where modules hold no host code (CUDA) */
    void *(*symbol)(void *impl, const char *name);
} cp_kimpl_ops;

extern const cp_kimpl_ops cp_kimpl_cuda;
extern const cp_kimpl_ops cp_kimpl_host;

/* NVRTC (and nvJitLink for relocatable code) through the cache, without a
 * device: the image for sm_<arch> (e.g. 90), malloc'd.  rdc: link with
 * libcudadevrt (also chosen when the source launches kernels from kernels).
 * Used by cuda_module.c and by the C tests. */
cp_status cp_nvrtc_build(const cp_kmodule_desc *d, int arch, void **image, size_t *len,
                         int *where, char **log);

/* nvcc (compile.h's CP_CC_NVCC) through the cache: the image of d's source
 * for sm_<arch>, malloc'd, as cp_nvrtc_build gives it. */
cp_status cp_nvcc_build(const cp_kmodule_desc *d, int arch, void **image, size_t *len, int *where,
                        char **log);

/* Checks a launch shape against limits; messages name the option. */
typedef struct cp_klimits {
    unsigned max_threads, max_block[3], max_grid[3];
    size_t max_shared;
} cp_klimits;
cp_status cp_klaunch_check(const cp_klaunch *l, const cp_klimits *lim);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_KERNEL_MODULE_H */
