/*
 * test_record.c: the recorder's core (src/record/record.c) and the reader of
 * its files (src/core/trace/record.c through cp_trace_load), on the host
 * (TAP output).  The CUPTI side (inject.c) needs a GPU: bench/record_check.sh.
 *
 *  - file names per process and device under one -o;
 *  - what is written loads back: device memory as rows, frees with their
 *    allocation's size, managed / pinned / vmm / failures kept apart;
 *  - a file of a process killed mid-run (no trailer, cut anywhere, plain
 *    or gzip) loads what is whole, with a warning;
 *  - the writer thread flushes without being asked; a forked child writes
 *    nothing into its parent's files;
 *  - malformed lines fail naming the line.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "record.h"
#include "tap.h"
#include "trace/trace.h"

#define ok tap_ok

static char tmpdir[256];

static void ev(cp_rec *r, int action, int kind, int dev, uint64_t ptr, uint64_t size,
               uint64_t stream, const char *call)
{
    cp_rec_event e;
    memset(&e, 0, sizeof e);
    e.action = (uint8_t)action;
    e.kind = (uint8_t)kind;
    e.device = (int16_t)dev;
    e.ptr = ptr;
    e.size = size;
    e.stream = stream;
    e.call = call;
    e.tid = 7;
    if (action == CP_REC_FREE)
        cp_rec_free(r, &e);
    else
        cp_rec_add(r, &e);
}

static void test_paths(void)
{
    char b[256];
    cp_rec_path("t.csv.gz", 12, 0, b, sizeof b);
    ok(strcmp(b, "t.p12.d0.csv.gz") == 0, "path: t.csv.gz -> %s", b);
    cp_rec_path("out/run.csv", 5, 3, b, sizeof b);
    ok(strcmp(b, "out/run.p5.d3.csv") == 0, "path: out/run.csv -> %s", b);
    cp_rec_path("a.b/trace", 1, 1, b, sizeof b);
    ok(strcmp(b, "a.b/trace.p1.d1") == 0, "path: no extension -> %s", b);
    cp_rec_path("dir/.csv.gz", 1, 0, b, sizeof b);
    ok(strcmp(b, "dir/.csv.p1.d0.gz") == 0, "path: a name that is only an extension -> %s", b);
    ok(cp_rec_path("t.csv.gz", 1, 0, b, 8) == -1, "path: a short buffer is refused");
}

static cp_trace *load(const char *path)
{
    cp_trace *t = NULL;
    if (cp_trace_load(path, &t) != CP_OK)
        return NULL;
    return t;
}

static void test_roundtrip(int gzip)
{
    char out[512], f0[512], f1[512], list[512], line[600];
    cp_rec *r;
    cp_trace *t;
    cp_trace_info in;
    cp_trace_row row;
    cp_rec_stats st;
    FILE *l;
    int nlist = 0;

    snprintf(out, sizeof out, "%s/rt%d.csv%s", tmpdir, gzip, gzip ? ".gz" : "");
    snprintf(list, sizeof list, "%s/list%d", tmpdir, gzip);
    r = cp_rec_open(out, 0, list, "test", 0);
    ok(r != NULL, "open (%s)", gzip ? "gzip" : "plain");
    ev(r, CP_REC_ALLOC, CP_REC_DEVICE, 0, 0x1000, 4096, 0, "cudaMalloc");
    ev(r, CP_REC_ALLOC, CP_REC_DEVICE, 0, 0x3000, 100, 0x55, "cudaMallocAsync");
    ev(r, CP_REC_ALLOC, CP_REC_MANAGED, 0, 0x9000, 1 << 20, 0, "cudaMallocManaged");
    ev(r, CP_REC_ALLOC, CP_REC_PINNED, 0, 0x7000, 512, 0, "cudaMallocHost");
    ev(r, CP_REC_ALLOC_FAIL, CP_REC_DEVICE, 0, 0, 1ull << 40, 0, "cudaMalloc");
    ev(r, CP_REC_ALLOC, CP_REC_DEVICE, 1, 0x5000, 64, 0, "cudaMalloc");
    ev(r, CP_REC_FREE, 0, 0, 0x1000, 0, 0, "cudaFree");
    ev(r, CP_REC_FREE, 0, 0, 0x9000, 0, 0, "cudaFree");        /* managed: kept apart */
    ev(r, CP_REC_FREE, 0, 0, 0x5000, 0, 0, "cudaFree");        /* device 1's file */
    ev(r, CP_REC_FREE, 0, 0, 0xdead000, 0, 0, "cudaFree");     /* never seen */
    ev(r, CP_REC_FREE, 0, 0, 0x3000, 0, 0x55, "cudaFreeAsync");
    cp_rec_flush(r);
    cp_rec_note(r, "a note");
    cp_rec_stats_get(r, &st);
    cp_rec_destroy(r);
    ok(st.events == 11 && st.allocs == 5 && st.frees == 4 && st.unknown_frees == 1 &&
           st.files == 2,
       "stats: 11 events, 5 allocations, 4 frees, 1 unknown free, 2 files");

    cp_rec_path(out, (long)getpid(), 0, f0, sizeof f0);
    cp_rec_path(out, (long)getpid(), 1, f1, sizeof f1);
    l = fopen(list, "r");
    while (l && fgets(line, sizeof line, l)) {
        line[strcspn(line, "\n")] = 0;
        nlist += strcmp(line, f0) == 0 || strcmp(line, f1) == 0;
    }
    if (l)
        fclose(l);
    ok(nlist == 2, "the list names both files");

    t = load(f0);
    ok(t != NULL, "device 0's file loads (%s)", t ? "" : cp_error_msg());
    if (!t)
        return;
    cp_trace_info_get(t, &in);
    ok(strcmp(cp_trace_format(t), "cupola_record") == 0, "format cupola_record");
    ok(in.allocs == 2 && in.frees == 2 && in.events == 4,
       "device memory only: 2 allocations, 2 frees (got %zu, %zu)", in.allocs, in.frees);
    /* managed alloc + free, pinned alloc, the failure, the unknown free */
    ok(in.ignored == 5, "the rest kept apart as ignored (got %zu)", in.ignored);
    ok(in.peak_live == 4196, "peak of device memory 4196 (got %llu)",
       (unsigned long long)in.peak_live);
    ok(in.streams == 2, "two streams");
    ok(cp_trace_warning(t) == NULL, "a whole file has no warning");
    cp_trace_event(t, 2, &row);
    ok(row.is_free && row.pointer == 0x1000 && row.size == 4096,
       "a free carries its allocation's size");
    cp_trace_free(t);
    t = load(f1);
    ok(t != NULL, "device 1's file loads");
    if (t) {
        cp_trace_info_get(t, &in);
        ok(in.allocs == 1 && in.frees == 1, "device 1: its allocation and its free");
        cp_trace_free(t);
    }
}

/* A process that records, flushes, and is killed: no gzip trailer. */
static void killed_child(const char *out, int n)
{
    pid_t pid = fork();
    if (pid == 0) {
        cp_rec *r = cp_rec_open(out, 0, NULL, NULL, 0);
        int i;
        for (i = 0; i < n; i++)
            ev(r, CP_REC_ALLOC, CP_REC_DEVICE, 0, 0x100000 + (uint64_t)i * 0x1000, 256, 0,
               "cudaMalloc");
        cp_rec_flush(r);
        /* more events, buffered but never flushed: lost with the process */
        ev(r, CP_REC_ALLOC, CP_REC_DEVICE, 0, 0x900000, 256, 0, "cudaMalloc");
        raise(SIGKILL);
        _exit(1);
    }
    waitpid(pid, NULL, 0);
}

static long file_size(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

static void test_cut(int gzip)
{
    char out[512], path[512], cutp[512];
    cp_trace *t;
    cp_trace_info in;
    FILE *f;
    char *data;
    long size, k, last = 0;
    int fails = 0, monotone = 1, loaded = 0;

    snprintf(out, sizeof out, "%s/killed%d.csv%s", tmpdir, gzip, gzip ? ".gz" : "");
    /* the child's pid names its file: find it through the list-free way,
     * the only file with that prefix */
    killed_child(out, 300);
    {
        char cmd[1100];
        FILE *p;
        snprintf(cmd, sizeof cmd, "ls %s/killed%d.p*.d0.csv%s", tmpdir, gzip, gzip ? ".gz" : "");
        p = popen(cmd, "r");
        path[0] = 0;
        if (p && fgets(path, sizeof path, p))
            path[strcspn(path, "\n")] = 0;
        if (p)
            pclose(p);
    }
    t = load(path);
    ok(t != NULL, "killed (%s): the file loads (%s)", gzip ? "gzip" : "plain",
       t ? "" : cp_error_msg());
    if (t) {
        cp_trace_info_get(t, &in);
        ok(in.allocs == 300, "killed: the 300 flushed events are there (got %zu)", in.allocs);
        ok(cp_trace_warning(t) != NULL, "killed: it warns (%s)",
           cp_trace_warning(t) ? cp_trace_warning(t) : "none");
        cp_trace_free(t);
    }
    /* Cut the file at every 97th byte: each cut loads what is whole (or is
     * refused before the column line), never more rows than a longer cut. */
    size = file_size(path);
    data = malloc((size_t)size + 1);
    f = fopen(path, "rb");
    if (!data || !f || fread(data, 1, (size_t)size, f) != (size_t)size) {
        ok(0, "read back %s", path);
        free(data);
        if (f)
            fclose(f);
        return;
    }
    fclose(f);
    snprintf(cutp, sizeof cutp, "%s/cut%d.csv%s", tmpdir, gzip, gzip ? ".gz" : "");
    for (k = 1; k < size; k += 97) {
        f = fopen(cutp, "wb");
        fwrite(data, 1, (size_t)k, f);
        fclose(f);
        t = load(cutp);
        if (!t) {
            if (!strstr(cp_error_msg(), "column line") && !strstr(cp_error_msg(), "header") &&
                !strstr(cp_error_msg(), ":1: truncated")) {
                fails++;
                printf("# cut at %ld: %s\n", k, cp_error_msg());
            }
            continue;
        }
        loaded++;
        cp_trace_info_get(t, &in);
        if ((long)in.allocs < last)
            monotone = 0;
        last = (long)in.allocs;
        if (!cp_trace_warning(t)) {
            fails++;
            printf("# cut at %ld: no warning\n", k);
        }
        cp_trace_free(t);
    }
    ok(fails == 0 && loaded > 0, "cuts every 97 bytes (%s): %d loaded with a warning, or refused "
       "before the column line (%d otherwise)", gzip ? "gzip" : "plain", loaded, fails);
    ok(monotone, "a longer cut never has fewer events");
    free(data);
}

static void test_thread(void)
{
    char out[512], path[512];
    cp_rec *r;
    cp_trace *t;
    cp_trace_info in;
    snprintf(out, sizeof out, "%s/thr.csv.gz", tmpdir);
    r = cp_rec_open(out, 10, NULL, NULL, 1);
    ev(r, CP_REC_ALLOC, CP_REC_DEVICE, 0, 0x1000, 8, 0, "cudaMalloc");
    ev(r, CP_REC_ALLOC, CP_REC_DEVICE, 0, 0x2000, 8, 0, "cudaMalloc");
    cp_rec_path(out, (long)getpid(), 0, path, sizeof path);
    /* the writer runs every 10 ms, when the machine lets it: look until both
     * events are there (up to 20 s; a loaded machine can deschedule the
     * thread past any one wait) */
    int loaded = 0;
    in.allocs = 0;
    for (int k = 0; k < 400 && in.allocs < 2; k++) {
        usleep(50000);
        t = load(path); /* still open: no trailer yet */
        if (t) {
            loaded = 1;
            cp_trace_info_get(t, &in);
            cp_trace_free(t);
        }
    }
    ok(loaded, "writer thread: the open file loads");
    ok(in.allocs == 2, "writer thread: both events written without a flush (got %zu)", in.allocs);
    cp_rec_destroy(r);
    t = load(path);
    ok(t && !cp_trace_warning(t), "closed: whole, no warning");
    if (t)
        cp_trace_free(t);
}

static void test_fork(void)
{
    char out[512], path[512];
    cp_rec *r;
    cp_trace *t;
    cp_trace_info in;
    pid_t pid;
    snprintf(out, sizeof out, "%s/fork.csv.gz", tmpdir);
    r = cp_rec_open(out, 10, NULL, NULL, 1);
    ev(r, CP_REC_ALLOC, CP_REC_DEVICE, 0, 0x1000, 8, 0, "cudaMalloc");
    pid = fork();
    if (pid == 0) {
        cp_rec_forked(r);
        ev(r, CP_REC_ALLOC, CP_REC_DEVICE, 0, 0x2000, 8, 0, "cudaMalloc");
        cp_rec_close(r);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    cp_rec_destroy(r);
    cp_rec_path(out, (long)getpid(), 0, path, sizeof path);
    t = load(path);
    ok(t != NULL, "fork: the parent's file loads");
    if (t) {
        cp_trace_info_get(t, &in);
        ok(in.allocs == 1 && !cp_trace_warning(t),
           "fork: the child wrote nothing into it (allocs %zu)", in.allocs);
        cp_trace_free(t);
    }
}

static void bad_line(const char *row, const char *want)
{
    char path[512];
    FILE *f;
    cp_trace *t = NULL;
    snprintf(path, sizeof path, "%s/bad.csv", tmpdir);
    f = fopen(path, "w");
    fprintf(f, "# cupola record 1: pid 1, device 0\n%s\n%s\n", CP_RECORD_HEADER, row);
    fclose(f);
    ok(cp_trace_load(path, &t) == CP_ERR_INVALID && strstr(cp_error_msg(), want) &&
           strstr(cp_error_msg(), "bad.csv:3"),
       "bad row '%s': %s", row, cp_error_msg());
    if (t)
        cp_trace_free(t);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cupola_test_record.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_paths();
    test_roundtrip(1);
    test_roundtrip(0);
    test_cut(1);
    test_cut(0);
    test_thread();
    test_fork();
    bad_line("1,2.0,alloc,0x10,8,0x0,0,device,0x0,cudaMalloc", "action must be");
    bad_line("1,2.0,allocate,0x10,8,0x0,0,gpu,0x0,cudaMalloc", "kind must be");
    bad_line("1,2.0,allocate,16,8,0x0,0,device,0x0,cudaMalloc", "pointer is not");
    bad_line("1,2.0,allocate,0x10,-8,0x0,0,device,0x0,cudaMalloc", "size is not");
    bad_line("1,2.0,allocate,0x10,8,0x0,0,device,0x0", "expected 10 columns");
    bad_line("1,2.0,allocate,0x10,8,0x0,0,device,0x0,a,b", "found more");
    bad_line("1,nan,allocate,0x10,8,0x0,0,device,0x0,cudaMalloc", "time is not");
    bad_line("1,2.0,free,0x10,0,0x0,0,device,0x0,cudaFree", "not live");
    bad_line("1,2.0,allocate,0x10,0,0x0,0,device,0x0,cudaMalloc", "size 0");
    bad_line("1,2.0,allocate,0x10,8,0x0,70000,device,0x0,cudaMalloc", "device is not");
    {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", tmpdir);
    }
    return tap_finish();
}
