/*
 * cupy_entry.c: the entry points of libcupola_cupy.so, cupola's pools
 * serving CuPy through cupy.cuda.memory.CFunctionAllocator (make
 * cupy-allocator).  The logic is pluggable.c's, shared with
 * libcupola_torch.so; this file names CuPy's variables (CUPOLA_CUPY_POOL,
 * CUPOLA_CUPY_STREAMS, CUPOLA_CUPY_LOG) and adapts CuPy's signatures:
 *
 *   void *malloc(void *param, size_t size, int device_id)
 *   void  free(void *param, void *ptr, int device_id)
 *
 * What CuPy does not say, and how this library stands in:
 *  - The stream.  CuPy's current stream is per thread, in Python, and never
 *    reaches a C allocator.  The param is a cupola_cupy_param whose `stream`
 *    the wrapper (python/cupola_cupy.py) sets to
 *    cupy.cuda.get_current_stream().ptr before each allocation, in a param
 *    of the calling thread's own, so threads never race on it.  A NULL
 *    param, or one without the magic, allocates on the legacy stream.
 *  - The size and stream at free.  CuPy frees by pointer; the library keeps
 *    each live block's size and allocation stream (cpt_free_tracked), and
 *    the block goes back to the pool on the stream it was allocated on, the
 *    stream whose arena CuPy's own pool returns a chunk to.  Free never
 *    reads param (CuPy keeps only its address, which may be gone by then).
 *  - Reuse across streams (the policy): a freed block goes back on the
 *    stream it was allocated on and is reused by that stream in stream
 *    order, and by another stream only once the pool knows the first
 *    stream's work up to the free has completed (the pool's stream-ordered
 *    layer, pool/streamorder.h): CuPy's own guarantee, its arena per stream.
 *    An array used on a second stream and dropped by Python while that
 *    stream still reads it is what CuPy's own pool leaves to the user, and so
 *    does this library by default (CUPOLA_CUPY_STREAMS=trust).  "safe" holds
 *    every free back until events recorded on all the other streams seen
 *    have completed, as for PyTorch (pluggable.h); it records on streams the
 *    program may have destroyed since (a CuPy Stream destroys its stream
 *    when Python drops it), so it is only for programs whose streams outlive
 *    their arrays.  The per-thread default stream (handle 2,
 *    cudaStreamPerThread) is one handle for every thread, so it counts as
 *    one stream here.
 *  - Refusals.  CuPy wraps whatever pointer malloc returns (14.2 also
 *    turns a C++ exception into a RuntimeError, earlier versions
 *    terminate), so malloc returns NULL and keeps why: cupola_cupy_status()
 *    and cupola_cupy_error() for the calling thread.  The wrapper turns NULL
 *    into cupy.cuda.memory.OutOfMemoryError (an exhausted pool) or
 *    RuntimeError (a wrong configuration, a CUDA error): never a pointer at
 *    0 in an array.
 */
#include <stdint.h>
#include <stdio.h>

#include "pluggable.h"

#define EXPORT __attribute__((visibility("default")))

/* "cupolaCP" in ASCII: tells a param of this library from anything else. */
#define CUPOLA_CUPY_MAGIC UINT64_C(0x6375706f6c614350)

typedef struct cupola_cupy_param {
    uint64_t magic;   /* CUPOLA_CUPY_MAGIC */
    uintptr_t stream; /* the stream of the next allocation (0: legacy) */
} cupola_cupy_param;

static const cpt_frontend cupy_frontend = {
    "CUPOLA_CUPY_POOL", "CUPOLA_CUPY_STREAMS", "CUPOLA_CUPY_LOG", "cupola cupy allocator", 1, 0,
};

/* At load, before CuPy or ctypes can call anything. */
__attribute__((constructor)) static void cupy_frontend_init(void)
{
    cpt_set_frontend(&cupy_frontend);
}

static _Thread_local int last_status;

EXPORT void *cupola_cupy_malloc(void *param, size_t size, int device);
EXPORT void cupola_cupy_free(void *param, void *ptr, int device);
EXPORT int cupola_cupy_status(void);
EXPORT int cupola_cupy_error(char *buf, size_t len);
EXPORT int cupola_cupy_stats(char *buf, size_t len);
EXPORT int cupola_cupy_check(void);
EXPORT int cupola_cupy_trim(int device, size_t keep);
EXPORT size_t cupola_cupy_param_size(void);
EXPORT uint64_t cupola_cupy_param_magic(void);

void *cupola_cupy_malloc(void *param, size_t size, int device)
{
    const cupola_cupy_param *pa = param;
    void *stream = pa && pa->magic == CUPOLA_CUPY_MAGIC ? (void *)pa->stream : NULL;
    void *p = NULL;
    last_status = (int)cpt_alloc(size, device, stream, &p);
    return last_status == CPT_OK ? p : NULL;
}

void cupola_cupy_free(void *param, void *ptr, int device)
{
    (void)param;
    cpt_free_tracked(ptr, device);
}

/* The calling thread's last malloc: 0 served, 1 out of memory, 2 a wrong
 * configuration, 3 another error (pluggable.h, cpt_status). */
int cupola_cupy_status(void)
{
    return last_status;
}

int cupola_cupy_error(char *buf, size_t len)
{
    return snprintf(buf, len, "%s", cpt_last_error());
}

int cupola_cupy_stats(char *buf, size_t len)
{
    return cpt_stats_json(buf, len);
}

int cupola_cupy_check(void)
{
    return cpt_check() == CPT_OK ? 0 : -1;
}

int cupola_cupy_trim(int device, size_t keep)
{
    return cpt_trim(device, keep) == CPT_OK ? 0 : -1;
}

size_t cupola_cupy_param_size(void)
{
    return sizeof(cupola_cupy_param);
}

uint64_t cupola_cupy_param_magic(void)
{
    return CUPOLA_CUPY_MAGIC;
}
