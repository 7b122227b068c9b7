#!/usr/bin/env python3
"""Cuts a PyTorch memory snapshot down for the repository to ship.

  python3 tests/torch/cut_snapshot.py IN OUT --before LINE [--occurrence K]
                                      [--cpp-frames]

Keeps device 0's entries before the K-th allocation (default 2) whose
outermost frame is at line LINE of the training script (the line that makes
each step's inputs: entries before its second allocation are the model's
load and one whole step), as cupola reads them: each entry's action, addr,
size, stream, time_us and frames, equal frames and stacks one object in the
pickle.  `segments` is what the kept entries leave reserved (each segment
allocated and not freed before the cut, whole), so PyTorch's reserved
figures of the cut snapshot are its own.  allocator_settings is kept.

--cpp-frames puts C++ frames in every stack as PyTorch's default
stacks="all" writes them: the unwinder's and the caching allocator's first,
then the operation's (named after the entry's innermost Python frame, or
autograd's engine for an allocation without Python frames: the backward
pass's, made on autograd's threads), then the Python frames, then the
interpreter's start.  Made this way, examples/traces/torch/scaling/*.cpp.*
are the same requests as the others with the stacks a default recording has.
Standard library only.
"""
import gzip
import pickle
import sys


def frame(name, filename="??", line=0):
    return {"filename": filename, "line": line, "name": name}


UNWIND = [frame("torch::unwind::unwind()"),
          frame("torch::CapturedTraceback::gather(bool, bool, bool)"),
          frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc("
                "signed char, unsigned long, CUstream_st*)"),
          frame("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc("
                "void**, signed char, unsigned long, CUstream_st*)"),
          frame("at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType, "
                "std::optional<c10::Device>, std::optional<c10::MemoryFormat>)")]
ENGINE = [frame("torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::"
                "GraphTask>&, torch::autograd::Node*, torch::autograd::InputBuffer&, "
                "std::shared_ptr<torch::autograd::ReadyQueue> const&)"),
          frame("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::"
                "GraphTask> const&)"),
          frame("torch::autograd::Engine::thread_init(int, std::shared_ptr<torch::autograd::"
                "ReadyQueue> const&, bool)"),
          frame("start_thread"), frame("clone")]
START = [frame("Py_RunMain"), frame("Py_BytesMain"), frame("__libc_start_main"), frame("_start")]


def with_cpp(frames):
    if not frames:
        return UNWIND + [frame("torch::autograd::generated::MulBackward0::apply("
                               "std::vector<at::Tensor>&&)")] + ENGINE
    op = frames[0].get("name", "op")
    return (UNWIND + [frame("at::_ops::%s::call(at::Tensor const&)" % op),
                      frame("torch::autograd::THPVariable_%s(_object*, _object*)" % op)]
            + list(frames) + START)


def main(argv):
    if len(argv) < 4 or argv[2] != "--before":
        print(__doc__)
        return 2
    src, dst, line = argv[0], argv[1], int(argv[3])
    occurrence = int(argv[argv.index("--occurrence") + 1]) if "--occurrence" in argv else 2
    cpp = "--cpp-frames" in argv
    with (gzip.open(src) if src.endswith(".gz") else open(src, "rb")) as f:
        snap = pickle.load(f)
    entries, seen, cut = snap["device_traces"][0], 0, None
    for i, e in enumerate(entries):
        fr = e.get("frames") or []
        if e["action"] == "alloc" and fr and fr[-1].get("line") == line:
            seen += 1
            if seen == occurrence:
                cut = i
                break
    if cut is None:
        print("no allocation number %d at line %d" % (occurrence, line))
        return 1
    frames, stacks, live = {}, {}, {}

    def shared(fl):
        fs = []
        for f in fl:
            k = (f.get("filename"), f.get("line"), f.get("name"))
            fs.append(frames.setdefault(k, {"filename": k[0], "line": k[1], "name": k[2]}))
        return stacks.setdefault(tuple(id(f) for f in fs), fs)

    out = []
    for e in entries[:cut]:
        x = {k: e.get(k) for k in ("action", "addr", "size", "stream", "time_us")}
        fr = e.get("frames") or []
        if cpp and e["action"] == "alloc":
            fr = with_cpp(fr)
        if fr and e["action"] == "alloc":
            x["frames"] = shared(fr)
        if e["action"] == "segment_alloc":
            live[e["addr"]] = (e["size"], e["stream"])
        elif e["action"] == "segment_free":
            live.pop(e["addr"], None)
        out.append(x)
    segs = [{"device": 0, "address": a, "total_size": s, "stream": st, "segment_type":
             "small" if s <= (2 << 20) else "large", "allocated_size": 0, "active_size": 0}
            for a, (s, st) in sorted(live.items())]
    res = {"device_traces": [out], "segments": segs}
    if "allocator_settings" in snap:
        res["allocator_settings"] = snap["allocator_settings"]
    with gzip.open(dst, "wb", compresslevel=9) as f:
        f.write(pickle.dumps(res, protocol=4))
    print("%s: %d of %d entries, %d segments" % (dst, len(out), len(entries), len(segs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
