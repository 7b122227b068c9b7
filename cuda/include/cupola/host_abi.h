/*
 * cupola/host_abi.h: what a user module compiled for the host backend
 * exports to cupola's core (the prelude, host_prelude.h, implements it).
 *
 * The core calls run_block for each block of a launch, on one OS thread at a
 * time per block; the module runs the block's threads as fibers on the
 * scratch memory the core provides: a compact array of per-thread states,
 * and one stack per thread with a guard page below each.
 *
 * This header compiles as C and C++.
 */
#ifndef CUPOLA_HOST_ABI_H
#define CUPOLA_HOST_ABI_H

#include <stddef.h>
#include <stdint.h>

#define CUPOLA_HK_ABI 1

#ifdef __cplusplus
extern "C" {
#endif

/* A parameter of a kernel as the compiler saw it: kind 'p' pointer ('d' a
 * pointer to a cupola_device_pool, 'v' a pointer to void), 'i'
 * signed integer, 'u' unsigned integer, 'f' floating point, 'x' anything
 * else (cupola cannot pass it); size in bytes. */
typedef struct cupola_hk_param {
    char kind;
    unsigned char size;
} cupola_hk_param;

typedef struct cupola_hk_kernel {
    const char *name;
    void (*thunk)(void *const *args);
    unsigned nparams;
    const cupola_hk_param *params;
} cupola_hk_kernel;

typedef struct cupola_hk_launch {
    const cupola_hk_kernel *kernel;
    void *const *args;
    unsigned grid[3], block[3];
    size_t shared; /* dynamic shared memory, bytes */
} cupola_hk_launch;

#define CUPOLA_HK_FIBER_BYTES 128 /* per-thread state, kept apart from the stacks */

typedef struct cupola_hk_scratch {
    void *fibers;         /* nslots * CUPOLA_HK_FIBER_BYTES, 64-byte aligned */
    unsigned char *slots; /* first stack (after its guard page) */
    size_t slot_size;     /* usable bytes of a slot */
    size_t slot_stride;   /* distance between slots */
    unsigned nslots;      /* >= the block's threads */
    void *dyn_shared;     /* >= launch.shared bytes, 256-byte aligned */
} cupola_hk_scratch;

typedef struct cupola_hk_module {
    unsigned abi;
    unsigned nkernels;
    const cupola_hk_kernel *kernels;
    /* runs block number `block` (x fastest) of the launch; 0, or 1 with a
     * message in err (a deadlock at a barrier: the launch fails), or 2 with
     * a message (__trap(): the stream is left in error, as a fault leaves
     * it) */
    int (*run_block)(const cupola_hk_launch *l, uint64_t block, const cupola_hk_scratch *s,
                     char *err, size_t errlen);
} cupola_hk_module;

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_HOST_ABI_H */
