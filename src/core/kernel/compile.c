/*
 * kernel/compile.c: hashing, the check of users' options, and running and
 * finding the system compilers (policy in compile.h).  The compile cache
 * and the shared objects built through it are cache.c's.
 */
#include "kernel/compile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Copies a string, truncating to fit (paths are checked where it matters). */
static void copystr(char *dst, size_t n, const char *src)
{
    size_t k = strlen(src);
    if (k >= n)
        k = n - 1;
    memcpy(dst, src, k);
    dst[k] = '\0';
}

/* ---- SHA-256 (FIPS 180-4) -------------------------------------------------- */

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(cp_sha256 *c, const unsigned char *p)
{
    uint32_t w[64], a, b, cc, d, e, f, g, h;
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3];
    e = c->h[4], f = c->h[5], g = c->h[6], h = c->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
        uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
        h = g, g = f, f = e, e = d + t1, d = cc, cc = b, b = a, a = t1 + t2;
    }
    c->h[0] += a, c->h[1] += b, c->h[2] += cc, c->h[3] += d;
    c->h[4] += e, c->h[5] += f, c->h[6] += g, c->h[7] += h;
}

void cp_sha256_init(cp_sha256 *c)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, iv, sizeof iv);
    c->len = 0;
    c->nbuf = 0;
}

void cp_sha256_update(cp_sha256 *c, const void *data, size_t n)
{
    const unsigned char *p = data;
    c->len += n;
    if (c->nbuf) {
        size_t k = 64 - c->nbuf < n ? 64 - c->nbuf : n;
        memcpy(c->buf + c->nbuf, p, k);
        c->nbuf += k, p += k, n -= k;
        if (c->nbuf < 64)
            return;
        sha256_block(c, c->buf);
        c->nbuf = 0;
    }
    for (; n >= 64; p += 64, n -= 64)
        sha256_block(c, p);
    memcpy(c->buf, p, n);
    c->nbuf = n;
}

void cp_sha256_final(cp_sha256 *c, unsigned char out[32])
{
    unsigned char pad[72] = {0x80};
    uint64_t bits = c->len * 8;
    size_t padn = (c->nbuf < 56 ? 56 : 120) - c->nbuf;
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (unsigned char)(bits >> (56 - 8 * i));
    cp_sha256_update(c, pad, padn);
    cp_sha256_update(c, lenb, 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (unsigned char)(c->h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(c->h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(c->h[i] >> 8);
        out[4 * i + 3] = (unsigned char)c->h[i];
    }
}

void cp_sha256_str(cp_sha256 *c, const char *s)
{
    uint64_t n = s ? strlen(s) : UINT64_MAX;
    cp_sha256_update(c, &n, sizeof n);
    if (s)
        cp_sha256_update(c, s, (size_t)n);
}

void cp_sha256_file(cp_sha256 *c, const char *path)
{
    unsigned char buf[8192];
    ssize_t k;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    cp_sha256_str(c, path);
    if (fd < 0) {
        cp_sha256_str(c, "<unreadable>");
        return;
    }
    while ((k = read(fd, buf, sizeof buf)) > 0)
        cp_sha256_update(c, buf, (size_t)k);
    close(fd);
}

static void tohex(const unsigned char *b, size_t n, char *out)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[b[i] >> 4];
        out[2 * i + 1] = hx[b[i] & 15];
    }
    out[2 * n] = '\0';
}

void cp_cache_key_of(cp_sha256 *c, cp_cache_key *out)
{
    unsigned char d[32];
    cp_sha256_final(c, d);
    tohex(d, 32, out->hex);
}

/* ---- user options ---------------------------------------------------------- */

static int is_ident(const char *s, size_t n)
{
    if (n == 0 || !(s[0] == '_' || (s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z')))
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!(s[i] == '_' || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= '0' && s[i] <= '9')))
            return 0;
    return 1;
}

static int has_ctl(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}

cp_status cp_cc_check_option(const char *o)
{
    static const char *const exact[] = {
        "-rdc=true", "-rdc=false", "--relocatable-device-code=true",
        "--relocatable-device-code=false", "--use_fast_math", "-use_fast_math", "-lineinfo",
        "--generate-line-info", "-g", "-G", "--fmad=true", "--fmad=false", "-w",
        "-O0", "-O1", "-O2", "-O3", "-Os", NULL};
    if (!o)
        return cp_error_set(CP_ERR_INVALID, "option is not a string");
    if (has_ctl(o))
        return cp_error_set(CP_ERR_INVALID, "option '%s' contains control characters", o);
    for (int i = 0; exact[i]; i++)
        if (strcmp(o, exact[i]) == 0)
            return CP_OK;
    if (strncmp(o, "-D", 2) == 0 || strncmp(o, "-U", 2) == 0) {
        const char *eq = strchr(o + 2, '=');
        size_t n = eq ? (size_t)(eq - (o + 2)) : strlen(o + 2);
        if (o[1] == 'U' && eq)
            return cp_error_set(CP_ERR_INVALID, "option '%s': -U takes a name only", o);
        if (!is_ident(o + 2, n))
            return cp_error_set(CP_ERR_INVALID,
                                "option '%s': -D/-U need a macro name joined to them (-DNAME=1)", o);
        return CP_OK;
    }
    if (strncmp(o, "-I", 2) == 0) {
        if (o[2] == '\0')
            return cp_error_set(CP_ERR_INVALID, "option '-I' needs its directory joined (-I/path)");
        return CP_OK;
    }
    if (strncmp(o, "-std=", 5) == 0 || strncmp(o, "--std=", 6) == 0) {
        const char *v = strchr(o, '=') + 1;
        if (strncmp(v, "c++", 3) != 0 && strncmp(v, "gnu++", 5) != 0 && strncmp(v, "c", 1) != 0 &&
            strncmp(v, "gnu", 3) != 0)
            return cp_error_set(CP_ERR_INVALID, "option '%s': not a language standard", o);
        for (const char *p = v; *p; p++)
            if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '+'))
                return cp_error_set(CP_ERR_INVALID, "option '%s': not a language standard", o);
        return CP_OK;
    }
    if (strncmp(o, "-maxrregcount=", 14) == 0 || strncmp(o, "--maxrregcount=", 15) == 0) {
        const char *v = strchr(o, '=') + 1;
        if (!*v || strspn(v, "0123456789") != strlen(v) || strlen(v) > 4)
            return cp_error_set(CP_ERR_INVALID, "option '%s': needs a register count", o);
        return CP_OK;
    }
    return cp_error_set(CP_ERR_INVALID,
                        "option '%s' is not allowed (allowed: -D, -U, -I, -O0..-O3, -Os, -std=, "
                        "-rdc=true, --use_fast_math, -lineinfo, -g, -G, --fmad=, -maxrregcount=, -w)",
                        o);
}

/* ---- running a compiler ------------------------------------------------------------- */

#define LOG_LIMIT (1u << 20)

/* The environment a compiler runs with: this process's, less LD_PRELOAD
 * (a sanitizer preloaded into the interpreter must not follow it into the
 * compiler, which would then fail or report the compiler's own leaks). */
static char **child_env(void)
{
    size_t n = 0, k = 0;
    char **env;
    for (char **e = environ; e && *e; e++)
        n++;
    env = malloc((n + 1) * sizeof *env);
    if (!env)
        return NULL;
    for (char **e = environ; e && *e; e++)
        if (strncmp(*e, "LD_PRELOAD=", 11) != 0)
            env[k++] = *e;
    env[k] = NULL;
    return env;
}

cp_status cp_cc_run(const char *const argv[], char **log, int *exit_code)
{
    char **env;
    int pfd[2];
    pid_t pid;
    posix_spawn_file_actions_t fa;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int status = 0, rc;

    *log = NULL;
    *exit_code = -1;
    if (pipe2(pfd, O_CLOEXEC) != 0)
        return cp_error_set(CP_ERR_BACKEND, "cannot create a pipe: %s", strerror(errno));
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
    env = child_env();
    rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)(uintptr_t)argv, env ? env : environ);
    free(env);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (rc != 0) {
        close(pfd[0]);
        return cp_error_set(CP_ERR_BACKEND, "cannot run %s: %s", argv[0], strerror(rc));
    }
    for (;;) {
        char chunk[4096];
        ssize_t k = read(pfd[0], chunk, sizeof chunk);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        if (n + (size_t)k + 1 > cap && n < LOG_LIMIT) {
            size_t nc = cap ? cap * 2 : 8192;
            char *nb;
            while (nc < n + (size_t)k + 1)
                nc *= 2;
            nb = realloc(buf, nc);
            if (nb) {
                buf = nb;
                cap = nc;
            }
        }
        if (buf && n + (size_t)k + 1 <= cap) {
            memcpy(buf + n, chunk, (size_t)k);
            n += (size_t)k;
        }
    }
    close(pfd[0]);
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            break;
    if (buf)
        buf[n] = '\0';
    *log = buf;
    if (WIFEXITED(status))
        *exit_code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
        *exit_code = 128 + WTERMSIG(status);
    return CP_OK;
}

static int find_in_path(const char *name, char *out, size_t outlen)
{
    const char *path = getenv("PATH");
    if (strchr(name, '/')) {
        if (access(name, X_OK) != 0)
            return 0;
        if (name[0] == '/')
            copystr(out, outlen, name);
        else if (!realpath(name, out))
            return 0;
        return 1;
    }
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *c = strchr(path, ':');
        size_t n = c ? (size_t)(c - path) : strlen(path);
        if (n > 0 && n + strlen(name) + 2 < outlen && path[0] == '/') {
            struct stat st;
            snprintf(out, outlen, "%.*s/%s", (int)n, path, name);
            if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0)
                return 1;
        }
        path += n;
        if (*path == ':')
            path++;
    }
    return 0;
}

/* Per compiler kind: its path and the hash of its identity, found once
 * (under cc_mu: threads may compile at once). */
static pthread_mutex_t cc_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int found;
    char path[4096];
    char env_seen[4096];
    unsigned char id[32];
} ccs[3];

/* nvcc where the toolkit usually is: $CUDA_HOME, $CUDA_PATH, /usr/local/cuda,
 * then PATH (the CUDA backend's libraries are looked for in the same order). */
static int find_nvcc(char *out, size_t outlen)
{
    const char *homes[3] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
    for (int i = 0; i < 3; i++) {
        char cand[4200];
        if (!homes[i] || homes[i][0] != '/')
            continue;
        snprintf(cand, sizeof cand, "%s/bin/nvcc", homes[i]);
        if (find_in_path(cand, out, outlen))
            return 1;
    }
    return find_in_path("nvcc", out, outlen);
}

cp_status cp_cc_find(cp_cc_lang lang, char *path, size_t pathlen, cp_sha256 *h)
{
    static const char *const cands[2][3] = {{"cc", "gcc", "clang"}, {"c++", "g++", "clang++"}};
    const char *envname = lang == CP_CC_C ? "CUPOLA_CC" : lang == CP_CC_CXX ? "CUPOLA_CXX" : "CUPOLA_NVCC";
    const char *env = getenv(envname);
    int k = lang == CP_CC_C ? 0 : lang == CP_CC_CXX ? 1 : 2;
    char p[4096];

    pthread_mutex_lock(&cc_mu);
    if (ccs[k].found && strcmp(ccs[k].env_seen, env ? env : "") == 0) {
        copystr(path, pathlen, ccs[k].path);
        if (h)
            cp_sha256_update(h, ccs[k].id, 32);
        pthread_mutex_unlock(&cc_mu);
        return CP_OK;
    }
    pthread_mutex_unlock(&cc_mu);

    if (k == 2 && !(env && *env)) {
        if (!find_nvcc(p, sizeof p))
            return cp_error_set(CP_ERR_UNSUPPORTED,
                                "no nvcc found (tried $CUDA_HOME/bin, $CUDA_PATH/bin, "
                                "/usr/local/cuda/bin and PATH; set CUPOLA_NVCC)");
    } else if (env && *env) {
        if (!find_in_path(env, p, sizeof p))
            return cp_error_set(CP_ERR_UNSUPPORTED, "%s=%s: no such executable", envname, env);
    } else {
        int ok = 0;
        for (int i = 0; i < 3 && !ok; i++)
            ok = find_in_path(cands[k][i], p, sizeof p);
        if (!ok)
            return cp_error_set(CP_ERR_UNSUPPORTED,
                                "no %s compiler found (tried %s, %s, %s on PATH; set %s)",
                                k ? "C++" : "C", cands[k][0], cands[k][1], cands[k][2], envname);
    }
    {
        const char *argv[] = {p, "--version", NULL};
        char *log = NULL;
        int code = -1;
        cp_sha256 c;
        cp_status st = cp_cc_run(argv, &log, &code);
        if (st != CP_OK)
            return st;
        if (code != 0) {
            free(log);
            return cp_error_set(CP_ERR_UNSUPPORTED, "%s --version failed (exit %d)", p, code);
        }
        cp_sha256_init(&c);
        cp_sha256_str(&c, p);
        cp_sha256_str(&c, log ? log : "");
        free(log);
        pthread_mutex_lock(&cc_mu);
        cp_sha256_final(&c, ccs[k].id);
        copystr(ccs[k].path, sizeof ccs[k].path, p);
        copystr(ccs[k].env_seen, sizeof ccs[k].env_seen, env ? env : "");
        ccs[k].found = 1;
        if (h)
            cp_sha256_update(h, ccs[k].id, 32);
        pthread_mutex_unlock(&cc_mu);
    }
    copystr(path, pathlen, p);
    return CP_OK;
}
