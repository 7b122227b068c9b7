/*
 * cupola/host_prelude.h: the CUDA C subset of cupola's own-kernel contract,
 * mapped onto the CPU.  The host backend compiles a user module with the
 * system's C++ compiler and this header force-included (-include), so the
 * same source runs with no GPU.
 *
 * How it maps:
 *  - A block's threads are fibers on one OS thread, run in thread order; a
 *    thread runs until it finishes or reaches a barrier, so __syncthreads
 *    really waits (it completes when every thread of the block that has not
 *    exited has reached it, and releases only those: an exited thread takes
 *    no part in barriers, as on CUDA since Volta).  Warp operations (__shfl*_sync, __ballot_sync,
 *    __any/__all_sync, __syncwarp) meet the lanes of the mask like a barrier
 *    among the warp (32 lanes, by linear thread index).  Threads waiting at
 *    different barriers forever are a deadlock: the block stops and the
 *    launch reports an error at the next synchronization.
 *  - threadIdx, blockIdx, blockDim, gridDim read the current fiber's state.
 *  - __shared__ is thread_local: one OS thread runs one block at a time, so
 *    every fiber of the block sees the same variable, and concurrent blocks
 *    on other threads see their own.  `extern __shared__ T name[];` (inside
 *    a function) is rewritten by cupola into a pointer to the launch's
 *    dynamic shared memory.
 *  - Atomics are GCC __atomic builtins (relaxed, as CUDA's); float and double
 *    atomicAdd/Min/Max are compare-and-swap loops.  __threadfence is a full
 *    fence.
 *  - A module whose source uses no barrier and no warp operation is built
 *    in direct mode (CUPOLA_HK_DIRECT): threads run one after the other with
 *    no fibers at all (see cp__run_block).
 *  - Device-side malloc and free are the C library's (legal CUDA; the heap
 *    is the process's).  Anything else (textures, cooperative groups,
 *    launching kernels from kernels) is not declared here and fails to
 *    compile.
 *
 * Names: this header is read before any macro of the user's (cupola turns
 * the user's -D/-U options into lines after it), so the user cannot change
 * its text; what its macros expand to in user code (threadIdx, the kernel
 * table) and everything at namespace scope that is not CUDA's own API uses
 * only reserved names (containing "__": cp__hk, cp__cur, cp__invoke ...),
 * and calls inside templates are qualified, so that no kernel, parameter,
 * global or macro of the user's is hidden, found by argument-dependent
 * lookup, or rewrites the expansion.
 */
#ifndef CUPOLA_HOST_PRELUDE_H
#define CUPOLA_HOST_PRELUDE_H

#ifndef __cplusplus
#error "cupola/host_prelude.h is compiled as C++"
#endif

#define CUPOLA_HOST_KERNEL 1

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <type_traits>
#include <utility>

#include "cupola/host_abi.h"

/* ---- qualifiers --------------------------------------------------------- */
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline __attribute__((__always_inline__))
#define __noinline__ __attribute__((__noinline__))
#define __shared__ thread_local
#define __align__(n) __attribute__((__aligned__(n)))
#define __launch_bounds__(...)
#define __grid_constant__
#ifndef __restrict__
#define __restrict__ __restrict
#endif

/* ---- vector types --------------------------------------------------------- */
struct uint3 {
    unsigned int x, y, z;
};
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
#define CP_HK_VEC2(T, N) \
    struct N##2 { T x, y; }; \
    static inline N##2 make_##N##2(T a, T b) { return N##2{a, b}; }
#define CP_HK_VEC4(T, N) \
    struct N##4 { T x, y, z, w; }; \
    static inline N##4 make_##N##4(T a, T b, T c, T d) { return N##4{a, b, c, d}; }
CP_HK_VEC2(float, float)
CP_HK_VEC4(float, float)
CP_HK_VEC2(double, double)
CP_HK_VEC2(int, int)
CP_HK_VEC4(int, int)
CP_HK_VEC2(unsigned int, uint)
CP_HK_VEC4(unsigned int, uint)
#undef CP_HK_VEC2
#undef CP_HK_VEC4

#define warpSize 32

/* ---- fibers ----------------------------------------------------------------- */
namespace cp__hk {

enum { READY = 0, WAIT_BLOCK, WAIT_WARP, DONE, TRAPPED };

struct block;
struct fiber {
    void *sp;
    uint3 cp__tid;
    unsigned lane, index;
    int state;
    unsigned mask;
    unsigned long long xchg;
    block *cp__blk;
};
static_assert(sizeof(fiber) <= CUPOLA_HK_FIBER_BYTES, "fiber state too large");
struct block {
    unsigned char *fibers;
    unsigned n, live;
    uint3 cp__bid;
    dim3 cp__bdim, cp__gdim;
    void *sched_sp;
    const cupola_hk_launch *l;
    void *cp__dyn;
};

/* default TLS model: initial-exec would draw on the static TLS surplus,
 * which a process loading many modules exhausts */
static thread_local fiber *cp__cur;

static inline fiber *fiber_at(block *b, unsigned i)
{
    return reinterpret_cast<fiber *>(b->fibers + (size_t)i * CUPOLA_HK_FIBER_BYTES);
}

} // namespace cp__hk

#define threadIdx (::cp__hk::cp__cur->cp__tid)
#define blockIdx (::cp__hk::cp__cur->cp__blk->cp__bid)
#define blockDim (::cp__hk::cp__cur->cp__blk->cp__bdim)
#define gridDim (::cp__hk::cp__cur->cp__blk->cp__gdim)

namespace cp__hk {
/* Block number index of launch l, with its threads not started yet. */
static inline void block_init(block *b, const cupola_hk_launch *l, uint64_t index,
                              const cupola_hk_scratch *s, unsigned char *fibers)
{
    unsigned n = l->block[0] * l->block[1] * l->block[2];
    b->fibers = fibers;
    b->n = n;
    b->live = n;
    b->cp__bid.x = (unsigned)(index % l->grid[0]);
    b->cp__bid.y = (unsigned)((index / l->grid[0]) % l->grid[1]);
    b->cp__bid.z = (unsigned)(index / ((uint64_t)l->grid[0] * l->grid[1]));
    b->cp__bdim = dim3(l->block[0], l->block[1], l->block[2]);
    b->cp__gdim = dim3(l->grid[0], l->grid[1], l->grid[2]);
    b->sched_sp = nullptr;
    b->l = l;
    b->cp__dyn = s->dyn_shared;
}
} // namespace cp__hk

#ifdef CUPOLA_HK_DIRECT
/* Direct mode: the source uses no barrier and no warp operation (cupola's
 * scan said so), so each thread runs to completion in turn, called straight
 * from the block loop: no fibers, no stacks.  A barrier reached anyway
 * (through a header the scan did not see) is a compile error, on which
 * cupola compiles the module again with fibers. */
namespace cp__hk {
static int cp__run_block(const cupola_hk_launch *l, uint64_t index, const cupola_hk_scratch *s,
                     char *err, size_t errlen)
{
    block b;
    fiber f;
    (void)err;
    (void)errlen;
    block_init(&b, l, index, s, nullptr);
    memset(&f, 0, sizeof f);
    f.cp__blk = &b;
    cp__cur = &f;
    for (unsigned z = 0, i = 0; z < l->block[2]; z++)
        for (unsigned y = 0; y < l->block[1]; y++)
            for (unsigned x = 0; x < l->block[0]; x++, i++) {
                f.cp__tid.x = x;
                f.cp__tid.y = y;
                f.cp__tid.z = z;
                f.lane = i & 31u;
                f.index = i;
                l->kernel->thunk(l->args);
            }
    cp__cur = nullptr;
    return 0;
}
} // namespace cp__hk
#else
/* cp__hk_switch(save, to): saves the callee-saved registers and the stack
 * pointer into *save and resumes the context whose stack pointer is to.  The
 * floating-point control state is shared by a block's fibers (the kernel runs
 * with the thread's), so it is not switched. */
#if defined(__x86_64__)
extern "C" __attribute__((visibility("hidden"))) void cp__hk_switch(void **save, void *to);
__asm__(".text\n"
        ".p2align 4\n"
        ".type cp__hk_switch,@function\n"
        "cp__hk_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size cp__hk_switch, .-cp__hk_switch\n");

namespace cp__hk {
static void *stack_init(unsigned char *lo, size_t size, void (*entry)())
{
    uint64_t *sp = reinterpret_cast<uint64_t *>(((uintptr_t)(lo + size)) & ~(uintptr_t)15);
    *--sp = 0; /* entry's return address: it never returns */
    *--sp = (uint64_t)(uintptr_t)entry;
    for (int i = 0; i < 6; i++)
        *--sp = 0;
    return sp;
}
} // namespace cp__hk
#else
#include <ucontext.h>
#error "cupola's host kernels need x86-64 (the fiber switch is written for it)"
#endif

namespace cp__hk {

static void entry()
{
    fiber *f = cp__cur;
    block *b = f->cp__blk;
    b->l->kernel->thunk(b->l->args);
    f = cp__cur;
    f->state = DONE;
    f->cp__blk->live--;
    cp__hk_switch(&f->sp, f->cp__blk->sched_sp);
    __builtin_unreachable();
}

static inline void wait(int st, unsigned mask)
{
    fiber *f = cp__cur;
    f->state = st;
    f->mask = mask;
    cp__hk_switch(&f->sp, f->cp__blk->sched_sp);
}

static int cp__run_block(const cupola_hk_launch *l, uint64_t index, const cupola_hk_scratch *s,
                     char *err, size_t errlen)
{
    block b;
    unsigned n = l->block[0] * l->block[1] * l->block[2];
    if (n == 0 || n > s->nslots || s->slot_size < 4096) {
        snprintf(err, errlen, "block of %u threads does not fit the scratch memory", n);
        return 1;
    }
    block_init(&b, l, index, s, static_cast<unsigned char *>(s->fibers));
    for (unsigned i = 0; i < n; i++) {
        fiber *f = fiber_at(&b, i);
        f->cp__tid.x = i % l->block[0];
        f->cp__tid.y = (i / l->block[0]) % l->block[1];
        f->cp__tid.z = i / (l->block[0] * l->block[1]);
        f->lane = i & 31u;
        f->index = i;
        f->state = READY;
        f->mask = 0;
        f->xchg = 0;
        f->cp__blk = &b;
        /* stack tops staggered by a cache line per thread: at equal page
         * offsets they would all fall into one set of the L1 cache */
        f->sp = stack_init(s->slots + (size_t)i * s->slot_stride,
                           s->slot_size - (size_t)(i % 63u) * 64u, entry);
    }
    for (;;) {
        unsigned nblock = 0;
        int released = 0;
        for (unsigned i = 0; i < n; i++) {
            fiber *f = fiber_at(&b, i);
            if (f->state == READY) {
                cp__cur = f;
                cp__hk_switch(&b.sched_sp, f->sp);
                if (f->state == TRAPPED) {
                    /* 2: a sticky error, as a trap is on CUDA */
                    cp__cur = nullptr;
                    snprintf(err, errlen, "__trap() in thread (%u,%u,%u) of block (%u,%u,%u)",
                             f->cp__tid.x, f->cp__tid.y, f->cp__tid.z, b.cp__bid.x, b.cp__bid.y, b.cp__bid.z);
                    return 2;
                }
            }
        }
        cp__cur = nullptr;
        if (b.live == 0)
            return 0;
        for (unsigned i = 0; i < n; i++)
            nblock += fiber_at(&b, i)->state == WAIT_BLOCK;
        if (nblock == b.live) {
            /* every thread that has not exited is at the barrier: release
             * those (an exited thread takes no part in barriers, as on CUDA
             * since Volta, and its stack must never be resumed) */
            for (unsigned i = 0; i < n; i++)
                if (fiber_at(&b, i)->state == WAIT_BLOCK)
                    fiber_at(&b, i)->state = READY;
            continue;
        }
        for (unsigned w = 0; w * 32 < n; w++) {
            unsigned waiting = 0, live = 0, want = 0;
            for (unsigned j = 0; j < 32 && w * 32 + j < n; j++) {
                fiber *f = fiber_at(&b, w * 32 + j);
                if (f->state != DONE)
                    live |= 1u << j;
                if (f->state == WAIT_WARP) {
                    waiting |= 1u << j;
                    want |= f->mask;
                }
            }
            if (waiting && ((want & live) & ~waiting) == 0) {
                for (unsigned j = 0; j < 32 && w * 32 + j < n; j++)
                    if (waiting & (1u << j))
                        fiber_at(&b, w * 32 + j)->state = READY;
                released = 1;
            }
        }
        if (!released) {
            snprintf(err, errlen,
                     "deadlock in block (%u,%u,%u): its threads wait at different barriers "
                     "(%u at __syncthreads, %u at a warp operation, %u exited)",
                     b.cp__bid.x, b.cp__bid.y, b.cp__bid.z, nblock, b.live - nblock, n - b.live);
            return 1;
        }
    }
}

/* Exchanges v among the lanes of mask; returns lane src's value (own value
 * when src is outside the block). */
template <class T> static inline T exchange(unsigned mask, T v, int src, bool valid)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "warp shuffles take values of at most 8 bytes");
    fiber *f = cp__cur;
    unsigned base = f->index & ~31u;
    T r = v;
    __builtin_memcpy(&f->xchg, &v, sizeof v);
    wait(WAIT_WARP, mask);
    f = cp__cur;
    if (valid && src >= 0 && base + (unsigned)src < f->cp__blk->n)
        __builtin_memcpy(&r, &fiber_at(f->cp__blk, base + (unsigned)src)->xchg, sizeof r);
    wait(WAIT_WARP, mask);
    return r;
}

static inline unsigned ballot(unsigned mask, int pred)
{
    fiber *f = cp__cur;
    unsigned base = f->index & ~31u, r = 0;
    f->xchg = pred != 0;
    wait(WAIT_WARP, mask);
    f = cp__cur;
    for (unsigned j = 0; j < 32 && base + j < f->cp__blk->n; j++) {
        fiber *o = fiber_at(f->cp__blk, base + j);
        if ((mask & (1u << j)) && o->state != DONE && o->xchg)
            r |= 1u << j;
    }
    wait(WAIT_WARP, mask);
    return r;
}

static inline int block_reduce(int pred, int op)
{
    fiber *f = cp__cur;
    int r = op == 1 ? 1 : 0;
    f->xchg = pred != 0;
    wait(WAIT_BLOCK, 0);
    f = cp__cur;
    for (unsigned i = 0; i < f->cp__blk->n; i++) {
        fiber *o = fiber_at(f->cp__blk, i);
        if (o->state == DONE)
            continue;
        if (op == 0)
            r += (int)o->xchg;
        else if (op == 1)
            r = r && o->xchg;
        else
            r = r || o->xchg;
    }
    wait(WAIT_BLOCK, 0);
    return r;
}

} // namespace cp__hk
#endif /* CUPOLA_HK_DIRECT */

/* Declared here so that a kernel's signature can name it whether or not the
 * source includes <cupola/device.h> (which defines it). */
struct cupola_device_pool;

namespace cp__hk {

template <class T> using pointee = typename std::remove_cv<typename std::remove_pointer<T>::type>::type;

/* Parameters and calls, from the kernel's own signature.  Pointers to a
 * device pool ('d') and untyped pointers ('v') are told apart from other
 * pointers, so that a Buffer is never passed where a kernel reads a pool's
 * state, nor a pool where it writes data. */
template <class T> constexpr cupola_hk_param param_of()
{
    return std::is_pointer<T>::value && std::is_same<pointee<T>, cupola_device_pool>::value
               ? cupola_hk_param{'d', (unsigned char)sizeof(T)}
           : std::is_pointer<T>::value && std::is_void<pointee<T>>::value
               ? cupola_hk_param{'v', (unsigned char)sizeof(T)}
           : std::is_pointer<T>::value ? cupola_hk_param{'p', (unsigned char)sizeof(T)}
           : std::is_floating_point<T>::value ? cupola_hk_param{'f', (unsigned char)sizeof(T)}
           : std::is_integral<T>::value && std::is_signed<T>::value
               ? cupola_hk_param{'i', (unsigned char)sizeof(T)}
           : std::is_integral<T>::value ? cupola_hk_param{'u', (unsigned char)sizeof(T)}
                                        : cupola_hk_param{'x', (unsigned char)(sizeof(T) > 255 ? 255 : sizeof(T))};
}
template <class... A> struct cp__sig {
    static constexpr cupola_hk_param cp__table[sizeof...(A) + 1] = {param_of<A>()..., cupola_hk_param{0, 0}};
};
template <class... A> constexpr unsigned cp__nparams(void (*)(A...)) { return sizeof...(A); }
template <class... A> constexpr const cupola_hk_param *cp__params(void (*)(A...)) { return cp__sig<A...>::cp__table; }
template <class... A, size_t... I>
static inline void cp__call(void (*fn)(A...), void *const *a, std::index_sequence<I...>)
{
    (void)a;
    fn(*static_cast<typename std::remove_cv<A>::type *>(a[I])...);
}
template <class... A> static inline void cp__invoke(void (*fn)(A...), void *const *a)
{
    ::cp__hk::cp__call(fn, a, std::index_sequence_for<A...>{});
}

} // namespace cp__hk

/* ---- synchronization and warp operations ------------------------------------ */
#ifdef CUPOLA_HK_DIRECT
#define CP_HK_FIBERS __attribute__((error("cupola-needs-fibers")))
void __syncthreads() CP_HK_FIBERS;
int __syncthreads_count(int) CP_HK_FIBERS;
int __syncthreads_and(int) CP_HK_FIBERS;
int __syncthreads_or(int) CP_HK_FIBERS;
void __syncwarp(unsigned = 0xffffffffu) CP_HK_FIBERS;
void __trap() CP_HK_FIBERS;
unsigned __activemask() CP_HK_FIBERS;
template <class T> T __shfl_sync(unsigned, T, int, int = 32) CP_HK_FIBERS;
template <class T> T __shfl_down_sync(unsigned, T, unsigned, int = 32) CP_HK_FIBERS;
template <class T> T __shfl_up_sync(unsigned, T, unsigned, int = 32) CP_HK_FIBERS;
template <class T> T __shfl_xor_sync(unsigned, T, int, int = 32) CP_HK_FIBERS;
unsigned __ballot_sync(unsigned, int) CP_HK_FIBERS;
int __any_sync(unsigned, int) CP_HK_FIBERS;
int __all_sync(unsigned, int) CP_HK_FIBERS;
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline unsigned __lanemask_lt() { return (1u << ::cp__hk::cp__cur->lane) - 1u; }
#else
/* ---- synchronization ---------------------------------------------------------- */
static inline void __syncthreads() { ::cp__hk::wait(::cp__hk::WAIT_BLOCK, 0); }
static inline int __syncthreads_count(int p) { return ::cp__hk::block_reduce(p, 0); }
static inline int __syncthreads_and(int p) { return ::cp__hk::block_reduce(p, 1); }
static inline int __syncthreads_or(int p) { return ::cp__hk::block_reduce(p, 2); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { ::cp__hk::wait(::cp__hk::WAIT_WARP, mask); }
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __trap()
{
    ::cp__hk::wait(::cp__hk::TRAPPED, 0);
    __builtin_unreachable();
}

/* ---- warp operations ------------------------------------------------------------ */
static inline unsigned __activemask()
{
    ::cp__hk::fiber *f = ::cp__hk::cp__cur;
    unsigned base = f->index & ~31u, r = 0;
    for (unsigned j = 0; j < 32 && base + j < f->cp__blk->n; j++)
        if (::cp__hk::fiber_at(f->cp__blk, base + j)->state != ::cp__hk::DONE)
            r |= 1u << j;
    return r;
}
static inline unsigned __lanemask_lt() { return (1u << ::cp__hk::cp__cur->lane) - 1u; }
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    int lane = (int)::cp__hk::cp__cur->lane;
    return ::cp__hk::exchange(mask, v, (lane & ~(width - 1)) + (src & (width - 1)), true);
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    int lane = (int)::cp__hk::cp__cur->lane;
    return ::cp__hk::exchange(mask, v, lane + (int)d, (lane & (width - 1)) + (int)d < width);
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    int lane = (int)::cp__hk::cp__cur->lane;
    return ::cp__hk::exchange(mask, v, lane - (int)d, (lane & (width - 1)) >= (int)d);
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32)
{
    int lane = (int)::cp__hk::cp__cur->lane, src = lane ^ m;
    return ::cp__hk::exchange(mask, v, src, (src & ~(width - 1)) == (lane & ~(width - 1)));
}
static inline unsigned __ballot_sync(unsigned mask, int p) { return ::cp__hk::ballot(mask, p); }
static inline int __any_sync(unsigned mask, int p) { return ::cp__hk::ballot(mask, p) != 0; }
static inline int __all_sync(unsigned mask, int p)
{
    return ::cp__hk::ballot(mask, p) == (mask & __activemask());
}

#endif /* CUPOLA_HK_DIRECT */

/* ---- atomics ------------------------------------------------------------------------ */
#define CP_HK_ATOMIC_INT(T)                                                                   \
    static inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); } \
    static inline T atomicSub(T *p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); } \
    static inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); } \
    static inline T atomicAnd(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); } \
    static inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }   \
    static inline T atomicXor(T *p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); } \
    static inline T atomicCAS(T *p, T expected, T v)                                           \
    {                                                                                         \
        __atomic_compare_exchange_n(p, &expected, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED); \
        return expected;                                                                      \
    }                                                                                         \
    static inline T atomicMin(T *p, T v)                                                      \
    {                                                                                         \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                         \
        while (v < old &&                                                                     \
               !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
            ;                                                                                 \
        return old;                                                                           \
    }                                                                                         \
    static inline T atomicMax(T *p, T v)                                                      \
    {                                                                                         \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                         \
        while (v > old &&                                                                     \
               !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
            ;                                                                                 \
        return old;                                                                           \
    }
CP_HK_ATOMIC_INT(int)
CP_HK_ATOMIC_INT(unsigned int)
CP_HK_ATOMIC_INT(long long)
CP_HK_ATOMIC_INT(unsigned long long)
#undef CP_HK_ATOMIC_INT

#define CP_HK_ATOMIC_FLOAT(T, U)                                                              \
    static inline T atomicAdd(T *p, T v)                                                      \
    {                                                                                         \
        U *q = reinterpret_cast<U *>(p);                                                      \
        U old = __atomic_load_n(q, __ATOMIC_RELAXED), nw;                                      \
        T f;                                                                                  \
        do {                                                                                  \
            memcpy(&f, &old, sizeof f);                                                       \
            f += v;                                                                           \
            memcpy(&nw, &f, sizeof f);                                                        \
        } while (!__atomic_compare_exchange_n(q, &old, nw, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)); \
        memcpy(&f, &old, sizeof f);                                                           \
        return f;                                                                             \
    }                                                                                         \
    static inline T atomicExch(T *p, T v)                                                     \
    {                                                                                         \
        U nw, old;                                                                            \
        T f;                                                                                  \
        memcpy(&nw, &v, sizeof v);                                                            \
        old = __atomic_exchange_n(reinterpret_cast<U *>(p), nw, __ATOMIC_RELAXED);            \
        memcpy(&f, &old, sizeof f);                                                           \
        return f;                                                                             \
    }
CP_HK_ATOMIC_FLOAT(float, unsigned int)
CP_HK_ATOMIC_FLOAT(double, unsigned long long)
#undef CP_HK_ATOMIC_FLOAT

static inline unsigned atomicInc(unsigned *p, unsigned lim)
{
    unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(p, &old, old >= lim ? 0u : old + 1u, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
        ;
    return old;
}
static inline unsigned atomicDec(unsigned *p, unsigned lim)
{
    unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(p, &old, (old == 0 || old > lim) ? lim : old - 1u, true,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    return old;
}

/* ---- math and intrinsics ------------------------------------------------------------ */
template <class A, class B> static inline typename std::common_type<A, B>::type min(A a, B b)
{
    typedef typename std::common_type<A, B>::type C;
    return (C)b < (C)a ? (C)b : (C)a;
}
template <class A, class B> static inline typename std::common_type<A, B>::type max(A a, B b)
{
    typedef typename std::common_type<A, B>::type C;
    return (C)a < (C)b ? (C)b : (C)a;
}
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __fdividef(float a, float b) { return a / b; }
/* __expf, __logf, __sinf, __cosf, __powf: glibc declares them already */
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
static inline int __float2int_rn(float x) { return (int)lrintf(x); }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x)
{
    unsigned r = 0;
    for (int i = 0; i < 32; i++, x >>= 1)
        r = (r << 1) | (x & 1u);
    return r;
}
template <class T> static inline T __ldg(const T *p) { return *p; }
static inline long long clock64() { return (long long)__builtin_ia32_rdtsc(); }

/* `extern __shared__ T name[];` becomes a pointer to this. */
static inline void *cp__hk_dyn_shared() { return ::cp__hk::cp__cur->cp__blk->cp__dyn; }

/* The table of the module's kernels; cupola appends one line naming them. */
#define CUPOLA_HK_KERNEL(fn)                                                                  \
    cupola_hk_kernel{#fn, [](void *const *cp__args) { ::cp__hk::cp__invoke(fn, cp__args); }, ::cp__hk::cp__nparams(fn), \
                     ::cp__hk::cp__params(fn)},
#define CUPOLA_HK_TABLE(...)                                                                  \
    static const cupola_hk_kernel cp__hk_kernels[] = {__VA_ARGS__ cupola_hk_kernel{nullptr, nullptr, 0, nullptr}}; \
    extern "C" __attribute__((__visibility__("default"))) const cupola_hk_module cupola_hk_module_v1 = { \
        CUPOLA_HK_ABI, (unsigned)(sizeof cp__hk_kernels / sizeof cp__hk_kernels[0]) - 1u,   \
        cp__hk_kernels, ::cp__hk::cp__run_block};

#endif /* CUPOLA_HOST_PRELUDE_H */
