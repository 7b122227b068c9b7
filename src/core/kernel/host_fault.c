/*
 * kernel/host_fault.c: hardware faults of user kernels on the host backend
 * (host_fault.h has the policy).
 */
#include "kernel/host_fault.h"

#include "backend/backend.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define ALT_STACK_BYTES (64u * 1024u)

static const int fault_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
#define NSIGS (sizeof fault_sigs / sizeof fault_sigs[0])

_Thread_local cp_hfault *volatile cp_hfault_armed;

static struct sigaction previous[NSIGS];
/* the calling thread's own stack, lowest usable address and guard size,
 * to tell a stack overflow of a kernel run without fibers */
static _Thread_local uintptr_t thread_stack_lo, thread_guard;
static int installed;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static pthread_key_t alt_key;

static int sig_slot(int sig)
{
    for (size_t i = 0; i < NSIGS; i++)
        if (fault_sigs[i] == sig)
            return (int)i;
    return -1;
}

/* A fault that is not a user kernel's: what would have happened without
 * cupola.  Only async-signal-safe calls. */
static void chain(int sig, siginfo_t *si, void *uc)
{
    int k = sig_slot(sig);
    const struct sigaction *p = k >= 0 ? &previous[k] : NULL;
    if (p && (p->sa_flags & SA_SIGINFO) && p->sa_sigaction) {
        p->sa_sigaction(sig, si, uc);
        return;
    }
    if (p && p->sa_handler != SIG_DFL && p->sa_handler != SIG_IGN) {
        p->sa_handler(sig);
        return;
    }
    if (p && p->sa_handler == SIG_IGN && si->si_code <= 0)
        return; /* a signal sent to a process that ignores it */
    /* the default action: a hardware fault re-executes the instruction once
     * the handler returns and now kills the process; a sent signal is raised
     * again (blocked until this handler returns) */
    {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(sig, &dfl, NULL);
        if (si->si_code <= 0)
            raise(sig);
    }
}

static void on_fault(int sig, siginfo_t *si, void *uc)
{
    cp_hfault *f = cp_hfault_armed;
    if (f && si && si->si_code > 0) {
        cp_hfault_armed = NULL;
        f->sig = sig;
        f->code = si->si_code;
        f->addr = si->si_addr;
        siglongjmp(f->jb, 1);
    }
    chain(sig, si, uc);
}

static void alt_free(void *p)
{
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, NULL);
    munmap(p, ALT_STACK_BYTES);
}

static void install(void)
{
    struct sigaction sa;
    if (pthread_key_create(&alt_key, alt_free) != 0)
        return;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < NSIGS; i++)
        sigaddset(&sa.sa_mask, fault_sigs[i]);
    for (size_t i = 0; i < NSIGS; i++)
        if (sigaction(fault_sigs[i], &sa, &previous[i]) != 0)
            return;
    installed = 1;
}

/* The module is unloaded: give the signals back to whoever had them, unless
 * someone installed a handler over cupola's since. */
__attribute__((destructor)) static void uninstall(void)
{
    if (!installed)
        return;
    for (size_t i = 0; i < NSIGS; i++) {
        struct sigaction cur;
        if (sigaction(fault_sigs[i], NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
            cur.sa_sigaction == on_fault)
            sigaction(fault_sigs[i], &previous[i], NULL);
    }
    installed = 0;
}

int cp_hfault_thread_init(char *err, size_t errlen)
{
    static _Thread_local int ready;
    stack_t cur;
    if (ready)
        return 0;
    pthread_once(&install_once, install);
    if (!installed) {
        snprintf(err, errlen, "cannot install the handlers for faults of user kernels");
        return 1;
    }
    /* a thread that has an alternate stack already (a sanitizer's) keeps it */
    if (sigaltstack(NULL, &cur) != 0 || (cur.ss_flags & SS_DISABLE) ||
        cur.ss_size < ALT_STACK_BYTES / 2) {
        stack_t ss;
        void *p = mmap(NULL, ALT_STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (p == MAP_FAILED) {
            snprintf(err, errlen, "out of memory for a signal stack");
            return 1;
        }
        memset(&ss, 0, sizeof ss);
        ss.ss_sp = p;
        ss.ss_size = ALT_STACK_BYTES;
        if (sigaltstack(&ss, NULL) != 0 || pthread_setspecific(alt_key, p) != 0) {
            ss.ss_flags = SS_DISABLE;
            sigaltstack(&ss, NULL);
            munmap(p, ALT_STACK_BYTES);
            snprintf(err, errlen, "cannot set up a signal stack");
            return 1;
        }
    }
    {
        pthread_attr_t at;
        void *lo = NULL;
        size_t size = 0, guard = 0;
        if (pthread_getattr_np(pthread_self(), &at) == 0) {
            if (pthread_attr_getstack(&at, &lo, &size) == 0)
                thread_stack_lo = (uintptr_t)lo;
            if (pthread_attr_getguardsize(&at, &guard) == 0)
                thread_guard = guard;
            pthread_attr_destroy(&at);
        }
    }
    ready = 1;
    return 0;
}

void cp_hfault_recover(void)
{
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < NSIGS; i++)
        sigaddset(&set, fault_sigs[i]);
    cp_hfault_armed = NULL;
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

/* What follows the message of a fault, outside its parentheses as the CUDA
 * backend's "the CUDA context is no longer usable" is. */
static void append_unusable(char *err, size_t errlen)
{
    size_t n = strlen(err);
    if (n < errlen)
        snprintf(err + n, errlen - n, "; the stream is no longer usable");
}

void cp_hfault_describe(const cp_hfault *f, const char *kname, const void *stack_lo,
                        const void *stack_hi, size_t stride, size_t guard, char *err,
                        size_t errlen)
{
    const char *sig = f->sig == SIGSEGV ? "SIGSEGV"
                      : f->sig == SIGBUS ? "SIGBUS"
                      : f->sig == SIGFPE ? "SIGFPE"
                                         : "SIGILL";
    uintptr_t a = (uintptr_t)f->addr;
    unsigned long long blk = (unsigned long long)f->block;
    if (f->sig == SIGFPE && (f->code == FPE_INTDIV || f->code == FPE_INTOVF)) {
        snprintf(err, errlen,
                 "cupolaErrorDivisionByZero: kernel '%s' faulted in block %llu: integer %s "
                 "(host backend: SIGFPE at instruction %p; on a GPU this does not fault but "
                 "gives an unspecified value); the stream is no longer usable",
                 kname, blk, f->code == FPE_INTDIV ? "division by zero" : "division overflow",
                 f->addr);
    } else if (f->sig == SIGILL || f->sig == SIGFPE) {
        cp_cuda_err_format(err, errlen, CP_CUDA_ILLEGAL_INSTRUCTION,
                           "kernel '%s' faulted in block %llu; host backend: %s at instruction "
                           "%p",
                           kname, blk, sig, f->addr);
        append_unusable(err, errlen);
    } else if ((stack_lo && stride && a >= (uintptr_t)stack_lo && a < (uintptr_t)stack_hi &&
                (a - (uintptr_t)stack_lo) % stride < guard) ||
               (thread_stack_lo && a < thread_stack_lo + 4096 &&
                a + thread_guard + 65536 >= thread_stack_lo)) {
        cp_cuda_err_format(err, errlen, CP_CUDA_ILLEGAL_ADDRESS,
                           "kernel '%s' faulted in block %llu: a thread overflowed its stack; "
                           "host backend: %s at address %p, in a stack's guard page",
                           kname, blk, sig, f->addr);
        append_unusable(err, errlen);
    } else {
        cp_cuda_err_format(err, errlen, CP_CUDA_ILLEGAL_ADDRESS,
                           "kernel '%s' made an illegal memory access in block %llu; host "
                           "backend: %s at address %p",
                           kname, blk, sig, f->addr);
        append_unusable(err, errlen);
    }
}
