/*
 * nvtx.c: NVTX ranges for users and for cupola's own operations (nvtx.h).
 */
#include "nvtx.h"

#include <stdlib.h>
#include <string.h>

#ifdef CUPOLA_HAVE_NVTX
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#pragma GCC diagnostic ignored "-Wcast-qual"
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#include <nvtx3/nvToolsExt.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#endif

int cp_nvtx_on;
static _Thread_local int depth;
#ifdef CUPOLA_HAVE_NVTX
static nvtxDomainHandle_t domain; /* made once, by cp_nvtx_init */
#endif

void cp_nvtx_init(void)
{
    static int done;
    const char *e;
    if (done)
        return;
    done = 1;
    e = getenv("CUPOLA_NVTX");
    cp_nvtx_on = e && *e && strcmp(e, "0") != 0;
#ifdef CUPOLA_HAVE_NVTX
    if (cp_nvtx_on)
        domain = nvtxDomainCreateA("cupola");
#endif
}

int cp_nvtx_available(void)
{
#ifdef CUPOLA_HAVE_NVTX
    return 1;
#else
    return 0;
#endif
}

int cp_nvtx_push(const char *name)
{
#ifdef CUPOLA_HAVE_NVTX
    nvtxRangePushA(name);
#else
    (void)name;
#endif
    return ++depth;
}

int cp_nvtx_pop(void)
{
    if (depth <= 0)
        return -1;
#ifdef CUPOLA_HAVE_NVTX
    nvtxRangePop();
#endif
    return --depth;
}

void cp_nvtx_mark(const char *name)
{
#ifdef CUPOLA_HAVE_NVTX
    nvtxMarkA(name);
#else
    (void)name;
#endif
}

int cp_nvtx_depth(void)
{
    return depth;
}

void cp_nvtx_cupola_push(const char *name)
{
#ifdef CUPOLA_HAVE_NVTX
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = name;
    nvtxDomainRangePushEx(domain, &a);
#else
    (void)name;
#endif
}

void cp_nvtx_cupola_pop(void)
{
#ifdef CUPOLA_HAVE_NVTX
    nvtxDomainRangePop(domain);
#endif
}
