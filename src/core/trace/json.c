/*
 * json.c: the JSON scanner of the JSON-lines readers (json.h).
 */
#include "json.h"

#include <string.h>

#include "text.h"

/* deeper nesting is refused: a hostile line cannot exhaust the stack */
#define DEPTH_MAX 64

const char *cp_json_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
        p++;
    return p;
}

const char *cp_json_string(const char *p, unsigned dialect, char *out, size_t n)
{
    const char *s = p + 1;
    size_t k = 0;
    for (;;) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '\0' || (ch < 0x20 && !(dialect & CP_JSON_CONTROLS)))
            return NULL;
        if (ch == '"')
            break;
        if (ch == '\\') {
            if (!s[1])
                return NULL;
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
    return s;
}

const char *cp_json_number(const char *p, uint64_t *v, int *neg, int *isint)
{
    const char *s = p, *digits;
    uint64_t x = 0;
    int big;
    *neg = 0;
    *isint = 1;
    if (*s == '-') {
        *neg = 1;
        s++;
    }
    for (digits = s; *s >= '0' && *s <= '9'; s++)
        ;
    if (s == digits)
        return NULL;
    /* past 2^64-1 (which itself is read): not an integer of 64 bits */
    big = cp_parse_dec(digits, (size_t)(s - digits), UINT64_MAX, &x) != CP_NUM_OK;
    if (*s == '.' || *s == 'e' || *s == 'E') {
        *isint = 0;
        if (*s == '.') {
            s++;
            if (!(*s >= '0' && *s <= '9'))
                return NULL;
            while (*s >= '0' && *s <= '9')
                s++;
        }
        if (*s == 'e' || *s == 'E') {
            s++;
            if (*s == '+' || *s == '-')
                s++;
            if (!(*s >= '0' && *s <= '9'))
                return NULL;
            while (*s >= '0' && *s <= '9')
                s++;
        }
    }
    if (big || (*neg && x > (uint64_t)INT64_MAX + 1))
        *isint = 0;
    *v = *neg ? (uint64_t)0 - x : x;
    return s;
}

static const char *skip(const char *p, unsigned dialect, int depth)
{
    p = cp_json_ws(p);
    if (depth > DEPTH_MAX)
        return NULL;
    if (*p == '"') {
        p = cp_json_string(p, dialect, NULL, 0);
        return p ? p + 1 : NULL;
    }
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = cp_json_ws(p + 1);
        if (*p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                if (*p != '"' || !(p = cp_json_string(p, dialect, NULL, 0)))
                    return NULL;
                p = cp_json_ws(p + 1);
                if (*p != ':')
                    return NULL;
                p++;
            }
            if (!(p = skip(p, dialect, depth + 1)))
                return NULL;
            p = cp_json_ws(p);
            if (*p == ',') {
                p = cp_json_ws(p + 1);
                continue;
            }
            return *p == close ? p + 1 : NULL;
        }
    }
    if ((dialect & CP_JSON_NAN) && strncmp(p, "-Infinity", 9) == 0)
        return p + 9;
    if (*p == '-' || (*p >= '0' && *p <= '9')) {
        uint64_t v;
        int neg, isint;
        if (!(dialect & CP_JSON_LOOSE))
            return cp_json_number(p, &v, &neg, &isint);
        while (*p == '-' || *p == '+' || *p == '.' || *p == 'e' || *p == 'E' ||
               (*p >= '0' && *p <= '9'))
            p++;
        return p;
    }
    if (strncmp(p, "true", 4) == 0 || strncmp(p, "null", 4) == 0)
        return p + 4;
    if (strncmp(p, "false", 5) == 0)
        return p + 5;
    if ((dialect & CP_JSON_NAN) && strncmp(p, "NaN", 3) == 0)
        return p + 3;
    if ((dialect & CP_JSON_NAN) && strncmp(p, "Infinity", 8) == 0)
        return p + 8;
    return NULL;
}

const char *cp_json_skip(const char *p, unsigned dialect)
{
    return skip(p, dialect, 0);
}

/* A member's key and colon at p (blanks skipped before it). */
static int member(cp_json_obj *o, const char *p)
{
    const char *e;
    if (*p != '"')
        return CP_JSON_E_KEY;
    if (!(e = cp_json_string(p, o->dialect, NULL, 0)))
        return CP_JSON_E_KEY_OPEN;
    o->key = p + 1;
    o->klen = (size_t)(e - o->key);
    p = cp_json_ws(e + 1);
    if (*p != ':')
        return CP_JSON_E_COLON;
    o->p = cp_json_ws(p + 1);
    return CP_JSON_MEMBER;
}

/* The object's closing brace at p: only blanks may follow. */
static int closed(cp_json_obj *o, const char *p)
{
    o->p = p + 1;
    return *cp_json_ws(p + 1) ? CP_JSON_E_AFTER : CP_JSON_END;
}

int cp_json_open(cp_json_obj *o, const char *line, unsigned dialect)
{
    const char *p = cp_json_ws(line);
    o->dialect = dialect;
    o->key = NULL;
    o->klen = 0;
    o->p = p;
    if (*p != '{')
        return CP_JSON_E_OBJECT;
    p = cp_json_ws(p + 1);
    if (*p == '}') {
        o->p = p;
        return CP_JSON_EMPTY;
    }
    return member(o, p);
}

int cp_json_close_empty(cp_json_obj *o)
{
    return closed(o, o->p);
}

int cp_json_next(cp_json_obj *o)
{
    const char *p = cp_json_ws(o->p);
    if (*p == ',')
        return member(o, cp_json_ws(p + 1));
    if (*p == '}')
        return closed(o, p);
    return CP_JSON_E_NEXT;
}

int cp_json_starts_object(const unsigned char *head, size_t n)
{
    size_t i = 0;
    while (i < n && (head[i] == ' ' || head[i] == '\t' || head[i] == '\n' || head[i] == '\r'))
        i++;
    return i < n && head[i] == '{';
}

int cp_json_has_key(const char *line, const char *key)
{
    const char *p = line;
    size_t k = strlen(key);
    while ((p = strstr(p, key)) != NULL) {
        p += k;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == ':')
            return 1;
    }
    return 0;
}
