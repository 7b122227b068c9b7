/*
 * text.c: the line reader and the number parsers every text reader shares
 * (text.h).
 *
 * gzgets stops at a newline, at a full buffer or at the end of the data, so
 * a line shorter than the bytes it read was cut by a NUL byte: known from
 * the bytes read (gztell) and the offset of the lines before.
 */
#include "text.h"

#include <stdio.h>
#include <stdlib.h>

int cp_parse_dec(const char *s, size_t n, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    int big = 0;
    size_t i;
    if (!n)
        return CP_NUM_NOT;
    for (i = 0; i < n; i++) {
        uint64_t d;
        if (s[i] < '0' || s[i] > '9')
            return CP_NUM_NOT;
        d = (uint64_t)(s[i] - '0');
        if (big || d > max || v > (max - d) / 10)
            big = 1; /* go on: "99...9x" is not a number at all */
        else
            v = v * 10 + d;
    }
    if (big)
        return CP_NUM_BIG;
    *out = v;
    return CP_NUM_OK;
}

int cp_parse_hex(const char *s, size_t n, unsigned max_digits, uint64_t *out)
{
    uint64_t v = 0;
    int big = 0;
    size_t i;
    if (n >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        s += 2;
        n -= 2;
    }
    if (!n)
        return CP_NUM_NOT;
    for (i = 0; i < n; i++) {
        unsigned d;
        if (s[i] >= '0' && s[i] <= '9')
            d = (unsigned)(s[i] - '0');
        else if (s[i] >= 'a' && s[i] <= 'f')
            d = (unsigned)(s[i] - 'a' + 10);
        else if (s[i] >= 'A' && s[i] <= 'F')
            d = (unsigned)(s[i] - 'A' + 10);
        else
            return CP_NUM_NOT;
        if (max_digits && i >= max_digits)
            return CP_NUM_NOT;
        if (big || v > (UINT64_MAX - d) / 16)
            big = 1;
        else
            v = v * 16 + d;
    }
    if (big)
        return CP_NUM_BIG;
    *out = v;
    return CP_NUM_OK;
}

cp_status cp_lines_init(cp_lines *l, gzFile gz, const char *path, const cp_line_rule *rule)
{
    memset(l, 0, sizeof *l);
    l->gz = gz;
    l->path = path;
    l->rule = rule;
    l->cap = rule->start;
    l->buf = malloc(l->cap);
    if (!l->buf)
        return cp_error_set(CP_ERR_OOM, "out of host memory loading %s", path);
    return CP_OK;
}

void cp_lines_fini(cp_lines *l)
{
    free(l->buf);
    l->buf = NULL;
}

static int lfail(cp_lines *l, size_t line, const char *why)
{
    l->st = cp_error_set(CP_ERR_INVALID, "%s:%zu: %s", l->path, line, why);
    return CP_LINE_ERROR;
}

/* Whether the gzip stream is in error (*err, *msg: zlib's code and reason). */
static int gz_failed(cp_lines *l, int *err, const char **msg)
{
    *msg = cp_gz_reason(gzerror(l->gz, err), l->path);
    return *err != Z_OK && *err != Z_STREAM_END;
}

/* The stream's error at line `line` (the line read, or the next at the
 * end), as the rule takes it: a cut, or an error. */
static int gz_error(cp_lines *l, size_t line, int err, const char *msg)
{
    const cp_line_rule *r = l->rule;
    if (r->cut == CP_CUT_ANY || (r->cut == CP_CUT_TRUNCATED && err == Z_BUF_ERROR)) {
        l->cut_reason = msg;
        return CP_LINE_CUT;
    }
    if (r->flags & CP_LINE_GZ_EACH)
        return lfail(l, line, "truncated or corrupt gzip data");
    l->st = cp_error_set(CP_ERR_INVALID, "%s:%zu: truncated or corrupt gzip data (%s)", l->path,
                         line, msg);
    return CP_LINE_ERROR;
}

/* The checks of a line read (len bytes, full: it filled the largest
 * buffer), in the rule's order (text.h). */
static int check_line(cp_lines *l, size_t len, int full)
{
    const cp_line_rule *r = l->rule;
    const char *msg;
    int err;
    if (r->flags & CP_LINE_GZ_EACH) {
        if (full)
            return lfail(l, l->line, r->too_long);
        if (gz_failed(l, &err, &msg))
            return gz_error(l, l->line, err, msg);
        return CP_LINE_OK;
    }
    if (!l->unterminated)
        return CP_LINE_OK;
    if (gz_failed(l, &err, &msg))
        return gz_error(l, l->line, err, msg);
    if (!(r->flags & CP_LINE_NUL_ANY)) {
        /* a last line without its newline: whole only if the stream ended
         * cleanly (a truncated gzip member hands out its partial last line
         * before reporting the error), a prefix where the rule says so */
        if (r->cut == CP_CUT_ANY && gzeof(l->gz))
            return CP_LINE_CUT;
        if ((uint64_t)gztell(l->gz) - l->offset != len)
            return lfail(l, l->line, "a NUL byte in the line");
    }
    if (full)
        return lfail(l, l->line, r->too_long);
    return CP_LINE_OK;
}

int cp_lines_next(cp_lines *l)
{
    const cp_line_rule *r = l->rule;
    size_t len = 0;
    int got = 0, full = 0, rc;

    l->cut_reason = NULL;
    for (;;) {
        if (!gzgets(l->gz, l->buf + len, (int)(l->cap - len)))
            break;
        got = 1;
        len += strlen(l->buf + len);
        if ((r->flags & CP_LINE_NUL_ANY) && (uint64_t)gztell(l->gz) - l->offset != len)
            return lfail(l, l->line + 1, "a NUL byte in the line");
        if ((len && l->buf[len - 1] == '\n') || len + 1 < l->cap)
            break; /* a whole line, or the last one without its newline */
        if (l->cap >= r->max) {
            full = 1;
            break;
        }
        {
            size_t ncap = 2 * l->cap < r->max ? 2 * l->cap : r->max;
            char *nb = realloc(l->buf, ncap);
            if (!nb) {
                l->st = cp_error_set(CP_ERR_OOM, "out of host memory loading %s", l->path);
                return CP_LINE_ERROR;
            }
            l->buf = nb;
            l->cap = ncap;
        }
    }
    if (!got) {
        const char *msg;
        int err;
        if (gz_failed(l, &err, &msg))
            return gz_error(l, l->line + 1, err, msg);
        return CP_LINE_END;
    }
    l->line++;
    l->unterminated = len && l->buf[len - 1] != '\n';
    rc = check_line(l, len, full);
    if (rc != CP_LINE_OK)
        return rc;
    l->offset += len;
    while (len && (l->buf[len - 1] == '\n' || l->buf[len - 1] == '\r'))
        l->buf[--len] = '\0';
    l->len = len;
    return CP_LINE_OK;
}
