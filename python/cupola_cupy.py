"""cupola's pools serving CuPy (libcupola_cupy.so, built by `make cupy-allocator`).

    import cupola_cupy
    alloc = cupola_cupy.install()          # pool from CUPOLA_CUPY_POOL (default "tlsf")
    ...                                     # CuPy code, unchanged
    print(alloc.stats()["devices"][0]["reserved_peak"])

install(lib=None) loads the library (lib, else $CUPOLA_CUPY_LIB, else
build/libcupola_cupy.so beside this folder, else the name alone), checks the
configuration (a bad CUPOLA_CUPY_POOL raises RuntimeError here, naming it),
and makes CuPy allocate through it: cupy.cuda.set_allocator(alloc.malloc).
CuPy's own MemoryPool is then not used.

Why this small wrapper around cupy.cuda.memory.CFunctionAllocator:
  - CuPy does not tell a C allocator the stream.  Each thread gets a param of
    its own, into which malloc writes cupy.cuda.get_current_stream().ptr
    before calling the library: the block is served on that stream and goes
    back to the pool on it when CuPy frees it (src/torch/cupy_entry.c states
    the reuse policy across streams).
  - CuPy wraps whatever pointer the C function returns.  The library returns
    NULL on a refusal; this wrapper turns it into
    cupy.cuda.memory.OutOfMemoryError (the pool is exhausted; cupola's
    figures in the message) or RuntimeError (a wrong configuration, a CUDA
    error), so no array ever gets a pointer at 0.
"""
import ctypes
import json
import os
import threading

__all__ = ["install", "uninstall", "Allocator", "library_path"]

_OK, _OOM, _CONFIG, _ERROR = 0, 1, 2, 3


class _Param(ctypes.Structure):
    # src/torch/cupy_entry.c, cupola_cupy_param
    _fields_ = [("magic", ctypes.c_uint64), ("stream", ctypes.c_void_p)]


def library_path(lib=None):
    if lib:
        return lib
    env = os.environ.get("CUPOLA_CUPY_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(here, "..", "build", "libcupola_cupy.so"),
                 os.path.join(here, "libcupola_cupy.so")):
        if os.path.exists(cand):
            return os.path.normpath(cand)
    return "libcupola_cupy.so"


class Allocator:
    """One loaded library; malloc(size) is what cupy.cuda.set_allocator takes."""

    def __init__(self, lib=None):
        import cupy
        self._cupy = cupy
        self._mem = cupy.cuda.memory
        self.path = library_path(lib)
        L = self.lib = ctypes.CDLL(self.path)
        L.cupola_cupy_check.restype = ctypes.c_int
        L.cupola_cupy_status.restype = ctypes.c_int
        L.cupola_cupy_error.restype = ctypes.c_int
        L.cupola_cupy_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        L.cupola_cupy_stats.restype = ctypes.c_int
        L.cupola_cupy_stats.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        L.cupola_cupy_trim.restype = ctypes.c_int
        L.cupola_cupy_trim.argtypes = [ctypes.c_int, ctypes.c_size_t]
        L.cupola_cupy_param_size.restype = ctypes.c_size_t
        L.cupola_cupy_param_magic.restype = ctypes.c_uint64
        if L.cupola_cupy_param_size() != ctypes.sizeof(_Param):
            raise RuntimeError("cupola: %s does not match this wrapper (param size)" % self.path)
        self._magic = L.cupola_cupy_param_magic()
        if L.cupola_cupy_check() != 0:
            raise RuntimeError("cupola: " + self.error())
        self._malloc_fn = ctypes.cast(L.cupola_cupy_malloc, ctypes.c_void_p).value
        self._free_fn = ctypes.cast(L.cupola_cupy_free, ctypes.c_void_p).value
        self._local = threading.local()

    def error(self):
        buf = ctypes.create_string_buffer(1024)
        self.lib.cupola_cupy_error(buf, len(buf))
        return buf.value.decode(errors="replace")

    def stats(self):
        """The library's figures (docs/API.md lists the keys) as a dict."""
        n = 8192
        while True:
            buf = ctypes.create_string_buffer(n)
            k = self.lib.cupola_cupy_stats(buf, n)
            if k < n:
                return json.loads(buf.value.decode())
            n = k + 1

    def trim(self, device=-1, keep=0):
        """Frees held back reach the pool, then cached memory above keep bytes goes back."""
        if self.lib.cupola_cupy_trim(device, keep) != 0:
            raise RuntimeError("cupola: " + self.error())

    def _thread(self):
        # A param per thread: the stream written into it is read by the
        # library in the same call, never by another thread's.
        try:
            return self._local.cfa, self._local.param
        except AttributeError:
            param = _Param(self._magic, None)
            cfa = self._mem.CFunctionAllocator(ctypes.addressof(param), self._malloc_fn,
                                               self._free_fn, (self, param))
            self._local.cfa, self._local.param = cfa, param
            return cfa, param

    def malloc(self, size):
        cfa, param = self._thread()
        stream = self._cupy.cuda.get_current_stream()
        param.stream = stream.ptr or None
        if stream.ptr and stream.ptr not in _streams:
            # A CuPy Stream destroys its CUDA stream when Python drops it, and
            # the library may still record on that stream when it frees or
            # reuses the stream's blocks: the stream lives as long as they may.
            with _streams_lock:
                _streams.setdefault(stream.ptr, stream)
        mp = cfa.malloc(size)
        if size > 0 and mp.ptr == 0:
            status, msg = self.lib.cupola_cupy_status(), self.error()
            if status == _OOM:
                used = -1
                try:
                    dev = self._cupy.cuda.runtime.getDevice()
                    for d in self.stats()["devices"]:
                        if d["device"] == dev:
                            used = d["used"]
                except Exception:  # the figures are a courtesy; the error is not
                    pass
                e = self._mem.OutOfMemoryError(size, used)
                e.args = ("%s (cupola: %s)" % (e.args[0] if e.args else "", msg),)
                raise e
            raise RuntimeError("cupola: " + msg)
        return mp


_installed = None
# Every CuPy Stream an allocation was made on, by its pointer, for the life of
# the process (see Allocator.malloc): its blocks may be freed at any time.
_streams = {}
_streams_lock = threading.Lock()


def install(lib=None):
    """Makes CuPy allocate from cupola's pool; returns the Allocator."""
    global _installed
    import cupy
    a = Allocator(lib)
    cupy.cuda.set_allocator(a.malloc)
    _installed = a
    return a


def uninstall():
    """Back to CuPy's default pool (blocks already handed out stay valid)."""
    global _installed
    import cupy
    cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)
    _installed = None
