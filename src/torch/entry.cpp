/*
 * entry.cpp: the entry points of libcupola_torch.so (the logic is C, in
 * pluggable.c; pluggable.h says what it does).
 *
 * This one file is C++ because PyTorch calls cupola_torch_alloc from C++
 * (std::function inside CUDAPluggableAllocator) and turns a C++ exception
 * into a Python error at its boundary: a failing allocation then raises
 * RuntimeError in the Python program with cupola's message ("CUDA out of
 * memory. ..." when the pool is full, "cupola: ..." for a wrong
 * configuration).  C cannot throw, and a NULL from alloc_fn is not checked by
 * PyTorch: the tensor would get a null pointer, and the first kernel to touch
 * it would fault the device.  Frees never throw (PyTorch calls them from
 * destructors).
 *
 * For Python:
 *   torch.cuda.memory.CUDAPluggableAllocator(path, "cupola_torch_alloc",
 *                                            "cupola_torch_free")
 * and through ctypes: cupola_torch_stats(buf, len) -> length of the JSON
 * (written into buf, NUL-terminated, cut to len), cupola_torch_check() -> 0
 * or -1 (a wrong configuration, also printed on stderr),
 * cupola_torch_error(buf, len), cupola_torch_trim(device, keep) -> 0 or -1.
 */
#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "pluggable.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT void *cupola_torch_alloc(size_t size, int device, void *stream)
{
    void *p = nullptr;
    cpt_status st = cpt_alloc(size, device, stream, &p);
    if (st == CPT_OK)
        return p;
    if (st == CPT_OOM)
        throw std::runtime_error(std::string("CUDA out of memory. ") + cpt_last_error());
    throw std::runtime_error(std::string("cupola: ") + cpt_last_error());
}

EXPORT void cupola_torch_free(void *ptr, size_t size, int device, void *stream)
{
    cpt_free(ptr, size, device, stream);
}

EXPORT int cupola_torch_stats(char *buf, size_t len)
{
    return cpt_stats_json(buf, len);
}

EXPORT int cupola_torch_check(void)
{
    return cpt_check() == CPT_OK ? 0 : -1;
}

EXPORT int cupola_torch_error(char *buf, size_t len)
{
    return std::snprintf(buf, len, "%s", cpt_last_error());
}

EXPORT int cupola_torch_trim(int device, size_t keep)
{
    return cpt_trim(device, keep) == CPT_OK ? 0 : -1;
}
