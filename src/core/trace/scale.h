/*
 * scale.h: a program's trace at a size it was not recorded at, from its
 * recordings at two or more other sizes (cupola.trace.scale; `cupola advise
 * A@4 B@8 --at 32`).  The size is what grows from run to run: the batch, the
 * sequence length, the image side; sizes are integers in 1..CP_SCALE_SIZE_MAX.
 *
 * The rules, in order:
 *   - The base is the recording whose size is nearest the one asked (of two
 *     as near, the larger).  The scaled trace is the base's events in the
 *     base's order, on its streams, with its frames: every allocation and
 *     free, PyTorch's pending frees, each empty_cache() and each refused
 *     request (`oom`, kept at its recorded size) where it stood.  Only the
 *     sizes of the allocations change.
 *   - Matching (scale_match.c): each of the base's allocations is looked for
 *     in each other recording by its key: its stack where the snapshot has
 *     frames (every frame, C++ ones included, is part of it), its stream by
 *     order of first use (stream handles differ from run to run) and its
 *     device.  Frame-less allocations (the backward pass's with
 *     stacks="python", made on autograd's threads; all of a CSV trace's)
 *     share one key, so among them the position decides.  First strictly,
 *     as a shortest edit script: the same key, and sizes that follow a law
 *     between the two recorded sizes (equal, or in proportion to the size,
 *     its square or its cube); then, between two strict matches, the same
 *     key in order, whatever the sizes.
 *   - Fitting: a matched allocation's size as a function of the size.  From
 *     two recordings: the law the strict match found, else the line through
 *     both.  From three or more: a law every recording follows exactly,
 *     else the polynomial of lowest degree, through the base and the
 *     recordings nearest it, that gives every recording's size to PyTorch's
 *     rounding (the next multiple of 512 bytes).  Two
 *     recordings cannot show a square plus a line (attention's scores plus
 *     the rest, as a sequence length grows): a line through two recordings
 *     that grows faster than in proportion to the size is counted
 *     (info.steeper, and its bytes at the peak); a third recording fits it.
 *   - Rules: an allocation of the base found in no other recording (a
 *     library's workspace, an algorithm chosen by size, a step that
 *     allocates one more buffer) keeps its recorded size; the allocations of
 *     other recordings found nowhere in the base are left out (near the base,
 *     the base says what the program does: info.left_out counts them); a fit
 *     that gives less than one byte takes the smallest size recorded.  These
 *     are info.by_rule.  At the base's own size every size is the base's.
 *   - Refusals (CP_ERR_INVALID, one sentence): fewer than two recordings; two
 *     of one size; a JAX profile or a CuPy log (PyTorch snapshots and CSV
 *     traces only), or a trace that is itself a prediction; recordings under
 *     different allocator settings; a recording without allocations; two
 *     recordings of which fewer than half the smaller one's allocations match
 *     strictly (another program): the sentence says where they first differ.
 *   - A scaled trace has no figures of PyTorch's.  It keeps the base's
 *     device calls (cudaMalloc and cudaFree of segments, with the addresses
 *     CUDA gave them): a replay with addresses "recorded" takes those
 *     addresses while the model's calls are the base's (the program's first
 *     calls, the weights' and the optimizer's, are the same at every size,
 *     and a driver places the same calls alike), then the address model.
 *
 * Plain C: never includes lua.h.
 */
#ifndef CUPOLA_SCALE_H
#define CUPOLA_SCALE_H

#include <stddef.h>
#include <stdint.h>

#include "trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest size (and size asked): 2^31 - 1, far past any batch, sequence
 * or side, and small enough that a cube of it is exact in the fits. */
#define CP_SCALE_SIZE_MAX ((uint64_t)INT32_MAX)
/* At most this many recordings (a fit keeps up to this many points). */
#define CP_SCALE_RECORDINGS_MAX 64

typedef struct cp_scale_info {
    const uint64_t *from;   /* the recorded sizes, ascending */
    size_t nfrom;
    uint64_t at;            /* the size of the prediction */
    uint64_t base;          /* the size of the recording whose events it keeps */
    size_t matched;         /* the base's allocations found in another recording */
    size_t by_rule;         /* ... whose size came by a rule */
    uint64_t by_rule_bytes; /* bytes in use at the trace's peak (peak_live) that came by rule */
    /* the matched ones by the fit their size took */
    size_t constant, linear, square, cube, affine, polynomial;
    size_t steeper;         /* lines through two recordings growing faster than the size */
    uint64_t steeper_bytes; /* ... their bytes in use at the peak */
    size_t left_out;        /* allocations of the other recordings not in the base, in all */
} cp_scale_info;

/* The trace at size `at` from n recordings (traces loaded from PyTorch
 * snapshots or CSV) at sizes[i].  The recordings are read, never changed. */
cp_status cp_trace_scale(const cp_trace *const *recs, const uint64_t *sizes, size_t n,
                         uint64_t at, cp_trace **out);
/* The same program at another size from a scaled trace: its base and fits
 * kept, no matching again (a search over sizes). */
cp_status cp_trace_rescale(const cp_trace *scaled, uint64_t at, cp_trace **out);
/* What a scaled trace is (NULL for any other trace). */
const cp_scale_info *cp_trace_scale_info(const cp_trace *t);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_SCALE_H */
