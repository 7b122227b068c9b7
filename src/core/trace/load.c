/*
 * load.c: cp_trace_load (trace.h), the dispatcher: a probe of the file
 * (reader.h), a bid from every reader in the table, the highest loads the
 * file into the row builder (builder.h), which finishes the trace.  The
 * loader knows no format: a new one is a reader and a row of the table.
 */
#include "reader.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "json.h"

/* Every reader, in the order that breaks ties and picks the reader of JSON
 * lines whose keys come first (CuPy's "hook" before JAX's "event": a line
 * with both is CuPy's). */
static const cp_trace_reader *const readers[] = {
    &cp_reader_torch_compact, &cp_reader_torch_pickle, &cp_reader_cupy_hook,
    &cp_reader_jax_lines,     &cp_reader_jax_xspace,   &cp_reader_record,
    &cp_reader_rmm_csv,
};
#define NREADERS (sizeof readers / sizeof readers[0])

/* how much of the first line the readers see */
#define FIRST_LINE_MAX 65536

static const cp_trace_reader *best(const cp_trace_probe *p, int *bid)
{
    const cp_trace_reader *win = NULL;
    size_t i;
    *bid = CP_BID_NONE;
    for (i = 0; i < NREADERS; i++) {
        int b = readers[i]->bid(p);
        if (b > *bid) {
            *bid = b;
            win = readers[i];
        }
    }
    return win;
}

/* The readers of JSON lines, as the refusal of lines none of them claims
 * names them: "a JAX memory event (key "event") nor a CuPy hook line ...". */
static cp_status unclaimed_json(const char *path)
{
    char list[512];
    size_t i, n = 0, k = 0;
    list[0] = '\0';
    for (i = NREADERS; i-- > 0;) {
        if (!readers[i]->keys)
            continue;
        n += (size_t)snprintf(list + n, n < sizeof list ? sizeof list - n : 0, "%s%s",
                              k++ ? " nor " : "", readers[i]->what);
        if (n >= sizeof list)
            break;
    }
    return cp_error_set(CP_ERR_INVALID, "%s:1: JSON lines, but neither %s", path, list);
}

/* The JSON-lines reader whose keys the first line has, in the table's order. */
static const cp_trace_reader *keys_of(const char *line)
{
    size_t i;
    for (i = 0; i < NREADERS; i++) {
        const char *const *k;
        for (k = readers[i]->keys; k && *k; k++)
            if (cp_json_has_key(line, *k))
                return readers[i];
    }
    return NULL;
}

/* A folder: the file in it that its reader reads (malloc'd), or NULL with
 * the error set. */
static char *from_folder(const char *path, const cp_trace_probe *pr)
{
    int bid;
    const cp_trace_reader *r = best(pr, &bid);
    char *found = r && r->folder ? r->folder(path) : NULL;
    if (!found)
        cp_error_set(CP_ERR_INVALID, "%s: cannot read: Is a directory, and no %s", path,
                     r && r->folder_what ? r->folder_what : "trace in it");
    return found;
}

static gzFile open_gz(const char *path, cp_status *st)
{
    gzFile gz = gzopen(path, "rb");
    if (!gz) {
        *st = cp_error_set(CP_ERR_BACKEND, "%s: cannot open: %s", path,
                           errno ? strerror(errno) : "out of memory");
        return NULL;
    }
    gzbuffer(gz, 1 << 17);
    *st = CP_OK;
    return gz;
}

/* The first bytes and the first line, through a handle of the probe's own:
 * the reader gets the file afresh, whatever reading the first line did to
 * the stream's state. */
static cp_status probe_file(const char *path, unsigned char *head, char *line,
                            cp_trace_probe *pr)
{
    cp_status st;
    gzFile gz = open_gz(path, &st);
    int got;
    if (!gz)
        return st;
    errno = 0;
    got = gzread(gz, head, 8);
    if (got < 0) /* a directory opens but cannot be read ("cannot rewind" before) */
        st = cp_error_set(CP_ERR_INVALID, "%s: cannot read: %s", path,
                          errno ? strerror(errno) : "read error");
    else if (gzrewind(gz) != 0)
        st = cp_error_set(CP_ERR_BACKEND, "%s: cannot rewind", path);
    if (st == CP_OK) {
        pr->head = head;
        pr->nhead = (size_t)got;
        pr->json = cp_json_starts_object(head, (size_t)got);
        /* the first line: its keys claim JSON lines, its text a recording */
        if (gzgets(gz, line, FIRST_LINE_MAX) == NULL)
            line[0] = '\0';
        if (pr->json)
            pr->keys_of = keys_of(line);
        pr->line = line;
    }
    gzclose(gz);
    return st;
}

/* Probes, picks the reader and loads with it; t->path is the file's. */
static cp_status load_file(cp_trace_builder *b, cp_trace_probe *pr)
{
    cp_trace *t = b->t;
    unsigned char head[8];
    char *line = malloc(FIRST_LINE_MAX);
    gzFile gz;
    cp_status st;
    int bid;

    if (!line)
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    st = probe_file(t->path, head, line, pr);
    if (st == CP_OK) {
        t->reader = best(pr, &bid);
        if (pr->json && !pr->keys_of && bid < CP_BID_UNCLAIMED_JSON)
            st = unclaimed_json(t->path);
        else if (!t->reader)
            st = cp_error_set(CP_ERR_INVALID, "%s: no reader knows this file", t->path);
        else if ((gz = open_gz(t->path, &st)) != NULL) {
            t->format = t->reader->name;
            st = t->reader->load(b, gz, pr);
            gzclose(gz);
        }
    }
    free(line);
    return st;
}

cp_status cp_trace_load(const char *path, cp_trace **out)
{
    return cp_trace_load_device(path, -1, out);
}

cp_status cp_trace_load_device(const char *path, int device, cp_trace **out)
{
    return cp_trace_load_opts(path, device, NULL, out);
}

cp_status cp_trace_load_opts(const char *path, int device, const char *allocator,
                             cp_trace **out)
{
    cp_trace_builder b;
    cp_trace_probe pr;
    cp_trace *t;
    cp_status st;
    char *found = NULL;
    struct stat sb;

    *out = NULL;
    memset(&pr, 0, sizeof pr);
    pr.device = device;
    pr.allocator = allocator;
    pr.path = path;
    pr.line = "";
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        pr.folder = 1;
        found = from_folder(path, &pr);
        if (!found)
            return CP_ERR_INVALID;
        path = found;
        pr.folder = 0;
    }
    t = calloc(1, sizeof *t);
    if (t)
        t->path = malloc(strlen(path) + 1);
    if (!t || !t->path) {
        free(t);
        free(found);
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    }
    strcpy(t->path, path);
    free(found);
    /* path may have been found's: from here on the trace's own copy */
    pr.path = t->path;
    st = cp_tb_init(&b, t);
    if (st != CP_OK) {
        cp_trace_free(t);
        return st;
    }
    st = load_file(&b, &pr);
    if (st == CP_OK)
        st = cp_tb_finish(&b);
    cp_tb_fini(&b);
    if (st != CP_OK) {
        cp_trace_free(t);
        return st;
    }
    *out = t;
    return CP_OK;
}
