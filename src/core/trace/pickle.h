/*
 * pickle.h: a reader for Python pickles that hold plain data only, the
 * subset PyTorch's memory snapshots use, built into a tree of values.
 *
 * Accepted: protocols 2 to 5 as the two PyTorch writers produce them (the
 * Python `_dump_snapshot`: protocol 4 or 5 with FRAME and implicit MEMOIZE;
 * the C++ `write_pickle`: protocol 2 with BINPUT/LONG_BINPUT and
 * BINGET/LONG_BINGET).  Values: None, booleans, integers (BININT, BININT1,
 * BININT2, LONG1 and LONG4 up to 9 bytes, so unsigned 64-bit addresses fit),
 * floats (BINFLOAT), strings (SHORT_BINUNICODE, BINUNICODE, BINUNICODE8) and
 * bytes (SHORT_BINBYTES, BINBYTES, BINBYTES8, BYTEARRAY8), tuples, lists and
 * dicts, with MARK, APPEND(S), SETITEM(S), POP, POP_MARK, DUP and STOP.
 *
 * Everything else (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, NEWOBJ, INST, OBJ,
 * PERSID, EXT*, buffers, sets, the text opcodes of protocols 0 and 1) is
 * refused with CP_ERR_INVALID and a message naming the opcode and its offset:
 * the reader builds values, it never looks anything up or calls anything.
 *
 * Hostile input: every read is bounds-checked against the input, the value
 * stack and mark stack are explicit arrays (no recursion), memo indices must
 * be below the offset of the opcode that stores them, and every value costs
 * at least one input byte, so memory is linear in the input's size.  A
 * failure is "offset N: reason" through cp_error_set; nothing of the tree
 * is left.
 *
 * The input is a buffer in memory or a stream read through a window (a
 * stream's length is not known ahead: the window grows only with the bytes
 * it delivered, never with what a length field claims).  Strings are
 * copied into the tree, which keeps nothing of the input.  A hook sees each
 * key and value set in a dict as the dict is built, and may shrink the
 * value (cp_pk_clear): the snapshot reader turns each frame list into its
 * label there, so a stream's memory follows the entries, not their frames.
 *
 * Values may be shared (memo references) and may even contain themselves
 * (a list appended to itself): walk them with a bound, never recursively
 * over everything.  Plain C: never includes lua.h.
 */
#ifndef CUPOLA_PICKLE_H
#define CUPOLA_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cp_pk_type {
    CP_PK_NONE = 0,
    CP_PK_BOOL,
    CP_PK_INT,   /* i (or u when is_u64: a value >= 2^63) */
    CP_PK_FLOAT,
    CP_PK_STR,   /* UTF-8 text, not NUL-terminated */
    CP_PK_BYTES,
    CP_PK_TUPLE,
    CP_PK_LIST,
    CP_PK_DICT   /* items: key, value, key, value, ... (n pairs) */
} cp_pk_type;

typedef struct cp_pk_value {
    uint8_t type;             /* cp_pk_type */
    uint8_t is_u64;           /* CP_PK_INT beyond INT64_MAX: read u */
    uint32_t mark;            /* free for the caller (e.g. "decoded as #k") */
    size_t n;                 /* items (tuple, list) or pairs (dict); string length */
    union {
        int64_t i;
        uint64_t u;
        double f;
        const char *s;
        struct cp_pk_value **items;
    } v;
    size_t cap;               /* allocated items (containers) */
} cp_pk_value;

typedef struct cp_pickle cp_pickle;

/* A stream: read() fills up to n bytes of buf and returns how many (0 at
 * the end), or -1 with a message set (cp_error_set) when it cannot. */
typedef struct cp_pk_source {
    long (*read)(void *ud, unsigned char *buf, size_t n);
    void *ud;
} cp_pk_source;

/* Called for each key and value a dict gets (SETITEM, SETITEMS, DICT), once
 * they are in it; a status other than CP_OK stops the parse with it. */
typedef struct cp_pk_hooks {
    cp_status (*setitem)(void *ud, cp_pk_value *dict, cp_pk_value *key, cp_pk_value *value);
    void *ud;
} cp_pk_hooks;

/* Parses buf[0..len).  On success *root is the pickled object and *out owns
 * the values (free with cp_pickle_free).  CP_ERR_INVALID "offset N: reason"
 * for malformed, truncated or refused input; CP_ERR_OOM when memory runs out. */
cp_status cp_pickle_parse(const unsigned char *buf, size_t len, cp_pickle **out,
                          cp_pk_value **root);
/* The same with a hook (NULL: none). */
cp_status cp_pickle_parse_hooked(const unsigned char *buf, size_t len, const cp_pk_hooks *hooks,
                                 cp_pickle **out, cp_pk_value **root);
/* The same from a stream. */
cp_status cp_pickle_parse_stream(const cp_pk_source *src, const cp_pk_hooks *hooks,
                                 cp_pickle **out, cp_pk_value **root);
void cp_pickle_free(cp_pickle *p);
/* Empties a container (its items are dropped; they stay in the tree). */
void cp_pk_clear(cp_pk_value *v);

/* Whether buf starts like a pickle of protocol 2 or later (0x80, version). */
int cp_pickle_sniff(const unsigned char *buf, size_t len);

/* d[key] for a dict with string keys; NULL when d is not a dict or the key is
 * absent.  Linear in the dict's size. */
const cp_pk_value *cp_pk_get(const cp_pk_value *d, const char *key);
/* The integer's value as uint64 (negative values wrap); 0 when not an int. */
uint64_t cp_pk_u64(const cp_pk_value *v);
/* An int or float as a double; 0 otherwise. */
double cp_pk_num(const cp_pk_value *v);
/* Whether v is a string equal to s. */
int cp_pk_streq(const cp_pk_value *v, const char *s);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_PICKLE_H */
