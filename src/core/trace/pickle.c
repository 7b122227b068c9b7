/*
 * pickle.c: the plain-data pickle reader (what it accepts and refuses, and
 * its bounds, are in pickle.h).
 *
 * A pickle is a program for a stack machine; this reader runs the part of
 * that machine that only builds values.  The stack, the mark stack and the
 * memo are explicit arrays, so nesting costs no C stack and a hostile depth
 * is just memory, bounded by the input's length like everything else.
 */
#include "pickle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Values are allocated in slabs, strings copied into chunks: the input
 * need not outlive the tree, so a stream is read through a window. */
#define SLAB_VALUES 1024
#define CHUNK_BYTES (64u << 10)

typedef struct slab {
    struct slab *next;
    size_t used;
    cp_pk_value v[SLAB_VALUES];
} slab;

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    char bytes[];
} chunk;

struct cp_pickle {
    slab *slabs;          /* every value */
    chunk *chunks;        /* every string's bytes */
};

typedef struct reader {
    const unsigned char *b; /* the window: b[0] is input offset base */
    size_t len, pos;
    size_t base;
    size_t op_at;         /* offset of the opcode being run */
    /* streams: the window's own buffer, refilled from src */
    unsigned char *own;
    size_t cap;
    const cp_pk_source *src;
    int eof;
    int total_known;      /* in memory: the whole input is the window */
    char why[256];        /* the stream's own message when a read failed */
    const cp_pk_hooks *hooks;
    cp_pickle *pk;
    cp_pk_value **stack;
    size_t sp, scap;
    size_t *marks;
    size_t nmarks, mcap;
    cp_pk_value **memo;
    size_t nmemo, memocap;
} reader;

static cp_status oom(void);

/* A failure at the opcode being run; where the input could not be read (a
 * stream's error, or memory for its window), that is the reason. */
static cp_status fail(const reader *r, const char *why)
{
    if (r->eof == -2)
        return oom();
    if (r->eof == -1)
        return cp_error_set(CP_ERR_INVALID, "offset %zu: %s", r->op_at, r->why);
    return cp_error_set(CP_ERR_INVALID, "offset %zu: %s", r->op_at, why);
}

static cp_status oom(void)
{
    return cp_error_set(CP_ERR_OOM, "out of host memory reading a pickle");
}

static const char *opname(unsigned char op)
{
    switch (op) {
    case 'c': return "GLOBAL";
    case 0x93: return "STACK_GLOBAL";
    case 'R': return "REDUCE";
    case 'b': return "BUILD";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    case 'I': return "INT (text, protocol 0)";
    case 'L': return "LONG (text, protocol 0)";
    case 'F': return "FLOAT (text, protocol 0)";
    case 'S': return "STRING (text, protocol 0)";
    case 'V': return "UNICODE (text, protocol 0)";
    case 'g': return "GET (text, protocol 0)";
    case 'p': return "PUT (text, protocol 0)";
    default: return NULL;
    }
}

/* Reads of a stream fill the window this much at a time. */
#define READ_BYTES (64u << 10)

/* Makes n bytes available at b + pos, reading more of a stream when the
 * window holds fewer; 0 when the input ends first, the stream fails
 * (r->eof = -1) or memory runs out (r->eof = -2).  The window doubles only
 * when the unread bytes it holds leave less than READ_BYTES free: it grows
 * with what the input delivered, never with what a length field claims. */
static int need(reader *r, size_t n)
{
    while (r->len - r->pos < n) {
        size_t keep = r->len - r->pos;
        long got;
        if (r->total_known || r->eof)
            return 0;
        if (r->pos) { /* the unread bytes to the front */
            memmove(r->own, r->own + r->pos, keep);
            r->base += r->pos;
            r->pos = 0;
            r->len = keep;
        }
        if (r->cap - r->len < READ_BYTES) {
            size_t ncap = r->cap ? 2 * r->cap : 4 * READ_BYTES;
            unsigned char *nb = (unsigned char *)realloc(r->own, ncap);
            if (!nb) {
                r->eof = -2;
                return 0;
            }
            r->own = nb;
            r->cap = ncap;
        }
        r->b = r->own;
        got = r->src->read(r->src->ud, r->own + r->len, r->cap - r->len);
        if (got < 0) {
            snprintf(r->why, sizeof r->why, "%s", cp_error_msg());
            r->eof = -1;
            return 0;
        }
        if (got == 0) {
            r->eof = 1;
            return 0;
        }
        r->len += (size_t)got;
    }
    return 1;
}

/* Offsets in messages are the input's. */
#define AT(r) ((r)->base + (r)->pos)

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    int i;
    for (i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static cp_pk_value *newval(reader *r, cp_pk_type type)
{
    slab *sl = r->pk->slabs;
    cp_pk_value *v;
    if (!sl || sl->used == SLAB_VALUES) {
        sl = (slab *)malloc(sizeof *sl);
        if (!sl)
            return NULL;
        sl->used = 0;
        sl->next = r->pk->slabs;
        r->pk->slabs = sl;
    }
    v = &sl->v[sl->used++];
    memset(v, 0, sizeof *v);
    v->type = (uint8_t)type;
    return v;
}

/* A copy of n bytes of the input, kept with the tree. */
static const char *keep_bytes(reader *r, const unsigned char *p, size_t n)
{
    chunk *c = r->pk->chunks;
    char *out;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > CHUNK_BYTES / 4 ? n : CHUNK_BYTES;
        c = (chunk *)malloc(sizeof *c + (cap ? cap : 1));
        if (!c)
            return NULL;
        c->cap = cap;
        c->used = 0;
        if (n > CHUNK_BYTES / 4 && r->pk->chunks) {
            /* a long string gets a chunk of its own, behind the open one */
            c->next = r->pk->chunks->next;
            r->pk->chunks->next = c;
        } else {
            c->next = r->pk->chunks;
            r->pk->chunks = c;
        }
    }
    out = c->bytes + c->used;
    if (n)
        memcpy(out, p, n);
    c->used += n;
    return out;
}

static cp_status push(reader *r, cp_pk_value *v)
{
    if (!v)
        return oom();
    if (r->sp == r->scap) {
        size_t cap = r->scap ? 2 * r->scap : 64;
        cp_pk_value **ns = (cp_pk_value **)realloc(r->stack, cap * sizeof *ns);
        if (!ns)
            return oom();
        r->stack = ns;
        r->scap = cap;
    }
    r->stack[r->sp++] = v;
    return CP_OK;
}

/* The values above the topmost mark (their count in *n, the first at
 * stack[*base]); the mark is popped. */
static cp_status pop_mark(reader *r, size_t *base, size_t *n)
{
    if (!r->nmarks)
        return fail(r, "no MARK on the stack");
    *base = r->marks[--r->nmarks];
    if (*base > r->sp)
        return fail(r, "stack underflow below a MARK");
    *n = r->sp - *base;
    return CP_OK;
}

static cp_status add_items(cp_pk_value *c, cp_pk_value **items, size_t n)
{
    size_t want = c->n * (c->type == CP_PK_DICT ? 2 : 1) + n;
    if (want > c->cap) {
        size_t cap = c->cap ? c->cap : 8;
        cp_pk_value **ni;
        while (cap < want)
            cap *= 2;
        ni = (cp_pk_value **)realloc(c->v.items, cap * sizeof *ni);
        if (!ni)
            return oom();
        c->v.items = ni;
        c->cap = cap;
    }
    memcpy(c->v.items + (want - n), items, n * sizeof *items);
    c->n += c->type == CP_PK_DICT ? n / 2 : n;
    return CP_OK;
}

static cp_status make_seq(reader *r, cp_pk_type type, size_t base, size_t n)
{
    cp_pk_value *v = newval(r, type);
    cp_status st;
    if (!v)
        return oom();
    if (n) {
        st = add_items(v, r->stack + base, n);
        if (st != CP_OK)
            return st;
    }
    r->sp = base;
    return push(r, v);
}

/* The caller's hook for each key and value set in a dict. */
static cp_status hook_pairs(reader *r, cp_pk_value *d, cp_pk_value **kv, size_t n)
{
    size_t i;
    cp_status st;
    if (!r->hooks || !r->hooks->setitem)
        return CP_OK;
    for (i = 0; i + 1 < n; i += 2) {
        st = r->hooks->setitem(r->hooks->ud, d, kv[i], kv[i + 1]);
        if (st != CP_OK)
            return st;
    }
    return CP_OK;
}

static cp_status memo_put(reader *r, uint64_t idx)
{
    if (!r->sp)
        return fail(r, "memo store with an empty stack");
    /* Every memo entry costs at least one input byte: a larger index can
     * only be hostile, and would make the memo array huge. */
    if (idx >= AT(r))
        return fail(r, "memo index larger than the pickle");
    if (idx >= r->memocap) {
        size_t cap = r->memocap ? r->memocap : 256;
        cp_pk_value **nm;
        while (cap <= idx)
            cap *= 2;
        nm = (cp_pk_value **)realloc(r->memo, cap * sizeof *nm);
        if (!nm)
            return oom();
        memset(nm + r->memocap, 0, (cap - r->memocap) * sizeof *nm);
        r->memo = nm;
        r->memocap = cap;
    }
    r->memo[idx] = r->stack[r->sp - 1];
    if (idx >= r->nmemo)
        r->nmemo = (size_t)idx + 1;
    return CP_OK;
}

static cp_status memo_get(reader *r, uint64_t idx)
{
    if (idx >= r->nmemo || !r->memo[idx])
        return fail(r, "memo index not defined");
    return push(r, r->memo[idx]);
}

static cp_status text(reader *r, cp_pk_type type, size_t lenbytes)
{
    uint64_t n;
    cp_pk_value *v;
    const char *s;
    if (!need(r, lenbytes))
        return fail(r, "truncated string length");
    n = le(r->b + r->pos, (int)lenbytes);
    r->pos += lenbytes;
    if (n > SIZE_MAX / 2 || !need(r, (size_t)n))
        return fail(r, "string runs past the end of the data");
    v = newval(r, type);
    s = v ? keep_bytes(r, r->b + r->pos, (size_t)n) : NULL;
    if (!s)
        return oom();
    v->v.s = s;
    v->n = (size_t)n;
    r->pos += (size_t)n;
    return push(r, v);
}

/* LONG1/LONG4: little-endian two's complement, at most 9 bytes (a 64-bit
 * unsigned value with its sign byte). */
static cp_status long_n(reader *r, size_t lenbytes)
{
    uint64_t n, v = 0;
    const unsigned char *p;
    cp_pk_value *val;
    int neg;
    if (!need(r, lenbytes))
        return fail(r, "truncated LONG length");
    n = le(r->b + r->pos, (int)lenbytes);
    r->pos += lenbytes;
    if (n > SIZE_MAX / 2 || !need(r, (size_t)n))
        return fail(r, "LONG runs past the end of the data");
    p = r->b + r->pos;
    r->pos += (size_t)n;
    val = newval(r, CP_PK_INT);
    if (!val)
        return oom();
    if (n == 0)
        return push(r, val);
    if (n > 9)
        return fail(r, "integer wider than 64 bits");
    neg = (p[n - 1] & 0x80) != 0;
    if (n == 9) {
        /* The ninth byte only carries the sign. */
        if (p[8] != (neg ? 0xff : 0x00))
            return fail(r, "integer wider than 64 bits");
        if (neg && !(p[7] & 0x80))
            return fail(r, "integer below -2^63");
        v = le(p, 8);
        val->is_u64 = !neg && (v >> 63);
    } else {
        v = le(p, (int)n);
        if (neg && n < 8)
            v |= ~(uint64_t)0 << (8 * n);
    }
    val->v.u = v;
    return push(r, val);
}

static cp_status int_n(reader *r, size_t nbytes, int is_signed)
{
    cp_pk_value *v;
    uint64_t x;
    if (!need(r, nbytes))
        return fail(r, "truncated integer");
    x = le(r->b + r->pos, (int)nbytes);
    r->pos += nbytes;
    v = newval(r, CP_PK_INT);
    if (!v)
        return oom();
    v->v.i = is_signed ? (int64_t)(int32_t)(uint32_t)x : (int64_t)x;
    return push(r, v);
}

/* The opcodes of the protocol, the stack and its marks; *known = 0 when op is none of them. */
static cp_status stack_op(reader *r, unsigned char op, int *known)
{
    cp_status st = CP_OK;
    size_t base, n;
    switch (op) {
    case 0x80: /* PROTO */
        if (!need(r, 1))
            return fail(r, "truncated PROTO");
        if (r->b[r->pos] < 2 || r->b[r->pos] > 5)
            return cp_error_set(CP_ERR_INVALID,
                                "offset %zu: unsupported pickle protocol %u (2 to 5 are read)",
                                r->op_at, (unsigned)r->b[r->pos]);
        r->pos++;
        break;
    case 0x95: /* FRAME: a length hint for buffered readers */
        if (!need(r, 8))
            return fail(r, "truncated FRAME");
        {
            /* a frame's bytes must all be there (as for Python's reader);
             * a stream reads them ahead, which its writer sized for */
            uint64_t flen = le(r->b + r->pos, 8);
            if (flen > SIZE_MAX / 2 || !need(r, 8 + (size_t)flen))
                return fail(r, "FRAME runs past the end of the data");
        }
        r->pos += 8;
        break;
    case '(': /* MARK */
        if (r->nmarks == r->mcap) {
            size_t cap = r->mcap ? 2 * r->mcap : 32;
            size_t *nm = (size_t *)realloc(r->marks, cap * sizeof *nm);
            if (!nm)
                return oom();
            r->marks = nm;
            r->mcap = cap;
        }
        r->marks[r->nmarks++] = r->sp;
        break;
    case '0': /* POP */
        if (!r->sp)
            return fail(r, "POP with an empty stack");
        if (r->nmarks && r->marks[r->nmarks - 1] == r->sp)
            return fail(r, "POP across a MARK");
        r->sp--;
        break;
    case '1': /* POP_MARK */
        st = pop_mark(r, &base, &n);
        r->sp = st == CP_OK ? base : r->sp;
        break;
    case '2': /* DUP */
        if (!r->sp)
            return fail(r, "DUP with an empty stack");
        st = push(r, r->stack[r->sp - 1]);
        break;
    default:
        *known = 0;
        break;
    }
    return st;
}

/* The opcodes that push a value: None, booleans, numbers, strings; *known = 0 when op is none of them. */
static cp_status value_op(reader *r, unsigned char op, int *known)
{
    cp_status st = CP_OK;
    cp_pk_value *v;
    switch (op) {
    case 'N':
        st = push(r, newval(r, CP_PK_NONE));
        break;
    case 0x88: /* NEWTRUE */
    case 0x89: /* NEWFALSE */
        v = newval(r, CP_PK_BOOL);
        if (v)
            v->v.i = op == 0x88;
        st = push(r, v);
        break;
    case 'J': /* BININT */
        st = int_n(r, 4, 1);
        break;
    case 'K': /* BININT1 */
        st = int_n(r, 1, 0);
        break;
    case 'M': /* BININT2 */
        st = int_n(r, 2, 0);
        break;
    case 0x8a: /* LONG1 */
        st = long_n(r, 1);
        break;
    case 0x8b: /* LONG4 */
        st = long_n(r, 4);
        break;
    case 'G': { /* BINFLOAT: big-endian IEEE 754 double */
        uint64_t bits = 0;
        int k;
        if (!need(r, 8))
            return fail(r, "truncated BINFLOAT");
        for (k = 0; k < 8; k++)
            bits = (bits << 8) | r->b[r->pos + (size_t)k];
        r->pos += 8;
        v = newval(r, CP_PK_FLOAT);
        if (v)
            memcpy(&v->v.f, &bits, sizeof v->v.f);
        st = push(r, v);
        break;
    }
    case 0x8c: /* SHORT_BINUNICODE */
        st = text(r, CP_PK_STR, 1);
        break;
    case 'X': /* BINUNICODE */
        st = text(r, CP_PK_STR, 4);
        break;
    case 0x8d: /* BINUNICODE8 */
        st = text(r, CP_PK_STR, 8);
        break;
    case 'C': /* SHORT_BINBYTES */
    case 'U': /* SHORT_BINSTRING */
        st = text(r, CP_PK_BYTES, 1);
        break;
    case 'B': /* BINBYTES */
    case 'T': /* BINSTRING */
        st = text(r, CP_PK_BYTES, 4);
        break;
    case 0x8e: /* BINBYTES8 */
    case 0x96: /* BYTEARRAY8 */
        st = text(r, CP_PK_BYTES, 8);
        break;
    default:
        *known = 0;
        break;
    }
    return st;
}

/* The opcodes that build tuples, lists and dicts; *known = 0 when op is none of them. */
static cp_status container_op(reader *r, unsigned char op, int *known)
{
    cp_status st = CP_OK;
    size_t base, n;
    cp_pk_value *v;
    switch (op) {
    case ')': /* EMPTY_TUPLE */
        st = push(r, newval(r, CP_PK_TUPLE));
        break;
    case ']': /* EMPTY_LIST */
        st = push(r, newval(r, CP_PK_LIST));
        break;
    case '}': /* EMPTY_DICT */
        st = push(r, newval(r, CP_PK_DICT));
        break;
    case 0x85: /* TUPLE1 */
    case 0x86: /* TUPLE2 */
    case 0x87: /* TUPLE3 */
        n = (size_t)(op - 0x84);
        if (r->sp < n || (r->nmarks && r->marks[r->nmarks - 1] > r->sp - n))
            return fail(r, "TUPLE with too few values on the stack");
        st = make_seq(r, CP_PK_TUPLE, r->sp - n, n);
        break;
    case 't': /* TUPLE */
    case 'l': /* LIST */
        st = pop_mark(r, &base, &n);
        if (st == CP_OK)
            st = make_seq(r, op == 't' ? CP_PK_TUPLE : CP_PK_LIST, base, n);
        break;
    case 'd': /* DICT */
        st = pop_mark(r, &base, &n);
        if (st == CP_OK && n % 2)
            return fail(r, "DICT with an odd number of values");
        if (st == CP_OK)
            st = make_seq(r, CP_PK_DICT, base, n);
        if (st == CP_OK)
            st = hook_pairs(r, r->stack[r->sp - 1], r->stack[r->sp - 1]->v.items, n);
        break;
    case 'a': /* APPEND */
        if (r->sp < 2 || (r->nmarks && r->marks[r->nmarks - 1] > r->sp - 2))
            return fail(r, "APPEND with too few values on the stack");
        v = r->stack[r->sp - 2];
        if (v->type != CP_PK_LIST)
            return fail(r, "APPEND to something that is not a list");
        st = add_items(v, r->stack + r->sp - 1, 1);
        r->sp--;
        break;
    case 'e': /* APPENDS */
    case 'u': /* SETITEMS */
        st = pop_mark(r, &base, &n);
        if (st != CP_OK)
            break;
        if (base == 0)
            return fail(r, op == 'e' ? "APPENDS without a list below its MARK"
                                     : "SETITEMS without a dict below its MARK");
        v = r->stack[base - 1];
        if (op == 'e' && v->type != CP_PK_LIST)
            return fail(r, "APPENDS to something that is not a list");
        if (op == 'u' && v->type != CP_PK_DICT)
            return fail(r, "SETITEMS on something that is not a dict");
        if (op == 'u' && n % 2)
            return fail(r, "SETITEMS with an odd number of values");
        if (n)
            st = add_items(v, r->stack + base, n);
        if (st == CP_OK && op == 'u')
            st = hook_pairs(r, v, r->stack + base, n);
        r->sp = base;
        break;
    case 's': /* SETITEM */
        if (r->sp < 3 || (r->nmarks && r->marks[r->nmarks - 1] > r->sp - 3))
            return fail(r, "SETITEM with too few values on the stack");
        v = r->stack[r->sp - 3];
        if (v->type != CP_PK_DICT)
            return fail(r, "SETITEM on something that is not a dict");
        st = add_items(v, r->stack + r->sp - 2, 2);
        if (st == CP_OK)
            st = hook_pairs(r, v, r->stack + r->sp - 2, 2);
        r->sp -= 2;
        break;
    default:
        *known = 0;
        break;
    }
    return st;
}

/* The memo's opcodes; *known = 0 when op is none of them. */
static cp_status memo_op(reader *r, unsigned char op, int *known)
{
    cp_status st = CP_OK;
    switch (op) {
    case 0x94: /* MEMOIZE */
        st = memo_put(r, r->nmemo);
        break;
    case 'q': /* BINPUT */
        if (!need(r, 1))
            return fail(r, "truncated BINPUT");
        st = memo_put(r, r->b[r->pos++]);
        break;
    case 'r': /* LONG_BINPUT */
        if (!need(r, 4))
            return fail(r, "truncated LONG_BINPUT");
        st = memo_put(r, le(r->b + r->pos, 4));
        r->pos += 4;
        break;
    case 'h': /* BINGET */
        if (!need(r, 1))
            return fail(r, "truncated BINGET");
        st = memo_get(r, r->b[r->pos++]);
        break;
    case 'j': /* LONG_BINGET */
        if (!need(r, 4))
            return fail(r, "truncated LONG_BINGET");
        st = memo_get(r, le(r->b + r->pos, 4));
        r->pos += 4;
        break;
    default:
        *known = 0;
        break;
    }
    return st;
}

/* An opcode outside the subset (pickle.h): refused, named. */
static cp_status refused(const reader *r, unsigned char op)
{
    const char *name = opname(op);
    if (name)
        return cp_error_set(CP_ERR_INVALID, "offset %zu: opcode %s (0x%02x) refused: "
                            "a memory snapshot holds only plain data, and cupola "
                            "never runs pickled code", r->op_at, name, op);
    return cp_error_set(CP_ERR_INVALID, "offset %zu: unknown opcode 0x%02x", r->op_at, op);
}

static cp_status run(reader *r, cp_pk_value **root)
{
    cp_status st = CP_OK;

    if (!need(r, 2) || r->b[0] != 0x80) {
        if (r->eof < 0)
            return fail(r, "unreadable");
        return cp_error_set(CP_ERR_INVALID, "offset 0: not a pickle of protocol 2 or later "
                            "(no PROTO opcode)");
    }
    while (st == CP_OK) {
        unsigned char op;
        int known = 1;
        if (!need(r, 1)) {
            r->op_at = AT(r);
            return fail(r, "truncated: the data ends before STOP");
        }
        r->op_at = AT(r);
        op = r->b[r->pos++];
        if (op == '.') { /* STOP */
            if (r->sp != 1)
                return fail(r, r->sp ? "STOP with more than one value on the stack"
                                     : "STOP with an empty stack");
            *root = r->stack[0];
            return CP_OK;
        }
        st = stack_op(r, op, &known);
        if (!known) {
            known = 1;
            st = value_op(r, op, &known);
        }
        if (!known) {
            known = 1;
            st = container_op(r, op, &known);
        }
        if (!known) {
            known = 1;
            st = memo_op(r, op, &known);
        }
        if (!known)
            return refused(r, op);
    }
    return st;
}

void cp_pickle_free(cp_pickle *p)
{
    slab *sl, *nsl;
    chunk *c, *nc;
    size_t i;
    if (!p)
        return;
    for (sl = p->slabs; sl; sl = nsl) {
        nsl = sl->next;
        for (i = 0; i < sl->used; i++) {
            cp_pk_value *v = &sl->v[i];
            if (v->type == CP_PK_TUPLE || v->type == CP_PK_LIST || v->type == CP_PK_DICT)
                free(v->v.items);
        }
        free(sl);
    }
    for (c = p->chunks; c; c = nc) {
        nc = c->next;
        free(c);
    }
    free(p);
}

void cp_pk_clear(cp_pk_value *v)
{
    if (v && (v->type == CP_PK_TUPLE || v->type == CP_PK_LIST || v->type == CP_PK_DICT)) {
        free(v->v.items);
        v->v.items = NULL;
        v->n = 0;
        v->cap = 0;
    }
}

static cp_status parse(reader *r, cp_pickle **out, cp_pk_value **root)
{
    cp_status st;
    *out = NULL;
    *root = NULL;
    r->pk = (cp_pickle *)calloc(1, sizeof *r->pk);
    if (!r->pk)
        return oom();
    st = run(r, root);
    free(r->stack);
    free(r->marks);
    free(r->memo);
    free(r->own);
    if (st != CP_OK) {
        cp_pickle_free(r->pk);
        *root = NULL;
        return st;
    }
    *out = r->pk;
    return CP_OK;
}

cp_status cp_pickle_parse(const unsigned char *buf, size_t len, cp_pickle **out,
                          cp_pk_value **root)
{
    return cp_pickle_parse_hooked(buf, len, NULL, out, root);
}

cp_status cp_pickle_parse_hooked(const unsigned char *buf, size_t len, const cp_pk_hooks *hooks,
                                 cp_pickle **out, cp_pk_value **root)
{
    reader r;
    memset(&r, 0, sizeof r);
    r.b = buf;
    r.len = len;
    r.total_known = 1;
    r.hooks = hooks;
    return parse(&r, out, root);
}

cp_status cp_pickle_parse_stream(const cp_pk_source *src, const cp_pk_hooks *hooks,
                                 cp_pickle **out, cp_pk_value **root)
{
    reader r;
    memset(&r, 0, sizeof r);
    r.src = src;
    r.hooks = hooks;
    return parse(&r, out, root);
}

int cp_pickle_sniff(const unsigned char *buf, size_t len)
{
    return len >= 2 && buf[0] == 0x80 && buf[1] >= 2 && buf[1] <= 5;
}

int cp_pk_streq(const cp_pk_value *v, const char *s)
{
    size_t n = strlen(s);
    return v && v->type == CP_PK_STR && v->n == n && memcmp(v->v.s, s, n) == 0;
}

const cp_pk_value *cp_pk_get(const cp_pk_value *d, const char *key)
{
    size_t i;
    const cp_pk_value *found = NULL;
    if (!d || d->type != CP_PK_DICT)
        return NULL;
    /* The last of equal keys wins, as in Python. */
    for (i = 0; i < d->n; i++)
        if (cp_pk_streq(d->v.items[2 * i], key))
            found = d->v.items[2 * i + 1];
    return found;
}

uint64_t cp_pk_u64(const cp_pk_value *v)
{
    if (!v)
        return 0;
    if (v->type == CP_PK_INT || v->type == CP_PK_BOOL)
        return v->v.u;
    return 0;
}

double cp_pk_num(const cp_pk_value *v)
{
    if (!v)
        return 0.0;
    if (v->type == CP_PK_FLOAT)
        return v->v.f;
    if (v->type == CP_PK_INT)
        return v->is_u64 ? (double)v->v.u : (double)v->v.i;
    return 0.0;
}
