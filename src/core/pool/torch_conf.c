/*
 * pool/torch_conf.c: PYTORCH_CUDA_ALLOC_CONF, as PyTorch 2.11 reads it for
 * CUDA, parsed into the settings of the torch model (pool/torch.c).
 *
 * Syntax: the string is cut into tokens at ',' ':' '[' and ']' (each a token
 * of its own) with white space dropped, then read as key ':' value pairs
 * separated by ','.  A value is one token, or for roundup_power2_divisions
 * a list '[' bound ':' divisions (',' bound ':' divisions)* ']' where a bound
 * is a power of two in MiB or '>' (every interval after the last bound).
 *
 * Keys and values (sizes in MiB):
 *   max_split_size_mb            integer >= 20: blocks this large are never split
 *   max_non_split_rounding_mb    integer >= 20 (default 20): how much larger than
 *                                the request an unsplit oversize block may be
 *   roundup_power2_divisions     N, or the list form; N and each divisions value a
 *                                power of two (0 too in the list: no rounding)
 *   garbage_collection_threshold number in (0, 1)
 *   expandable_segments          True | False
 *   release_lock_on_cudamalloc   True | False (also release_lock_on_hipmalloc)
 *   graph_capture_record_stream_reuse  True | False
 *   per_process_memory_fraction  number in [0, 1]: the limit, as a fraction of the
 *                                device's memory
 *   backend                      native (cudaMallocAsync is refused: cupola's
 *                                native pools, cupola.mempool, are that allocator)
 *   pinned_use_cuda_host_register (or _hip_), pinned_num_register_threads,
 *   pinned_use_background_threads, pinned_reserve_segment_size_mb: the host-side
 *                                (pinned memory) allocator's, accepted, checked and
 *                                reported, not modelled.
 *
 * Where this parser is stricter than PyTorch's: a number must be the whole
 * token (PyTorch's std::stoull reads "64abc" as 64 and "-1" as 2^64-1), and
 * pairs must be separated by ',' (PyTorch skips whatever token follows a
 * value).  A conf PyTorch refuses is refused here too.
 */
#include "torch.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB CP_TORCH_MIB
#define MIN_MB 20u            /* kLargeBuffer in MiB: the least split and rounding sizes */
#define MAX_REGISTER_THREADS 128u

const char *const cp_torch_host_keys[] = {
    "pinned_use_cuda_host_register", "pinned_num_register_threads",
    "pinned_use_background_threads", "pinned_reserve_segment_size_mb", NULL};

void cp_torch_conf_default(cp_torch_conf *c)
{
    memset(c, 0, sizeof *c);
    c->max_split_size = CP_TORCH_NO_SPLIT_LIMIT;
    c->max_non_split_rounding = 20 * MIB;
    c->memory_fraction = 1.0;
    c->pinned_num_register_threads = 1;
}

uint32_t cp_torch_conf_divisions(const cp_torch_conf *c, uint64_t size)
{
    /* Intervals start at 1 MiB (2^20): index = log2(size) - 20, clamped. */
    int lg = 63 - __builtin_clzll(size | 1);
    int idx = lg > 20 ? lg - 20 : 0;
    return c->roundup_divisions[idx > 15 ? 15 : idx];
}

/* ---- tokens ---------------------------------------------------------------- */
#define MAX_TOKEN 160 /* 40 characters of up to 4 bytes: what a message shows */

typedef struct lexer {
    const char *s;
    size_t len, pos;
    char tok[MAX_TOKEN + 1];
    size_t toklen;   /* the token's full length (it may be cut in tok) */
    int sep;         /* the token is one of , : [ ] */
    int end;
} lexer;

static int is_sep(char ch)
{
    return ch == ',' || ch == ':' || ch == '[' || ch == ']';
}

/* The next token, white space dropped as PyTorch drops it (inside a word
 * too: "max_split _size_mb" is "max_split_size_mb"). */
static void next(lexer *lx)
{
    lx->toklen = 0;
    lx->sep = 0;
    while (lx->pos < lx->len && isspace((unsigned char)lx->s[lx->pos]))
        lx->pos++;
    if (lx->pos >= lx->len) {
        lx->end = 1;
        lx->tok[0] = '\0';
        return;
    }
    lx->end = 0;
    if (is_sep(lx->s[lx->pos])) {
        lx->tok[0] = lx->s[lx->pos++];
        lx->tok[1] = '\0';
        lx->toklen = 1;
        lx->sep = 1;
        return;
    }
    while (lx->pos < lx->len && !is_sep(lx->s[lx->pos])) {
        char ch = lx->s[lx->pos++];
        if (isspace((unsigned char)ch))
            continue;
        if (lx->toklen < MAX_TOKEN)
            lx->tok[lx->toklen] = ch;
        lx->toklen++;
    }
    lx->tok[lx->toklen < MAX_TOKEN ? lx->toklen : MAX_TOKEN] = '\0';
}

/* The token for a message as every message of cupola's shows a value
 * (src/lua/util.c): at most 40 characters (a UTF-8 character is never
 * split), then "..."; newline, tab and other control bytes escaped as Lua
 * writes them. */
#define SHOWN_MAX 40
static const char *shown(const lexer *lx, char *buf, size_t n)
{
    size_t i, k = 0, chars = 0, len = lx->toklen < MAX_TOKEN ? lx->toklen : MAX_TOKEN;
    if (lx->end)
        return "end of string";
    for (i = 0; i < len && k + 6 < n &&
                (chars < SHOWN_MAX || ((unsigned char)lx->tok[i] & 0xc0) == 0x80);
         i++) {
        unsigned char ch = (unsigned char)lx->tok[i];
        if ((ch & 0xc0) != 0x80)
            chars++;
        if (ch == '\n')
            k += (size_t)snprintf(buf + k, n - k, "\\n");
        else if (ch == '\t')
            k += (size_t)snprintf(buf + k, n - k, "\\t");
        else if (ch < 0x20 || ch == 0x7f)
            k += (size_t)snprintf(buf + k, n - k, "\\%u", (unsigned)ch);
        else
            buf[k++] = (char)ch;
    }
    if (i < lx->toklen && k + 4 < n) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k < n ? k : n - 1] = '\0';
    return buf;
}

static cp_status bad_value(const lexer *lx, const char *key, const char *want)
{
    char b[4 * MAX_TOKEN + 8];
    if (lx->end || lx->sep)
        return cp_error_set(CP_ERR_INVALID, "conf: %s needs a value (%s), found %s%s%s", key, want,
                            lx->end ? "" : "'", shown(lx, b, sizeof b), lx->end ? "" : "'");
    return cp_error_set(CP_ERR_INVALID, "conf: %s must be %s, not '%s'", key, want,
                        shown(lx, b, sizeof b));
}

/* A whole token of decimal digits, below 2^64. */
static int token_u64(const lexer *lx, uint64_t *out)
{
    uint64_t v = 0;
    size_t i;
    if (lx->end || lx->sep || lx->toklen == 0 || lx->toklen > MAX_TOKEN)
        return -1;
    for (i = 0; i < lx->toklen; i++) {
        unsigned d;
        if (lx->tok[i] < '0' || lx->tok[i] > '9')
            return -1;
        d = (unsigned)(lx->tok[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* A whole token that is a finite decimal number. */
static int token_double(const lexer *lx, double *out)
{
    char *end;
    double v;
    size_t i;
    if (lx->end || lx->sep || lx->toklen == 0 || lx->toklen > MAX_TOKEN)
        return -1;
    for (i = 0; i < lx->toklen; i++) /* no hex floats, inf, nan */
        if (!strchr("0123456789.eE+-", lx->tok[i]))
            return -1;
    errno = 0;
    v = strtod(lx->tok, &end);
    if (end != lx->tok + lx->toklen || errno || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

static int is_pow2(uint64_t v)
{
    return v && !(v & (v - 1));
}

static int token_is(const lexer *lx, const char *word)
{
    return !lx->end && lx->toklen == strlen(word) && strcmp(lx->tok, word) == 0;
}

static cp_status read_bool(lexer *lx, const char *key, int *out)
{
    next(lx);
    if (token_is(lx, "True"))
        *out = 1;
    else if (token_is(lx, "False"))
        *out = 0;
    else
        return bad_value(lx, key, "True or False");
    return CP_OK;
}

/* An integer number of MiB, at least MIN_MB; larger than any size is no limit. */
static cp_status read_mb(lexer *lx, const char *key, uint64_t *out)
{
    uint64_t v;
    next(lx);
    if (token_u64(lx, &v) != 0 || v < MIN_MB)
        return bad_value(lx, key, "an integer of at least 20 (MiB)");
    *out = v > UINT64_MAX / MIB ? CP_TORCH_NO_SPLIT_LIMIT : v * MIB;
    return CP_OK;
}

static cp_status read_divisions(lexer *lx, cp_torch_conf *c)
{
    static const char *const key = "roundup_power2_divisions";
    uint64_t v;
    int i;
    next(lx);
    if (!token_is(lx, "[")) {
        if (token_u64(lx, &v) != 0 || !is_pow2(v) || v > UINT32_MAX)
            return bad_value(lx, key, "a power of two, or a list [MiB:divisions,...,>:divisions]");
        for (i = 0; i < 16; i++)
            c->roundup_divisions[i] = (uint32_t)v;
        return CP_OK;
    }
    {
        int first = 1;
        size_t last = 0;
        memset(c->roundup_divisions, 0, sizeof c->roundup_divisions);
        next(lx);
        if (token_is(lx, "]"))
            return CP_OK; /* an empty list: no rounding */
        for (;;) {
            int rest = 0;
            uint64_t bound = 0, divs;
            if (token_is(lx, ">"))
                rest = 1;
            else if (token_u64(lx, &bound) != 0 || !is_pow2(bound))
                return bad_value(lx, key, "a list whose bounds are powers of two (MiB) or '>'");
            next(lx);
            if (!token_is(lx, ":"))
                return bad_value(lx, key, "a list of bound:divisions pairs");
            next(lx);
            if (token_u64(lx, &divs) != 0 || (divs && !is_pow2(divs)) || divs > UINT32_MAX)
                return bad_value(lx, key, "a list whose divisions are 0 or powers of two");
            if (rest) {
                /* '>' covers every interval after the last bound given (after
                 * the first interval when none was: PyTorch's rule), and is
                 * not a first bound. */
                for (i = (int)last + 1; i < 16; i++)
                    c->roundup_divisions[i] = (uint32_t)divs;
            } else {
                size_t idx = (size_t)(63 - __builtin_clzll(bound));
                if (idx > 15)
                    idx = 15;
                if (first) /* the first bound covers every interval below it */
                    for (i = 0; i < (int)idx; i++)
                        c->roundup_divisions[i] = (uint32_t)divs;
                c->roundup_divisions[idx] = (uint32_t)divs;
                last = idx;
                first = 0;
            }
            next(lx);
            if (token_is(lx, "]"))
                return CP_OK;
            if (!token_is(lx, ","))
                return bad_value(lx, key, "a list closed by ']'");
            next(lx);
        }
    }
}

cp_status cp_torch_conf_parse(const char *s, size_t len, cp_torch_conf *c)
{
    lexer lx;
    cp_status st;
    char b[4 * MAX_TOKEN + 8];

    cp_torch_conf_default(c);
    memset(&lx, 0, sizeof lx);
    lx.s = s ? s : "";
    lx.len = s ? len : 0;
    next(&lx);
    while (!lx.end) {
        char key[MAX_TOKEN + 1], ks[4 * MAX_TOKEN + 8];
        if (lx.sep)
            return cp_error_set(CP_ERR_INVALID, "conf: expected a key, found '%s'",
                                shown(&lx, b, sizeof b));
        if (lx.toklen > MAX_TOKEN) /* no key is that long */
            return cp_error_set(CP_ERR_INVALID, "conf: unknown key '%s'", shown(&lx, b, sizeof b));
        memcpy(key, lx.tok, lx.toklen + 1);
        shown(&lx, ks, sizeof ks); /* the key as messages show it */
        next(&lx);
        if (!token_is(&lx, ":")) {
            int known =
                strcmp(key, "max_split_size_mb") == 0 || strcmp(key, "expandable_segments") == 0 ||
                strcmp(key, "roundup_power2_divisions") == 0 ||
                strcmp(key, "garbage_collection_threshold") == 0;
            return cp_error_set(CP_ERR_INVALID, "conf: %s '%s' needs ':' and a value, found %s%s%s",
                                known ? "key" : "unknown key", ks, lx.end ? "" : "'",
                                shown(&lx, b, sizeof b), lx.end ? "" : "'");
        }
        c->set_keys++;
        if (strcmp(key, "max_split_size_mb") == 0) {
            if ((st = read_mb(&lx, key, &c->max_split_size)) != CP_OK)
                return st;
        } else if (strcmp(key, "max_non_split_rounding_mb") == 0) {
            if ((st = read_mb(&lx, key, &c->max_non_split_rounding)) != CP_OK)
                return st;
        } else if (strcmp(key, "roundup_power2_divisions") == 0) {
            if ((st = read_divisions(&lx, c)) != CP_OK)
                return st;
        } else if (strcmp(key, "garbage_collection_threshold") == 0) {
            double v;
            next(&lx);
            if (token_double(&lx, &v) != 0 || !(v > 0.0 && v < 1.0))
                return bad_value(&lx, key, "a number in (0, 1)");
            c->gc_threshold = v;
        } else if (strcmp(key, "per_process_memory_fraction") == 0) {
            double v;
            next(&lx);
            if (token_double(&lx, &v) != 0 || !(v >= 0.0 && v <= 1.0))
                return bad_value(&lx, key, "a number in [0, 1]");
            c->memory_fraction = v;
        } else if (strcmp(key, "expandable_segments") == 0) {
            if ((st = read_bool(&lx, key, &c->expandable_segments)) != CP_OK)
                return st;
        } else if (strcmp(key, "release_lock_on_cudamalloc") == 0 ||
                   strcmp(key, "release_lock_on_hipmalloc") == 0) {
            if ((st = read_bool(&lx, key, &c->release_lock_on_cudamalloc)) != CP_OK)
                return st;
        } else if (strcmp(key, "graph_capture_record_stream_reuse") == 0) {
            if ((st = read_bool(&lx, key, &c->graph_capture_record_stream_reuse)) != CP_OK)
                return st;
        } else if (strcmp(key, "backend") == 0) {
            next(&lx);
            if (token_is(&lx, "cudaMallocAsync") || token_is(&lx, "hipMallocAsync"))
                return cp_error_set(CP_ERR_INVALID,
                                    "conf: backend:%s is CUDA's stream-ordered allocator, not "
                                    "the caching allocator this pool models; use cupola's "
                                    "native pools for it (cupola.mempool{...}, "
                                    "cupola.malloc_async)", lx.tok);
            if (!token_is(&lx, "native"))
                return bad_value(&lx, key, "native (or cudaMallocAsync, see cupola.mempool)");
        } else if (strcmp(key, "pinned_use_cuda_host_register") == 0 ||
                   strcmp(key, "pinned_use_hip_host_register") == 0) {
            if ((st = read_bool(&lx, key, &c->pinned_use_host_register)) != CP_OK)
                return st;
            c->host_keys |= 1u << 0;
        } else if (strcmp(key, "pinned_num_register_threads") == 0) {
            uint64_t v;
            next(&lx);
            if (token_u64(&lx, &v) != 0 || !is_pow2(v) || v > MAX_REGISTER_THREADS)
                return bad_value(&lx, key, "a power of two of at most 128");
            c->pinned_num_register_threads = v;
            c->host_keys |= 1u << 1;
        } else if (strcmp(key, "pinned_use_background_threads") == 0) {
            if ((st = read_bool(&lx, key, &c->pinned_use_background_threads)) != CP_OK)
                return st;
            c->host_keys |= 1u << 2;
        } else if (strcmp(key, "pinned_reserve_segment_size_mb") == 0) {
            uint64_t v;
            next(&lx);
            if (token_u64(&lx, &v) != 0 || v == 0)
                return bad_value(&lx, key, "a positive integer (MiB)");
            c->pinned_reserve_segment_size_mb = v;
            c->host_keys |= 1u << 3;
        } else {
            return cp_error_set(CP_ERR_INVALID,
                                "conf: unknown key '%s' (PyTorch 2.11 reads max_split_size_mb, "
                                "max_non_split_rounding_mb, roundup_power2_divisions, "
                                "garbage_collection_threshold, expandable_segments, "
                                "per_process_memory_fraction, release_lock_on_cudamalloc, "
                                "graph_capture_record_stream_reuse, backend and the pinned_* "
                                "keys)", ks);
        }
        next(&lx);
        if (lx.end)
            break;
        if (!token_is(&lx, ","))
            return cp_error_set(CP_ERR_INVALID, "conf: expected ',' after the value of %s, "
                                "found '%s'", key, shown(&lx, b, sizeof b));
        next(&lx);
        if (lx.end)
            return cp_error_set(CP_ERR_INVALID, "conf: a key must follow ',' (after %s)", key);
    }
    return CP_OK;
}

/* Appends with snprintf's convention: *k counts what would have been written. */
static void put(char *buf, size_t n, size_t *k, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t n, size_t *k, const char *fmt, ...)
{
    va_list ap;
    int w;
    va_start(ap, fmt);
    w = vsnprintf(*k < n ? buf + *k : NULL, *k < n ? n - *k : 0, fmt, ap);
    va_end(ap);
    if (w > 0)
        *k += (size_t)w;
}

/* The shortest decimal that reads back as v. */
static const char *shortest(double v, char *buf, size_t n)
{
    int prec;
    for (prec = 1; prec < 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return buf;
    }
    snprintf(buf, n, "%.17g", v);
    return buf;
}

size_t cp_torch_conf_format(const cp_torch_conf *c, char *buf, size_t n)
{
    char num[32];
    cp_torch_conf d;
    size_t k = 0;
    const char *sep = "";
    int i, same = 1;

    cp_torch_conf_default(&d);
    if (n)
        buf[0] = '\0';
    if (c->max_split_size != d.max_split_size) {
        put(buf, n, &k, "%smax_split_size_mb:%llu", sep,
            (unsigned long long)(c->max_split_size / MIB));
        sep = ",";
    }
    if (c->max_non_split_rounding != d.max_non_split_rounding) {
        put(buf, n, &k, "%smax_non_split_rounding_mb:%llu", sep,
            (unsigned long long)(c->max_non_split_rounding / MIB));
        sep = ",";
    }
    for (i = 1; i < 16; i++)
        same &= c->roundup_divisions[i] == c->roundup_divisions[0];
    if (same && c->roundup_divisions[0]) {
        put(buf, n, &k, "%sroundup_power2_divisions:%u", sep, (unsigned)c->roundup_divisions[0]);
        sep = ",";
    } else if (!same) {
        put(buf, n, &k, "%sroundup_power2_divisions:[", sep);
        for (i = 0; i < 16; i++)
            put(buf, n, &k, "%s%llu:%u", i ? "," : "", (unsigned long long)1 << i,
                (unsigned)c->roundup_divisions[i]);
        put(buf, n, &k, "]");
        sep = ",";
    }
    if (c->gc_threshold > 0.0) {
        put(buf, n, &k, "%sgarbage_collection_threshold:%s", sep,
            shortest(c->gc_threshold, num, sizeof num));
        sep = ",";
    }
    if (c->memory_fraction < 1.0) {
        put(buf, n, &k, "%sper_process_memory_fraction:%s", sep,
            shortest(c->memory_fraction, num, sizeof num));
        sep = ",";
    }
    if (c->expandable_segments) {
        put(buf, n, &k, "%sexpandable_segments:True", sep);
        sep = ",";
    }
    if (c->release_lock_on_cudamalloc) {
        put(buf, n, &k, "%srelease_lock_on_cudamalloc:True", sep);
        sep = ",";
    }
    if (c->graph_capture_record_stream_reuse) {
        put(buf, n, &k, "%sgraph_capture_record_stream_reuse:True", sep);
        sep = ",";
    }
    if (c->host_keys & 1u) {
        put(buf, n, &k, "%spinned_use_cuda_host_register:%s", sep,
            c->pinned_use_host_register ? "True" : "False");
        sep = ",";
    }
    if (c->host_keys & 2u) {
        put(buf, n, &k, "%spinned_num_register_threads:%llu", sep,
            (unsigned long long)c->pinned_num_register_threads);
        sep = ",";
    }
    if (c->host_keys & 4u) {
        put(buf, n, &k, "%spinned_use_background_threads:%s", sep,
            c->pinned_use_background_threads ? "True" : "False");
        sep = ",";
    }
    if (c->host_keys & 8u)
        put(buf, n, &k, "%spinned_reserve_segment_size_mb:%llu", sep,
            (unsigned long long)c->pinned_reserve_segment_size_mb);
    return k;
}
