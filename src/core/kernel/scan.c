/*
 * kernel/scan.c: the source scan of scan.h.  Not a C++ parser: it tokenizes
 * (identifiers, punctuation, brace depth, lines) and looks for a few fixed
 * shapes; anything it does not recognise is left to the compiler.
 */
#include "kernel/scan.h"

#include <stdlib.h>
#include <string.h>

typedef struct tok {
    size_t start, len;
    int line, depth;
    char kind; /* 'i' identifier, 'p' punctuation, 'n' number */
} tok;

typedef struct toks {
    tok *v;
    size_t n, cap;
} toks;

static int push(toks *t, size_t start, size_t len, int line, int depth, char kind)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        tok *v = realloc(t->v, cap * sizeof *v);
        if (!v)
            return 0;
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n].start = start;
    t->v[t->n].len = len;
    t->v[t->n].line = line;
    t->v[t->n].depth = depth;
    t->v[t->n].kind = kind;
    t->n++;
    return 1;
}

static int is_id0(char c)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int is_id(char c)
{
    return is_id0(c) || (c >= '0' && c <= '9');
}

static int tokenize(const char *s, size_t n, toks *t, int *launch_line)
{
    size_t i = 0;
    int line = 1, depth = 0, bol = 1;
    while (i < n) {
        char c = s[i];
        if (c == '\n') {
            line++, i++, bol = 1;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            i++;
            continue;
        }
        if (c == '#' && bol) { /* a preprocessor line, with its continuations */
            while (i < n && s[i] != '\n') {
                if (s[i] == '\\' && i + 1 < n && s[i + 1] == '\n')
                    line++, i++;
                i++;
            }
            continue;
        }
        bol = 0;
        if (c == '/' && i + 1 < n && s[i + 1] == '/') {
            while (i < n && s[i] != '\n')
                i++;
            continue;
        }
        if (c == '/' && i + 1 < n && s[i + 1] == '*') {
            i += 2;
            while (i < n && !(s[i] == '*' && i + 1 < n && s[i + 1] == '/')) {
                if (s[i] == '\n')
                    line++;
                i++;
            }
            i = i + 2 < n ? i + 2 : n;
            continue;
        }
        if (c == '"' || c == '\'') {
            /* a literal ends at its quote or, unterminated, before the end
             * of its line, which is counted like any other (an escaped
             * newline, a continuation, is counted here) */
            char q = c;
            i++;
            while (i < n && s[i] != q && s[i] != '\n') {
                if (s[i] == '\\' && i + 1 < n) {
                    if (s[i + 1] == '\n')
                        line++;
                    i++;
                }
                i++;
            }
            if (i < n && s[i] == q)
                i++;
            continue;
        }
        if (is_id0(c)) {
            size_t b = i;
            while (i < n && is_id(s[i]))
                i++;
            if (!push(t, b, i - b, line, depth, 'i'))
                return 0;
            continue;
        }
        if (c >= '0' && c <= '9') {
            size_t b = i;
            while (i < n && (is_id(s[i]) || s[i] == '.' || s[i] == '\''))
                i++;
            if (!push(t, b, i - b, line, depth, 'n'))
                return 0;
            continue;
        }
        if (c == '<' && i + 2 < n && s[i + 1] == '<' && s[i + 2] == '<' && !*launch_line)
            *launch_line = line;
        if (c == '{')
            depth++;
        if (!push(t, i, 1, line, depth, 'p'))
            return 0;
        if (c == '}' && depth > 0)
            depth--;
        i++;
    }
    return 1;
}

static int is(const char *s, const tok *k, const char *w)
{
    size_t n = strlen(w);
    return k->len == n && memcmp(s + k->start, w, n) == 0;
}

static int add_name(cp_kscan *out, const char *s, size_t len)
{
    char **v;
    for (size_t i = 0; i < out->nkernels; i++)
        if (strlen(out->kernels[i]) == len && memcmp(out->kernels[i], s, len) == 0)
            return 1;
    v = realloc(out->kernels, (out->nkernels + 1) * sizeof *v);
    if (!v)
        return 0;
    out->kernels = v;
    v[out->nkernels] = malloc(len + 1);
    if (!v[out->nkernels])
        return 0;
    memcpy(v[out->nkernels], s, len);
    v[out->nkernels][len] = '\0';
    out->nkernels++;
    return 1;
}

/* Skips a balanced ( ... ) group starting at t[i] == '('; returns the index after it. */
static size_t skip_parens(const char *s, const toks *t, size_t i)
{
    int d = 0;
    for (; i < t->n; i++) {
        if (is(s, &t->v[i], "("))
            d++;
        else if (is(s, &t->v[i], ")") && --d == 0)
            return i + 1;
    }
    return i;
}

/* Whether the source names anything that makes a thread wait for others
 * (or stop the block): the host backend then needs fibers. */
static int find_sync(const char *s, const toks *t)
{
    static const char *const names[] = {
        "__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or",
        "__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
        "__ballot_sync", "__any_sync", "__all_sync", "__activemask", "__trap", NULL};
    for (size_t i = 0; i < t->n; i++) {
        if (t->v[i].kind != 'i' || t->v[i].len < 6 || s[t->v[i].start] != '_')
            continue;
        for (int k = 0; names[k]; k++)
            if (is(s, &t->v[i], names[k]))
                return 1;
    }
    return 0;
}

static int find_kernels(const char *s, const toks *t, cp_kscan *out)
{
    for (size_t i = 0; i < t->n; i++) {
        size_t j, name = (size_t)-1;
        int templ = 0;
        if (!is(s, &t->v[i], "__global__"))
            continue;
        for (j = i; j-- > 0;) {
            if (is(s, &t->v[j], ";") || is(s, &t->v[j], "}") || is(s, &t->v[j], "{"))
                break;
            if (is(s, &t->v[j], "template"))
                templ = 1;
        }
        if (templ)
            continue;
        for (j = i + 1; j < t->n; j++) {
            if (is(s, &t->v[j], "__launch_bounds__") || is(s, &t->v[j], "__attribute__") ||
                is(s, &t->v[j], "__align__")) {
                if (j + 1 < t->n && is(s, &t->v[j + 1], "(")) {
                    j = skip_parens(s, t, j + 1) - 1;
                    continue;
                }
            }
            if (is(s, &t->v[j], "(") || is(s, &t->v[j], ";") || is(s, &t->v[j], "{"))
                break;
            if (t->v[j].kind == 'i')
                name = j;
        }
        if (j < t->n && is(s, &t->v[j], "(") && name == j - 1 &&
            !(name > 0 && (is(s, &t->v[name - 1], ":") || is(s, &t->v[name - 1], "~"))))
            if (!add_name(out, s + t->v[name].start, t->v[name].len))
                return 0;
    }
    return 1;
}

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static int put(sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        char *p;
        while (cap < b->n + n + 1)
            cap *= 2;
        p = realloc(b->p, cap);
        if (!p)
            return 0;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 1;
}

static int puts_(sbuf *b, const char *s)
{
    return put(b, s, strlen(s));
}

/* `extern __shared__ T name[];` inside a function ->
 * `T *const name = (T *)cp__hk_dyn_shared();` keeping the line count. */
static int rewrite_shared(const char *s, size_t n, const toks *t, cp_kscan *out)
{
    sbuf b = {NULL, 0, 0};
    size_t at = 0;
    for (size_t i = 0; i + 1 < t->n; i++) {
        size_t j, semi, nm;
        if (!is(s, &t->v[i], "extern") || !is(s, &t->v[i + 1], "__shared__") || t->v[i].depth == 0)
            continue;
        for (semi = i + 2; semi < t->n && !is(s, &t->v[semi], ";"); semi++)
            ;
        /* ... name [ ] ; */
        if (semi >= t->n || semi < i + 6 || !is(s, &t->v[semi - 1], "]") ||
            !is(s, &t->v[semi - 2], "[") || t->v[semi - 3].kind != 'i')
            continue;
        nm = semi - 3;
        if (!put(&b, s + at, t->v[i].start - at))
            goto oom;
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 1 && !puts_(&b, "*)cp__hk_dyn_shared();"))
                goto oom;
            if (pass == 1)
                break;
            /* the type, twice: declaration and cast */
            for (int k = 0; k < 2; k++) {
                if (k == 1 && !puts_(&b, "("))
                    goto oom;
                for (j = i + 2; j < nm; j++) {
                    if ((is(s, &t->v[j], "__align__") || is(s, &t->v[j], "__attribute__")) &&
                        j + 1 < nm && is(s, &t->v[j + 1], "(")) {
                        j = skip_parens(s, t, j + 1) - 1;
                        continue;
                    }
                    if (!put(&b, s + t->v[j].start, t->v[j].len) || !puts_(&b, " "))
                        goto oom;
                }
                if (k == 0 && (!puts_(&b, "*const ") ||
                               !put(&b, s + t->v[nm].start, t->v[nm].len) || !puts_(&b, " = ")))
                    goto oom;
            }
        }
        for (int l = t->v[i].line; l < t->v[semi].line; l++)
            if (!puts_(&b, "\n"))
                goto oom;
        at = t->v[semi].start + 1;
        i = semi;
    }
    if (!put(&b, s + at, n - at))
        goto oom;
    out->text = b.p;
    out->text_len = b.n;
    return 1;
oom:
    free(b.p);
    return 0;
}

cp_status cp_kscan_source(const char *src, size_t n, int rewrite, cp_kscan *out)
{
    toks t = {NULL, 0, 0};
    memset(out, 0, sizeof *out);
    if (!tokenize(src, n, &t, &out->launch_line) || !find_kernels(src, &t, out) ||
        (rewrite && !rewrite_shared(src, n, &t, out))) {
        free(t.v);
        cp_kscan_free(out);
        return cp_error_set(CP_ERR_OOM, "out of memory scanning a module's source");
    }
    out->uses_sync = find_sync(src, &t);
    free(t.v);
    return CP_OK;
}

void cp_kscan_free(cp_kscan *s)
{
    for (size_t i = 0; i < s->nkernels; i++)
        free(s->kernels[i]);
    free(s->kernels);
    free(s->text);
    memset(s, 0, sizeof *s);
}
