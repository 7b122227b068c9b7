/*
 * pool/torch_conf.c: PYTORCH_CUDA_ALLOC_CONF, read exactly as PyTorch 2.11
 * reads it for CUDA, into the settings of the torch model (pool/torch.c).
 *
 * PyTorch reads the string twice, with two parsers that share one
 * tokenizer, and refuses it when either raises; this file does the same
 * walks, token by token, so that it accepts what PyTorch accepts, refuses
 * what PyTorch refuses, and reads every value as PyTorch does.
 *
 * Tokens.  The string is cut at ',' ':' '[' and ']' (each a token of its
 * own); white space (space, \t \n \v \f \r) is dropped wherever it stands,
 * inside words too.
 *
 * The walk.  Both parsers take a key, then skip one token without looking
 * at it (meant to be ':'), then read the value, then skip one more token
 * if there is one (meant to be ','), and go on with the next key.  So
 * "max_split_size_mb:64:expandable_segments:True" sets both keys, and a
 * trailing ',' is fine.  A value a parser does not read itself (the other
 * parser's keys) is skipped: one token, or from '[' to the first ']'.  A
 * token needed past the end of the string refuses it.
 *
 * The first parser (the allocator settings every device shares) reads
 *   large_segment_size_mb      integer > 10: the segment of requests between
 *                              1 and 10 MiB and the page of large expandable
 *                              segments (20 by default).  Read before every
 *                              other key, wherever it stands (every token
 *                              equal to the key counts).
 *   max_split_size_mb          integer >= large_segment_size_mb
 *   max_non_split_rounding_mb  integer >= large_segment_size_mb (default:
 *                              large_segment_size_mb)
 *   garbage_collection_threshold   number in (0, 1)
 *   roundup_power2_divisions   N, a power of two (every interval); or a list
 *                              '[' bound ':' N (',' bound ':' N)* ']': a bound
 *                              is a power of two in MiB naming the interval
 *                              that starts there (beyond 32768: the last),
 *                              the first bound also covers every interval
 *                              below it, and '>' covers every interval after
 *                              the last bound given (after the first interval
 *                              when none was); N is 0 or a power of two.
 *                              Inside the list the token after a bound is
 *                              skipped unread, and the token after N unless
 *                              it is ']'.
 *   expandable_segments, pinned_use_background_threads   True | False
 * The second (CUDA's own) reads
 *   backend                    native (cudaMallocAsync is refused: it is CUDA's
 *                              stream-ordered allocator, cupola.mempool)
 *   release_lock_on_cudamalloc (or _hipmalloc), graph_capture_record_stream_reuse,
 *   pinned_use_cuda_host_register (or _hip_)   True | False
 *   pinned_num_register_threads     a power of two, at most 128
 *   pinned_reserve_segment_size_mb  integer > 0
 *   per_process_memory_fraction     number in [0, 1]: the limit, as a fraction
 *                                   of the device's memory
 * and refuses any key that neither reads.
 *
 * Values.  An integer is read as C's strtoull reads it in base 10 (what
 * std::stoull does): an optional sign, then the leading digits, the rest of
 * the token ignored ("64abc" is 64), a minus sign negating modulo 2^64 ("-1"
 * is 2^64 - 1); no digit, or a value past 2^64 - 1, refuses it.  A size in
 * MiB larger than any size is capped at (2^64 - 1) / 2^20 MiB before it is
 * multiplied out.  A number is read as strtod reads it in the C locale
 * (std::stod): a leading number is enough, hex and "nan" are numbers, an
 * overflow or underflow refuses it.  True and False are those words only.
 *
 * The host-side keys (pinned_*) configure the pinned-memory allocator:
 * checked and reported, not modelled.  release_lock_on_cudamalloc and
 * graph_capture_record_stream_reuse change nothing a model allocates.
 */
#include "torch.h"

#include <errno.h>
#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB CP_TORCH_MIB
#define MB_CAP (UINT64_MAX / MIB) /* the most MiB a size may have */
#define MIN_SEGMENT_MB 10u        /* large_segment_size_mb must exceed kMinLargeAlloc */
#define MAX_REGISTER_THREADS 128u
#define NDIV 16                   /* roundup intervals: 1 MiB, 2 MiB, ..., 32 GiB and up */

const char *const cp_torch_host_keys[] = {
    "pinned_use_cuda_host_register", "pinned_num_register_threads",
    "pinned_use_background_threads", "pinned_reserve_segment_size_mb", NULL};

void cp_torch_conf_default(cp_torch_conf *c)
{
    memset(c, 0, sizeof *c);
    c->max_split_size = CP_TORCH_NO_SPLIT_LIMIT;
    c->large_segment_size = CP_TORCH_LARGE_SEGMENT;
    c->max_non_split_rounding = CP_TORCH_LARGE_SEGMENT;
    c->memory_fraction = 1.0;
    c->pinned_num_register_threads = 1;
}

uint64_t cp_torch_conf_divisions(const cp_torch_conf *c, uint64_t size)
{
    /* Intervals start at 1 MiB (2^20): index = log2(size) - 20, clamped. */
    int lg = 63 - __builtin_clzll(size | 1);
    int idx = lg > 20 ? lg - 20 : 0;
    return c->roundup_divisions[idx > NDIV - 1 ? NDIV - 1 : idx];
}

/* ---- tokens ---------------------------------------------------------------- */
typedef struct toks {
    char *text;         /* every token, each followed by a NUL */
    size_t *at, *len;   /* token i: text + at[i], len[i] bytes */
    size_t n;
} toks;

static int is_sep(char ch)
{
    return ch == ',' || ch == ':' || ch == '[' || ch == ']';
}

static int is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\v' || ch == '\f' || ch == '\r';
}

static cp_status tokenize(const char *s, size_t len, toks *T)
{
    size_t i, k = 0, open = 0;
    int in_word = 0;
    memset(T, 0, sizeof *T);
    /* at most len tokens, and len bytes plus a NUL each */
    T->text = (char *)malloc(2 * len + 1);
    T->at = (size_t *)malloc((len + 1) * sizeof *T->at);
    T->len = (size_t *)malloc((len + 1) * sizeof *T->len);
    if (!T->text || !T->at || !T->len)
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    for (i = 0; i < len; i++) {
        char ch = s[i];
        if (is_sep(ch)) {
            if (in_word) {
                T->len[T->n++] = k - open;
                T->text[k++] = '\0';
                in_word = 0;
            }
            T->at[T->n] = k;
            T->len[T->n++] = 1;
            T->text[k++] = ch;
            T->text[k++] = '\0';
        } else if (!is_space(ch)) {
            if (!in_word) {
                in_word = 1;
                open = k;
                T->at[T->n] = k;
            }
            T->text[k++] = ch;
        }
    }
    if (in_word) {
        T->len[T->n++] = k - open;
        T->text[k++] = '\0';
    }
    return CP_OK;
}

static void toks_free(toks *T)
{
    free(T->text);
    free(T->at);
    free(T->len);
}

static const char *tok(const toks *T, size_t i)
{
    return T->text + T->at[i];
}

static int is(const toks *T, size_t i, const char *word)
{
    return i < T->n && T->len[i] == strlen(word) && memcmp(tok(T, i), word, T->len[i]) == 0;
}

/* ---- messages ------------------------------------------------------------- */
/* A token as every message of cupola's shows a value (src/lua/util.c): at
 * most 40 characters (a UTF-8 character is never split), then "..."; newline,
 * tab and other control bytes escaped as Lua writes them. */
#define SHOWN_MAX 40
#define SHOWN_BUF 200
static const char *shown(const toks *T, size_t i, char *buf)
{
    const char *t = tok(T, i);
    size_t j, k = 0, chars = 0, len = T->len[i];
    for (j = 0; j < len && k + 6 < SHOWN_BUF &&
                (chars < SHOWN_MAX || ((unsigned char)t[j] & 0xc0) == 0x80);
         j++) {
        unsigned char ch = (unsigned char)t[j];
        if ((ch & 0xc0) != 0x80)
            chars++;
        if (ch == '\n')
            k += (size_t)snprintf(buf + k, SHOWN_BUF - k, "\\n");
        else if (ch == '\t')
            k += (size_t)snprintf(buf + k, SHOWN_BUF - k, "\\t");
        else if (ch < 0x20 || ch == 0x7f)
            k += (size_t)snprintf(buf + k, SHOWN_BUF - k, "\\%u", (unsigned)ch);
        else
            buf[k++] = (char)ch;
    }
    if (j < len) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = '\0';
    return buf;
}

/* Token i is needed: past the end of the string, PyTorch refuses it. */
static cp_status need(const toks *T, size_t i, const char *key, const char *want)
{
    if (i < T->n)
        return CP_OK;
    return cp_error_set(CP_ERR_INVALID, "conf: %s needs %s, found the end of the string", key,
                        want);
}

static cp_status bad(const toks *T, size_t i, const char *key, const char *want)
{
    char b[SHOWN_BUF];
    return cp_error_set(CP_ERR_INVALID, "conf: %s must be %s, not '%s'", key, want,
                        shown(T, i, b));
}

/* ---- values ---------------------------------------------------------------- */
/* std::stoull: 0, or -1 when there is no number, -2 when it is out of range. */
static int to_u64(const toks *T, size_t i, uint64_t *out)
{
    const char *s = tok(T, i);
    char *end;
    unsigned long long v;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (end == s)
        return -1;
    if (errno == ERANGE)
        return -2;
    *out = (uint64_t)v;
    return 0;
}

/* std::stod in the C locale: 0, or -1 / -2 as to_u64. */
static int to_double(const toks *T, size_t i, double *out)
{
    const char *s = tok(T, i);
    char *end;
    double v;
    locale_t c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    errno = 0;
    v = c ? strtod_l(s, &end, c) : strtod(s, &end);
    if (c)
        freelocale(c);
    if (end == s)
        return -1;
    if (errno == ERANGE)
        return -2;
    *out = v;
    return 0;
}

static int is_pow2(uint64_t v)
{
    return v && !(v & (v - 1));
}

static cp_status read_bool(const toks *T, size_t i, const char *key, int *out)
{
    cp_status st = need(T, i, key, "a value (True or False)");
    if (st != CP_OK)
        return st;
    if (is(T, i, "True"))
        *out = 1;
    else if (is(T, i, "False"))
        *out = 0;
    else
        return bad(T, i, key, "True or False");
    return CP_OK;
}

/* An integer; want says what it must be. */
static cp_status read_u64(const toks *T, size_t i, const char *key, const char *want,
                          uint64_t *out)
{
    cp_status st = need(T, i, key, "a value");
    int r;
    if (st != CP_OK)
        return st;
    r = to_u64(T, i, out);
    if (r == -2)
        return bad(T, i, key, "an integer below 2^64");
    if (r != 0)
        return bad(T, i, key, want);
    return CP_OK;
}

/* A size in MiB of at least min_mb, in bytes. */
static cp_status read_mb(const toks *T, size_t i, const char *key, uint64_t min_mb,
                         uint64_t *out)
{
    char want[64];
    uint64_t v;
    cp_status st;
    snprintf(want, sizeof want, "an integer of at least %llu (MiB)", (unsigned long long)min_mb);
    if ((st = read_u64(T, i, key, want, &v)) != CP_OK)
        return st;
    if (v < min_mb)
        return bad(T, i, key, want);
    *out = (v < MB_CAP ? v : MB_CAP) * MIB;
    return CP_OK;
}

static cp_status read_double(const toks *T, size_t i, const char *key, const char *want,
                             double *out)
{
    cp_status st = need(T, i, key, "a value");
    int r;
    if (st != CP_OK)
        return st;
    r = to_double(T, i, out);
    if (r == -2)
        return bad(T, i, key, "a number a double holds");
    if (r != 0)
        return bad(T, i, key, want);
    return CP_OK;
}

/* ---- keys ------------------------------------------------------------------- */
static int shared_key(const toks *T, size_t i)
{
    static const char *const keys[] = {
        "large_segment_size_mb", "max_split_size_mb", "max_non_split_rounding_mb",
        "garbage_collection_threshold", "roundup_power2_divisions", "expandable_segments",
        "pinned_use_background_threads", NULL};
    size_t k;
    for (k = 0; keys[k]; k++)
        if (is(T, i, keys[k]))
            return 1;
    return 0;
}

static int cuda_key(const toks *T, size_t i)
{
    static const char *const keys[] = {
        "backend", "release_lock_on_cudamalloc", "release_lock_on_hipmalloc",
        "pinned_use_cuda_host_register", "pinned_use_hip_host_register",
        "pinned_num_register_threads", "pinned_reserve_segment_size_mb",
        "graph_capture_record_stream_reuse", "per_process_memory_fraction", NULL};
    size_t k;
    for (k = 0; keys[k]; k++)
        if (is(T, i, keys[k]))
            return 1;
    return 0;
}

/* Neither parser reads key i: PyTorch refuses the string. */
static cp_status unknown_key(const toks *T, size_t i)
{
    char b[SHOWN_BUF];
    return cp_error_set(CP_ERR_INVALID,
                        "conf: unknown key '%s' (PyTorch 2.11 reads max_split_size_mb, "
                        "max_non_split_rounding_mb, large_segment_size_mb, "
                        "roundup_power2_divisions, garbage_collection_threshold, "
                        "expandable_segments, per_process_memory_fraction, "
                        "release_lock_on_cudamalloc, graph_capture_record_stream_reuse, backend "
                        "and the pinned_* keys)",
                        shown(T, i, b));
}

/* ---- the first parser: the settings every device shares ------------------ */
/* A value the parser does not read: one token, or '[' to the first ']';
 * returns the index of its last token. */
static cp_status skip_value(const toks *T, size_t *i, const char *key)
{
    cp_status st;
    if ((st = need(T, *i + 1, key, "':' and a value")) != CP_OK ||
        (st = need(T, *i + 2, key, "a value")) != CP_OK)
        return st;
    *i += 2;
    if (!is(T, *i, "["))
        return CP_OK;
    while (++*i < T->n && !is(T, *i, "]"))
        ;
    return need(T, *i, key, "a list closed by ']'");
}

static cp_status read_divisions(const toks *T, size_t *pi, cp_torch_conf *c)
{
    static const char *const key = "roundup_power2_divisions";
    size_t i = *pi, last = 0, j;
    int first = 1;
    uint64_t v;
    cp_status st;
    if ((st = need(T, ++i, key, "':' and a value")) != CP_OK ||
        (st = need(T, ++i, key, "a value")) != CP_OK)
        return st;
    if (!is(T, i, "[")) {
        static const char *const want =
            "a power of two, or a list [MiB:divisions,...,>:divisions]";
        if ((st = read_u64(T, i, key, want, &v)) != CP_OK)
            return st;
        if (!is_pow2(v))
            return bad(T, i, key, want);
        for (j = 0; j < NDIV; j++)
            c->roundup_divisions[j] = v;
        *pi = i;
        return CP_OK;
    }
    while (++i < T->n && !is(T, i, "]")) {
        size_t bound = i;
        if ((st = need(T, ++i, key, "a list of bound:divisions pairs")) != CP_OK)
            return st;
        if ((st = read_u64(T, ++i, key, "a list whose divisions are 0 or powers of two", &v)) !=
            CP_OK)
            return st;
        if (v && !is_pow2(v))
            return bad(T, i, key, "a list whose divisions are 0 or powers of two");
        if (is(T, bound, ">")) {
            for (j = last + 1; j < NDIV; j++)
                c->roundup_divisions[j] = v;
        } else {
            uint64_t b;
            size_t idx;
            if (to_u64(T, bound, &b) != 0 || !is_pow2(b))
                return bad(T, bound, key, "a list whose bounds are powers of two (MiB) or '>'");
            idx = (size_t)(63 - __builtin_clzll(b));
            if (idx > NDIV - 1)
                idx = NDIV - 1;
            if (first) { /* the first bound also covers every interval below it */
                for (j = 0; j < idx; j++)
                    c->roundup_divisions[j] = v;
                first = 0;
            }
            c->roundup_divisions[idx] = v;
            last = idx;
        }
        if ((st = need(T, i + 1, key, "a list closed by ']'")) != CP_OK)
            return st;
        if (!is(T, i + 1, "]"))
            i++; /* the ',' (unread) */
    }
    if ((st = need(T, i, key, "a list closed by ']'")) != CP_OK)
        return st;
    *pi = i;
    return CP_OK;
}

static cp_status parse_shared(const toks *T, cp_torch_conf *c)
{
    size_t i;
    cp_status st;
    /* large_segment_size_mb first, wherever it stands: the least
     * max_split_size_mb and the default max_non_split_rounding_mb follow it */
    for (i = 0; i < T->n; i++) {
        static const char *const key = "large_segment_size_mb";
        uint64_t v;
        if (!is(T, i, key))
            continue;
        if ((st = need(T, ++i, key, "':' and a value")) != CP_OK ||
            (st = read_u64(T, ++i, key, "an integer above 10 (MiB)", &v)) != CP_OK)
            return st;
        if (v <= MIN_SEGMENT_MB)
            return bad(T, i, key, "an integer above 10 (MiB)");
        c->large_segment_size = (v < MB_CAP ? v : MB_CAP) * MIB;
    }
    c->max_non_split_rounding = c->large_segment_size;
    for (i = 0; i < T->n; i++) {
        uint64_t least = c->large_segment_size / MIB;
        if (is(T, i, "large_segment_size_mb")) {
            st = skip_value(T, &i, tok(T, i));
        } else if (is(T, i, "max_split_size_mb")) {
            if ((st = need(T, ++i, "max_split_size_mb", "':' and a value")) == CP_OK)
                st = read_mb(T, ++i, "max_split_size_mb", least, &c->max_split_size);
        } else if (is(T, i, "max_non_split_rounding_mb")) {
            if ((st = need(T, ++i, "max_non_split_rounding_mb", "':' and a value")) == CP_OK)
                st = read_mb(T, ++i, "max_non_split_rounding_mb", least,
                             &c->max_non_split_rounding);
        } else if (is(T, i, "garbage_collection_threshold")) {
            static const char *const key = "garbage_collection_threshold";
            double v = 0.0;
            if ((st = need(T, ++i, key, "':' and a value")) == CP_OK &&
                (st = read_double(T, ++i, key, "a number in (0, 1)", &v)) == CP_OK &&
                !(v > 0.0 && v < 1.0))
                st = bad(T, i, key, "a number in (0, 1)");
            if (st == CP_OK)
                c->gc_threshold = v;
        } else if (is(T, i, "roundup_power2_divisions")) {
            st = read_divisions(T, &i, c);
        } else if (is(T, i, "expandable_segments")) {
            if ((st = need(T, ++i, "expandable_segments", "':' and a value")) == CP_OK)
                st = read_bool(T, ++i, "expandable_segments", &c->expandable_segments);
        } else if (is(T, i, "pinned_use_background_threads")) {
            if ((st = need(T, ++i, "pinned_use_background_threads", "':' and a value")) == CP_OK)
                st = read_bool(T, ++i, "pinned_use_background_threads",
                               &c->pinned_use_background_threads);
            c->host_keys |= 1u << 2;
        } else if (cuda_key(T, i)) {
            st = skip_value(T, &i, tok(T, i)); /* the other parser's */
        } else {
            return unknown_key(T, i);
        }
        if (st != CP_OK)
            return st;
        if (i + 1 < T->n)
            i++; /* the ',' (unread) */
    }
    return CP_OK;
}

/* ---- the second parser: CUDA's own keys ------------------------------------- */
static cp_status parse_cuda(const toks *T, cp_torch_conf *c)
{
    size_t i;
    cp_status st;
    for (i = 0; i < T->n; i++) {
        const char *key = tok(T, i); /* a key either parser reads, past the check */
        if (!shared_key(T, i) && !cuda_key(T, i))
            return unknown_key(T, i);
        c->set_keys++;
        if ((st = need(T, i + 1, key, "':' and a value")) != CP_OK)
            return st;
        if (shared_key(T, i)) {
            st = skip_value(T, &i, key); /* the first parser's */
        } else if (is(T, i, "backend")) {
            i += 2;
            if ((st = need(T, i, key, "a value (native)")) != CP_OK)
                return st;
            if (is(T, i, "cudaMallocAsync") || is(T, i, "hipMallocAsync"))
                return cp_error_set(CP_ERR_INVALID,
                                    "conf: backend:%s is CUDA's stream-ordered allocator, not "
                                    "the caching allocator this pool models; use cupola's "
                                    "native pools for it (cupola.mempool{...}, "
                                    "cupola.malloc_async)", tok(T, i));
            if (!is(T, i, "native"))
                st = bad(T, i, key, "native (or cudaMallocAsync, see cupola.mempool)");
        } else if (is(T, i, "release_lock_on_cudamalloc") ||
                   is(T, i, "release_lock_on_hipmalloc")) {
            i += 2;
            st = read_bool(T, i, key, &c->release_lock_on_cudamalloc);
        } else if (is(T, i, "pinned_use_cuda_host_register") ||
                   is(T, i, "pinned_use_hip_host_register")) {
            i += 2;
            st = read_bool(T, i, key, &c->pinned_use_host_register);
            c->host_keys |= 1u << 0;
        } else if (is(T, i, "graph_capture_record_stream_reuse")) {
            i += 2;
            st = read_bool(T, i, key, &c->graph_capture_record_stream_reuse);
        } else if (is(T, i, "pinned_num_register_threads")) {
            static const char *const want = "a power of two of at most 128";
            uint64_t v = 0;
            i += 2;
            if ((st = read_u64(T, i, key, want, &v)) == CP_OK &&
                (!is_pow2(v) || v > MAX_REGISTER_THREADS))
                st = bad(T, i, key, want);
            c->pinned_num_register_threads = v;
            c->host_keys |= 1u << 1;
        } else if (is(T, i, "pinned_reserve_segment_size_mb")) {
            uint64_t v = 0;
            i += 2;
            if ((st = read_u64(T, i, key, "a positive integer (MiB)", &v)) == CP_OK && v == 0)
                st = bad(T, i, key, "a positive integer (MiB)");
            c->pinned_reserve_segment_size_mb = v;
            c->host_keys |= 1u << 3;
        } else { /* per_process_memory_fraction */
            double v = 1.0;
            i += 2;
            if ((st = read_double(T, i, key, "a number in [0, 1]", &v)) == CP_OK &&
                !(v >= 0.0 && v <= 1.0))
                st = bad(T, i, key, "a number in [0, 1]");
            c->memory_fraction = v;
        }
        if (st != CP_OK)
            return st;
        if (i + 1 < T->n)
            i++; /* the ',' (unread) */
    }
    return CP_OK;
}

cp_status cp_torch_conf_parse(const char *s, size_t len, cp_torch_conf *c)
{
    toks T;
    cp_status st;
    cp_torch_conf_default(c);
    st = tokenize(s ? s : "", s ? len : 0, &T);
    if (st == CP_OK)
        st = parse_shared(&T, c);
    if (st == CP_OK)
        st = parse_cuda(&T, c);
    toks_free(&T);
    if (st != CP_OK) /* what a refused string leaves is the defaults */
        cp_torch_conf_default(c);
    return st;
}

/* ---- the canonical string ---------------------------------------------------- */
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
    size_t k = 0;
    const char *sep = "";
    int i, same = 1;

    if (n)
        buf[0] = '\0';
    if (c->large_segment_size != CP_TORCH_LARGE_SEGMENT) {
        put(buf, n, &k, "%slarge_segment_size_mb:%llu", sep,
            (unsigned long long)(c->large_segment_size / MIB));
        sep = ",";
    }
    if (c->max_split_size != CP_TORCH_NO_SPLIT_LIMIT) {
        put(buf, n, &k, "%smax_split_size_mb:%llu", sep,
            (unsigned long long)(c->max_split_size / MIB));
        sep = ",";
    }
    if (c->max_non_split_rounding != c->large_segment_size) {
        put(buf, n, &k, "%smax_non_split_rounding_mb:%llu", sep,
            (unsigned long long)(c->max_non_split_rounding / MIB));
        sep = ",";
    }
    for (i = 1; i < NDIV; i++)
        same &= c->roundup_divisions[i] == c->roundup_divisions[0];
    if (same && c->roundup_divisions[0]) {
        put(buf, n, &k, "%sroundup_power2_divisions:%llu", sep,
            (unsigned long long)c->roundup_divisions[0]);
        sep = ",";
    } else if (!same) {
        put(buf, n, &k, "%sroundup_power2_divisions:[", sep);
        for (i = 0; i < NDIV; i++)
            put(buf, n, &k, "%s%llu:%llu", i ? "," : "", (unsigned long long)1 << i,
                (unsigned long long)c->roundup_divisions[i]);
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
