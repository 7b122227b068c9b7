/*
 * snapshot_impl.h: what the parts of the snapshot decoder share, internal
 * to it (snapshot.h is its interface): the raw entries as decoded, before
 * the rows; the marks that keep the work linear in the file's size.
 *   snapshot.c         the entries, the settings, the entry points
 *   snapshot_frames.c  a frame list into its label
 *   snapshot_rows.c    the rows and PyTorch's reserved bytes over time
 *   snapshot_ops.c     the torch model's operations
 *   cpsnap.c           cupola's compact snapshot
 */
#ifndef CUPOLA_SNAPSHOT_IMPL_H
#define CUPOLA_SNAPSHOT_IMPL_H

#include "snapshot.h"

#include "ptrmap.h"

/* mark = role << 28 | value; value 0 means "not decoded". */
enum { M_ENTRY = 1, M_SEGMENT = 2, M_FRAMES = 3, M_FRAME = 4 };
#define MARK(role, v) ((uint32_t)(role) << 28 | (uint32_t)(v))
#define MROLE(m) ((m) >> 28)
#define MVAL(m) ((m) & UINT32_C(0x0fffffff))
#define MMAX UINT32_C(0x0fffffff)

enum { A_OTHER, A_ALLOC, A_FREE_REQ, A_FREE_DONE, A_SEG_UP, A_SEG_DOWN, A_OOM };

typedef struct raw_event {
    uint64_t addr, size, stream;
    double time_us;
    uint32_t label;
    uint16_t device;
    uint8_t action;
    uint8_t use;      /* free_requested: it is the block's free */
    uint8_t call;     /* segment events: cp_torch_devcall */
    uint8_t done;     /* free_completed: taken with its free_requested (torch ops) */
    size_t order;     /* position before the merge, for a stable sort */
    size_t entry;     /* index in its device's list, for messages */
} raw_event;

typedef struct dec {
    cp_snapshot *s;
    raw_event *raw;
    size_t *rawev;      /* per raw event: the row an allocation became (SIZE_MAX: none) */
    size_t n, cap;
    cp_ptrmap labelmap; /* FNV-1a of the label | 1 -> index + 1 */
    int only;           /* the one device whose entries are read; -1: every device */
    uint16_t opdev;     /* the device the torch model's operations are built from */
} dec;

/* CP_ERR_OOM "out of host memory reading a snapshot". */
cp_status cp_snap_oom(void);
/* The label of a frame list (snapshot.h says what its lines are): index + 1
 * into s->labels, 0 for none. */
cp_status cp_snap_frames_label(dec *d, cp_pk_value *frames, uint32_t *out);
/* The parse hook (pickle.h) that turns each frame list into its label as it
 * is set. */
cp_status cp_snap_frames_hook(void *ud, cp_pk_value *dict, cp_pk_value *key, cp_pk_value *value);
/* From the decoded entries: the rows, PyTorch's reserved bytes over time,
 * and the torch model's operations. */
cp_status cp_snap_process(dec *d);
/* The torch model's operations (snapshot_ops.c says how). */
cp_status cp_snap_torch_ops(dec *d);
/* A compact snapshot's entries (cpsnap.c says its layout). */
cp_status cp_snap_decode_compact(dec *d, const unsigned char *buf, size_t len);

#endif /* CUPOLA_SNAPSHOT_IMPL_H */
