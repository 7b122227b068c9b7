#!/usr/bin/env python3
"""python/cupola_cupy.py against libcupola_cupy.so, without a GPU or CuPy.

A stand-in `cupy` module (below) calls the library's malloc and free exactly
as cupy.cuda.memory.CFunctionAllocator does (CuPy 14.2: malloc(param, size,
device) when an allocation is made with size > 0, free(param, ptr, device)
when the memory object dies with a nonzero pointer), on the host backend.
Checks: blocks served and freed on the current stream, a refusal raised as
OutOfMemoryError with cupola's figures and no pointer at 0 handed out, a
bad CUPOLA_CUPY_POOL a RuntimeError at install, the stats readable.

  CUPOLA_BACKEND=host python3 tests/cupy/test_wrapper.py build/libcupola_cupy.so
Prints TAP; exit status 1 on a failure.
"""
import ctypes
import os
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

MALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)


def fake_cupy():
    cupy = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    memory = types.ModuleType("cupy.cuda.memory")
    runtime = types.SimpleNamespace(getDevice=lambda: 0)
    state = {"stream": 0, "allocator": None}

    class OutOfMemoryError(MemoryError):
        def __init__(self, size, total, limit=0):
            super().__init__("Out of memory allocating {:,} bytes (allocated so far: {:,} bytes)."
                             .format(size, total))

    class Mem:
        def __init__(self, size, param, mf, ff, dev):
            self.param, self.ff, self.dev, self.size, self.ptr = param, ff, dev, size, 0
            if size > 0:
                self.ptr = MALLOC(mf)(param, size, dev) or 0

        def __del__(self):
            if self.ptr:
                FREE(self.ff)(self.param, self.ptr, self.dev)

    class CFunctionAllocator:
        def __init__(self, param, mf, ff, owner):
            self.param, self.mf, self.ff, self.owner = param, mf, ff, owner

        def malloc(self, size):
            return Mem(size, self.param, self.mf, self.ff, 0)  # MemoryPointer(mem, 0): .ptr alike

    memory.OutOfMemoryError = OutOfMemoryError
    memory.CFunctionAllocator = CFunctionAllocator
    cuda.memory = memory
    cuda.runtime = runtime
    cuda.get_current_stream = lambda: types.SimpleNamespace(ptr=state["stream"])
    cuda.set_allocator = lambda a=None: state.__setitem__("allocator", a)
    cupy.cuda = cuda
    cupy.get_default_memory_pool = lambda: types.SimpleNamespace(malloc=None)
    cupy._state = state
    sys.modules["cupy"], sys.modules["cupy.cuda"], sys.modules["cupy.cuda.memory"] = cupy, cuda, memory
    return cupy


n = 0
failed = 0


def ok(cond, what):
    global n, failed
    n += 1
    if not cond:
        failed += 1
    print("%s %d - %s" % ("ok" if cond else "not ok", n, what), flush=True)


def main(lib):
    cupy = fake_cupy()
    import cupola_cupy
    os.environ["CUPOLA_BACKEND"] = "host"
    os.environ["CUPOLA_CUPY_POOL"] = "tlsf,max=4MiB"
    a = cupola_cupy.install(lib)
    ok(cupy._state["allocator"] == a.malloc, "install sets CuPy's allocator")
    m = a.malloc(1000)
    ok(m.ptr != 0 and a.stats()["devices"][0]["used"] == 1000, "1000 bytes served")
    del m
    ok(a.stats()["devices"][0]["used"] == 0, "freed when CuPy's memory object dies")
    z = a.malloc(0)
    ok(z.ptr == 0, "size 0: no pointer, no call")
    try:
        a.malloc(8 << 20)
        ok(False, "a refusal raises")
    except cupy.cuda.memory.OutOfMemoryError as e:
        ok("Tried to allocate" in str(e) and "Out of memory allocating 8,388,608" in str(e),
           "a refusal is CuPy's OutOfMemoryError with cupola's figures (%s)" % e)
    m = a.malloc(4096)
    ok(m.ptr != 0, "what fits is still served")
    del m
    cupy._state["stream"] = 0x1000  # a made-up handle: the host backend stands a stream in
    p = a.malloc(2048)
    st = a.stats()
    ok(p.ptr != 0 and st["foreign_streams"] == 1, "the current stream reaches the library")
    del p
    # CuPy's default is trust: the free goes back on its stream at once (no
    # event on a stream Python may have destroyed), and the wrapper keeps the
    # Stream object alive for the library
    st = a.stats()
    ok(st["devices"][0]["used"] == 0 and st["free_errors"] == 0 and st["held_frees"] == 0
       and st["streams_mode"] == "trust",
       "freed on its stream without a size, at once (trust, CuPy's default) (%s)" % st)
    ok(0x1000 in cupola_cupy._streams, "the Stream an allocation was made on is kept alive")
    a.trim()
    ok(a.stats()["devices"][0]["reserved"] == 0, "trim returns the cached memory")
    print("1..%d\n# %d passed, %d failed" % (n, n - failed, failed))
    return 1 if failed else 0


def bad_spec(lib):
    fake_cupy()
    import cupola_cupy
    os.environ["CUPOLA_BACKEND"] = "host"
    os.environ["CUPOLA_CUPY_POOL"] = "tlsf,bogus=1"
    try:
        cupola_cupy.install(lib)
        print("installed")
    except RuntimeError as e:
        print("RuntimeError: %s" % e)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--bad-spec":
        bad_spec(sys.argv[2])
        sys.exit(0)
    import subprocess
    r = main(sys.argv[1])
    # a bad spec, in a process of its own (the library reads it once)
    p = subprocess.run([sys.executable, __file__, "--bad-spec", sys.argv[1]], capture_output=True,
                       text=True)
    good = p.returncode == 0 and "RuntimeError: cupola: CUPOLA_CUPY_POOL" in p.stdout
    print("%s - a bad CUPOLA_CUPY_POOL is a RuntimeError at install (%s)" %
          ("ok" if good else "not ok", p.stdout.strip() or p.stderr.strip()[-200:]))
    sys.exit(1 if r or not good else 0)
