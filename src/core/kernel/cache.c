/*
 * kernel/cache.c: the compile cache (its directory, its entries in memory
 * and on disk) and the shared objects built through it (policy in
 * compile.h); hashing and running the compilers are compile.c's.
 */
#include "kernel/compile.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* Copies a string, truncating to fit (paths are checked where it matters). */
static void copystr(char *dst, size_t n, const char *src)
{
    size_t k = strlen(src);
    if (k >= n)
        k = n - 1;
    memcpy(dst, src, k);
    dst[k] = '\0';
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
