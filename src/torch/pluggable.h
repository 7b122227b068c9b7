/*
 * pluggable.h: cupola's C pools behind a framework's allocator hook, the
 * logic shared by libcupola_torch.so (PyTorch's pluggable allocator,
 * torch.cuda.memory.CUDAPluggableAllocator; entry.cpp) and libcupola_cupy.so
 * (CuPy's cupy.cuda.memory.CFunctionAllocator; cupy_entry.c), in plain C
 * over the core (no Lua).  Each library names its environment variables
 * through cpt_set_frontend (PyTorch's, below, by default); CuPy's are
 * CUPOLA_CUPY_POOL, CUPOLA_CUPY_STREAMS and CUPOLA_CUPY_LOG, and since CuPy
 * frees by pointer alone, its library keeps each live block's size and
 * stream (cpt_free_tracked).  Host-testable: on the host backend
 * foreign stream handles are stood for by host streams (backend.h,
 * stream_wrap), so tests/c/test_torch_pluggable.c runs it anywhere.
 *
 * Configuration, read at the first call (cpt_check) from the environment:
 *   CUPOLA_TORCH_POOL     the pool, "KIND[,KEY=VALUE]..." (pool/spec.c):
 *                         "vmm", "tlsf,initial=1GiB,release_threshold=4GiB",
 *                         "cub,max_cached_bytes=1GiB"; default "tlsf"
 *   CUPOLA_TORCH_STREAMS  "safe" (default) or "trust" (below)
 *   CUPOLA_TORCH_LOG      a path: every request (allocate, allocate failure,
 *                         free, as the program made them) written there in RMM's
 *                         CSV, which cupola.trace.load reads, to replay the
 *                         run through a pool (flushed at every stats call)
 *   CUPOLA_BACKEND        as for the Lua module (auto: CUDA when a device answers)
 * A bad value fails every allocation with a message naming it (and prints it
 * on stderr once); nothing crashes.
 *
 * Streams: PyTorch passes the raw cudaStream_t current at the allocation,
 * and the same stream again at the free (its per-allocation metadata).  Each
 * distinct handle is wrapped once (stream_wrap) and kept for the life of the
 * process (PyTorch's streams are never destroyed; a program that destroys
 * one of its own external streams must not free blocks on it afterwards);
 * handle 0 is the legacy default stream.  The pool's `reuse` policy then
 * applies as everywhere in cupola: a block freed on stream S is reused on S in
 * stream order, and on another stream once S's work up to the free has
 * completed (reuse = "event", the default) or behind a wait (reuse = "wait").
 *
 * record_stream: PyTorch's pluggable allocator has no record_stream hook from
 * Python (CUDAPluggableAllocator takes alloc and free only), so
 * Tensor.record_stream(s) does nothing and a tensor used on a second stream
 * is freed to the allocator on its allocation stream as soon as Python drops
 * it, while the other stream may still be reading it.  No allocator that sees
 * only (pointer, stream) can know of that use.  Hence the streams mode:
 *   safe   once a device has seen two or more streams, a free is held back:
 *          an event is recorded on every other stream the library has seen on
 *          that device, and the block reaches the pool only when all of them
 *          have completed (polled at every allocation and free; waited for
 *          when an allocation would otherwise fail).  What PyTorch's own
 *          allocator does for the streams named by record_stream, done for
 *          every stream.  With one stream nothing is held back.
 *   trust  frees reach the pool at once: for programs that keep a tensor
 *          alive until other streams are done with it (or synchronize).
 *
 * Thread safety: one mutex around the library's state (PyTorch allocates from
 * the autograd threads too); the pools lock themselves.
 */
#ifndef CUPOLA_TORCH_PLUGGABLE_H
#define CUPOLA_TORCH_PLUGGABLE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cpt_status {
    CPT_OK = 0,
    CPT_OOM,    /* the pool is out of memory (message: its figures) */
    CPT_CONFIG, /* the environment's configuration is wrong (message names it) */
    CPT_ERROR   /* any other failure (a CUDA error, a bad device) */
} cpt_status;

/* What differs between the libraries: the names of their variables, the
 * prefix of their stderr lines, and whether frees come with their size and
 * stream (PyTorch) or by pointer alone (CuPy: track = 1, then
 * cpt_free_tracked finds both). */
typedef struct cpt_frontend {
    const char *pool_env;    /* "CUPOLA_TORCH_POOL" */
    const char *streams_env; /* "CUPOLA_TORCH_STREAMS" */
    const char *log_env;     /* "CUPOLA_TORCH_LOG" */
    const char *who;         /* "cupola torch allocator" */
    int track;
    /* The streams mode when streams_env is unset: 1 safe (PyTorch, whose
     * streams live as long as the program), 0 trust (CuPy, whose Stream
     * objects destroy their streams when Python drops them: safe mode's
     * events recorded on every stream seen would reach a destroyed one). */
    int safe_default;
} cpt_frontend;

/* Before the first call (a library's constructor); f must outlive the
 * library.  NULL: PyTorch's names.  Tests call it after cpt_reset. */
void cpt_set_frontend(const cpt_frontend *f);

/* Reads the configuration and chooses the backend once; CPT_OK or
 * CPT_CONFIG/CPT_ERROR with the message (cpt_last_error). */
cpt_status cpt_check(void);
/* size 0: *out = NULL and CPT_OK (PyTorch asks; the pool is not involved). */
cpt_status cpt_alloc(size_t size, int device, void *stream, void **out);
/* Frees never fail towards PyTorch (they run in destructors): an error is
 * kept as the last error, counted and printed on stderr. */
void cpt_free(void *ptr, size_t size, int device, void *stream);
/* track = 1: a free by pointer; the block goes back on the stream it was
 * allocated on (the one CuPy's own pool returns a chunk to).  A pointer the
 * library does not hold is counted as a free error, never a crash. */
void cpt_free_tracked(void *ptr, int device);
/* The calling thread's last message (never NULL). */
const char *cpt_last_error(void);
/* The library's figures as JSON (its keys are documented in docs/API.md):
 * writes at most len bytes, NUL included, and returns the length of the whole
 * text (as snprintf), so a caller can retry with a larger buffer. */
int cpt_stats_json(char *buf, size_t len);
/* Frees held back (safe mode) wait for their events and reach the pool;
 * then the pool of device (all devices for -1) returns cached memory to the
 * upstream down to keep bytes (cp_resource_trim).  CPT_OK or CPT_ERROR. */
cpt_status cpt_trim(int device, size_t keep);
/* Tests and tools: the cp_stream (as void *) a native handle maps to on
 * device, wrapping it if it is new (NULL: the legacy stream, or an error). */
void *cpt_stream(void *native, int device);
/* Tests only: drops every pool (they must have no live blocks) and the
 * configuration, so that the next call reads the environment again. */
void cpt_reset(void);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_TORCH_PLUGGABLE_H */
