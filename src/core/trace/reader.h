/*
 * reader.h: a trace format's reader, as the loader (load.c) sees it,
 * internal to trace/.  Readers bid and load the way libarchive's format
 * readers do: the loader shows every reader the same probe of the file
 * (its first bytes, its first line, its name, whether it is a folder), each
 * bids, the highest bid loads the file into a row builder (builder.h).  A
 * reader depends on the builder and the shared helpers (text.h, json.h),
 * never on another reader or on the loader.
 *
 * Bids, highest first, and the readers that make them (ties: the table's
 * order in load.c).  Their order is the order the loader has always
 * recognised files in, pinned down by the specs:
 *   100  the compact snapshot: its magic ("CPSNAP1\n")
 *    90  a PyTorch snapshot pickle: PROTO's byte first, or named *.pickle,
 *        *.pkl (any file so named is read as a pickle, to be called one)
 *   (80) JSON lines whose first line has no reader's keys: refused by the
 *        loader, naming the readers that read JSON lines
 *    70  JAX memory events as JSON lines: the first line's keys
 *    60  a JAX profile (XSpace): named *.xplane.pb(.gz), or a protobuf whose
 *        first field is a plane; a folder (the profile in it)
 *    50  a CuPy hook log: the first line's key
 *    20  a `cupola record` file: its first line
 *    10  an RMM log (CSV): anything else, refused by its header if not one
 *
 * Plain C: never includes lua.h.
 */
#ifndef CUPOLA_TRACE_READER_H
#define CUPOLA_TRACE_READER_H

#include <stddef.h>
#include <zlib.h>

#include "builder.h"

/* What a reader bids on.  For a folder, only path and folder hold (the
 * reader that wins names the file in it to read, which is probed again). */
typedef struct cp_trace_probe {
    const char *path;            /* the file's name as given */
    int folder;                  /* path is a folder */
    const unsigned char *head;   /* the first bytes */
    size_t nhead;                /* how many (0: an empty file; at most 8) */
    const char *line;            /* the first line, NUL-terminated, at most
                                    64 KiB (a longer one cut) */
    /* The JSON-lines reader whose keys the first line has (the first in
     * the table's order), NULL: none, or not JSON lines. */
    const struct cp_trace_reader *keys_of;
    int json;                    /* the first bytes start a JSON object */
    int device;                  /* the one device asked for (-1: all) */
    const char *allocator;       /* the allocator asked for (NULL: none) */
} cp_trace_probe;

typedef struct cp_trace_reader {
    const char *name;            /* the format: what cp_trace_format says */
    const char *what;            /* in a sentence: "a CuPy hook line (key \"hook\")" */
    /* JSON lines: keys (quoted, "\"hook\"") of which one in the first line
     * claims the file; NULL for other formats */
    const char *const *keys;
    int (*bid)(const cp_trace_probe *p);
    /* A folder this reader bid on: the file in it to read (malloc'd), or
     * NULL when it holds none; folder_what says what was looked for. */
    char *(*folder)(const char *dir);
    const char *folder_what;
    /* Reads the whole file (gz, at its start) into b; the status, with the
     * message set on failure. */
    cp_status (*load)(cp_trace_builder *b, gzFile gz, const cp_trace_probe *p);
    /* Frees what load attached to the trace beyond its rows (NULL: nothing). */
    void (*free)(cp_trace *t);
} cp_trace_reader;

/* Bid levels (above). */
enum {
    CP_BID_NONE = 0,
    CP_BID_RMM_CSV = 10,
    CP_BID_RECORD = 20,
    CP_BID_CUPY = 50,
    CP_BID_XSPACE = 60,
    CP_BID_JAX_LINES = 70,
    CP_BID_UNCLAIMED_JSON = 80,
    CP_BID_PICKLE = 90,
    CP_BID_COMPACT = 100
};

/* The readers there are (their files: csv.c, record.c, snapshot_load.c,
 * jax_load.c, cupy_hook.c). */
extern const cp_trace_reader cp_reader_rmm_csv;
extern const cp_trace_reader cp_reader_record;
extern const cp_trace_reader cp_reader_torch_pickle;
extern const cp_trace_reader cp_reader_torch_compact;
extern const cp_trace_reader cp_reader_jax_lines;
extern const cp_trace_reader cp_reader_jax_xspace;
extern const cp_trace_reader cp_reader_cupy_hook;

#endif /* CUPOLA_TRACE_READER_H */
