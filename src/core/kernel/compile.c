/*
 * kernel/compile.c: hashing, the compile cache and the system compiler
 * (policy in compile.h).
 */
#include "kernel/compile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
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

/* ---- the cache directory ------------------------------------------------------ */

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static int dir_state; /* 0: not resolved, 1: usable, -1: off */
static char cache_dir[4096];
static char cache_why[256];
static cp_cache_stats stats;

/* A private directory for builds when the disk cache is off. */
static char scratch_dir[4096];
static pid_t scratch_pid; /* the process that made it: a fork()ed child must not remove it */

/* Creates dir (mode 0700) when missing; checks that it is a real directory
 * of this user that nobody else can write. */
static int ensure_dir(const char *dir, int create, char *why, size_t whylen)
{
    struct stat st;
    if (lstat(dir, &st) != 0) {
        if (errno != ENOENT || !create) {
            snprintf(why, whylen, "%.200s: %s", dir, strerror(errno));
            return 0;
        }
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
            snprintf(why, whylen, "cannot create %.200s: %s", dir, strerror(errno));
            return 0;
        }
        if (lstat(dir, &st) != 0) {
            snprintf(why, whylen, "%.200s: %s", dir, strerror(errno));
            return 0;
        }
    }
    if (S_ISLNK(st.st_mode)) {
        snprintf(why, whylen, "%.200s is a symbolic link: refused", dir);
        return 0;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, whylen, "%.200s is not a directory", dir);
        return 0;
    }
    if (st.st_uid != geteuid()) {
        snprintf(why, whylen, "%.200s is owned by another user: refused", dir);
        return 0;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, whylen, "%.200s is writable by other users: refused", dir);
        return 0;
    }
    return 1;
}

static void resolve_dir_locked(void)
{
    const char *env = getenv("CUPOLA_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    char parent[4096];
    struct passwd pw, *pwp = NULL;
    char pwbuf[1024];

    if (dir_state)
        return;
    dir_state = -1;
    if (env && *env) {
        if (strlen(env) >= sizeof cache_dir - 80) {
            snprintf(cache_why, sizeof cache_why, "CUPOLA_CACHE_DIR is too long");
            return;
        }
        copystr(cache_dir, sizeof cache_dir, env);
    } else {
        if (xdg && *xdg == '/') {
            copystr(parent, sizeof parent, xdg);
        } else {
            if (!home || *home != '/') {
                if (getpwuid_r(geteuid(), &pw, pwbuf, sizeof pwbuf, &pwp) == 0 && pwp)
                    home = pw.pw_dir;
            }
            if (!home || *home != '/') {
                snprintf(cache_why, sizeof cache_why, "no home directory for the cache");
                return;
            }
            if (strlen(home) >= sizeof parent - 100) {
                snprintf(cache_why, sizeof cache_why, "home directory path too long");
                return;
            }
            snprintf(parent, sizeof parent, "%s/.cache", home);
            /* ~/.cache is created when missing, as other programs would */
            if (mkdir(parent, 0700) != 0 && errno != EEXIST) {
                snprintf(cache_why, sizeof cache_why, "cannot create %.200s: %s", parent,
                         strerror(errno));
                return;
            }
        }
        if (strlen(parent) >= sizeof cache_dir - 100) {
            snprintf(cache_why, sizeof cache_why, "cache directory path too long");
            return;
        }
        {
            size_t k = strlen(parent); /* checked above: fits with room to spare */
            memcpy(cache_dir, parent, k);
            memcpy(cache_dir + k, "/cupola", 8);
        }
    }
    if (!ensure_dir(cache_dir, 1, cache_why, sizeof cache_why))
        return;
    dir_state = 1;
}

/* The directory builds go to: the cache, else a private temporary one. */
static cp_status work_dir_locked(const char **out)
{
    resolve_dir_locked();
    if (dir_state > 0) {
        *out = cache_dir;
        return CP_OK;
    }
    if (!scratch_dir[0]) {
        const char *tmp = getenv("TMPDIR");
        char t[4096];
        if (!tmp || *tmp != '/' || strlen(tmp) > 3000)
            tmp = "/tmp";
        snprintf(t, sizeof t, "%s/cupola-XXXXXX", tmp);
        if (!mkdtemp(t))
            return cp_error_set(CP_ERR_BACKEND, "cannot create a build directory in %s: %s", tmp,
                                strerror(errno));
        copystr(scratch_dir, sizeof scratch_dir, t);
        scratch_pid = getpid();
    }
    *out = scratch_dir;
    return CP_OK;
}

/* The scratch directory's objects stay while the process may load them;
 * at exit they and the directory go (defined below, with the entries). */
static void scratch_cleanup(void);

/* ---- entries ---------------------------------------------------------------------- */

#define TRAILER_MAGIC "CUPOLAK1"
#define TRAILER_SIZE (8 + 32 + 8 + 32)

typedef struct mem_entry {
    cp_cache_key key;
    char ext[8];
    void *data;
    size_t len;
    char path[4096];
} mem_entry;

#define MEM_ENTRIES 128
static mem_entry *mem[MEM_ENTRIES];
static size_t mem_next;

static void hexbytes(const char *hex, unsigned char out[32])
{
    for (int i = 0; i < 32; i++) {
        int hi = hex[2 * i] <= '9' ? hex[2 * i] - '0' : hex[2 * i] - 'a' + 10;
        int lo = hex[2 * i + 1] <= '9' ? hex[2 * i + 1] - '0' : hex[2 * i + 1] - 'a' + 10;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
}

static void make_trailer(const cp_cache_key *key, const void *data, size_t len,
                         unsigned char t[TRAILER_SIZE])
{
    cp_sha256 c;
    uint64_t n = len;
    memcpy(t, TRAILER_MAGIC, 8);
    hexbytes(key->hex, t + 8);
    for (int i = 0; i < 8; i++)
        t[40 + i] = (unsigned char)(n >> (8 * i));
    cp_sha256_init(&c);
    cp_sha256_update(&c, data, len);
    cp_sha256_final(&c, t + 48);
}

static int valid_ext(const char *ext)
{
    size_t n = ext ? strlen(ext) : 0;
    return n > 0 && n < 8 && strspn(ext, "abcdefghijklmnopqrstuvwxyz0123456789") == n;
}

static void mem_put_locked(const cp_cache_key *key, const char *ext, const void *data, size_t len,
                           const char *path, int keep_data)
{
    mem_entry *e = calloc(1, sizeof *e);
    if (!e)
        return; /* only the memory cache is lost */
    if (keep_data && len) {
        e->data = malloc(len);
        if (!e->data) {
            free(e);
            return;
        }
        memcpy(e->data, data, len);
    }
    e->key = *key;
    copystr(e->ext, sizeof e->ext, ext);
    e->len = len;
    copystr(e->path, sizeof e->path, path ? path : "");
    if (mem[mem_next]) {
        free(mem[mem_next]->data);
        free(mem[mem_next]);
    }
    mem[mem_next] = e;
    mem_next = (mem_next + 1) % MEM_ENTRIES;
}

/* At exit or dlclose: the scratch directory's objects go, and so does the
 * memory cache (its table is unmapped with this code). */
__attribute__((destructor)) static void scratch_cleanup(void)
{
    size_t n = strlen(scratch_dir);
    if (n && scratch_pid == getpid()) {
        for (size_t i = 0; i < MEM_ENTRIES; i++)
            if (mem[i] && strncmp(mem[i]->path, scratch_dir, n) == 0 && mem[i]->path[n] == '/')
                unlink(mem[i]->path);
        rmdir(scratch_dir);
    }
    cp_cache_forget_memory();
}

static mem_entry *mem_find_locked(const cp_cache_key *key, const char *ext)
{
    for (size_t i = 0; i < MEM_ENTRIES; i++)
        if (mem[i] && strcmp(mem[i]->key.hex, key->hex) == 0 && strcmp(mem[i]->ext, ext) == 0)
            return mem[i];
    return NULL;
}

void cp_cache_forget_memory(void)
{
    pthread_mutex_lock(&cache_mu);
    for (size_t i = 0; i < MEM_ENTRIES; i++) {
        if (mem[i]) {
            free(mem[i]->data);
            free(mem[i]);
            mem[i] = NULL;
        }
    }
    mem_next = 0;
    pthread_mutex_unlock(&cache_mu);
}

/* Reads and checks a disk entry; 1 with the payload (malloc'd) on success, 0
 * when missing or bad (a bad one is removed). */
static int disk_read_locked(const char *path, const cp_cache_key *key, void **data, size_t *len)
{
    struct stat st;
    unsigned char *buf, want[TRAILER_SIZE];
    size_t n, got = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        st.st_size < TRAILER_SIZE || (uint64_t)st.st_size > ((uint64_t)1 << 32)) {
        close(fd);
        goto bad;
    }
    n = (size_t)st.st_size;
    buf = malloc(n);
    if (!buf) {
        close(fd);
        return 0;
    }
    while (got < n) {
        ssize_t k = read(fd, buf + got, n - got);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    if (got != n) {
        free(buf);
        goto bad;
    }
    make_trailer(key, buf, n - TRAILER_SIZE, want);
    if (memcmp(buf + n - TRAILER_SIZE, want, TRAILER_SIZE) != 0) {
        free(buf);
        goto bad;
    }
    *data = buf;
    *len = n - TRAILER_SIZE;
    return 1;
bad:
    unlink(path);
    stats.rebuilt++;
    return 0;
}

static void entry_path(char *out, size_t n, const char *dir, const cp_cache_key *key,
                       const char *ext)
{
    snprintf(out, n, "%s/%s.%s", dir, key->hex, ext);
}

cp_status cp_cache_lookup(const cp_cache_key *key, const char *ext, int want_data, void **data,
                          size_t *len, char *path, int *where)
{
    mem_entry *e;
    char p[4200];
    void *buf = NULL;
    size_t n = 0;

    *where = 0;
    if (data)
        *data = NULL;
    if (len)
        *len = 0;
    if (path)
        path[0] = '\0';
    if (!valid_ext(ext))
        return cp_error_set(CP_ERR_INVALID, "cache: bad entry kind '%s'", ext ? ext : "(null)");
    pthread_mutex_lock(&cache_mu);
    e = mem_find_locked(key, ext);
    if (e && (!want_data || e->data || e->len == 0)) {
        if (want_data && e->len) {
            buf = malloc(e->len);
            if (!buf) {
                pthread_mutex_unlock(&cache_mu);
                return cp_error_set(CP_ERR_OOM, "out of memory reading the compile cache");
            }
            memcpy(buf, e->data, e->len);
        }
        if (data)
            *data = buf;
        if (len)
            *len = e->len;
        if (path)
            copystr(path, 4096, e->path);
        *where = 1;
        stats.memory_hits++;
        pthread_mutex_unlock(&cache_mu);
        return CP_OK;
    }
    resolve_dir_locked();
    if (dir_state > 0) {
        entry_path(p, sizeof p, cache_dir, key, ext);
        if (disk_read_locked(p, key, &buf, &n)) {
            mem_put_locked(key, ext, buf, n, p, want_data);
            if (want_data && data)
                *data = buf;
            else
                free(buf);
            if (len)
                *len = n;
            if (path)
                copystr(path, 4096, p);
            *where = 2;
            stats.disk_hits++;
            pthread_mutex_unlock(&cache_mu);
            return CP_OK;
        }
    }
    stats.misses++;
    pthread_mutex_unlock(&cache_mu);
    return CP_OK;
}

static int write_all(int fd, const void *data, size_t n)
{
    const char *p = data;
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return 0;
        p += k, n -= (size_t)k;
    }
    return 1;
}

/* Appends the trailer to the file at tmp (holding the payload) and renames
 * it to the entry's path. */
static cp_status publish_locked(const char *tmp, const cp_cache_key *key, const char *ext,
                                const void *data, size_t len, char *final, size_t finallen)
{
    unsigned char t[TRAILER_SIZE];
    int fd = open(tmp, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return cp_error_set(CP_ERR_BACKEND, "cache: cannot open %s: %s", tmp, strerror(errno));
    make_trailer(key, data, len, t);
    if (!write_all(fd, t, sizeof t)) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return cp_error_set(CP_ERR_BACKEND, "cache: cannot write %s: %s", tmp, strerror(e));
    }
    fchmod(fd, 0600);
    close(fd);
    entry_path(final, finallen, cache_dir, key, ext);
    if (rename(tmp, final) != 0) {
        int e = errno;
        unlink(tmp);
        return cp_error_set(CP_ERR_BACKEND, "cache: cannot rename to %s: %s", final, strerror(e));
    }
    return CP_OK;
}

cp_status cp_cache_store(const cp_cache_key *key, const char *ext, const void *data, size_t len,
                         char *path)
{
    char tmp[4200], final[4200] = "";
    cp_status st = CP_OK;
    if (path)
        path[0] = '\0';
    if (!valid_ext(ext))
        return cp_error_set(CP_ERR_INVALID, "cache: bad entry kind '%s'", ext ? ext : "(null)");
    pthread_mutex_lock(&cache_mu);
    resolve_dir_locked();
    stats.stores++;
    if (dir_state > 0) {
        int fd;
        snprintf(tmp, sizeof tmp, "%s/%s.%s.tmpXXXXXX", cache_dir, key->hex, ext);
        fd = mkstemp(tmp);
        if (fd >= 0) {
            int ok = write_all(fd, data, len);
            close(fd);
            if (ok)
                st = publish_locked(tmp, key, ext, data, len, final, sizeof final);
            else
                unlink(tmp);
            if (st != CP_OK || !ok)
                final[0] = '\0'; /* the disk cache failed; memory still serves */
            st = CP_OK;
        }
    }
    mem_put_locked(key, ext, data, len, final, 1);
    if (path)
        copystr(path, 4096, final);
    pthread_mutex_unlock(&cache_mu);
    return st;
}

void cp_cache_get_stats(cp_cache_stats *out)
{
    pthread_mutex_lock(&cache_mu);
    resolve_dir_locked();
    *out = stats;
    out->disk = dir_state > 0;
    copystr(out->dir, sizeof out->dir, dir_state > 0 ? cache_dir : "");
    copystr(out->why, sizeof out->why, dir_state > 0 ? "" : cache_why);
    pthread_mutex_unlock(&cache_mu);
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

/* Per compiler kind: its path and the hash of its identity, found once. */
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

    pthread_mutex_lock(&cache_mu);
    if (ccs[k].found && strcmp(ccs[k].env_seen, env ? env : "") == 0) {
        copystr(path, pathlen, ccs[k].path);
        if (h)
            cp_sha256_update(h, ccs[k].id, 32);
        pthread_mutex_unlock(&cache_mu);
        return CP_OK;
    }
    pthread_mutex_unlock(&cache_mu);

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
        pthread_mutex_lock(&cache_mu);
        cp_sha256_final(&c, ccs[k].id);
        copystr(ccs[k].path, sizeof ccs[k].path, p);
        copystr(ccs[k].env_seen, sizeof ccs[k].env_seen, env ? env : "");
        ccs[k].found = 1;
        if (h)
            cp_sha256_update(h, ccs[k].id, 32);
        pthread_mutex_unlock(&cache_mu);
    }
    copystr(path, pathlen, p);
    return CP_OK;
}

/* ---- a shared object through the cache ---------------------------------------------- */

/* Writes the prologue, then `#line 1 "name"` so the compiler's messages name
 * the user's file, then the source. */
static cp_status write_source(const char *path, const char *prologue, const char *name,
                              const char *src, size_t n)
{
    FILE *f = fopen(path, "wex");
    int ok;
    if (!f)
        return cp_error_set(CP_ERR_BACKEND, "cannot write %s: %s", path, strerror(errno));
    if (prologue)
        fputs(prologue, f);
    fputs("#line 1 \"", f);
    for (const char *p = name; *p; p++) {
        if (*p == '"' || *p == '\\')
            fputc('\\', f);
        if ((unsigned char)*p >= 0x20 && *p != 0x7f)
            fputc(*p, f);
    }
    fputs("\"\n", f);
    ok = fwrite(src, 1, n, f) == n;
    fputc('\n', f);
    ok = (fclose(f) == 0) && ok;
    if (!ok)
        return cp_error_set(CP_ERR_BACKEND, "cannot write %s", path);
    return CP_OK;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rbe");
    char *buf = NULL;
    long n;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)n + 1);
        if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        if (buf)
            *len = (size_t)n;
    }
    fclose(f);
    return buf;
}

#define MAX_ARGS 256

cp_status cp_cc_shared_object(const cp_cc_job *job, cp_cc_result *out)
{
    cp_sha256 h;
    cp_cache_key key;
    char cc[4096], srcdir[4200], srcpath[4300], objtmp[4300];
    const char *argv[MAX_ARGS];
    const char *dir = NULL;
    int argc = 0, code = -1, where = 0;
    cp_status st;
    char *log = NULL;

    memset(out, 0, sizeof *out);
    if (!job || !job->source || !job->name)
        return cp_error_set(CP_ERR_INVALID, "compile: no source");
    for (const char *const *o = job->options; o && *o; o++)
        if ((st = cp_cc_check_option(*o)) != CP_OK)
            return st;

    cp_sha256_init(&h);
    cp_sha256_str(&h, "cupola-cc-shared-object-1");
    cp_sha256_str(&h, job->salt ? job->salt : "");
    cp_sha256_update(&h, &job->lang, sizeof job->lang);
    if ((st = cp_cc_find(job->lang, cc, sizeof cc, &h)) != CP_OK)
        return st;
    cp_sha256_str(&h, job->name);
    cp_sha256_str(&h, job->prologue);
    cp_sha256_update(&h, &job->source_len, sizeof job->source_len);
    cp_sha256_update(&h, job->source, job->source_len);
    for (const char *const *o = job->args; o && *o; o++)
        cp_sha256_str(&h, *o);
    cp_sha256_str(&h, "--");
    for (const char *const *o = job->options; o && *o; o++)
        cp_sha256_str(&h, *o);
    cp_sha256_str(&h, "--");
    for (const char *const *d = job->depends; d && *d; d++)
        cp_sha256_file(&h, *d);
    cp_cache_key_of(&h, &key);

    if (!job->syntax_only &&
        (st = cp_cache_lookup(&key, "so", 0, NULL, NULL, out->path, &where)) != CP_OK)
        return st;
    if (!job->syntax_only && where && out->path[0]) {
        out->where = where;
        return CP_OK;
    }

    pthread_mutex_lock(&cache_mu);
    st = work_dir_locked(&dir);
    if (st == CP_OK) {
        snprintf(srcdir, sizeof srcdir, "%s/src.XXXXXX", dir);
        if (!mkdtemp(srcdir))
            st = cp_error_set(CP_ERR_BACKEND, "cannot create %s: %s", srcdir, strerror(errno));
    }
    if (st == CP_OK) {
        int fd;
        snprintf(objtmp, sizeof objtmp, "%s/%s.so.tmpXXXXXX", dir, key.hex);
        fd = mkstemp(objtmp);
        if (fd < 0) {
            st = cp_error_set(CP_ERR_BACKEND, "cannot create %s: %s", objtmp, strerror(errno));
            rmdir(srcdir);
        } else {
            close(fd);
        }
    }
    pthread_mutex_unlock(&cache_mu);
    if (st != CP_OK)
        return st;

    snprintf(srcpath, sizeof srcpath, "%s/%s", srcdir,
             job->lang == CP_CC_C ? "source.c" : job->lang == CP_CC_CXX ? "source.cc" : "source.cu");
    st = write_source(srcpath, job->prologue, job->name, job->source, job->source_len);
    if (st == CP_OK) {
        argv[argc++] = cc;
        for (const char *const *o = job->args; o && *o && argc < MAX_ARGS - 8; o++)
            argv[argc++] = *o;
        for (const char *const *o = job->options; o && *o && argc < MAX_ARGS - 8; o++) {
            const char *t[2];
            int k = 1;
            if (job->translate) {
                k = job->translate(*o, t);
            } else {
                t[0] = *o;
            }
            for (int i = 0; i < k && i < 2; i++)
                argv[argc++] = t[i];
        }
        if (job->syntax_only) {
            argv[argc++] = "-fsyntax-only";
        } else {
            argv[argc++] = "-o";
            argv[argc++] = objtmp;
        }
        argv[argc++] = "-x";
        argv[argc++] = job->lang == CP_CC_C ? "c" : job->lang == CP_CC_CXX ? "c++" : "cu";
        argv[argc++] = srcpath;
        argv[argc] = NULL;
        st = cp_cc_run(argv, &log, &code);
    }
    unlink(srcpath);
    rmdir(srcdir);
    if (st != CP_OK) {
        unlink(objtmp);
        free(log);
        return st;
    }
    out->log = log;
    if (code != 0) {
        unlink(objtmp);
        return cp_error_set(CP_ERR_INVALID, "%s: compile error:\n%s", job->name,
                            log && *log ? log : "(the compiler printed nothing)");
    }
    if (job->syntax_only) {
        unlink(objtmp);
        return CP_OK;
    }
    {
        size_t n = 0;
        char *img = read_file(objtmp, &n);
        if (!img) {
            unlink(objtmp);
            return cp_error_set(CP_ERR_BACKEND, "cannot read the compiler's output %s", objtmp);
        }
        pthread_mutex_lock(&cache_mu);
        stats.stores++;
        if (dir_state > 0) {
            st = publish_locked(objtmp, &key, "so", img, n, out->path, sizeof out->path);
        } else {
            /* no disk cache: the object stays in the private directory */
            char final[4200];
            snprintf(final, sizeof final, "%s/%s.so", dir, key.hex);
            if (rename(objtmp, final) != 0) {
                st = cp_error_set(CP_ERR_BACKEND, "cannot rename to %s: %s", final, strerror(errno));
                unlink(objtmp);
            } else {
                copystr(out->path, sizeof out->path, final);
            }
        }
        if (st == CP_OK)
            mem_put_locked(&key, "so", NULL, n, out->path, 0);
        pthread_mutex_unlock(&cache_mu);
        free(img);
    }
    return st;
}
