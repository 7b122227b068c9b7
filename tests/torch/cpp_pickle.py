#!/usr/bin/env python3
"""Rewrites a PyTorch memory snapshot as PyTorch's C++ pickler writes one.

    python3 tests/torch/cpp_pickle.py IN.pickle[.gz] OUT.pickle[.gz]

torch.cuda.memory._dump_snapshot pickles with Python's pickle module; C++
programs get the same snapshot from torch::cuda::_memory_snapshot_pickled(),
which writes it with torch::jit::Pickler (torch/csrc/jit/serialization/
pickler.cpp, called by torch/csrc/cuda/memory_snapshot.cpp).  That writer
could not be run where the recordings were made, so this script writes its
opcodes by hand, as its code says it does (learned by reading it; no code of
it is used):

  * PROTO 2, then the value, then STOP;
  * strings: BINUNICODE, memoized by value: the first time BINPUT, later
    BINGET (LONG_BINPUT / LONG_BINGET past memo index 255);
  * integers: BININT1 for 0..255, BININT2 for 256..65535, BININT for the
    rest of int32, else LONG1 with 8 bytes (signed 64-bit);
  * floats: BINFLOAT; booleans: NEWTRUE / NEWFALSE; None: NONE;
  * dicts: EMPTY_DICT, MARK, key and value pairs, SETITEMS (even when
    empty); lists: EMPTY_LIST, MARK, items, APPENDS; tuples of two:
    TUPLE2 (segment_pool_id);
  * a dict or list held in more than one place (the frame dicts, a frame
    list shared by a trace entry and a segment's block, the trace entries
    and blocks that got frames, the shared empty frame list) is memoized by
    pointer: BINPUT after it is complete, BINGET when it comes again;
  * the snapshot's shape is memory_snapshot.cpp's: no compile_context or
    user_metadata keys, `frames` last in an entry and only where a stack was
    recorded (a segment or block without one gets the shared empty list),
    an oom entry's free memory under `device_free`, allocator_settings with
    the keys that function writes.

The output loads with Python's pickle too (protocol 2 is Python's), which is
how the script checks itself before writing.
"""
import gzip
import pickle
import struct
import sys


class Writer:
    def __init__(self):
        self.out = bytearray()
        self.memo_id = 0
        self.strings = {}
        self.objects = {}

    def put(self):
        i = self.memo_id
        self.memo_id += 1
        if i <= 255:
            self.out += b"q" + bytes([i])
        else:
            self.out += b"r" + struct.pack("<I", i)
        return i

    def get(self, i):
        if i <= 255:
            self.out += b"h" + bytes([i])
        else:
            self.out += b"j" + struct.pack("<I", i)

    def string(self, s):
        if s in self.strings:
            self.get(self.strings[s])
            return
        b = s.encode("utf-8")
        self.out += b"X" + struct.pack("<I", len(b)) + b
        self.strings[s] = self.put()

    def integer(self, n):
        if 0 <= n <= 0xFF:
            self.out += b"K" + bytes([n])
        elif 0 <= n <= 0xFFFF:
            self.out += b"M" + struct.pack("<H", n)
        elif -(1 << 31) <= n < (1 << 31):
            self.out += b"J" + struct.pack("<i", n)
        else:
            if n >= 1 << 63:
                n -= 1 << 64  # an int64_t of the unsigned value, as IValue holds it
            self.out += b"\x8a\x08" + struct.pack("<q", n)

    def value(self, v, shared):
        if isinstance(v, (dict, list)) and id(v) in self.objects:
            self.get(self.objects[id(v)])
            return
        if v is None:
            self.out += b"N"
        elif v is True:
            self.out += b"\x88"
        elif v is False:
            self.out += b"\x89"
        elif isinstance(v, int):
            self.integer(v)
        elif isinstance(v, float):
            self.out += b"G" + struct.pack(">d", v)
        elif isinstance(v, str):
            self.string(v)
        elif isinstance(v, tuple):
            assert len(v) == 2
            self.value(v[0], shared)
            self.value(v[1], shared)
            self.out += b"\x86"
        elif isinstance(v, list):
            self.out += b"]("
            for x in v:
                self.value(x, shared)
            self.out += b"e"
        elif isinstance(v, dict):
            self.out += b"}("
            for k, x in v.items():
                self.value(k, shared)
                self.value(x, shared)
            self.out += b"u"
        else:
            raise TypeError(type(v))
        if isinstance(v, (dict, list)) and id(v) in shared:
            self.objects[id(v)] = self.put()


def as_cpp(snap):
    """The snapshot as memory_snapshot.cpp builds it, and the objects it holds twice."""
    shared = set()
    uses = {}

    def use(o):
        uses[id(o)] = uses.get(id(o), 0) + 1
        if uses[id(o)] > 1:
            shared.add(id(o))

    empty = []
    shared.add(id(empty))
    frame_lists = {}

    def frames_of(src):
        fr = src.get("frames")
        if not fr:
            return None
        key = id(fr)
        if key not in frame_lists:
            lst = list(fr)
            for f in lst:
                use(f)
            frame_lists[key] = lst
        lst = frame_lists[key]
        use(lst)
        shared.add(id(lst))  # py_unique_frames holds each list as well
        return lst

    segments = []
    for s in snap.get("segments", []):
        d = {}
        for k in ("device", "address", "total_size", "allocated_size", "active_size",
                  "requested_size", "stream", "segment_type"):
            d[k] = s.get(k, "large" if k == "segment_type" else 0)
        d["segment_pool_id"] = tuple(s.get("segment_pool_id", (0, 0)))
        d["is_expandable"] = bool(s.get("is_expandable", False))
        fr = frames_of(s)
        d["frames"] = fr if fr is not None else empty
        if fr is not None:
            shared.add(id(d))
        blocks = []
        for b in s.get("blocks", []):
            bd = {"address": b["address"], "size": b["size"],
                  "requested_size": b.get("requested_size", b["size"]), "state": b["state"]}
            fr = frames_of(b)
            bd["frames"] = fr if fr is not None else empty
            if fr is not None:
                shared.add(id(bd))
            blocks.append(bd)
        d["blocks"] = blocks
        segments.append(d)
    traces = []
    for dev in snap.get("device_traces", []):
        lst = []
        for e in dev:
            d = {"action": e["action"]}
            d["device_free" if e["action"] == "oom" else "addr"] = e["addr"]
            d["size"] = e["size"]
            d["stream"] = e["stream"]
            d["time_us"] = e["time_us"]
            fr = frames_of(e)
            if fr is not None:
                d["frames"] = fr
                shared.add(id(d))
            lst.append(d)
        traces.append(lst)
    src = snap.get("allocator_settings", {})
    settings = {
        "PYTORCH_CUDA_ALLOC_CONF": src.get("PYTORCH_CUDA_ALLOC_CONF") or "",
        "max_split_size": int(src.get("max_split_size", -1)),
        "garbage_collection_threshold": float(src.get("garbage_collection_threshold", 0.0)),
        "expandable_segments": bool(src.get("expandable_segments", False)),
        "pinned_num_register_threads": src.get("pinned_num_register_threads", 1),
        "release_lock_on_cudamalloc": bool(src.get("release_lock_on_cudamalloc", False)),
        "pinned_use_cuda_host_register": bool(src.get("pinned_use_cuda_host_register", False)),
        "roundup_power2_divisions": dict(src.get("roundup_power2_divisions", {})),
    }
    return {"segments": segments, "device_traces": traces, "allocator_settings": settings}, shared


def main():
    src, dst = sys.argv[1], sys.argv[2]
    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rb") as f:
        snap = pickle.load(f)
    cpp, shared = as_cpp(snap)
    w = Writer()
    w.out += b"\x80\x02"
    w.value(cpp, shared)
    w.out += b"."
    data = bytes(w.out)
    back = pickle.loads(data)

    def wrapped(e):  # an address above 2^63 reads back as the int64 it was written as
        return {k: (v % (1 << 64) if isinstance(v, int) and not isinstance(v, bool) else v)
                for k, v in e.items() if k != "frames"}
    assert [[wrapped(e) for e in dev] for dev in back["device_traces"]] == \
        [[wrapped(e) for e in dev] for dev in cpp["device_traces"]]
    assert back["allocator_settings"] == cpp["allocator_settings"]
    opener = gzip.open if dst.endswith(".gz") else open
    with opener(dst, "wb") as f:
        f.write(data)
    print("%s: %d bytes, %d memo entries, %d entries" % (dst, len(data), w.memo_id,
                                                       sum(len(d) for d in cpp["device_traces"])))


if __name__ == "__main__":
    main()
