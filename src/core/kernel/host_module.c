/*
 * kernel/host_module.c: user kernels on the host backend (module.h).
 *
 * Policy, exactly:
 *  - Compile: the source is scanned (scan.h): a launch from a kernel (`<<<`)
 *    is refused, `extern __shared__` arrays become pointers to the launch's
 *    dynamic shared memory, and a table naming the module's __global__
 *    functions is appended.  The system C++ compiler builds a shared object
 *    (C++17, -O2 unless the options say otherwise, -fno-exceptions,
 *    -Wl,-z,defs so that anything undefined is a compile error,
 *    -fstack-clash-protection so that a stack overflow faults in the guard
 *    page) with cupola/host_prelude.h force-included; compile.h caches it.
 *    The user's -D/-U options of non-reserved names become #define/#undef
 *    lines between the prelude and the source (macro_prologue).
 *  - A compile error whose first message is not in the user's file (a
 *    syntax error that ran on into the appended table, or one the prelude
 *    reports) is checked again without the table (-fsyntax-only); when that
 *    fails too, its log, which names the user's file and line first, is the
 *    error's.
 *  - Load: dlopen (RTLD_NOW | RTLD_LOCAL); the module's table gives each
 *    kernel's thunk and its real parameter kinds and sizes, which m:kernel
 *    checks the declared types against.
 *  - Launch: the shape is checked (block <= 1024 threads, dimensions as on
 *    CUDA, dynamic shared memory <= 227 KiB, sm_90's limit), then a task
 *    holding the argument values is enqueued on the stream (host_task), so
 *    launches are ordered with everything else on it.  The task runs a
 *    one-block grid on the stream's worker; larger grids are spread over a
 *    pool of CPU threads (one fewer than the cores, at least one; created on
 *    the first such launch, never per launch; CUPOLA_HOST_THREADS overrides)
 *    with the stream's worker taking blocks too.  Blocks are handed out by
 *    an atomic counter.
 *  - Each OS thread that runs blocks keeps scratch memory (fiber states, one
 *    64 KiB stack per thread of the block with a guard page below it, the
 *    dynamic shared memory), grown on demand and kept for the next launch.
 *  - A block that deadlocks at its barriers stops; the launch's remaining
 *    blocks are skipped and the next synchronization reports the error.  A
 *    __trap() does the same and leaves the stream in error, as a fault does
 *    (below) and as a trap does on CUDA.
 *  - A hardware fault in user code (illegal address, null dereference,
 *    integer division by zero, stack overflow: host_fault.h) stops the launch
 *    the same way, and the stream is left in error as a CUDA context would
 *    be: the next synchronization and every later use of the stream report
 *    "cudaErrorIllegalAddress: an illegal memory access was encountered
 *    (kernel 'name' ...)" (or cudaErrorIllegalInstruction, with CUDA's name as
 *    on the GPU; an integer division by zero, which does not fault on a GPU,
 *    is cupolaErrorDivisionByZero); other streams and the process live on.
 *  - A queued launch holds a reference to its module: closing a module never
 *    unloads code a pending launch will run.
 */
#include "kernel/module.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "include/cupola/host_abi.h"
/* Under valgrind the fiber stacks are registered as stacks: a fiber switch
 * moves the stack pointer by less than memcheck's --max-stackframe, which it
 * would otherwise take for a huge frame pushed or popped on one stack (and
 * then report every access in the "new" frame).  The requests cost a few
 * instructions when not under valgrind; without the header they are left out. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define HK_VALGRIND 1
#endif
#endif
#include "kernel/compile.h"
#include "kernel/host_fault.h"
#include "kernel/scan.h"

#define HK_STACK (64u * 1024u)
#define HK_GUARD 4096u
#define HK_MAX_SHARED 232448u /* 227 KiB: sm_90's opt-in maximum per block */

typedef struct hmod {
    atomic_int refs; /* the module and each queued launch */
    void *dl;
    const cupola_hk_module *tab;
} hmod;

typedef struct hkern {
    hmod *m;
    const cupola_hk_kernel *k;
    unsigned n;
    cp_ktype types[CP_KMAX_PARAMS];
} hkern;

static void hmod_release(hmod *m)
{
    if (atomic_fetch_sub(&m->refs, 1) == 1) {
        dlclose(m->dl);
        free(m);
    }
}

/* ---- compiling ------------------------------------------------------------ */

/* A -D or -U option of a name the user may define (not reserved: no leading
 * underscore).  Those become #define and #undef lines after the prelude
 * (macro_prologue), so that a user's macro (-DN=256, -Da) never rewrites
 * the prelude's own text; reserved names (_GNU_SOURCE and the like) stay on
 * the command line, where they configure the system headers the prelude
 * includes. */
static int is_user_macro(const char *opt)
{
    return (strncmp(opt, "-D", 2) == 0 || strncmp(opt, "-U", 2) == 0) && opt[2] != '_';
}

/* The user's -D/-U options as lines (malloc'd; NULL when there are none or
 * out of memory, with *oom set).  `#line 1 "<command-line>"` makes the
 * compiler call them what it calls command-line macros. */
static char *macro_prologue(const char *const *options, int *oom)
{
    size_t cap = 64;
    char *p, *q;
    *oom = 0;
    for (const char *const *o = options; o && *o; o++)
        if (is_user_macro(*o))
            cap += strlen(*o) + 16;
    if (cap == 64)
        return NULL;
    p = q = malloc(cap);
    if (!p) {
        *oom = 1;
        return NULL;
    }
    q += sprintf(q, "#line 1 \"<command-line>\"\n");
    for (const char *const *o = options; o && *o; o++) {
        const char *eq;
        if (!is_user_macro(*o))
            continue;
        if ((*o)[1] == 'U') {
            q += sprintf(q, "#undef %s\n", *o + 2);
            continue;
        }
        /* the option was checked: a macro name, then nothing or `=value`
         * without control characters (so no line break) */
        eq = strchr(*o + 2, '=');
        if (eq)
            q += sprintf(q, "#define %.*s %s\n", (int)(eq - (*o + 2)), *o + 2, eq + 1);
        else
            q += sprintf(q, "#define %s 1\n", *o + 2);
    }
    return p;
}

/* Whether the compiler's first error is in the user's own file: the first
 * line holding " error:" (gcc and clang write "file:line:col: error: ..."
 * and "... fatal error: ...") starts with "name:LINE". */
static int first_error_is_users(const char *log, const char *name)
{
    size_t n = strlen(name);
    for (const char *l = log; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        const char *hit = NULL;
        for (size_t i = 0; i + 7 <= len; i++)
            if (memcmp(l + i, " error:", 7) == 0) {
                hit = l + i;
                break;
            }
        if (hit)
            return len > n && strncmp(l, name, n) == 0 && l[n] == ':' && l[n + 1] >= '0' &&
                   l[n + 1] <= '9';
        l = e ? e + 1 : NULL;
    }
    return 0;
}

/* User options for g++: fast math maps, device-only ones are dropped, and
 * the user's macros go into the source (macro_prologue). */
static int translate(const char *opt, const char *out[2])
{
    if (strcmp(opt, "--use_fast_math") == 0 || strcmp(opt, "-use_fast_math") == 0) {
        out[0] = "-ffast-math";
        return 1;
    }
    if (is_user_macro(opt))
        return 0;
    if (strncmp(opt, "-D", 2) == 0 || strncmp(opt, "-U", 2) == 0 || strncmp(opt, "-I", 2) == 0 ||
        strncmp(opt, "-O", 2) == 0 || strcmp(opt, "-g") == 0 || strcmp(opt, "-w") == 0) {
        out[0] = opt;
        return 1;
    }
    if (strncmp(opt, "-std=", 5) == 0) {
        out[0] = opt;
        return 1;
    }
    if (strncmp(opt, "--std=", 6) == 0) {
        out[0] = opt + 1;
        return 1;
    }
    return 0; /* -rdc, -lineinfo, -G, --fmad, -maxrregcount: the GPU's */
}

static int file_exists(const char *p)
{
    return access(p, R_OK) == 0;
}

/* The prelude (cupola/host_prelude.h) from the first include folder that
 * has it, into out. */
static cp_status find_prelude(const cp_kmodule_desc *d, char *out, size_t n)
{
    out[0] = '\0';
    for (int i = 0; d->include_dirs && d->include_dirs[i] && i < 16; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/cupola/host_prelude.h", d->include_dirs[i]);
        if (!out[0] && file_exists(p))
            snprintf(out, n, "%.4000s", p);
    }
    if (!out[0])
        return cp_error_set(CP_ERR_UNSUPPORTED,
                            "%s: cupola/host_prelude.h not found on the include path (set "
                            "CUPOLA_INCLUDE to the folder holding cupola/)",
                            d->name);
    return CP_OK;
}

/* The module's source as compiled: the user's text (scanned: *direct when
 * no kernel synchronizes, so that kernels run without fibers), then one line
 * naming the kernels for the prelude's table: those the scan found, and
 * those cupola's own headers name in CUPOLA_HK_MORE_KERNELS (a header of
 * kernels a module includes: the survey's, a plugin pool's harness).
 * *userlen: the length of the user's part. */
static cp_status module_source(const cp_kmodule_desc *d, char **out, size_t *len, size_t *userlen,
                               int *direct)
{
    cp_kscan sc;
    char *src;
    size_t cap, n;
    cp_status st = cp_kscan_source(d->data, d->len, 1, &sc);
    if (st != CP_OK)
        return st;
    *direct = !sc.uses_sync;
    if (sc.launch_line) {
        st = cp_error_set(CP_ERR_INVALID,
                          "%s:%d: compile error: a kernel launches a kernel (<<<...>>>); nested "
                          "launches need the CUDA backend, the host backend cannot run them",
                          d->name, sc.launch_line);
        cp_kscan_free(&sc);
        return st;
    }
    cap = sc.text_len + 300;
    for (size_t i = 0; i < sc.nkernels; i++)
        cap += strlen(sc.kernels[i]) + 24;
    src = malloc(cap);
    if (!src) {
        cp_kscan_free(&sc);
        return cp_error_set(CP_ERR_OOM, "out of memory for a module's source");
    }
    memcpy(src, sc.text, sc.text_len);
    n = *userlen = sc.text_len;
    n += (size_t)snprintf(src + n, cap - n,
                          "\n#line 1 \"<cupola: kernel table>\"\n#ifndef CUPOLA_HK_MORE_KERNELS\n"
                          "#define CUPOLA_HK_MORE_KERNELS\n#endif\nCUPOLA_HK_TABLE(");
    for (size_t i = 0; i < sc.nkernels; i++)
        n += (size_t)snprintf(src + n, cap - n, "CUPOLA_HK_KERNEL(%s)", sc.kernels[i]);
    n += (size_t)snprintf(src + n, cap - n, "CUPOLA_HK_MORE_KERNELS)\n");
    cp_kscan_free(&sc);
    *out = src;
    *len = n;
    return CP_OK;
}

/* The compiler's arguments and the files the build depends on (its cache
 * key), and the room their strings need. */
typedef struct build_args {
    /* deps: device.h of each include folder, the allocators' headers, the
     * prelude, host_abi.h and the NULL */
    const char *args[64], *deps[16 + CP_DEVICE_ALLOC_NHEADERS + 3];
    int na, nd;
    char incargs[16][4200], depbuf[16][4200];
    char allocbuf[CP_DEVICE_ALLOC_NHEADERS][4200];
    char abi[4200];
} build_args;

static void make_args(const cp_kmodule_desc *d, const char *prelude, int direct, build_args *b)
{
    static const char *const alloc_headers[] = CP_DEVICE_ALLOC_HEADERS;
    int has_o = 0, have_alloc = 0;
    char *slash;
    for (const char *const *o = d->options; o && *o; o++)
        if (strncmp(*o, "-O", 2) == 0)
            has_o = 1;
    b->na = b->nd = 0;
    b->args[b->na++] = "-std=c++17";
    if (!has_o)
        b->args[b->na++] = "-O2";
    b->args[b->na++] = "-shared";
    b->args[b->na++] = "-fPIC";
    b->args[b->na++] = "-fno-exceptions";
    b->args[b->na++] = "-fvisibility=hidden";
    b->args[b->na++] = "-Wl,-z,defs";
    /* a frame larger than a page touches each page it claims, in order, so
     * that a stack overflow always faults in the guard page below the stack
     * (and is reported as one) instead of jumping past it into the next
     * thread's stack */
    b->args[b->na++] = "-fstack-clash-protection";
    b->args[b->na++] = "-include";
    b->args[b->na++] = prelude;
    if (direct)
        b->args[b->na++] = "-DCUPOLA_HK_DIRECT=1";
    for (int i = 0; d->include_dirs && d->include_dirs[i] && i < 16; i++) {
        snprintf(b->incargs[i], sizeof b->incargs[i], "-I%.4100s", d->include_dirs[i]);
        b->args[b->na++] = b->incargs[i];
        /* cupola's own headers are part of the key */
        snprintf(b->depbuf[i], sizeof b->depbuf[i], "%.4100s/cupola/device.h", d->include_dirs[i]);
        if (file_exists(b->depbuf[i])) {
            b->deps[b->nd++] = b->depbuf[i];
            /* the allocators device.h includes, from the first folder that has it */
            for (int k = 0; !have_alloc && k < CP_DEVICE_ALLOC_NHEADERS; k++) {
                snprintf(b->allocbuf[k], sizeof b->allocbuf[k], "%.4100s/cupola/%s",
                         d->include_dirs[i], alloc_headers[k]);
                if (file_exists(b->allocbuf[k]))
                    b->deps[b->nd++] = b->allocbuf[k];
            }
            have_alloc = 1;
        }
    }
    b->args[b->na] = NULL;
    b->deps[b->nd++] = prelude;
    /* host_abi.h sits beside the prelude */
    snprintf(b->abi, sizeof b->abi, "%s", prelude);
    slash = strrchr(b->abi, '/');
    if (slash) {
        snprintf(slash + 1, sizeof b->abi - (size_t)(slash + 1 - b->abi), "host_abi.h");
        b->deps[b->nd++] = b->abi;
    }
    b->deps[b->nd] = NULL;
}

/* Builds the job: again with fibers when a barrier the scan did not see (in
 * a header) needs them, and, when the first error is not in the user's
 * file, checks the user's source alone to name its own file and line. */
static cp_status build(const cp_kmodule_desc *d, cp_cc_job *job, build_args *b, size_t userlen,
                       int direct, cp_cc_result *res)
{
    cp_status st = cp_cc_shared_object(job, res);
    if (st == CP_ERR_INVALID && direct && res->log && strstr(res->log, "cupola-needs-fibers")) {
        for (int i = 0; i < b->na; i++)
            if (strcmp(b->args[i], "-DCUPOLA_HK_DIRECT=1") == 0) {
                memmove(&b->args[i], &b->args[i + 1], (size_t)(b->na - i) * sizeof b->args[0]);
                b->na--;
                break;
            }
        free(res->log);
        st = cp_cc_shared_object(job, res);
    }
    if (st == CP_ERR_INVALID && res->log && !first_error_is_users(res->log, d->name)) {
        /* The first error is not in the user's file: a syntax error that ran
         * on into the kernel table cupola appends ("broken(" or an unclosed
         * `{`), or one inside the prelude.  The source alone, checked without
         * the table, gives the user's own file and line first; if it checks
         * clean, the first log stands. */
        cp_cc_result chk;
        cp_status st2;
        job->source_len = userlen;
        job->syntax_only = 1;
        st2 = cp_cc_shared_object(job, &chk);
        if (st2 == CP_ERR_INVALID && chk.log) {
            free(res->log);
            res->log = chk.log;
            st = st2;
        } else {
            free(chk.log);
            /* the first failure's message again */
            st = cp_error_set(CP_ERR_INVALID, "%s: compile error:\n%s", d->name, res->log);
        }
    }
    return st;
}

/* The compiled module at path, loaded, with its kernel table. */
static cp_status open_module(const cp_kmodule_desc *d, const char *path, hmod **out)
{
    hmod *m = calloc(1, sizeof *m);
    if (!m)
        return cp_error_set(CP_ERR_OOM, "out of memory for a module");
    atomic_init(&m->refs, 1);
    m->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!m->dl) {
        const char *e = dlerror();
        free(m);
        return cp_error_set(CP_ERR_BACKEND, "%s: cannot load the compiled module: %s", d->name,
                            e ? e : "dlopen failed");
    }
    m->tab = (const cupola_hk_module *)dlsym(m->dl, "cupola_hk_module_v1");
    if (!m->tab || m->tab->abi != CUPOLA_HK_ABI) {
        dlclose(m->dl);
        free(m);
        return cp_error_set(CP_ERR_BACKEND, "%s: the compiled module has no kernel table of ABI %d",
                            d->name, CUPOLA_HK_ABI);
    }
    *out = m;
    return CP_OK;
}

static cp_status h_load(const cp_kmodule_desc *d, void **impl, int *where, char **log)
{
    cp_status st;
    char prelude[4096], *src = NULL, *macros;
    size_t srclen = 0, userlen = 0;
    int direct = 0, oom = 0;
    build_args b;
    cp_cc_job job;
    cp_cc_result res;
    hmod *m = NULL;

    *impl = NULL;
    if (d->kind != CP_KSRC_SOURCE)
        return cp_error_set(CP_ERR_UNSUPPORTED, "%s: %s needs the CUDA backend (this is the host backend)",
                            d->name, d->kind == CP_KSRC_PTX ? "PTX" : "a cubin image");
    if ((st = find_prelude(d, prelude, sizeof prelude)) != CP_OK)
        return st;
    for (const char *const *o = d->options; o && *o; o++)
        if ((st = cp_cc_check_option(*o)) != CP_OK)
            return st;
    if ((st = module_source(d, &src, &srclen, &userlen, &direct)) != CP_OK)
        return st;
    make_args(d, prelude, direct, &b);
    macros = macro_prologue(d->options, &oom);
    if (oom) {
        free(src);
        return cp_error_set(CP_ERR_OOM, "out of memory for a module's options");
    }
    memset(&job, 0, sizeof job);
    job.prologue = macros;
    job.lang = CP_CC_CXX;
    job.name = d->name;
    job.source = src;
    job.source_len = srclen;
    job.options = d->options;
    job.args = b.args;
    job.depends = b.deps;
    job.salt = "cupola-host-kernel-1";
    job.translate = translate;
    st = build(d, &job, &b, userlen, direct, &res);
    free(macros);
    free(src);
    if (log)
        *log = res.log;
    else
        free(res.log);
    if (st != CP_OK)
        return st;
    if ((st = open_module(d, res.path, &m)) != CP_OK)
        return st;
    *where = res.where;
    *impl = m;
    return CP_OK;
}

static void h_unload(void *impl)
{
    hmod_release(impl);
}

/* ---- kernels ----------------------------------------------------------------- */

static int param_matches(cp_ktype t, cupola_hk_param p)
{
    switch (t) {
    /* A Buffer where the kernel reads a pool's state, or a pool where it
     * writes data, corrupts memory: refused (void pointers take either). */
    case CP_KT_PTR: return p.kind == 'p' || p.kind == 'v';
    case CP_KT_DEVICE_POOL: return p.kind == 'd' || p.kind == 'v';
    case CP_KT_I32:
    case CP_KT_U32: return (p.kind == 'i' || p.kind == 'u') && p.size == 4;
    case CP_KT_I64:
    case CP_KT_U64: return (p.kind == 'i' || p.kind == 'u') && p.size == 8;
    case CP_KT_F32: return p.kind == 'f' && p.size == 4;
    case CP_KT_F64: return p.kind == 'f' && p.size == 8;
    default: return 0;
    }
}

static const char *kind_name(cupola_hk_param p)
{
    switch (p.kind) {
    case 'p': return "a pointer to data";
    case 'd': return "a cupola_device_pool pointer";
    case 'v': return "a void pointer";
    case 'f': return p.size == 4 ? "float" : p.size == 8 ? "double" : "a floating type";
    case 'i': return p.size == 4 ? "a 32-bit signed integer" : p.size == 8 ? "a 64-bit signed integer" : "a small integer";
    case 'u': return p.size == 4 ? "a 32-bit unsigned integer" : p.size == 8 ? "a 64-bit unsigned integer" : "a small integer";
    default: return "a type cupola cannot pass";
    }
}

static cp_status h_get(void *impl, const char *mname, const char *name, const cp_ktype *types,
                       unsigned n, void **kimpl)
{
    hmod *m = impl;
    const cupola_hk_kernel *k = NULL;
    hkern *hk;
    for (unsigned i = 0; i < m->tab->nkernels; i++)
        if (strcmp(m->tab->kernels[i].name, name) == 0)
            k = &m->tab->kernels[i];
    if (!k)
        return cp_error_set(CP_ERR_INVALID, "no kernel '%s' in module %s", name, mname);
    if (k->nparams != n)
        return cp_error_set(CP_ERR_INVALID, "kernel '%s' takes %u parameters, %u declared", name,
                            k->nparams, n);
    for (unsigned i = 0; i < n; i++)
        if (!param_matches(types[i], k->params[i]))
            return cp_error_set(CP_ERR_INVALID,
                                "kernel '%s': parameter %u is declared %s but the kernel takes %s",
                                name, i + 1, cp_ktype_names[types[i]], kind_name(k->params[i]));
    hk = calloc(1, sizeof *hk);
    if (!hk)
        return cp_error_set(CP_ERR_OOM, "out of memory for a kernel");
    hk->m = m;
    hk->k = k;
    hk->n = n;
    memcpy(hk->types, types, n * sizeof *types);
    atomic_fetch_add(&m->refs, 1);
    *kimpl = hk;
    return CP_OK;
}

static void h_put(void *kimpl)
{
    hkern *hk = kimpl;
    hmod_release(hk->m);
    free(hk);
}

/* ---- scratch memory, per OS thread ---------------------------------------------- */

typedef struct scratch {
    unsigned char *map;
    size_t maplen;
    unsigned nslots;
    void *fibers;
    void *dyn;
    size_t dynlen;
    unsigned *vg_ids; /* valgrind's stack ids, one per slot; NULL unless under valgrind */
} scratch;

/* Tells valgrind (when running under it) where each fiber stack of a new
 * mapping is, or forgets the old mapping's stacks. */
static void scratch_stacks_register(scratch *s, size_t stride)
{
#ifdef HK_VALGRIND
    if (!RUNNING_ON_VALGRIND)
        return;
    s->vg_ids = malloc((size_t)s->nslots * sizeof *s->vg_ids);
    if (!s->vg_ids)
        return; /* only valgrind's reports are at stake */
    for (unsigned i = 0; i < s->nslots; i++) {
        unsigned char *lo = s->map + (size_t)i * stride + HK_GUARD;
        s->vg_ids[i] = VALGRIND_STACK_REGISTER(lo, lo + HK_STACK);
    }
#else
    (void)s;
    (void)stride;
#endif
}

static void scratch_stacks_deregister(scratch *s)
{
#ifdef HK_VALGRIND
    if (s->vg_ids)
        for (unsigned i = 0; i < s->nslots; i++)
            VALGRIND_STACK_DEREGISTER(s->vg_ids[i]);
#endif
    free(s->vg_ids);
    s->vg_ids = NULL;
}

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *p)
{
    scratch *s = p;
    if (!s)
        return;
    scratch_stacks_deregister(s);
    if (s->map)
        munmap(s->map, s->maplen);
    free(s->fibers);
    free(s->dyn);
    free(s);
}

static void scratch_key_init(void)
{
    pthread_key_create(&scratch_key, scratch_free);
}

static int scratch_get(unsigned threads, size_t shared, cupola_hk_scratch *out, char *err,
                       size_t errlen)
{
    scratch *s;
    const size_t stride = HK_STACK + HK_GUARD;
    pthread_once(&scratch_once, scratch_key_init);
    s = pthread_getspecific(scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s || pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            snprintf(err, errlen, "out of memory for a block's scratch memory");
            return 1;
        }
    }
    if (s->nslots < threads) {
        unsigned want = 32;
        unsigned char *map;
        void *fib = NULL;
        while (want < threads)
            want *= 2;
        map = mmap(NULL, stride * want, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (map == MAP_FAILED || posix_memalign(&fib, 64, (size_t)want * CUPOLA_HK_FIBER_BYTES) != 0) {
            if (map != MAP_FAILED)
                munmap(map, stride * want);
            snprintf(err, errlen, "out of memory for the stacks of a %u-thread block", threads);
            return 1;
        }
        for (unsigned i = 0; i < want; i++)
            mprotect(map + (size_t)i * stride, HK_GUARD, PROT_NONE);
        scratch_stacks_deregister(s);
        if (s->map)
            munmap(s->map, s->maplen);
        free(s->fibers);
        s->map = map;
        s->maplen = stride * want;
        s->nslots = want;
        s->fibers = fib;
        scratch_stacks_register(s, stride);
    }
    if (s->dynlen < shared) {
        void *dyn = NULL;
        if (posix_memalign(&dyn, 256, shared) != 0) {
            snprintf(err, errlen, "out of memory for %zu bytes of dynamic shared memory", shared);
            return 1;
        }
        free(s->dyn);
        s->dyn = dyn;
        s->dynlen = shared;
    }
    out->fibers = s->fibers;
    out->slots = s->map + HK_GUARD;
    out->slot_size = HK_STACK;
    out->slot_stride = stride;
    out->nslots = s->nslots;
    out->dyn_shared = s->dyn;
    return 0;
}

/* ---- the block pool ---------------------------------------------------------------- */

typedef struct hjob {
    struct hjob *next;
    const cupola_hk_module *tab;
    const cupola_hk_launch *l;
    uint64_t nblocks;
    atomic_uint_least64_t next_block;
    uint64_t finished; /* under P.mu */
    int active;        /* pool threads inside run_blocks, under P.mu */
    atomic_int failed;
    atomic_int fault;  /* a block faulted (host_fault.h): the stream's error is sticky */
    char err[512]; /* the first failure, under P.mu */
} hjob;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t *threads;
    int n, started, stop;
    int ready; /* threads past their start-up, in pool_main (under mu) */
    hjob *jobs;
} P = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .work = PTHREAD_COND_INITIALIZER,
       .done = PTHREAD_COND_INITIALIZER};

/* Runs blocks of j until none is left; returns how many it took.  User code
 * runs armed (host_fault.h): a hardware fault jumps back here, fails the job
 * as a fault and the remaining blocks are skipped; this thread stays usable
 * (no lock of cupola's is held while a block runs). */
static uint64_t run_blocks(hjob *j)
{
    cupola_hk_scratch s;
    char err[512]; /* as j->err */
    volatile uint64_t count = 0;
    volatile int have_scratch = 0;
    cp_hfault fr;
    unsigned threads = j->l->block[0] * j->l->block[1] * j->l->block[2];
    memset(&s, 0, sizeof s);
    if (sigsetjmp(fr.jb, 0) != 0) {
        /* a fault in a block of this job */
        cp_hfault_recover();
        cp_hfault_describe(&fr, j->l->kernel->name, have_scratch ? s.slots - HK_GUARD : NULL,
                           have_scratch ? s.slots - HK_GUARD + (size_t)s.nslots * s.slot_stride
                                        : NULL,
                           s.slot_stride, HK_GUARD, err, sizeof err);
        atomic_store(&j->fault, 1);
        if (!atomic_exchange(&j->failed, 1)) {
            pthread_mutex_lock(&P.mu);
            snprintf(j->err, sizeof j->err, "%s", err);
            pthread_mutex_unlock(&P.mu);
        }
    }
    for (;;) {
        int rc;
        uint64_t b = atomic_fetch_add(&j->next_block, 1);
        if (b >= j->nblocks)
            break;
        count++;
        if (atomic_load(&j->failed))
            continue;
        if (!have_scratch) {
            if (cp_hfault_thread_init(err, sizeof err) != 0 ||
                scratch_get(threads, j->l->shared, &s, err, sizeof err) != 0)
                goto fail;
            have_scratch = 1;
        }
        fr.block = b;
        cp_hfault_armed = &fr;
        rc = j->tab->run_block(j->l, b, &s, err, sizeof err);
        cp_hfault_armed = NULL;
        if (rc == 2) {
            /* __trap(): sticky, as on CUDA; the message is made complete */
            char why[300];
            snprintf(why, sizeof why, "%.299s", err);
            snprintf(err, sizeof err,
                     "cupolaErrorHostKernel: kernel '%s': %s; the stream is no longer usable",
                     j->l->kernel->name, why);
            atomic_store(&j->fault, 1);
        }
        if (rc != 0)
            goto fail;
        continue;
    fail:
        if (!atomic_exchange(&j->failed, 1)) {
            pthread_mutex_lock(&P.mu);
            snprintf(j->err, sizeof j->err, "%s", err);
            pthread_mutex_unlock(&P.mu);
        }
    }
    return count;
}

static void *pool_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&P.mu);
    P.ready++;
    pthread_cond_broadcast(&P.done);
    for (;;) {
        hjob *j = NULL;
        uint64_t k;
        while (!P.stop) {
            for (j = P.jobs; j; j = j->next)
                if (atomic_load(&j->next_block) < j->nblocks)
                    break;
            if (j)
                break;
            pthread_cond_wait(&P.work, &P.mu);
        }
        if (P.stop)
            break;
        j->active++;
        pthread_mutex_unlock(&P.mu);
        k = run_blocks(j);
        pthread_mutex_lock(&P.mu);
        j->finished += k;
        j->active--;
        if (j->finished == j->nblocks && j->active == 0)
            pthread_cond_broadcast(&P.done);
    }
    pthread_mutex_unlock(&P.mu);
    return NULL;
}

/* Starts the pool once; 0 threads (a one-core machine) is fine. */
static void pool_start_locked(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("CUPOLA_HOST_THREADS");
    int want = cores > 1 ? (int)cores - 1 : 0;
    if (P.started)
        return;
    P.started = 1;
    if (env && *env) {
        long v = strtol(env, NULL, 10);
        if (v >= 1 && v <= 1024)
            want = (int)v - 1;
    }
    if (want > 256)
        want = 256;
    if (want <= 0)
        return;
    P.threads = calloc((size_t)want, sizeof *P.threads);
    if (!P.threads)
        return;
    for (int i = 0; i < want; i++) {
        if (pthread_create(&P.threads[P.n], NULL, pool_main, NULL) != 0)
            break;
        P.n++;
    }
    /* The threads' start-up (the C library's and a sanitizer's: their
     * allocator caches, thread registries) is over before the launch that
     * started them completes: a fork() waits for the running items only
     * (host_sched.c), and a thread still starting then could hold a lock of
     * the allocator's that the child would wait for at exit. */
    while (P.ready < P.n)
        pthread_cond_wait(&P.done, &P.mu);
}

__attribute__((destructor)) static void pool_shutdown(void)
{
    if (cp_forked)
        return; /* a child of fork(): the pool's threads are the parent's */
    pthread_mutex_lock(&P.mu);
    P.stop = 1;
    pthread_cond_broadcast(&P.work);
    pthread_mutex_unlock(&P.mu);
    for (int i = 0; i < P.n; i++)
        pthread_join(P.threads[i], NULL);
    free(P.threads);
    P.threads = NULL;
    P.n = 0;
}

/* ---- launching ------------------------------------------------------------------------ */

typedef struct hlaunch {
    hmod *m;
    const cupola_hk_kernel *k;
    unsigned grid[3], block[3];
    size_t shared;
    unsigned nargs;
    uint64_t vals[]; /* one 8-byte slot per argument */
} hlaunch;

static int run_launch(void *data, char *err, size_t errlen)
{
    hlaunch *h = data;
    void *argp[CP_KMAX_PARAMS];
    cupola_hk_launch l;
    hjob j;
    int rc = 0;

    if (!err) {
        /* cancelled: the stream is in error (a fault before it); run nothing */
        hmod_release(h->m);
        return 0;
    }

    for (unsigned i = 0; i < h->nargs; i++)
        argp[i] = &h->vals[i];
    l.kernel = h->k;
    l.args = argp;
    memcpy(l.grid, h->grid, sizeof l.grid);
    memcpy(l.block, h->block, sizeof l.block);
    l.shared = h->shared;

    memset(&j, 0, sizeof j);
    j.tab = h->m->tab;
    j.l = &l;
    j.nblocks = (uint64_t)h->grid[0] * h->grid[1] * h->grid[2];
    atomic_init(&j.next_block, 0);
    atomic_init(&j.failed, 0);
    atomic_init(&j.fault, 0);
    if (j.nblocks > 1) {
        pthread_mutex_lock(&P.mu);
        pool_start_locked();
        if (P.n > 0 && !P.stop) {
            j.next = P.jobs;
            P.jobs = &j;
            pthread_cond_broadcast(&P.work);
        }
        pthread_mutex_unlock(&P.mu);
    }
    {
        uint64_t k = run_blocks(&j);
        pthread_mutex_lock(&P.mu);
        j.finished += k;
        while (j.finished < j.nblocks || j.active > 0)
            pthread_cond_wait(&P.done, &P.mu);
        for (hjob **pp = &P.jobs; *pp; pp = &(*pp)->next)
            if (*pp == &j) {
                *pp = j.next;
                break;
            }
        if (atomic_load(&j.fault)) {
            /* the message names the kernel already */
            snprintf(err, errlen, "%s", j.err);
            rc = 2;
        } else if (atomic_load(&j.failed)) {
            snprintf(err, errlen, "kernel '%s': %s", h->k->name, j.err);
            rc = 1;
        }
        pthread_mutex_unlock(&P.mu);
    }
    hmod_release(h->m);
    return rc;
}

static cp_status h_launch(void *kimpl, const cp_klaunch *l, void *const *args)
{
    static const cp_klimits lim = {1024, {1024, 1024, 64}, {0x7fffffffu, 65535, 65535},
                                   HK_MAX_SHARED};
    hkern *hk = kimpl;
    union {
        hlaunch h;
        unsigned char bytes[sizeof(hlaunch) + CP_KMAX_PARAMS * 8];
    } u;
    cp_status st = cp_klaunch_check(l, &lim);
    if (st != CP_OK)
        return st;
    u.h.m = hk->m;
    u.h.k = hk->k;
    memcpy(u.h.grid, l->grid, sizeof u.h.grid);
    memcpy(u.h.block, l->block, sizeof u.h.block);
    u.h.shared = l->shared;
    u.h.nargs = hk->n;
    for (unsigned i = 0; i < hk->n; i++) {
        u.h.vals[i] = 0;
        memcpy(&u.h.vals[i], args[i], cp_ktype_sizes[hk->types[i]]);
    }
    atomic_fetch_add(&hk->m->refs, 1);
    st = cp_be->host_task(l->stream, run_launch, &u.h, sizeof(hlaunch) + hk->n * 8u);
    if (st != CP_OK)
        hmod_release(hk->m);
    return st;
}

static cp_status h_registers(void *kimpl, int *out)
{
    (void)kimpl;
    *out = 0;
    return cp_error_set(CP_ERR_UNSUPPORTED, "a kernel on the host backend has no registers to count");
}

static void *h_symbol(void *impl, const char *name)
{
    return dlsym(((hmod *)impl)->dl, name);
}

const cp_kimpl_ops cp_kimpl_host = {
    .symbol = h_symbol,
    .load = h_load,
    .unload = h_unload,
    .get = h_get,
    .put = h_put,
    .launch = h_launch,
    .registers = h_registers,
};
