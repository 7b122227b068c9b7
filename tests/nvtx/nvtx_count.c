/*
 * nvtx_count.c: an NVTX injection library of cupola's own that
 * counts what a program emits, to prove that cupola's ranges reach a tool
 * without Nsight Systems.  NVTX v3 loads the library named by
 * NVTX_INJECTION64_PATH on the first NVTX call and calls its
 * InitializeInjectionNvtx2, which here installs counting handlers for the
 * default domain's RangePushA/RangePop/MarkA and for domains (DomainCreateA,
 * DomainRangePushEx, DomainRangePop).
 *
 * At exit it writes, to $NVTX_COUNT_OUT (else stderr), one line per domain
 *     domain <name> pushes <n> pops <n> marks <n> max_depth <n> unbalanced <n>
 * and one per distinct range message
 *     range <domain> <message> <n>
 * ("unbalanced" counts pops with no open range of that domain and thread).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvtx3/nvToolsExt.h>

#define MAXD 16
#define MAXM 256

typedef struct dom {
    char name[64];
    long pushes, pops, marks, max_depth, unbalanced;
} dom;

static dom doms[MAXD] = {{"default", 0, 0, 0, 0, 0}};
static int ndoms = 1;
static struct {
    int d;
    char msg[96];
    long n;
} msgs[MAXM];
static int nmsgs;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static __thread long depth[MAXD];

static void count_push(int d, const char *m)
{
    int i;
    pthread_mutex_lock(&mu);
    doms[d].pushes++;
    if (++depth[d] > doms[d].max_depth)
        doms[d].max_depth = depth[d];
    for (i = 0; i < nmsgs; i++)
        if (msgs[i].d == d && strcmp(msgs[i].msg, m ? m : "") == 0)
            break;
    if (i == nmsgs && nmsgs < MAXM) {
        msgs[i].d = d;
        snprintf(msgs[i].msg, sizeof msgs[i].msg, "%s", m ? m : "");
        nmsgs++;
    }
    if (i < MAXM)
        msgs[i].n++;
    pthread_mutex_unlock(&mu);
}

static int count_pop(int d)
{
    int r;
    pthread_mutex_lock(&mu);
    doms[d].pops++;
    if (depth[d] <= 0)
        doms[d].unbalanced++;
    else
        depth[d]--;
    r = (int)depth[d];
    pthread_mutex_unlock(&mu);
    return r;
}

static int dom_index(nvtxDomainHandle_t h)
{
    long i = (long)(size_t)h;
    return i > 0 && i < ndoms ? (int)i : 0;
}

static int NVTX_API h_push(const char *m)
{
    count_push(0, m);
    return (int)depth[0] - 1;
}

static int NVTX_API h_pop(void)
{
    return count_pop(0);
}

static void NVTX_API h_mark(const char *m)
{
    (void)m;
    pthread_mutex_lock(&mu);
    doms[0].marks++;
    pthread_mutex_unlock(&mu);
}

static nvtxDomainHandle_t NVTX_API h_domain(const char *name)
{
    int i;
    pthread_mutex_lock(&mu);
    for (i = 1; i < ndoms; i++)
        if (strcmp(doms[i].name, name) == 0)
            break;
    if (i == ndoms && ndoms < MAXD) {
        snprintf(doms[i].name, sizeof doms[i].name, "%s", name);
        ndoms++;
    }
    pthread_mutex_unlock(&mu);
    return (nvtxDomainHandle_t)(size_t)(i < MAXD ? i : 0);
}

static int NVTX_API h_dpush(nvtxDomainHandle_t h, const nvtxEventAttributes_t *a)
{
    int d = dom_index(h);
    count_push(d, a && a->messageType == NVTX_MESSAGE_TYPE_ASCII ? a->message.ascii : "");
    return (int)depth[d] - 1;
}

static int NVTX_API h_dpop(nvtxDomainHandle_t h)
{
    return count_pop(dom_index(h));
}

static void report(void)
{
    const char *path = getenv("NVTX_COUNT_OUT");
    FILE *f = path ? fopen(path, "w") : NULL;
    int i;
    if (!f)
        f = stderr;
    for (i = 0; i < ndoms; i++)
        fprintf(f, "domain %s pushes %ld pops %ld marks %ld max_depth %ld unbalanced %ld\n",
                doms[i].name, doms[i].pushes, doms[i].pops, doms[i].marks, doms[i].max_depth,
                doms[i].unbalanced);
    for (i = 0; i < nmsgs; i++)
        fprintf(f, "range %s %s %ld\n", doms[msgs[i].d].name, msgs[i].msg, msgs[i].n);
    if (f != stderr)
        fclose(f);
}

static int set(NvtxGetExportTableFunc_t get, NvtxCallbackModule mod, unsigned id,
               NvtxFunctionPointer fn)
{
    const NvtxExportTableCallbacks *cb =
        (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned size = 0;
    if (!cb || !cb->GetModuleFunctionTable(mod, &table, &size) || !table || id >= size)
        return 0;
    *table[id] = fn;
    return 1;
}

int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get);
__attribute__((visibility("default"))) int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get)
{
    int ok = 1;
    ok &= set(get, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePushA, (NvtxFunctionPointer)h_push);
    ok &= set(get, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePop, (NvtxFunctionPointer)h_pop);
    ok &= set(get, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_MarkA, (NvtxFunctionPointer)h_mark);
    ok &= set(get, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainCreateA,
              (NvtxFunctionPointer)h_domain);
    ok &= set(get, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePushEx,
              (NvtxFunctionPointer)h_dpush);
    ok &= set(get, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePop,
              (NvtxFunctionPointer)h_dpop);
    atexit(report);
    return ok;
}
