/*
 * test_compile.c: kernel/compile.c and cache.c, the compile-and-cache machinery: SHA-256
 * against FIPS vectors, the option allow-list, disk entries (a truncated or
 * corrupted one is rebuilt, never loaded), the cache directory's checks, the
 * headers of cupola's in a module's cache key, and a C shared object built by
 * the system compiler, cached and loaded.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernel/compile.h"
#include "kernel/module.h"
#include "kernel/scan.h"
#include "tap.h"

static void hex(const unsigned char *d, char *out)
{
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

static void test_sha256(void)
{
    cp_sha256 c;
    unsigned char d[32];
    char h[65];
    const char *abc = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    cp_sha256_init(&c);
    cp_sha256_update(&c, "abc", 3);
    cp_sha256_final(&c, d);
    hex(d, h);
    tap_ok(strcmp(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0,
           "sha256('abc')");
    cp_sha256_init(&c);
    for (size_t i = 0; i < strlen(abc); i++) /* byte by byte: the buffering */
        cp_sha256_update(&c, abc + i, 1);
    cp_sha256_final(&c, d);
    hex(d, h);
    tap_ok(strcmp(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0,
           "sha256 of the 448-bit vector, fed a byte at a time");
}

static void test_options(void)
{
    static const char *const good[] = {"-DN=4", "-DFOO", "-UBAR", "-I/tmp", "-O3", "-std=c++17",
                                       "-rdc=true", "--use_fast_math", "-lineinfo", "-G",
                                       "-maxrregcount=32", NULL};
    static const char *const bad[] = {"-o", "-fplugin=x.so", "-D", "-D1X", "-I", "-std=;rm",
                                      "-Wl,-rpath", "--output-file=x", "-UX=1", "-DA\nB", NULL};
    for (int i = 0; good[i]; i++)
        tap_ok(cp_cc_check_option(good[i]) == CP_OK, "option %s is allowed", good[i]);
    for (int i = 0; bad[i]; i++) {
        cp_status st = cp_cc_check_option(bad[i]);
        tap_ok(st == CP_ERR_INVALID && strstr(cp_error_msg(), "option"), "option #%d refused", i);
    }
    cp_cc_check_option("-fplugin=x.so");
    tap_ok(strstr(cp_error_msg(), "'-fplugin=x.so'") != NULL, "the refusal names the option");
}

static void test_entries(const char *dir)
{
    cp_cache_key k;
    cp_sha256 c;
    char path[4096];
    void *data = NULL;
    size_t len = 0;
    int where = -1;
    const char payload[] = "an image of some bytes";

    cp_sha256_init(&c);
    cp_sha256_str(&c, "test_entries");
    cp_cache_key_of(&c, &k);
    tap_ok(cp_cache_lookup(&k, "bin", 1, &data, &len, path, &where) == CP_OK && where == 0,
           "a new key misses");
    tap_ok(cp_cache_store(&k, "bin", payload, sizeof payload, path) == CP_OK &&
               strncmp(path, dir, strlen(dir)) == 0,
           "store writes an entry into the cache directory (%s)", path);
    cp_cache_lookup(&k, "bin", 1, &data, &len, NULL, &where);
    tap_ok(where == 1 && len == sizeof payload && memcmp(data, payload, len) == 0, "memory hit");
    free(data);
    cp_cache_forget_memory();
    cp_cache_lookup(&k, "bin", 1, &data, &len, NULL, &where);
    tap_ok(where == 2 && len == sizeof payload && data && memcmp(data, payload, len) == 0,
           "disk hit after the memory cache is forgotten");
    free(data);

    /* truncated: detected, removed, a miss */
    cp_cache_forget_memory();
    tap_ok(truncate(path, 30) == 0, "truncate the entry");
    data = NULL;
    cp_cache_lookup(&k, "bin", 1, &data, &len, NULL, &where);
    tap_ok(where == 0 && data == NULL && access(path, F_OK) != 0,
           "a truncated entry is a miss and is removed");

    /* corrupted payload byte: detected */
    cp_cache_store(&k, "bin", payload, sizeof payload, path);
    cp_cache_forget_memory();
    {
        int fd = open(path, O_WRONLY);
        tap_ok(fd >= 0 && pwrite(fd, "X", 1, 3) == 1, "corrupt one byte");
        if (fd >= 0)
            close(fd);
    }
    cp_cache_lookup(&k, "bin", 1, &data, &len, NULL, &where);
    tap_ok(where == 0 && data == NULL, "a corrupted entry is a miss");
    {
        cp_cache_stats s;
        cp_cache_get_stats(&s);
        tap_ok(s.disk && s.rebuilt == 2 && s.disk_hits == 1 && s.memory_hits == 1,
               "stats count the hits and the rebuilt entries");
    }
}

static void test_shared_object(void)
{
    static const char src[] = "int cp_test_add(int a, int b) { return a + b + N; }\n";
    static const char bad[] = "int f(void) {\n  return nope;\n}\n";
    static const char *const opts[] = {"-DN=3", "-O2", NULL};
    static const char *const args[] = {"-shared", "-fPIC", NULL};
    static const char *const badopts[] = {"-fplugin=evil.so", NULL};
    cp_cc_job job = {.lang = CP_CC_C, .name = "add.c", .source = src, .source_len = sizeof src - 1,
                     .options = opts, .args = args, .salt = "test-1"};
    cp_cc_result r;
    cp_status st;
    char cc[4096];

    if (cp_cc_find(CP_CC_C, cc, sizeof cc, NULL) != CP_OK) {
        tap_ok(1, "# SKIP no C compiler: %s", cp_error_msg());
        return;
    }
    st = cp_cc_shared_object(&job, &r);
    tap_ok(st == CP_OK && r.where == 0, "a C source compiles to a shared object");
    if (st == CP_OK) {
        void *h = dlopen(r.path, RTLD_NOW | RTLD_LOCAL);
        void *sym = h ? dlsym(h, "cp_test_add") : NULL;
        int (*add)(int, int) = NULL;
        if (sym)
            memcpy(&add, &sym, sizeof add); /* object to function pointer, as POSIX allows */
        tap_ok(add && add(1, 2) == 6, "it loads (with its trailer) and -DN=3 reached it");
        if (h)
            dlclose(h);
    }
    free(r.log);
    st = cp_cc_shared_object(&job, &r);
    tap_ok(st == CP_OK && r.where == 1, "the second build is a memory hit");
    free(r.log);
    cp_cache_forget_memory();
    st = cp_cc_shared_object(&job, &r);
    tap_ok(st == CP_OK && r.where == 2, "after forgetting memory, a disk hit");
    free(r.log);

    job.source = bad;
    job.source_len = sizeof bad - 1;
    st = cp_cc_shared_object(&job, &r);
    tap_ok(st == CP_ERR_INVALID && strstr(cp_error_msg(), "add.c:2:") != NULL,
           "a compile error names the file and line: %.80s", cp_error_msg());
    free(r.log);
    job.options = badopts;
    st = cp_cc_shared_object(&job, &r);
    tap_ok(st == CP_ERR_INVALID && strstr(cp_error_msg(), "-fplugin=evil.so") != NULL,
           "an option outside the allow-list is refused before compiling");
    free(r.log);
}

/* The source scan: kernel names, nested launches, `extern __shared__`. */
static void test_scan(void)
{
    static const char src[] =
        "// __global__ void in_comment()\n"
        "extern \"C\" __global__ void a(int *x);\n"
        "extern \"C\" __global__ void a(int *x) { const char *s = \"__global__ void q()\"; }\n"
        "template <class T> __global__ void t(T *x) {}\n"
        "extern \"C\" __global__ void __launch_bounds__(128) b(float *y)\n"
        "{\n"
        "    extern __shared__ __align__(16) float sm[];\n"
        "    sm[0] = 1;\n"
        "}\n"
        "__global__ void c() { b<<<1, 1>>>(0); }\n";
    cp_kscan sc;
    int lines_in = 0, lines_out = 0;
    tap_ok(cp_kscan_source(src, sizeof src - 1, 1, &sc) == CP_OK, "scan a source");
    tap_ok(sc.nkernels == 3 && strcmp(sc.kernels[0], "a") == 0 && strcmp(sc.kernels[1], "b") == 0 &&
               strcmp(sc.kernels[2], "c") == 0,
           "kernels a, b, c: not the template, the comment or the string; declared twice once");
    tap_ok(sc.launch_line == 10, "the nested launch is on line 10 (%d)", sc.launch_line);
    tap_ok(!sc.uses_sync, "no barrier named");
    tap_ok(sc.text && strstr(sc.text, "float *const sm = (float *)cp__hk_dyn_shared();") != NULL,
           "extern __shared__ becomes a pointer to the dynamic shared memory");
    for (const char *p = src; *p; p++)
        lines_in += *p == '\n';
    for (size_t i = 0; sc.text && i < sc.text_len; i++)
        lines_out += sc.text[i] == '\n';
    tap_ok(lines_in == lines_out, "the rewrite keeps every line where it was");
    cp_kscan_free(&sc);
    tap_ok(cp_kscan_source("x = __syncthreads_count(1);", 27, 0, &sc) == CP_OK && sc.uses_sync,
           "a barrier is noticed");
    cp_kscan_free(&sc);
}

/* NVRTC needs no device: compile for sm_90, relocatable code through
 * nvJitLink, the cache, and a compile error's log (skipped without NVRTC). */
static void test_nvrtc(void)
{
    static const char *const inc[] = {"cuda/include", NULL};
    static const char src[] = "#include <cupola/device.h>\n"
                              "extern \"C\" __global__ void f(float *y) { y[cupola_global_index()] = 1; }\n";
    static const char nest[] = "extern \"C\" __global__ void child(int *x) { atomicAdd(x, 1); }\n"
                               "extern \"C\" __global__ void parent(int *x) { child<<<1, 32>>>(x); }\n";
    static const char bad[] = "extern \"C\" __global__ void f(int *x)\n{\n    x[0] = nope;\n}\n";
    cp_kmodule_desc d = {CP_KSRC_SOURCE, "f.cu", src, sizeof src - 1, NULL, inc, 0};
    void *img = NULL;
    size_t len = 0;
    int where = -1;
    char *log = NULL;
    cp_status st = cp_nvrtc_build(&d, 90, &img, &len, &where, &log);
    if (st == CP_ERR_UNSUPPORTED) {
        tap_skip("nvrtc", cp_error_msg());
        return;
    }
    tap_ok(st == CP_OK && where == 0 && len > 4 && memcmp(img, "\177ELF", 4) == 0,
           "NVRTC compiles for sm_90 into an ELF image");
    free(img);
    free(log);
    st = cp_nvrtc_build(&d, 90, &img, &len, &where, &log);
    tap_ok(st == CP_OK && where == 1, "the second build is a memory hit");
    free(img);
    free(log);
    d.name = "nest.cu";
    d.data = nest;
    d.len = sizeof nest - 1;
    st = cp_nvrtc_build(&d, 90, &img, &len, &where, &log);
    tap_ok(st == CP_OK && len > 4 && memcmp(img, "\177ELF", 4) == 0,
           "a nested launch compiles relocatable and links with cudadevrt");
    free(img);
    free(log);
    d.name = "bad.cu";
    d.data = bad;
    d.len = sizeof bad - 1;
    st = cp_nvrtc_build(&d, 90, &img, &len, &where, &log);
    tap_ok(st == CP_ERR_INVALID && strstr(cp_error_msg(), "bad.cu(3)") != NULL,
           "an NVRTC compile error names the module and the line");
    free(log);
}

/* One NVRTC build for sm_90 of a device-pool source (opt: one option, or
 * NULL), checked, with NVRTC's log in the check's name when it fails;
 * returns the status (CP_ERR_UNSUPPORTED, unchecked: no NVRTC). */
static cp_status nvrtc_builds(const char *name, const char *src, size_t len, const char *opt,
                              const char *what)
{
    static const char *const inc[] = {"cuda/include", NULL};
    const char *opts[2] = {opt, NULL};
    cp_kmodule_desc d = {CP_KSRC_SOURCE, name, src, len, opt ? opts : NULL, inc, 0};
    void *img = NULL;
    size_t n = 0;
    int where = -1;
    char *log = NULL;
    cp_status st = cp_nvrtc_build(&d, 90, &img, &n, &where, &log);
    if (st != CP_ERR_UNSUPPORTED)
        tap_ok(st == CP_OK, "NVRTC builds %s%s%s", what, log && st ? ": " : "", log && st ? log : "");
    free(img);
    free(log);
    return st;
}

/* The device pools' run-time compiled sources build with NVRTC for sm_90
 * (what the GPU machine compiles): the survey's module for every kind,
 * CUDA's malloc and the scan, a plugin pool's harness with the example
 * plugin, and a kernel of one's own on a heap.  Checked here, where there is
 * no device, so the GPU run does not fail on a compile error. */
static void test_nvrtc_device_pools(void)
{
    static const char survey[] = "#include <cupola/survey.cuh>\n";
    static const char *const variants[] = {"-DCUPOLA_POOL_KIND=0", "-DCUPOLA_POOL_KIND=1", "-DCUPOLA_POOL_KIND=2",
                                           "-DCUPOLA_POOL_KIND=3", "-DCUPOLA_POOL_KIND=4", "-DCUPOLA_SURVEY_MALLOC",
                                           "-DCUPOLA_SURVEY_SCAN"};
    static const char user[] = "#include <cupola/device.h>\n"
                               "extern \"C\" __global__ void k(cupola_device_pool *p, unsigned long long *o)\n"
                               "{ void *x = cupola_alloc(p, 100000); o[cupola_global_index()] = (unsigned long long)x;\n"
                               "  cupola_free(p, x); }\n";
    char *plugin = NULL, *src = NULL, what[96];
    size_t plen = 0;
    FILE *f;
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        snprintf(what, sizeof what, "the survey's module with %s", variants[i]);
        if (nvrtc_builds("survey.cu", survey, sizeof survey - 1, variants[i], what) == CP_ERR_UNSUPPORTED) {
            tap_skip("nvrtc", cp_error_msg());
            return;
        }
    }
    nvrtc_builds("user.cu", user, sizeof user - 1, NULL,
                 "a kernel of one's own that allocates through <cupola/device.h>");
    if ((f = fopen("examples/plugins/stackalloc.cu", "rb")) != NULL) {
        plugin = calloc(1, 1 << 16);
        plen = plugin ? fread(plugin, 1, (1 << 16) - 1, f) : 0;
        fclose(f);
    }
    src = plugin ? malloc(plen + 200) : NULL;
    if (src) {
        /* as dp_plugin.c puts a plugin pool's module together */
        int n = snprintf(src, plen + 200, "#include <cupola/plugin.h>\n#line 1 \"stackalloc.cu\"\n%s"
                                          "\n#include <cupola/dp_harness.cuh>\n", plugin);
        nvrtc_builds("stackalloc.cu", src, (size_t)n, NULL,
                     "a plugin pool's harness with examples/plugins/stackalloc.cu");
        /* and the survey's module over the plugin, as cupola.survey makes it */
        n = snprintf(src, plen + 200, "#include <cupola/plugin.h>\n#line 1 \"stackalloc.cu\"\n%s"
                                      "\n#include <cupola/survey.cuh>\n", plugin);
        nvrtc_builds("survey_stackalloc.cu", src, (size_t)n, "-DCUPOLA_POOL_KIND=5",
                     "the survey's module over a plugin");
    } else {
        tap_ok(0, "examples/plugins/stackalloc.cu is readable");
    }
    free(src);
    free(plugin);
}

/* A file's contents (malloc'd), or NULL. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = '\0';
        *len = (size_t)n;
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

/* compiler = "nvcc": the toolkit's nvcc builds a plugin pool's module (the
 * harness after a plugin created on the host) into an image for sm_90,
 * through the cache, and its host part into a shared object that exports
 * cupola_plugin_create and cupola_plugin_destroy (what dp_plugin.c does on
 * the GPU machine, checked here where there is no device).  With
 * CUPOLA_PEERS (the folder of the peers' checkouts, docs/API.md), each
 * adapter of bench/peers/ builds too. */
static void test_nvcc(void)
{
    static const char *const inc[] = {"cuda/include", NULL};
    static const char bad[] = "#include <cupola/plugin.h>\n__device__ int f() { return nope; }\n";
    static const struct {
        const char *file, *dir, *opt;
    } peers[] = {{"bench/peers/gallatin.cu", "gallatin/include", NULL},
                 {"bench/peers/ouroboros.cu", "ouroboros/include", NULL},
                 {"bench/peers/ouroboros.cu", "ouroboros/include", "-DOURO_CHUNKS"},
                 {"bench/peers/fdgmalloc.cu", "survey/frameworks/fdg", NULL}};
    const char *peerdir = getenv("CUPOLA_PEERS");
    char *plugin, *src;
    size_t plen = 0, n;
    void *img = NULL;
    size_t len = 0;
    int where = -1;
    char *log = NULL;
    cp_status st;
    char path[4096];

    if (cp_cc_find(CP_CC_NVCC, path, sizeof path, NULL) != CP_OK) {
        tap_skip("nvcc", cp_error_msg());
        return;
    }
    if (!(plugin = slurp("examples/plugins/hostslots.cu", &plen))) {
        tap_ok(0, "examples/plugins/hostslots.cu is readable");
        return;
    }
    n = plen + 200;
    src = malloc(n);
    n = (size_t)snprintf(src, n, "#include <cupola/plugin.h>\n%s\n#include <cupola/dp_harness.cuh>\n", plugin);
    {
        cp_kmodule_desc d = {CP_KSRC_SOURCE, "hostslots.cu", src, n, NULL, inc, 1};
        st = cp_nvcc_build(&d, 90, &img, &len, &where, &log);
        tap_ok(st == CP_OK && where == 0 && len > 64 && memcmp(img, "\177ELF", 4) == 0,
               "nvcc builds a plugin pool's module into an ELF image%s%s", st ? ": " : "", st ? cp_error_msg() : "");
        free(img);
        free(log);
        st = cp_nvcc_build(&d, 90, &img, &len, &where, &log);
        tap_ok(st == CP_OK && where == 1, "the second nvcc build is a memory hit");
        /* the image is the ELF file's own bytes, the cache's trailer cut off */
        {
            unsigned long long shoff = 0;
            unsigned shnum = 0, shsize = 0;
            if (len > 64) {
                memcpy(&shoff, (char *)img + 40, 8);
                shsize = (unsigned)((unsigned char *)img)[58] | (unsigned)((unsigned char *)img)[59] << 8;
                shnum = (unsigned)((unsigned char *)img)[60] | (unsigned)((unsigned char *)img)[61] << 8;
            }
            tap_ok(len >= shoff + (unsigned long long)shnum * shsize && len < shoff + (unsigned long long)shnum * shsize + 4096,
                   "the image ends with the ELF file (%zu bytes, section table ends at %llu)", len,
                   shoff + (unsigned long long)shnum * shsize);
        }
        free(img);
        free(log);
        d.name = "bad.cu";
        d.data = bad;
        d.len = sizeof bad - 1;
        st = cp_nvcc_build(&d, 90, &img, &len, &where, &log);
        tap_ok(st == CP_ERR_INVALID && strstr(cp_error_msg(), "bad.cu") != NULL, "an nvcc compile error names the file");
        free(log);
    }
    /* NVRTC takes the same module (the host part is #if'd out): a hosted
     * plugin need not name compiler = "nvcc" when its device code is plain */
    nvrtc_builds("hostslots.cu", src, n, NULL, "a hosted plugin's module, its host part left out");
    {
        static const char *const args[] = {"-shared", "-Xcompiler", "-fPIC", "-arch=sm_90", "-std=c++17", "-w",
                                           "--expt-relaxed-constexpr", "-DCUPOLA_PLUGIN_HOST_PART=1",
                                           "-Icuda/include", NULL};
        cp_cc_job job = {.lang = CP_CC_NVCC, .name = "hostslots.cu", .source = src, .source_len = n,
                         .args = args, .salt = "test-nvcc-host-1"};
        cp_cc_result r;
        void *dl;
        st = cp_cc_shared_object(&job, &r);
        dl = st == CP_OK ? dlopen(r.path, RTLD_NOW | RTLD_LOCAL) : NULL;
        tap_ok(dl && dlsym(dl, "cupola_plugin_create") && dlsym(dl, "cupola_plugin_destroy"),
               "nvcc builds a plugin's host part that exports create and destroy%s%s", st ? ": " : "",
               st ? cp_error_msg() : (dl ? "" : dlerror()));
        free(r.log);
        /* not closed: the CUDA runtime inside stays loaded, as dp_plugin.c keeps it */
    }
    free(src);
    free(plugin);
    for (size_t i = 0; peerdir && i < sizeof peers / sizeof peers[0]; i++) {
        char dir[4200], opt[4300];
        const char *opts[4] = {opt, "-DCUPOLA_POOL_KIND=5", peers[i].opt, NULL};
        snprintf(dir, sizeof dir, "%s/%s", peerdir, peers[i].dir);
        snprintf(opt, sizeof opt, "-I%s", dir);
        if (!(plugin = slurp(peers[i].file, &plen))) {
            tap_ok(0, "%s is readable", peers[i].file);
            continue;
        }
        n = plen + 200;
        src = malloc(n);
        n = (size_t)snprintf(src, n, "#include <cupola/plugin.h>\n%s\n#include <cupola/survey.cuh>\n", plugin);
        {
            cp_kmodule_desc d = {CP_KSRC_SOURCE, peers[i].file, src, n, opts, inc, 1};
            st = cp_nvcc_build(&d, 90, &img, &len, &where, &log);
            tap_ok(st == CP_OK && len > 64 && memcmp(img, "\177ELF", 4) == 0, "nvcc builds %s%s%s with %s for sm_90%s%s",
                   peers[i].file, peers[i].opt ? " " : "", peers[i].opt ? peers[i].opt : "", dir,
                   st ? ": " : "", st ? (log ? log : cp_error_msg()) : "");
            free(img);
            free(log);
        }
        free(src);
        free(plugin);
    }
}

/* Every header of cupola's that device.h or a listed header includes is
 * part of a module's cache key (CP_DEVICE_ALLOC_HEADERS): a header left out
 * would let a cached module outlive a change to it. */
static void test_key_headers(void)
{
    static const char *const listed[] = CP_DEVICE_ALLOC_HEADERS;
    const char *todo[64];
    int ntodo = 0, missing = 0;
    todo[ntodo++] = "device.h";
    for (int i = 0; i < CP_DEVICE_ALLOC_NHEADERS; i++)
        todo[ntodo++] = listed[i];
    for (int i = 0; i < ntodo; i++) {
        char path[256], line[512];
        FILE *f;
        snprintf(path, sizeof path, "cuda/include/cupola/%s", todo[i]);
        if (!(f = fopen(path, "r"))) {
            tap_ok(0, "%s, in CP_DEVICE_ALLOC_HEADERS, is missing", path);
            missing++;
            continue;
        }
        while (fgets(line, sizeof line, f)) {
            char name[128];
            int known = 0;
            if (sscanf(line, " #include \"cupola/%127[^\"]\"", name) != 1 &&
                sscanf(line, " #include <cupola/%127[^>]>", name) != 1)
                continue;
            for (int k = 0; k < ntodo; k++)
                known |= strcmp(todo[k], name) == 0;
            if (!known) {
                tap_ok(0, "%s includes cupola/%s, which is not in CP_DEVICE_ALLOC_HEADERS", todo[i], name);
                missing++;
            }
        }
        fclose(f);
    }
    tap_ok(missing == 0, "the %d headers device.h and the device pools' kernels include are in the cache key",
           ntodo);
}

int main(void)
{
    char dir[] = "/tmp/cupola-test-cache-XXXXXX";
    char sub[256];
    test_sha256();
    test_options();
    test_scan();
    test_key_headers();
    if (!mkdtemp(dir)) {
        tap_ok(0, "mkdtemp");
        return tap_finish();
    }
    snprintf(sub, sizeof sub, "%s/cache", dir);
    setenv("CUPOLA_CACHE_DIR", sub, 1);
    {
        cp_cache_stats s;
        struct stat st;
        cp_cache_get_stats(&s);
        tap_ok(s.disk && stat(sub, &st) == 0 && (st.st_mode & 0777) == 0700,
               "the cache directory is created with mode 0700");
    }
    test_entries(sub);
    test_shared_object();
    test_nvrtc();
    test_nvrtc_device_pools();
    test_nvcc();
    {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            tap_ok(0, "cleanup");
    }
    return tap_finish();
}
