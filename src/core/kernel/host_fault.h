/*
 * kernel/host_fault.h: hardware faults of user kernels on the host backend.
 *
 * A user kernel runs as plain machine code on a CPU thread, so an
 * out-of-bounds store, a null dereference, an integer division by zero or a
 * stack overflow raises SIGSEGV, SIGBUS, SIGFPE or SIGILL.  On a GPU the same
 * fault fails the launch and the next synchronization reports it; this file
 * gives the host backend that behaviour:
 *
 *  - cp_hfault_thread_init installs (once per process) handlers for those
 *    four signals, on an alternate stack (SA_ONSTACK), and gives the calling
 *    thread its own alternate stack (kept for the thread's life), so even a
 *    stack overflow can be handled.
 *  - A thread "arms" a frame (CP_HFAULT_ARM) around the user code it runs.
 *    A fault raised by the hardware (si_code > 0) in an armed thread jumps
 *    back to the frame (siglongjmp) with the signal, its code and address.
 *  - Any other fault (outside user code, on another thread, or sent with
 *    kill) goes to the handler that was installed before cupola's, or, where
 *    that was the default, kills the process exactly as it would have: the
 *    process's own crashes stay crashes.
 *  - The handlers are uninstalled (the previous ones restored) when the
 *    module is unloaded.
 *
 * What it cannot do: a wild store that lands on mapped memory corrupts it
 * silently (as on the GPU within an allocation), and a kernel that faults
 * inside a C library call that holds a lock (malloc, printf) leaves that
 * lock held.  The frame is per thread; nothing of cupola's scheduler is
 * locked while user code runs.
 */
#ifndef CUPOLA_KERNEL_HOST_FAULT_H
#define CUPOLA_KERNEL_HOST_FAULT_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cp_hfault {
    sigjmp_buf jb;
    volatile int sig, code;
    void *volatile addr;
    volatile uint64_t block; /* set by the caller: the block being run */
} cp_hfault;

/* The calling thread's armed frame (NULL: none). */
extern _Thread_local cp_hfault *volatile cp_hfault_armed;

/* Installs the handlers (once) and the thread's alternate stack; 0 on
 * success, else err says why (the caller fails the launch). */
int cp_hfault_thread_init(char *err, size_t errlen);

/* After a jump: unblocks the fault signals (the jump does not restore the
 * mask, which keeps arming cheap) and disarms. */
void cp_hfault_recover(void);

/* Describes the fault of f: "cudaErrorIllegalAddress: an illegal memory
 * access was encountered (kernel 'k' ...)", with the CUDA error name a GPU
 * reports (cupolaErrorDivisionByZero where a GPU does not fault), for
 * kernel kname; stack_lo..stack_hi (optional) is where the threads' stacks
 * and their guard pages lie, to tell a stack overflow. */
void cp_hfault_describe(const cp_hfault *f, const char *kname, const void *stack_lo,
                        const void *stack_hi, size_t stride, size_t guard, char *err,
                        size_t errlen);

#endif
