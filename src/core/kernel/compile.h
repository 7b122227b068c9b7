/*
 * kernel/compile.h: compiling code at run time, and caching what was built.
 *
 * Used for user kernels (kernel/module.c: NVRTC images on the CUDA backend,
 * shared objects built by the system C++ compiler on the host backend) and
 * by anything else that turns source text into loadable code (C plugins).
 * Nothing here knows about kernels: a job is source text, a compiler kind,
 * options and the files the result depends on.  compile.c hashes, checks
 * options and runs the compilers; cache.c keeps the cache and builds shared
 * objects through it.
 *
 * The cache, exactly:
 *  - The key is the SHA-256 of everything that changes the output: the
 *    source, the options (checked and trusted), the compiler's identity (its
 *    path and `--version` output, or the library version for NVRTC), the
 *    target (architecture), the contents of the headers cupola puts on the
 *    include path, and a salt naming the producer and its format version.
 *    User headers reached through -I are not part of the key.
 *  - In memory: key -> image bytes or shared-object path, for the life of the
 *    process (bounded; the oldest entries go first).
 *  - On disk: one file per key under $CUPOLA_CACHE_DIR, else
 *    $XDG_CACHE_HOME/cupola, else ~/.cache/cupola.  The directory is created
 *    with mode 0700; one that is a symbolic link, is not owned by this user
 *    or is writable by others is refused (the disk cache is then off for the
 *    process, and cp_cc_stats says why).  An entry is the payload followed by
 *    a trailer (magic, key, payload length, SHA-256 of the payload); it is
 *    written to a temporary file in the same directory and renamed, so a
 *    reader sees a whole entry or none.  An entry whose trailer does not
 *    match (truncated, corrupted, another key) is deleted and rebuilt, never
 *    loaded.  A shared object keeps its trailer: the dynamic loader ignores
 *    bytes past the ELF contents.
 *  - Compilers run through posix_spawn with an argument vector (no shell),
 *    stdin from /dev/null, stdout and stderr captured together as the log,
 *    in this process's environment less LD_PRELOAD.
 *
 * This header compiles as C and C++.
 */
#ifndef CUPOLA_KERNEL_COMPILE_H
#define CUPOLA_KERNEL_COMPILE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- hashing --------------------------------------------------------------- */

typedef struct cp_sha256 {
    uint32_t h[8];
    uint64_t len;
    unsigned char buf[64];
    size_t nbuf;
} cp_sha256;

void cp_sha256_init(cp_sha256 *c);
void cp_sha256_update(cp_sha256 *c, const void *data, size_t n);
void cp_sha256_final(cp_sha256 *c, unsigned char out[32]);
/* Adds a string with its length, so that ("ab","c") and ("a","bc") differ. */
void cp_sha256_str(cp_sha256 *c, const char *s);
/* Adds the contents of a file (or a marker when it cannot be read). */
void cp_sha256_file(cp_sha256 *c, const char *path);

/* A cache key: 64 hex digits and a NUL. */
typedef struct cp_cache_key {
    char hex[65];
} cp_cache_key;
void cp_cache_key_of(cp_sha256 *c, cp_cache_key *out);

/* ---- user options ------------------------------------------------------------ */

/* Checks one user option against the allow-list shared by every compiler:
 * -DNAME[=V], -UNAME, -I<dir>, -O0..-O3/-Os, -std=<std>, -rdc=true|false,
 * --relocatable-device-code=true|false, --use_fast_math (-use_fast_math),
 * -lineinfo, -g, -G, --fmad=true|false, -maxrregcount=N, -w.  Returns CP_OK,
 * or CP_ERR_INVALID with a message naming the option. */
cp_status cp_cc_check_option(const char *opt);

/* ---- the cache ------------------------------------------------------------------ */

/* Finds key in the memory cache, then on disk (ext names the kind of entry,
 * "cubin" or "so").  On a hit: *data (malloc'd, caller frees; NULL when
 * want_data is 0) and *len are the payload, path (optional, PATH_MAX bytes)
 * the entry's file, and *where 1 (memory) or 2 (disk).  A miss sets *where 0
 * and returns CP_OK. */
cp_status cp_cache_lookup(const cp_cache_key *key, const char *ext, int want_data, void **data,
                          size_t *len, char *path, int *where);
/* Stores a payload under key (memory, and disk when usable); path (optional)
 * gets the entry's file ("" when the disk cache is off). */
cp_status cp_cache_store(const cp_cache_key *key, const char *ext, const void *data, size_t len,
                         char *path);

typedef struct cp_cache_stats {
    uint64_t memory_hits, disk_hits, misses, stores, rebuilt; /* rebuilt: bad entries dropped */
    int disk;                                                 /* the disk cache is usable */
    char dir[4096];
    char why[256]; /* why the disk cache is off */
} cp_cache_stats;
void cp_cache_get_stats(cp_cache_stats *out);
/* Forgets the in-memory entries (the disk cache stays): a later lookup of
 * the same key reads the disk, as a new process would. */
void cp_cache_forget_memory(void);

/* ---- running the system compiler ------------------------------------------------ */

typedef enum cp_cc_lang {
    CP_CC_C = 0, /* CUPOLA_CC, else cc, gcc, clang */
    CP_CC_CXX,   /* CUPOLA_CXX, else c++, g++, clang++ */
    CP_CC_NVCC   /* CUDA C through nvcc: CUPOLA_NVCC, else $CUDA_HOME/bin/nvcc,
                  * $CUDA_PATH/bin/nvcc, /usr/local/cuda/bin/nvcc, nvcc on PATH
                  * (plugins whose peers need the whole toolkit: host code,
                  * host headers, -I folders of the user's) */
} cp_cc_lang;

/* Finds the compiler for lang: the absolute path into path (PATH_MAX bytes),
 * and its identity (path and version output) added to h when h is given. */
cp_status cp_cc_find(cp_cc_lang lang, char *path, size_t pathlen, cp_sha256 *h);

/* Runs argv[0] (an absolute path) with argv, no shell; the combined stdout
 * and stderr go to *log (malloc'd, NUL-terminated; may be NULL on failure to
 * start).  *exit_code gets the exit status (or 128+signal).  CP_OK means it
 * ran, whatever its status. */
cp_status cp_cc_run(const char *const argv[], char **log, int *exit_code);

/* A shared object built from one source file, through the cache (with
 * CP_CC_NVCC and "-cubin" among args, the payload is a CUDA image instead:
 * the cache does not look inside). */
typedef struct cp_cc_job {
    cp_cc_lang lang;
    const char *name;      /* what messages and the compiler's log call the source */
    const char *source;    /* the text */
    size_t source_len;
    const char *const *options;  /* user options (checked), NULL-terminated or NULL */
    const char *const *args;     /* cupola's own arguments (trusted), NULL-terminated or NULL */
    const char *const *depends;  /* files whose contents enter the key, NULL-terminated or NULL */
    const char *salt;            /* names the producer and its format version */
    /* translates a checked user option into compiler arguments: writes up to
     * 2 strings into out (pointing at opt or static text), returns how many
     * (0: dropped).  NULL: every option is passed as it is. */
    int (*translate)(const char *opt, const char *out[2]);
    /* text written before the source (and before the `#line 1 "name"` that
     * makes the compiler's messages name the user's file), or NULL */
    const char *prologue;
    /* only check the source (-fsyntax-only): nothing is built or cached;
     * CP_OK when it compiles, else the compile error as below */
    int syntax_only;
} cp_cc_job;

typedef struct cp_cc_result {
    char path[4096]; /* the shared object to dlopen */
    char *log;       /* the compiler's output (malloc'd; NULL on a cache hit) */
    int where;       /* 0: compiled now, 1: memory cache, 2: disk cache */
} cp_cc_result;

/* Builds (or finds) the shared object.  A compile error is CP_ERR_INVALID
 * with the message "<name>: compile error:\n<log>" (cut to the error
 * buffer's size) and the whole log in out->log; the caller frees out->log
 * in every case. */
cp_status cp_cc_shared_object(const cp_cc_job *job, cp_cc_result *out);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_KERNEL_COMPILE_H */
