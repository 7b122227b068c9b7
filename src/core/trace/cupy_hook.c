/*
 * trace/cupy_hook.c: the reader of the JSON lines CuPy's memory hooks write
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
#include "reader.h"
#include "trace_cupy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "pool/cupy.h"
#include "text.h"

/* Lines of at most 1 MiB; a log whose gzip stream ends early was cut (the
 * program stopped while writing it), any other gzip error is one. */
#define LINE_MAX_BYTES (1u << 20)
static const cp_line_rule lines = {LINE_MAX_BYTES + 2, LINE_MAX_BYTES + 2,
                                   "line longer than 1 MiB", CP_CUT_TRUNCATED, CP_LINE_NUL_ANY};

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

static int key_of(const char *key, size_t n)
{
    int k;
    for (k = 0; k < NKEYS; k++)
        if (strlen(key_names[k]) == n && memcmp(key, key_names[k], n) == 0)
            break;
    return k;
}

/* The value of key k at p: its end, or NULL with j->err. */
static const char *value(jline *j, int k, const char *p)
{
    const char *e;
    if (k == NKEYS) {
        if (!(e = cp_json_skip(p, CP_JSON_STRICT)))
            j->err = "malformed JSON value";
        return e;
    }
    if (k == K_HOOK) {
        if (*p != '"' || !(e = cp_json_string(p, CP_JSON_STRICT, j->hook, sizeof j->hook))) {
            j->err = "key 'hook' must be a string";
            snprintf(j->errkey, sizeof j->errkey, "%s", key_names[k]);
            return NULL;
        }
        j->has[k] = 1;
        return e + 1;
    }
    if ((k == K_STREAM || k == K_ARENA) && strncmp(p, "null", 4) == 0)
        return p + 4; /* no stream given: as if absent */
    if (k == K_PMEM && *p == '"') {
        char hx[40];
        if (!(e = cp_json_string(p, CP_JSON_STRICT, hx, sizeof hx)) ||
            cp_parse_hex(hx, strlen(hx), 16, &j->v[k]) != CP_NUM_OK) {
            j->err = "key 'pmem_id' must be an integer or a hexadecimal string";
            return NULL;
        }
        j->has[k] = 1;
        return e + 1;
    }
    {
        int neg, isint;
        if (!(e = cp_json_number(p, &j->v[k], &neg, &isint)) || !isint ||
            (neg && k != K_STREAM && k != K_ARENA)) {
            j->err = k == K_STREAM || k == K_ARENA ? "must be an integer (a stream pointer) or null"
                                                   : "must be an integer from 0 to 2^64-1";
            snprintf(j->errkey, sizeof j->errkey, "%s", key_names[k]);
            return NULL;
        }
        j->neg[k] = neg;
        j->has[k] = 1;
        return e;
    }
}

static int jparse(const char *s, jline *j)
{
    static const char *const why[] = {
        "", "not a JSON object (a CuPy hook log has one object a line)",
        "malformed JSON (expected a key in quotes)", "malformed JSON (expected a key in quotes)",
        "malformed JSON (expected ':' after a key)", "malformed JSON (expected ',' or '}')",
        "text after the JSON object"};
    cp_json_obj o;
    int rc;
    memset(j, 0, sizeof *j);
    rc = cp_json_open(&o, s, CP_JSON_STRICT);
    if (rc == CP_JSON_EMPTY)
        rc = cp_json_close_empty(&o);
    while (rc == CP_JSON_MEMBER) {
        if (!(o.p = value(j, key_of(o.key, o.klen), o.p)))
            return -1;
        rc = cp_json_next(&o);
    }
    if (rc < 0) {
        j->err = why[-rc];
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
    cp_trace_builder *b;
    cp_trace *t;
    cp_trace_cupy *c;
    const char *path;
    size_t line;
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
    return cp_tb_nomem(l->b);
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

/* The index of a stream value: a row's stream is 16 bits in the replay. */
static cp_status stream_index(cld *l, uint64_t stream, uint32_t *out)
{
    if (!cp_tb_stream_known(l->b, stream) && l->t->nstreams >= UINT16_MAX)
        return lbad(l, "more than 65535 distinct streams", NULL);
    return cp_tb_stream(l->b, stream, out);
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

/* A row of the trace (the log's own checks come first, with its words). */
static cp_status add_row(cld *l, int is_free, uint64_t ptr, uint64_t size, uint64_t stream)
{
    cp_tb_row r;
    memset(&r, 0, sizeof r);
    r.is_free = is_free;
    r.ptr = ptr;
    r.size = size;
    r.stream = stream;
    l->b->line = l->line;
    return cp_tb_add(l->b, &r);
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

/* The frees logged inside a malloc that turned out to be none of the pool's
 * (of size 0, or the log ends in it) stay plain frees. */
static void plain_frees(cld *l)
{
    size_t i;
    for (i = l->gc_first; i < l->c->nop; i++)
        if (l->c->op[i].kind == CP_CUPY_GCFREE)
            l->c->op[i].kind = CP_CUPY_FREE;
    l->in_malloc = 0;
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

/* Each device has a pool of its own (MemoryPool keeps one
 * SingleDeviceMemoryPool a device), and CuPy's hooks name the pool's device
 * on every line (a free's is its memory's device, whatever device is
 * current): a log of several devices is read one device at a time, the
 * others' lines left out before anything else of them.  1: leave it out. */
static int other_device(cld *l, const jline *j)
{
    uint64_t d;
    if (!j->has[K_DEVICE])
        return 0;
    d = j->v[K_DEVICE];
    note_device(l, d);
    if (l->want >= 0 && d != (uint64_t)l->want)
        return 1;
    if (l->want < 0 && l->have_dev && d != l->dev && !l->second_line)
        l->second_line = l->line; /* refused at the end, naming every device */
    if (l->second_line)
        return 1;
    l->have_dev = 1;
    l->dev = d;
    return 0;
}

/* What every line may carry: stream, total_bytes, sizes within 2^63-1. */
static cp_status common_keys(cld *l, const jline *j)
{
    cp_trace_cupy *c = l->c;
    int k;
    if (j->has[K_STREAM])
        c->has_stream = 1;
    if (j->has[K_TOTAL]) {
        uint64_t total = j->v[K_TOTAL];
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
    return CP_OK;
}

/* alloc: the pool's cudaMalloc (the recorded addresses follow them). */
static cp_status alloc_line(cld *l, const jline *j)
{
    cp_trace_cupy *c = l->c;
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

/* free_all_blocks: the user's call. */
static cp_status free_all_line(cld *l, const jline *j, uint64_t total)
{
    cp_status st;
    /* CuPy frees the current device's pool: which one, a line that names
     * no device does not say (refused at the end where the log holds
     * several) */
    if (!j->has[K_DEVICE] && !l->nodev_fab_line)
        l->nodev_fab_line = l->line;
    if (l->in_malloc)
        return lbad(l, "a free_all_blocks line inside a malloc (between its "
                    "malloc_preprocess and malloc lines)", NULL);
    l->c->has_free_all = 1;
    st = add_op(l, CP_CUPY_FREE_ALL, 0, 0, j->has[K_ARENA] ? j->v[K_ARENA] : 0, total, 0);
    if (st == CP_OK && j->has[K_ARENA])
        l->c->op[l->c->nop - 1].flag = 1;
    return st;
}

/* A malloc CuPy served: a row, and the operation. */
static cp_status served(cld *l, uint64_t size, uint64_t msize, uint64_t ptr, uint64_t stream,
                        uint64_t total)
{
    cp_trace *t = l->t;
    cp_status st;
    if (cp_tb_live(l->b, ptr)) {
        char msg[128];
        snprintf(msg, sizeof msg, "a malloc of mem_ptr 0x%llx, which is already live "
                 "(no free line for it before)", (unsigned long long)ptr);
        return lbad(l, msg, NULL);
    }
    if (t->nallocs >= UINT32_MAX - 1)
        return lbad(l, "too many allocations (more than 2^32)", NULL);
    if (size > CP_TRACE_BYTES_MAX - l->b->live_bytes ||
        size > CP_TRACE_BYTES_MAX - t->info.total_bytes)
        return lbad(l, "the live or total bytes pass 2^63-1, the largest byte count a "
                    "trace holds", NULL);
    if ((st = add_row(l, 0, ptr, size, stream)) != CP_OK)
        return st;
    return add_op(l, CP_CUPY_MALLOC, msize, ptr, stream, total, t->ord[t->n - 1]);
}

/* malloc: MemoryPool.malloc, served or refused (mem_ptr 0). */
static cp_status malloc_line(cld *l, const jline *j, uint64_t stream, uint64_t total)
{
    uint64_t size, msize, ptr;
    uint32_t sidx;
    cp_status st;
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
        l->c->zero_mallocs++;
        l->t->info.ignored++;
        /* CuPy returns Memory(0) before it looks at the pool: frees logged
         * inside (Python's collector, run by the objects the hooks or the
         * call make) are plain frees, in order */
        if (l->in_malloc)
            plain_frees(l);
        return CP_OK;
    }
    if ((st = stream_index(l, stream, &sidx)) != CP_OK)
        return st;
    if (ptr == 0) {
        /* refused: OutOfMemoryError; an `oom` entry for every pool */
        if ((st = cp_tb_oom_entry(l->b, l->t->n, size, sidx, 0)) != CP_OK ||
            (st = add_op(l, CP_CUPY_OOM, msize, 0, stream, total, 0)) != CP_OK)
            return st;
    } else if ((st = served(l, size, msize, ptr, stream, total)) != CP_OK) {
        return st;
    }
    if (l->in_malloc)
        close_malloc(l);
    return CP_OK;
}

/* free: PooledMemory.free of a block the log saw allocated (else unmatched). */
static cp_status free_line(cld *l, const jline *j, uint64_t stream, uint64_t total)
{
    uint32_t v, sidx;
    cp_status st;
    if (!j->has[K_MEMPTR])
        return lbad(l, "a free line needs mem_ptr", NULL);
    v = j->v[K_MEMPTR] ? cp_tb_live(l->b, j->v[K_MEMPTR]) : 0;
    if (!v) {
        l->t->info.unmatched++;
        return CP_OK;
    }
    if ((st = stream_index(l, stream, &sidx)) != CP_OK)
        return st;
    if ((st = add_row(l, 1, j->v[K_MEMPTR], 0, stream)) != CP_OK)
        return st;
    return add_op(l, l->in_malloc ? CP_CUPY_GCFREE : CP_CUPY_FREE, 0, 0, 0, total, v - 1);
}

static cp_status event(cld *l, const jline *j)
{
    uint64_t stream = j->has[K_STREAM] ? j->v[K_STREAM] : 0;
    uint64_t total = j->has[K_TOTAL] ? j->v[K_TOTAL] : CP_CUPY_NO_TOTAL;
    const char *h = j->hook;
    cp_status st;

    if (other_device(l, j))
        return CP_OK;
    if ((st = common_keys(l, j)) != CP_OK)
        return st;
    if (strcmp(h, "malloc_preprocess") == 0) {
        l->c->has_preprocess = 1;
        if (l->in_malloc)
            return lbad(l, "a malloc_preprocess line inside another malloc (its malloc line "
                        "is missing)", NULL);
        l->in_malloc = 1;
        l->gc_first = l->c->nop;
        return CP_OK;
    }
    if (strcmp(h, "alloc") == 0)
        return alloc_line(l, j);
    if (strcmp(h, "free_all_blocks") == 0)
        return free_all_line(l, j, total);
    if (strcmp(h, "malloc") == 0)
        return malloc_line(l, j, stream, total);
    if (strcmp(h, "free") == 0)
        return free_line(l, j, stream, total);
    /* another hook's line (alloc_preprocess, free_preprocess, ...) */
    l->t->info.ignored++;
    return CP_OK;
}

/* The log ends early (a program stopped while writing it): what came before
 * loads, with a warning that says where. */
static void cut(cld *l, const char *gzmsg)
{
    cp_tb_cut(l->b, "%s:%zu: the log is cut here (%s; the program was stopped while writing "
              "it?): the lines before it were loaded", l->path, l->line,
              gzmsg ? gzmsg : "a last line without its newline that is no whole object");
}

/* Every line, up to the end or the cut. */
static cp_status read_lines(cld *l, gzFile gz)
{
    cp_lines ln;
    jline j;
    cp_status st;
    int rc;
    if ((st = cp_lines_init(&ln, gz, l->path, &lines)) != CP_OK)
        return st;
    while ((rc = cp_lines_next(&ln)) == CP_LINE_OK) {
        l->line = ln.line;
        if (!*cp_json_ws(ln.buf))
            continue; /* a blank line */
        if (jparse(ln.buf, &j) != 0) {
            if (ln.unterminated) {
                /* the last line, without its newline, and no whole object: a
                 * line the program was writing when it stopped (Python's
                 * file buffer is written out in pieces) */
                cut(l, NULL);
                break;
            }
            st = lbad(l, j.err, j.errkey);
            break;
        }
        if ((st = event(l, &j)) != CP_OK)
            break;
    }
    if (rc == CP_LINE_CUT) {
        l->line = ln.line;
        cut(l, ln.cut_reason);
    } else if (rc == CP_LINE_ERROR) {
        st = ln.st;
    }
    cp_lines_fini(&ln);
    return st;
}

/* What the whole log must say, once read; the devices of its rows. */
static cp_status finish(cld *l, int device)
{
    cp_trace *t = l->t;
    char list[160];
    uint64_t d;
    if (l->in_malloc)
        plain_frees(l); /* the log ends inside a malloc (the program died in it) */
    if (l->line == 0)
        return cp_error_set(CP_ERR_INVALID, "%s: empty file", l->path);
    seen_list(l, list, sizeof list);
    if (l->second_line)
        return cp_error_set(CP_ERR_INVALID, "%s: the log holds devices %s (line %zu is the "
                            "first of a second): each device has a pool of its own; load one "
                            "device's with {device = n} (cupola advise: --device N)", l->path,
                            list, l->second_line);
    if (l->nodev_fab_line && (l->nseen > 1 || l->more_seen))
        return cp_error_set(CP_ERR_INVALID, "%s:%zu: a free_all_blocks line without device_id in "
                            "a log of several devices: CuPy frees the current device's pool, and "
                            "the line does not say which (the recording hook of docs/API.md "
                            "writes it)", l->path, l->nodev_fab_line);
    if (device >= 0 && !l->have_dev && l->nseen)
        return cp_error_set(CP_ERR_INVALID, "%s: device %d: no line of it (the log's lines are "
                            "of device%s %s)", l->path, device, l->nseen > 1 ? "s" : "", list);
    if (device > 0 && !l->have_dev)
        /* (device 0 of a log that names none is the log: one device's) */
        return cp_error_set(CP_ERR_INVALID, "%s: device %d: the log names no device (no "
                            "device_id key): it is one device's, read as device 0%s", l->path,
                            device, list);
    t->info.devices = l->nseen > 1 ? l->nseen + (unsigned)l->more_seen : 1;
    /* the rows say the device they are of (a log of device 3 is device 3's) */
    d = l->have_dev ? l->dev : device > 0 ? (uint64_t)device : 0;
    if (d > UINT16_MAX)
        return cp_error_set(CP_ERR_INVALID, "%s: device_id %llu: more than 65535", l->path,
                            (unsigned long long)d);
    if (d && cp_tb_device_all(l->b, (uint16_t)d) != CP_OK)
        return loom(l);
    if (t->cut && l->line == 1)
        return cp_error_set(CP_ERR_INVALID, "%s:1: the log is cut in its first line: no whole "
                            "line to read", l->path);
    t->info.threads = 1; /* the log says none */
    return CP_OK;
}

static cp_status load(cp_trace_builder *b, gzFile gz, const cp_trace_probe *p)
{
    cld l;
    cp_status st;

    memset(&l, 0, sizeof l);
    l.b = b;
    l.t = b->t;
    l.path = b->path;
    l.want = p->device;
    l.c = calloc(1, sizeof *l.c);
    if (!l.c)
        return loom(&l);
    b->t->cupy = l.c;
    st = read_lines(&l, gz);
    if (st == CP_OK)
        st = finish(&l, p->device);
    return st;
}

static void free_log(cp_trace *t)
{
    cp_trace_cupy *c = t->cupy;
    if (!c)
        return;
    free(c->op);
    free(c->dev_size);
    free(c->dev_addr);
    free(c->dev_line);
    free(c);
    t->cupy = NULL;
}

static const char *const keys[] = {"\"hook\"", NULL};

static int bid(const cp_trace_probe *p)
{
    return p->keys_of == &cp_reader_cupy_hook ? CP_BID_CUPY : CP_BID_NONE;
}

const cp_trace_reader cp_reader_cupy_hook = {
    .name = "cupy_hook",
    .what = "a CuPy hook line (key \"hook\")",
    .keys = keys,
    .bid = bid,
    .load = load,
    .free = free_log,
};
