/*
 * json.h: the JSON scanner of the readers of JSON lines (JAX's memory
 * events, CuPy's hook lines), internal to trace/.  It walks a line in place
 * (NUL-terminated, nothing copied or allocated) and says where values end;
 * each reader takes what it needs from the keys it knows and gives its own
 * messages.
 *
 * A dialect says what is read beyond strict JSON, as each format's writer
 * writes it:
 *   CP_JSON_NAN       NaN, Infinity and -Infinity (Python's json.dumps
 *                     writes them for a stat like fragmentation, 0/0)
 *   CP_JSON_LOOSE     a number is any run of digits, signs, '.', 'e' and
 *                     'E' after a '-' or a digit (else: JSON's grammar)
 *   CP_JSON_CONTROLS  control characters inside strings (else refused)
 * Escapes are skipped, never decoded: the names the readers compare have
 * none.  Nesting deeper than 64 is refused.
 *
 * Plain C: never includes lua.h.
 */
#ifndef CUPOLA_TRACE_JSON_H
#define CUPOLA_TRACE_JSON_H

#include <stddef.h>
#include <stdint.h>

#define CP_JSON_NAN 1u
#define CP_JSON_LOOSE 2u
#define CP_JSON_CONTROLS 4u
/* what JAX's lines are read with (Python's json module writes them) */
#define CP_JSON_PYTHON (CP_JSON_NAN | CP_JSON_LOOSE | CP_JSON_CONTROLS)
/* strict JSON (CuPy's hook lines) */
#define CP_JSON_STRICT 0u

/* p past blanks (space, tab, CR, LF). */
const char *cp_json_ws(const char *p);
/* p at a string's opening quote: its closing quote, or NULL; with out, up
 * to n - 1 bytes of it (escapes as written) and a NUL. */
const char *cp_json_string(const char *p, unsigned dialect, char *out, size_t n);
/* A number by JSON's grammar at p: its end, or NULL; *isint when it is an
 * integer that fits 64 bits (*v; negative ones as two's complement, *neg). */
const char *cp_json_number(const char *p, uint64_t *v, int *neg, int *isint);
/* Any value at p (blanks first): its end, or NULL when malformed. */
const char *cp_json_skip(const char *p, unsigned dialect);

/* One object a line, member by member:
 *     cp_json_obj o;
 *     rc = cp_json_open(&o, line, dialect);          CP_JSON_MEMBER or an error
 *     while (rc == CP_JSON_MEMBER) {
 *         ... o.key, o.klen; the value at o.p: read it, set o.p to its end ...
 *         rc = cp_json_next(&o);                     MEMBER, END or an error
 *     }
 * cp_json_open answers CP_JSON_EMPTY for an empty object ("{}"): then
 * cp_json_close_empty says END or E_AFTER.  END means the object closed with
 * nothing after it but blanks. */
typedef struct cp_json_obj {
    const char *p;       /* the value (after its blanks), then past it */
    const char *key;     /* the member's key, without its quotes */
    size_t klen;
    unsigned dialect;
} cp_json_obj;

enum {
    CP_JSON_EMPTY = 2,
    CP_JSON_MEMBER = 1,
    CP_JSON_END = 0,
    CP_JSON_E_OBJECT = -1,   /* the line is not an object */
    CP_JSON_E_KEY = -2,      /* no key in quotes where one belongs */
    CP_JSON_E_KEY_OPEN = -3, /* a key without its closing quote */
    CP_JSON_E_COLON = -4,    /* no ':' after a key */
    CP_JSON_E_NEXT = -5,     /* no ',' or '}' after a value */
    CP_JSON_E_AFTER = -6     /* text after the object */
};
int cp_json_open(cp_json_obj *o, const char *line, unsigned dialect);
int cp_json_next(cp_json_obj *o);
int cp_json_close_empty(cp_json_obj *o);

/* Whether the first bytes of a file start a JSON object (blanks, then '{'). */
int cp_json_starts_object(const unsigned char *head, size_t n);
/* Whether key (with its quotes, "\"hook\"") is in line followed by ':'
 * (blanks between): a cheap look at a first line, no parse. */
int cp_json_has_key(const char *line, const char *key);

#endif /* CUPOLA_TRACE_JSON_H */
