/*
 * text.h: what the readers of text traces share (RMM CSV, `cupola record`
 * files, JAX's and CuPy's JSON lines), internal to trace/:
 *
 *   - one gzip (or plain) file read line by line, each reader giving its
 *     line limit and its rule for a file that ends early (cp_line_rule);
 *   - bounded number parsers (decimal, hexadecimal);
 *   - zlib's message without the path zlib puts before it.
 *
 * Messages name the path and the line ("t.csv:17: a NUL byte in the line"),
 * the way every reader's own messages do.  Plain C: never includes lua.h.
 */
#ifndef CUPOLA_TRACE_TEXT_H
#define CUPOLA_TRACE_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#include "error.h"

/* zlib's gzerror message without the path zlib puts before it ("f.gz:
 * unexpected end of file" -> "unexpected end of file"): the loaders'
 * messages name the path themselves. */
static inline const char *cp_gz_reason(const char *msg, const char *path)
{
    size_t n = strlen(path);
    if (msg && strncmp(msg, path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ')
        return msg + n + 2;
    return msg;
}

/* ---- numbers -------------------------------------------------------------
 * Both read exactly the n bytes at s (no sign, no blanks): CP_NUM_NOT when
 * they are not a number of the kind (empty, or any other character, which
 * wins over a value too big), CP_NUM_BIG when they are but the value is
 * above the bound. */
enum { CP_NUM_OK = 0, CP_NUM_NOT = -1, CP_NUM_BIG = -2 };

/* Decimal digits, at most max. */
int cp_parse_dec(const char *s, size_t n, uint64_t max, uint64_t *out);
/* Hexadecimal digits, "0x" or "0X" before them or not: at most max_digits
 * of them (more: CP_NUM_NOT), or, with max_digits 0, any number of digits
 * whose value fits 64 bits (CP_NUM_BIG past it). */
int cp_parse_hex(const char *s, size_t n, unsigned max_digits, uint64_t *out);

/* ---- lines ---------------------------------------------------------------
 * A reader's rule for its lines.  The buffer holds a line, its newline and
 * a NUL; it starts at `start` bytes and doubles while a line fills it, up to
 * `max`: a line that fills `max` is refused with `too_long`.  `cut` says
 * what a file that ends early is:
 *   CP_CUT_NEVER      an error ("truncated or corrupt gzip data (reason)")
 *   CP_CUT_TRUNCATED  a cut (CP_LINE_CUT) where the gzip stream ends early;
 *                     any other gzip error is an error
 *   CP_CUT_ANY        a cut at any gzip error, and at a last line without
 *                     its newline (the recorder writes whole lines, so such
 *                     a line may be a prefix of a longer one)
 * and flags the order of the checks, each reader's since its first version:
 *   CP_LINE_NUL_ANY   every line is checked for a NUL byte, before anything
 *                     else (without: only a line without its newline, after
 *                     its gzip check; a line whose first byte is NUL then
 *                     reads as an empty line)
 *   CP_LINE_GZ_EACH   the gzip stream is checked after every line, a line
 *                     that fills `max` refused before it, and its error
 *                     given without zlib's reason */
enum { CP_CUT_NEVER = 0, CP_CUT_TRUNCATED, CP_CUT_ANY };
#define CP_LINE_NUL_ANY 1u
#define CP_LINE_GZ_EACH 2u

typedef struct cp_line_rule {
    size_t start, max;
    const char *too_long;
    int cut;
    unsigned flags;
} cp_line_rule;

typedef struct cp_lines {
    gzFile gz;
    const char *path;
    const cp_line_rule *rule; /* may change between two lines */
    char *buf;
    size_t cap;
    size_t len;         /* the line's length, its newline and \r stripped */
    size_t line;        /* its number, from 1 (at the end: the last line's) */
    uint64_t offset;    /* the bytes of the lines before it */
    int unterminated;   /* it had no newline (the last line of the file) */
    const char *cut_reason; /* CP_LINE_CUT: zlib's reason, or NULL for a last
                               line without its newline (dropped) */
    cp_status st;       /* CP_LINE_ERROR: CP_ERR_INVALID or CP_ERR_OOM */
} cp_lines;

enum { CP_LINE_ERROR = -1, CP_LINE_END = 0, CP_LINE_OK = 1, CP_LINE_CUT = 2 };

/* CP_ERR_OOM "out of host memory loading path" when the buffer cannot be had. */
cp_status cp_lines_init(cp_lines *l, gzFile gz, const char *path, const cp_line_rule *rule);
/* The next line into l->buf (NUL-terminated, l->len): CP_LINE_OK; CP_LINE_END
 * when there is none; CP_LINE_CUT when the file ends early as the rule says
 * it may (the lines before were whole; l->line is the line it ends in);
 * CP_LINE_ERROR with the message set (cp_error_set, "path:line: reason")
 * and l->st. */
int cp_lines_next(cp_lines *l);
void cp_lines_fini(cp_lines *l);

#endif /* CUPOLA_TRACE_TEXT_H */
