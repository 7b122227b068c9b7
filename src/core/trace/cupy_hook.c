/*
 * trace/cupy_hook.c: reading the JSON lines CuPy's memory hooks write
 * (cupy.cuda.memory_hooks.DebugPrintHook(file=f), or a hook of the user's
 * that writes the same and more) into a cp_trace (trace_cupy.h says what it
 * becomes).
 *
 * One JSON object a line, its "hook" naming the event:
 *   alloc              the pool's cudaMalloc: mem_size, mem_ptr (0: refused)
 *   malloc             MemoryPool.malloc: size, mem_size (size rounded up to
 *                      512), mem_ptr (0 with size > 0: CuPy refused it,
 *                      OutOfMemoryError), pmem_id (hex string or integer)
 *   free               PooledMemory.free: mem_size, mem_ptr, pmem_id
 *   malloc_preprocess  (a hook of the user's) a malloc begins: the frees and
 *                      allocs until its malloc line happened inside it
 *   free_all_blocks    (a hook of the user's) the program called
 *                      free_all_blocks(); with arena_stream, only that
 *                      stream's arena (free_all_blocks(stream=s))
 * Any line may carry device_id (the pool's device: with several in a log,
 * one is read, the one asked for; without, a second is an error), stream (the current
 * stream's pointer: the arena CuPy uses; 0 when absent, the legacy default
 * stream) and total_bytes (the pool's total_bytes() after the event: the
 * replay checks the model against it; the peak leaves out free lines and
 * refused alloc lines, below).  Other keys, and lines of other hooks, are
 * ignored.  A malloc of size 0 never reaches the pool (CuPy hands out
 * Memory(0)) and is ignored, and frees logged inside it are plain frees; a
 * free of a pointer not live in the log (a hook installed while arrays
 * lived) is counted as unmatched.
 *
 * Errors name the line: not a JSON object, a known key of the wrong type,
 * a line without "hook", mem_size not size rounded to 512 (not CuPy's
 * MemoryPool), a second device where none was asked for, sizes past 2^63-1, a NUL byte, a line
 * longer than 1 MiB, truncated gzip data.
 */
#include "trace_impl.h"
#include "trace_cupy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptrmap.h"
#include "pool/cupy.h"

#define LINE_MAX_BYTES (1u << 20)

int cp_cupy_hook_sniff(const unsigned char *head, size_t n)
{
    size_t i = 0;
    while (i < n && (head[i] == ' ' || head[i] == '\t' || head[i] == '\n' || head[i] == '\r'))
        i++;
    return i < n && head[i] == '{';
}

void cp_cupy_hook_free(cp_trace_cupy *c)
{
    if (!c)
        return;
    free(c->op);
    free(c->dev_size);
    free(c->dev_addr);
    free(c->dev_line);
    free(c);
}

int cp_trace_cupy_info_get(const cp_trace *t, cp_trace_cupy_info *out)
{
    const cp_trace_cupy *c = t->cupy;
    size_t i;
    memset(out, 0, sizeof *out);
    if (!c)
        return 0;
    out->device_allocs = c->ndev - c->dev_refused;
    out->device_alloc_failures = c->dev_refused;
    out->zero_mallocs = c->zero_mallocs;
    for (i = 0; i < c->nop; i++) {
        out->gc_frees += c->op[i].kind == CP_CUPY_GCFREE;
        out->free_all_blocks += c->op[i].kind == CP_CUPY_FREE_ALL;
    }
    out->stream = c->has_stream;
    out->malloc_preprocess = c->has_preprocess;
    out->total_bytes = c->has_total;
    out->peak_total_bytes = c->peak_total;
    return 1;
}

/* ---- one JSON object -------------------------------------------------- */

enum { K_HOOK, K_DEVICE, K_SIZE, K_MEMSIZE, K_MEMPTR, K_PMEM, K_STREAM, K_TOTAL, K_ARENA, NKEYS };
static const char *const key_names[NKEYS] = {"hook", "device_id", "size", "mem_size", "mem_ptr",
                                             "pmem_id", "stream", "total_bytes", "arena_stream"};

typedef struct jline {
    int has[NKEYS];
    uint64_t v[NKEYS];     /* integers (negative ones as two's complement) */
    int neg[NKEYS];
    char hook[32];
    const char *err;       /* why the line is not read */
    char errkey[64];
} jline;

static void skip_ws(const char **p)
{
    while (**p == ' ' || **p == '\t' || **p == '\r' || **p == '\n')
        (*p)++;
}

/* A JSON string at *p (the opening quote): copies up to n - 1 bytes of it
 * into out (escapes kept as they are: the names cupola compares have none). */
static int jstring(const char **p, char *out, size_t n)
{
    const char *s = *p + 1;
    size_t k = 0;
    for (;;) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '\0' || ch < 0x20)
            return -1;
        if (ch == '"')
            break;
        if (ch == '\\') {
            if (!s[1])
                return -1;
            if (out && k + 1 < n)
                out[k++] = *s;
            s++;
        }
        if (out && k + 1 < n)
            out[k++] = *s;
        s++;
    }
    if (out)
        out[k] = '\0';
    *p = s + 1;
    return 0;
}

/* A JSON number: *isint when it is an integer that fits 64 bits (with *neg). */
static int jnumber(const char **p, uint64_t *v, int *neg, int *isint)
{
    const char *s = *p;
    uint64_t x = 0;
    int big = 0, digits = 0;
    *neg = 0;
    *isint = 1;
    if (*s == '-') {
        *neg = 1;
        s++;
    }
    while (*s >= '0' && *s <= '9') {
        uint64_t d = (uint64_t)(*s - '0');
        if (big || x > (UINT64_MAX - d) / 10)
            big = 1; /* past 2^64-1 (which itself is read) */
        else
            x = x * 10 + d;
        s++;
        digits++;
    }
    if (!digits)
        return -1;
    if (*s == '.' || *s == 'e' || *s == 'E') {
        *isint = 0;
        if (*s == '.') {
            s++;
            if (!(*s >= '0' && *s <= '9'))
                return -1;
            while (*s >= '0' && *s <= '9')
                s++;
        }
        if (*s == 'e' || *s == 'E') {
            s++;
            if (*s == '+' || *s == '-')
                s++;
            if (!(*s >= '0' && *s <= '9'))
                return -1;
            while (*s >= '0' && *s <= '9')
                s++;
        }
    }
    if (big || (*neg && x > (uint64_t)INT64_MAX + 1))
        *isint = 0;
    *v = *neg ? (uint64_t)0 - x : x;
    *p = s;
    return 0;
}

/* Skips any JSON value (an ignored key's), nesting bounded. */
static int jskip(const char **p, int depth)
{
    uint64_t v;
    int neg, isint;
    skip_ws(p);
    if (depth > 64)
        return -1;
    switch (**p) {
    case '"':
        return jstring(p, NULL, 0);
    case '{':
    case '[': {
        char close = **p == '{' ? '}' : ']';
        int obj = close == '}';
        (*p)++;
        skip_ws(p);
        if (**p == close) {
            (*p)++;
            return 0;
        }
        for (;;) {
            skip_ws(p);
            if (obj) {
                if (**p != '"' || jstring(p, NULL, 0) != 0)
                    return -1;
                skip_ws(p);
                if (**p != ':')
                    return -1;
                (*p)++;
            }
            if (jskip(p, depth + 1) != 0)
                return -1;
            skip_ws(p);
            if (**p == ',') {
                (*p)++;
                continue;
            }
            if (**p == close) {
                (*p)++;
                return 0;
            }
            return -1;
        }
    }
    case 't':
        if (strncmp(*p, "true", 4) != 0)
            return -1;
        *p += 4;
        return 0;
    case 'f':
        if (strncmp(*p, "false", 5) != 0)
            return -1;
        *p += 5;
        return 0;
    case 'n':
        if (strncmp(*p, "null", 4) != 0)
            return -1;
        *p += 4;
        return 0;
    default:
        return jnumber(p, &v, &neg, &isint);
    }
}

static int jparse(const char *s, jline *j)
{
    const char *p = s;
    memset(j, 0, sizeof *j);
    skip_ws(&p);
    if (*p != '{') {
        j->err = "not a JSON object (a CuPy hook log has one object a line)";
        return -1;
    }
    p++;
    skip_ws(&p);
    if (*p == '}') {
        p++;
    } else {
        for (;;) {
            char key[64];
            int k;
            skip_ws(&p);
            if (*p != '"' || jstring(&p, key, sizeof key) != 0) {
                j->err = "malformed JSON (expected a key in quotes)";
                return -1;
            }
            skip_ws(&p);
            if (*p != ':') {
                j->err = "malformed JSON (expected ':' after a key)";
                return -1;
            }
            p++;
            skip_ws(&p);
            for (k = 0; k < NKEYS; k++)
                if (strcmp(key, key_names[k]) == 0)
                    break;
            if (k == NKEYS) {
                if (jskip(&p, 0) != 0) {
                    j->err = "malformed JSON value";
                    return -1;
                }
            } else if (k == K_HOOK) {
                if (*p != '"' || jstring(&p, j->hook, sizeof j->hook) != 0) {
                    j->err = "key 'hook' must be a string";
                    snprintf(j->errkey, sizeof j->errkey, "%s", key);
                    return -1;
                }
                j->has[k] = 1;
            } else if ((k == K_STREAM || k == K_ARENA) && strncmp(p, "null", 4) == 0) {
                p += 4; /* no stream given: as if absent */
            } else if (k == K_PMEM && *p == '"') {
                char hx[40];
                if (jstring(&p, hx, sizeof hx) != 0 || cp_trace_parse_hex(hx, &j->v[k]) != 0) {
                    j->err = "key 'pmem_id' must be an integer or a hexadecimal string";
                    return -1;
                }
                j->has[k] = 1;
            } else {
                int neg, isint;
                if (jnumber(&p, &j->v[k], &neg, &isint) != 0 || !isint ||
                    (neg && k != K_STREAM && k != K_ARENA)) {
                    j->err = k == K_STREAM || k == K_ARENA
                                 ? "must be an integer (a stream pointer) or null"
                                 : "must be an integer from 0 to 2^64-1";
                    snprintf(j->errkey, sizeof j->errkey, "%s", key);
                    return -1;
                }
                j->neg[k] = neg;
                j->has[k] = 1;
            }
            skip_ws(&p);
            if (*p == ',') {
                p++;
                continue;
            }
            if (*p == '}') {
                p++;
                break;
            }
            j->err = "malformed JSON (expected ',' or '}')";
            return -1;
        }
    }
    skip_ws(&p);
    if (*p) {
        j->err = "text after the JSON object";
        return -1;
    }
    if (!j->has[K_HOOK]) {
        j->err = "no \"hook\" key (alloc, malloc, free, malloc_preprocess or free_all_blocks)";
        return -1;
    }
    return 0;
}

/* ---- the loader ------------------------------------------------------- */

typedef struct cld {
    cp_trace *t;
    cp_trace_cupy *c;
    const char *path;
    size_t line;
    cp_ptrmap live;        /* mem_ptr -> ordinal + 1 */
    cp_ptrmap streams;     /* stream value + 1 -> index + 1 */
    void *stream_max;
    uint64_t *osize;       /* requested size by ordinal */
    size_t ocap;
    uint64_t live_bytes;
    int in_malloc;         /* after a malloc_preprocess line, before its malloc */
    size_t gc_first;       /* the first GCFREE operation of that malloc */
    int want;              /* the device asked for (-1: none) */
    int have_dev;          /* a line of the device read (or, without want, of any) */
    uint64_t dev;          /* the device read, once have_dev */
    uint64_t seen[64];     /* the devices the lines name, the first 64 */
    unsigned nseen;
    int more_seen;         /* more than 64 */
    size_t nodev_fab_line; /* the first free_all_blocks line naming no device (0: none) */
    size_t second_line;    /* without want: the first line of a second device (0: none) */
} cld;

static cp_status lbad(cld *l, const char *why, const char *key)
{
    if (key && *key)
        return cp_error_set(CP_ERR_INVALID, "%s:%zu: key '%s' %s", l->path, l->line, key, why);
    return cp_error_set(CP_ERR_INVALID, "%s:%zu: %s", l->path, l->line, why);
}

static cp_status loom(cld *l)
{
    return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", l->path);
}

static int grow(void **p, size_t *cap, size_t n, size_t elem, size_t first)
{
    size_t nc;
    void *np;
    if (n < *cap)
        return 0;
    nc = *cap ? 2 * *cap : first;
    np = realloc(*p, nc * elem);
    if (!np)
        return -1;
    *p = np;
    *cap = nc;
    return 0;
}

static cp_status stream_index(cld *l, uint64_t stream, uint32_t *out)
{
    cp_trace *t = l->t;
    void *v = stream == UINT64_MAX ? l->stream_max : cp_ptrmap_get(&l->streams, stream + 1);
    if (!v) {
        uint64_t *np;
        if (t->nstreams >= UINT16_MAX)
            return lbad(l, "more than 65535 distinct streams", NULL);
        np = realloc(t->streams, (t->nstreams + 1) * sizeof *np);
        if (!np)
            return loom(l);
        t->streams = np;
        t->streams[t->nstreams++] = stream;
        v = (void *)(uintptr_t)t->nstreams;
        if (stream == UINT64_MAX)
            l->stream_max = v;
        else if (cp_ptrmap_put(&l->streams, stream + 1, v) != 0)
            return loom(l);
    }
    *out = (uint32_t)((uintptr_t)v - 1);
    return CP_OK;
}

static cp_status add_op(cld *l, int kind, uint64_t size, uint64_t ptr, uint64_t arena,
                        uint64_t total, uint32_t ord)
{
    cp_trace_cupy *c = l->c;
    cp_cupy_op *o;
    if (grow((void **)&c->op, &c->cop, c->nop, sizeof *c->op, 4096) != 0)
        return loom(l);
    o = &c->op[c->nop++];
    o->kind = (uint8_t)kind;
    o->flag = 0;
    o->size = size;
    o->ptr = ptr;
    o->arena = arena;
    o->total = total;
    o->ord = ord;
    o->line = l->line > UINT32_MAX ? UINT32_MAX : (uint32_t)l->line;
    o->row = l->t->n ? (uint32_t)(l->t->n - 1) : 0;
    return CP_OK;
}

static cp_status add_row(cld *l, int is_free, uint64_t ptr, uint64_t size, uint32_t ord,
                         uint32_t sidx)
{
    cp_trace *t = l->t;
    size_t i = t->n;
    if (t->n == t->cap && cp_trace_grow_rows(t) != 0)
        return loom(l);
    t->is_free[i] = (uint8_t)is_free;
    t->ord[i] = ord;
    t->ptr[i] = ptr;
    t->size[i] = size;
    t->stream[i] = sidx;
    t->thread[i] = 0;
    t->time[i] = 0.0;
    t->n++;
    return CP_OK;
}

/* A malloc's frees inside it (after malloc_preprocess) move behind it. */
static void close_malloc(cld *l)
{
    cp_trace_cupy *c = l->c;
    size_t n, g = l->gc_first, m = c->nop - 1;
    cp_cupy_op op;
    l->in_malloc = 0;
    n = m - g;
    if (!n)
        return;
    op = c->op[m];
    memmove(&c->op[g + 1], &c->op[g], n * sizeof op);
    op.flag = (uint8_t)(n > 255 ? 255 : n);
    c->op[g] = op;
    /* more than 255 gc frees: the rest stay GCFREE operations after them,
     * which the replay applies in order, as it does the first 255 */
}

static void note_device(cld *l, uint64_t d)
{
    unsigned i;
    for (i = 0; i < l->nseen; i++)
        if (l->seen[i] == d)
            return;
    if (l->nseen < sizeof l->seen / sizeof l->seen[0])
        l->seen[l->nseen++] = d;
    else
        l->more_seen = 1;
}

/* "0, 1 and 3": the devices the log's lines name. */
static void seen_list(const cld *l, char *out, size_t n)
{
    size_t k = 0;
    unsigned i;
    out[0] = '\0';
    for (i = 0; i < l->nseen && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%llu",
                              i == 0 ? "" : i + 1 == l->nseen && !l->more_seen ? " and " : ", ",
                              (unsigned long long)l->seen[i]);
    if (l->more_seen && k < n)
        snprintf(out + k, n - k, ", ...");
}

static cp_status event(cld *l, jline *j)
{
    cp_trace *t = l->t;
    cp_trace_cupy *c = l->c;
    uint64_t stream = j->has[K_STREAM] ? j->v[K_STREAM] : 0;
    uint64_t total = j->has[K_TOTAL] ? j->v[K_TOTAL] : CP_CUPY_NO_TOTAL;
    uint32_t sidx;
    cp_status st;
    const char *h = j->hook;
    int k;

    /* Each device has a pool of its own (MemoryPool keeps one
     * SingleDeviceMemoryPool a device), and CuPy's hooks name the pool's
     * device on every line (a free's is its memory's device, whatever
     * device is current): a log of several devices is read one device at
     * a time, the others' lines left out before anything else of them. */
    if (j->has[K_DEVICE]) {
        uint64_t d = j->v[K_DEVICE];
        note_device(l, d);
        if (l->want >= 0 && d != (uint64_t)l->want)
            return CP_OK;
        if (l->want < 0 && l->have_dev && d != l->dev && !l->second_line)
            l->second_line = l->line; /* refused at the end, naming every device */
        if (l->second_line)
            return CP_OK;
        l->have_dev = 1;
        l->dev = d;
    }
    if (j->has[K_STREAM])
        c->has_stream = 1;
    if (j->has[K_TOTAL]) {
        if (total > CP_TRACE_BYTES_MAX)
            return lbad(l, "must be at most 2^63-1", "total_bytes");
        c->has_total = 1;
        /* CuPy's peak: what it held.  Not a refused alloc line's (CuPy
         * counts the bytes of a cudaMalloc in flight in total_bytes, the
         * refused ones too, until the call fails), nor a free line's (a
         * free never changes total_bytes, and the recording hook logs the
         * current device's pool: for an array freed outside its device's
         * `with Device(d)` block, another device's) */
        if (total > c->peak_total && strcmp(j->hook, "free") != 0 &&
            !(strcmp(j->hook, "alloc") == 0 && j->has[K_MEMPTR] && j->v[K_MEMPTR] == 0))
            c->peak_total = total;
    }
    for (k = K_SIZE; k <= K_MEMPTR; k++)
        if (k != K_MEMPTR && j->has[k] && j->v[k] > CP_TRACE_BYTES_MAX)
            return lbad(l, "must be at most 2^63-1, the largest byte count a trace holds",
                        key_names[k]);

    if (strcmp(h, "malloc_preprocess") == 0) {
        c->has_preprocess = 1;
        if (l->in_malloc)
            return lbad(l, "a malloc_preprocess line inside another malloc (its malloc line "
                        "is missing)", NULL);
        l->in_malloc = 1;
        l->gc_first = c->nop;
        return CP_OK;
    }
    if (strcmp(h, "alloc") == 0) {
        if (!j->has[K_MEMSIZE] || !j->has[K_MEMPTR])
            return lbad(l, "an alloc line needs mem_size and mem_ptr", NULL);
        if (j->v[K_MEMSIZE] == 0)
            return lbad(l, "an alloc line of mem_size 0", NULL);
        if (grow((void **)&c->dev_size, &c->cdev, c->ndev, sizeof *c->dev_size, 256) != 0)
            return loom(l);
        {
            size_t cap = c->cdev;
            uint64_t *na = realloc(c->dev_addr, cap * sizeof *na);
            uint32_t *nl;
            if (!na)
                return loom(l);
            c->dev_addr = na;
            nl = realloc(c->dev_line, cap * sizeof *nl);
            if (!nl)
                return loom(l);
            c->dev_line = nl;
        }
        c->dev_size[c->ndev] = j->v[K_MEMSIZE];
        c->dev_addr[c->ndev] = j->v[K_MEMPTR];
        c->dev_line[c->ndev] = l->line > UINT32_MAX ? UINT32_MAX : (uint32_t)l->line;
        c->ndev++;
        if (j->v[K_MEMPTR] == 0)
            c->dev_refused++;
        return CP_OK;
    }
    if (strcmp(h, "free_all_blocks") == 0) {
        /* CuPy frees the current device's pool: which one, a line that
         * names no device does not say (refused at the end where the log
         * holds several) */
        if (!j->has[K_DEVICE] && !l->nodev_fab_line)
            l->nodev_fab_line = l->line;
        if (l->in_malloc)
            return lbad(l, "a free_all_blocks line inside a malloc (between its "
                        "malloc_preprocess and malloc lines)", NULL);
        c->has_free_all = 1;
        st = add_op(l, CP_CUPY_FREE_ALL, 0, 0, j->has[K_ARENA] ? j->v[K_ARENA] : 0, total, 0);
        if (st == CP_OK && j->has[K_ARENA])
            c->op[c->nop - 1].flag = 1;
        return st;
    }
    if (strcmp(h, "malloc") == 0) {
        uint64_t size, msize, ptr;
        if (!j->has[K_SIZE] || !j->has[K_MEMSIZE] || !j->has[K_MEMPTR])
            return lbad(l, "a malloc line needs size, mem_size and mem_ptr", NULL);
        size = j->v[K_SIZE];
        msize = j->v[K_MEMSIZE];
        ptr = j->v[K_MEMPTR];
        if (msize != cp_cupy_round(size))
            return lbad(l, "a malloc line's mem_size is not its size rounded up to 512 bytes "
                        "(CuPy's MemoryPool rounds so; is this another allocator's log?)", NULL);
        if (size == 0) {
            /* Memory(0): never reaches the pool, never freed through it */
            c->zero_mallocs++;
            t->info.ignored++;
            if (l->in_malloc) {
                /* CuPy returns Memory(0) before it looks at the pool: frees
                 * logged inside (Python's collector, run by the objects the
                 * hooks or the call make) are plain frees, in order */
                size_t i;
                for (i = l->gc_first; i < c->nop; i++)
                    if (c->op[i].kind == CP_CUPY_GCFREE)
                        c->op[i].kind = CP_CUPY_FREE;
                l->in_malloc = 0;
            }
            return CP_OK;
        }
        if ((st = stream_index(l, stream, &sidx)) != CP_OK)
            return st;
        if (ptr == 0) {
            /* refused: OutOfMemoryError; an `oom` entry for every pool */
            size_t k2 = t->nooms;
            size_t *nr = realloc(t->oom_row, (k2 + 1) * sizeof *nr);
            uint64_t *ns;
            uint32_t *nst;
            if (!nr)
                return loom(l);
            t->oom_row = nr;
            ns = realloc(t->oom_size, (k2 + 1) * sizeof *ns);
            if (!ns)
                return loom(l);
            t->oom_size = ns;
            nst = realloc(t->oom_stream, (k2 + 1) * sizeof *nst);
            if (!nst)
                return loom(l);
            t->oom_stream = nst;
            t->oom_row[k2] = t->n;
            t->oom_size[k2] = size;
            t->oom_stream[k2] = sidx;
            t->nooms++;
            if ((st = add_op(l, CP_CUPY_OOM, msize, 0, stream, total, 0)) != CP_OK)
                return st;
        } else {
            uint32_t ord;
            if (cp_ptrmap_get(&l->live, ptr)) {
                char msg[128];
                snprintf(msg, sizeof msg, "a malloc of mem_ptr 0x%llx, which is already live "
                         "(no free line for it before)", (unsigned long long)ptr);
                return lbad(l, msg, NULL);
            }
            if (t->nallocs >= UINT32_MAX - 1)
                return lbad(l, "too many allocations (more than 2^32)", NULL);
            if (size > CP_TRACE_BYTES_MAX - l->live_bytes ||
                size > CP_TRACE_BYTES_MAX - t->info.total_bytes)
                return lbad(l, "the live or total bytes pass 2^63-1, the largest byte count a "
                            "trace holds", NULL);
            if (grow((void **)&l->osize, &l->ocap, t->nallocs, sizeof *l->osize, 4096) != 0)
                return loom(l);
            ord = (uint32_t)t->nallocs++;
            l->osize[ord] = size;
            if (cp_ptrmap_put(&l->live, ptr, (void *)(uintptr_t)(ord + 1)) != 0)
                return loom(l);
            l->live_bytes += size;
            if (l->live_bytes > t->info.peak_live)
                t->info.peak_live = l->live_bytes;
            t->info.allocs++;
            t->info.total_bytes += size;
            if (size > t->info.max_size)
                t->info.max_size = size;
            if ((st = add_row(l, 0, ptr, size, ord, sidx)) != CP_OK)
                return st;
            if ((st = add_op(l, CP_CUPY_MALLOC, msize, ptr, stream, total, ord)) != CP_OK)
                return st;
        }
        if (l->in_malloc)
            close_malloc(l);
        return CP_OK;
    }
    if (strcmp(h, "free") == 0) {
        void *v;
        uint32_t ord;
        if (!j->has[K_MEMPTR])
            return lbad(l, "a free line needs mem_ptr", NULL);
        v = j->v[K_MEMPTR] ? cp_ptrmap_del(&l->live, j->v[K_MEMPTR]) : NULL;
        if (!v) {
            t->info.unmatched++;
            return CP_OK;
        }
        ord = (uint32_t)((uintptr_t)v - 1);
        l->live_bytes -= l->osize[ord];
        t->info.frees++;
        if ((st = stream_index(l, stream, &sidx)) != CP_OK)
            return st;
        if ((st = add_row(l, 1, j->v[K_MEMPTR], l->osize[ord], ord, sidx)) != CP_OK)
            return st;
        return add_op(l, l->in_malloc ? CP_CUPY_GCFREE : CP_CUPY_FREE, 0, 0, 0, total, ord);
    }
    /* another hook's line (alloc_preprocess, free_preprocess, ...) */
    t->info.ignored++;
    return CP_OK;
}

/* The log ends early (a program stopped while writing it): what came before
 * loads, with a warning that says where (t.cut, t.warning). */
static void cut(cld *l, const char *gzmsg)
{
    l->t->cut = 1;
    snprintf(l->t->warning, sizeof l->t->warning,
             "%s:%zu: the log is cut here (%s; the program was stopped while writing it?): the "
             "lines before it were loaded", l->path, l->line,
             gzmsg ? gzmsg : "a last line without its newline that is no whole object");
}

cp_status cp_cupy_hook_load(gzFile gz, const char *path, int device, cp_trace *t)
{
    cld l;
    char *buf;
    uint64_t offset = 0;
    cp_status st = CP_OK;
    jline j;
    int err, last;

    memset(&l, 0, sizeof l);
    l.t = t;
    l.path = path;
    l.want = device;
    t->format = TRACE_CUPY;
    t->info.devices = 1;
    t->info.threads = 1;
    l.c = calloc(1, sizeof *l.c);
    buf = malloc(LINE_MAX_BYTES + 2);
    if (!l.c || !buf || cp_ptrmap_init(&l.live, 4096) != 0 ||
        cp_ptrmap_init(&l.streams, 16) != 0) {
        st = cp_error_set(CP_ERR_OOM, "out of host memory loading %s", path);
        goto out;
    }
    t->cupy = l.c;
    for (;;) {
        size_t len;
        if (!gzgets(gz, buf, (int)(LINE_MAX_BYTES + 2)))
            break;
        l.line++;
        len = strlen(buf);
        if ((uint64_t)gztell(gz) - offset != len) {
            st = lbad(&l, "a NUL byte in the line", NULL);
            goto out;
        }
        last = len && buf[len - 1] != '\n';
        if (last) {
            const char *msg = cp_gz_reason(gzerror(gz, &err), path);
            if (err == Z_BUF_ERROR) {
                /* a gzip stream that ends early: the log of a program that
                 * was stopped while writing it; its partial line is dropped */
                cut(&l, msg);
                break;
            }
            if (err != Z_OK && err != Z_STREAM_END) {
                st = cp_error_set(CP_ERR_INVALID, "%s:%zu: truncated or corrupt gzip data (%s)",
                                  path, l.line, msg);
                goto out;
            }
            if (len > LINE_MAX_BYTES) {
                st = lbad(&l, "line longer than 1 MiB", NULL);
                goto out;
            }
        }
        offset += len;
        while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            buf[--len] = '\0';
        {
            const char *p = buf;
            skip_ws(&p);
            if (!*p)
                continue; /* a blank line */
        }
        if (jparse(buf, &j) != 0) {
            if (last) {
                /* the last line, without its newline, and no whole object: a
                 * line the program was writing when it stopped (Python's
                 * file buffer is written out in pieces) */
                cut(&l, NULL);
                break;
            }
            st = lbad(&l, j.err, j.errkey);
            goto out;
        }
        if ((st = event(&l, &j)) != CP_OK)
            goto out;
    }
    if (!t->cut) {
        const char *msg = cp_gz_reason(gzerror(gz, &err), path);
        if (err == Z_BUF_ERROR) {
            cut(&l, msg); /* the stream ends early after a whole line */
        } else if (err != Z_OK && err != Z_STREAM_END) {
            st = cp_error_set(CP_ERR_INVALID, "%s:%zu: truncated or corrupt gzip data (%s)", path,
                              l.line + 1, msg);
            goto out;
        }
    }
    if (l.in_malloc) {
        /* the log ends inside a malloc (the program died in it): its frees
         * stay plain frees */
        size_t i;
        for (i = l.gc_first; i < l.c->nop; i++)
            if (l.c->op[i].kind == CP_CUPY_GCFREE)
                l.c->op[i].kind = CP_CUPY_FREE;
    }
    if (l.line == 0) {
        st = cp_error_set(CP_ERR_INVALID, "%s: empty file", path);
        goto out;
    }
    if (l.second_line) {
        char list[160];
        seen_list(&l, list, sizeof list);
        st = cp_error_set(CP_ERR_INVALID, "%s: the log holds devices %s (line %zu is the first "
                          "of a second): each device has a pool of its own; load one device's "
                          "with {device = n} (cupola advise: --device N)", path, list,
                          l.second_line);
        goto out;
    }
    if (l.nodev_fab_line && (l.nseen > 1 || l.more_seen)) {
        st = cp_error_set(CP_ERR_INVALID, "%s:%zu: a free_all_blocks line without device_id in a "
                          "log of several devices: CuPy frees the current device's pool, and the "
                          "line does not say which (the recording hook of docs/API.md writes it)",
                          path, l.nodev_fab_line);
        goto out;
    }
    if (device >= 0 && !l.have_dev && l.nseen) {
        char list[160];
        seen_list(&l, list, sizeof list);
        st = cp_error_set(CP_ERR_INVALID, "%s: device %d: no line of it (the log's lines are of "
                          "device%s %s)", path, device, l.nseen > 1 ? "s" : "", list);
        goto out;
    }
    if (device > 0 && !l.have_dev) {
        /* (device 0 of a log that names none is the log: one device's) */
        char list[160];
        seen_list(&l, list, sizeof list);
        st = cp_error_set(CP_ERR_INVALID, "%s: device %d: the log names no device (no "
                          "device_id key): it is one device's, read as device 0%s", path, device,
                          list);
        goto out;
    }
    t->info.devices = l.nseen > 1 ? l.nseen + (unsigned)l.more_seen : 1;
    /* the rows say the device they are of (a log of device 3 is device 3's) */
    {
        uint64_t d = l.have_dev ? l.dev : device > 0 ? (uint64_t)device : 0;
        if (d > UINT16_MAX) {
            st = cp_error_set(CP_ERR_INVALID, "%s: device_id %llu: more than 65535", path,
                              (unsigned long long)d);
            goto out;
        }
        if (d) {
            size_t i;
            t->device = malloc((t->n ? t->n : 1) * sizeof *t->device);
            if (!t->device) {
                st = loom(&l);
                goto out;
            }
            for (i = 0; i < t->n; i++)
                t->device[i] = (uint16_t)d;
        }
    }
    if (t->cut && l.line == 1) {
        st = cp_error_set(CP_ERR_INVALID, "%s:1: the log is cut in its first line: no whole line "
                          "to read", path);
        goto out;
    }
    t->ops = malloc((t->n ? t->n : 1) * sizeof *t->ops);
    if (!t->ops) {
        st = loom(&l);
        goto out;
    }
    {
        size_t i;
        for (i = 0; i < t->n; i++) {
            t->ops[i].size = l.osize[t->ord[i]];
            t->ops[i].ord = t->ord[i];
            t->ops[i].stream = (uint16_t)t->stream[i];
            t->ops[i].is_free = t->is_free[i];
        }
    }
    t->info.ooms = t->nooms;
    t->info.events = t->n;
    t->info.streams = t->nstreams;
    t->info.leaked = (size_t)l.live.count;
    t->info.duration_us = 0.0;
out:
    cp_ptrmap_fini(&l.live);
    cp_ptrmap_fini(&l.streams);
    free(l.osize);
    free(buf);
    if (!t->cupy)
        cp_cupy_hook_free(l.c);
    return st;
}
