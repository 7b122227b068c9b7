/*
 * preload.c: libcupola_record_preload.so, which `bin/cupola record` puts in
 * LD_PRELOAD beside the injection library (inject.c).
 *
 * CUPTI takes one subscriber per process and the recorder is it: a profiler
 * the program starts later (torch.profiler's kineto, a tool of its own) has
 * its cuptiSubscribe refused with CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
 * and goes on without CUDA events, saying so at most in its own log
 * (torch.profiler exits 0 with no CUDA event).  Preloaded, this library
 * defines cuptiSubscribe and cuptiSubscribe_v2 ahead of libcupti, calls
 * libcupti's own (dlsym RTLD_NEXT), always with a buffer for the name of the
 * subscriber already there, and when that is the recorder it says so in one
 * line on stderr, once per process, naming the library that asked:
 *
 *   cupola record: process 4711: libtorch_cuda.so asked for CUPTI (a profiler?) and was
 *   refused: cupola record holds it, so that profiler sees no CUDA activity; profile
 *   without cupola record
 *
 * The caller gets exactly what libcupti answered (its own name buffer
 * filled as libcupti fills it).  The recorder's own subscribe passes
 * through untouched.  Nothing here links libcupti or CUDA: a process that
 * never uses CUPTI only loads a small library.  Not seen: a profiler that
 * finds cuptiSubscribe with dlsym on a handle of its own (the recording is
 * the same; only the line is missing).
 */
#include <cupti.h>

#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define RECORDER "cupola record"

typedef CUptiResult (*subscribe_v2_fn)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *,
                                       CUpti_SubscriberParams *);
typedef CUptiResult (*subscribe_fn)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);

static atomic_int said;

static int find_cupti(struct dl_phdr_info *info, size_t size, void *data)
{
    const char *name = info->dlpi_name, *slash;
    (void)size;
    if (!name || !*name)
        return 0;
    slash = strrchr(name, '/');
    if (strncmp(slash ? slash + 1 : name, "libcupti.so", 11) != 0)
        return 0;
    *(void **)data = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
    return *(void **)data != NULL;
}

/* libcupti's own function: the next definition after this library, or, where
 * libcupti is loaded outside the global scope (a dependency of a library
 * opened with RTLD_LOCAL: CUDA's injection, a Python extension), the one of
 * the libcupti loaded.  NULL when there is none. */
static void *next(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name), *h = NULL;
    if (f)
        return f;
    dl_iterate_phdr(find_cupti, &h);
    if (!h)
        return NULL;
    f = dlsym(h, name);
    dlclose(h); /* RTLD_NOLOAD took a reference: the library stays loaded by its owner */
    return f;
}

static void say_refused(const void *ret)
{
    Dl_info di;
    const char *who = "a library of the program";
    const char *slash;
    if (atomic_exchange(&said, 1))
        return;
    if (ret && dladdr(ret, &di) && di.dli_fname) {
        slash = strrchr(di.dli_fname, '/');
        who = slash ? slash + 1 : di.dli_fname;
    }
    fprintf(stderr, "cupola record: process %ld: %s asked for CUPTI (a profiler?) and was "
            "refused: cupola record holds it, so that profiler sees no CUDA activity; profile "
            "without cupola record\n", (long)getpid(), who);
}

/* libcupti's cuptiSubscribe_v2 with a name buffer; says the refusal when
 * the holder is the recorder.  params may be NULL (as CUPTI allows). */
static CUptiResult subscribe(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc cb, void *ud,
                             CUpti_SubscriberParams *params, const void *ret)
{
    /* unions: ISO C has no cast from an object to a function pointer */
    union { void *p; subscribe_v2_fn f; } v2 = {.p = next("cuptiSubscribe_v2")};
    CUpti_SubscriberParams p;
    char old[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 64];
    CUptiResult res;
    if (!v2.p) {
        /* an older libcupti: the plain call, and the refusal unexplained */
        union { void *p; subscribe_fn f; } v1 = {.p = next("cuptiSubscribe")};
        return v1.p ? v1.f(sub, cb, ud) : CUPTI_ERROR_NOT_INITIALIZED;
    }
    if (params && params->subscriberName && strcmp(params->subscriberName, RECORDER) == 0)
        return v2.f(sub, cb, ud, params); /* the recorder itself */
    memset(&p, 0, sizeof p);
    if (params)
        memcpy(&p, params, params->structSize < sizeof p ? params->structSize : sizeof p);
    else
        p.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    old[0] = '\0';
    p.oldSubscriberName = old;
    p.oldSubscriberSize = sizeof old;
    res = v2.f(sub, cb, ud, &p);
    if (params && params->structSize >= CUpti_SubscriberParams_STRUCT_SIZE &&
        params->oldSubscriberName && params->oldSubscriberSize)
        snprintf(params->oldSubscriberName, params->oldSubscriberSize, "%s", old);
    if (res == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && strstr(old, RECORDER))
        say_refused(ret);
    return res;
}

EXPORT CUptiResult CUPTIAPI cuptiSubscribe_v2(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc cb,
                                              void *ud, CUpti_SubscriberParams *params)
{
    return subscribe(sub, cb, ud, params, __builtin_return_address(0));
}

EXPORT CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc cb,
                                           void *ud)
{
    return subscribe(sub, cb, ud, NULL, __builtin_return_address(0));
}
