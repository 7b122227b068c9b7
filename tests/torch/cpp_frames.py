#!/usr/bin/env python3
"""cpp_frames.py IN OUT: a snapshot pickle whose frames are as PyTorch writes
them with its default stacks (torch.cuda.memory._record_memory_history(),
stacks="all"): each entry's Python frames between the C++ frames of the
allocation (innermost, first the unwinder's own, torch::unwind::unwind) and
those of the interpreter's start (outermost).  PyTorch writes "??" and line 0
for C++ frames it has no debug information for, which is what a wheel from
pytorch.org gives.

The C++ frames are the call path of a CUDA tensor's allocation in PyTorch
2.x's caching allocator, the same for every entry (the real ones vary with
the operation; the labels cupola makes do not depend on them).  Used to make
examples/traces/torch/twostream.cppframes.pickle.gz from
twostream.full.pickle.gz; standard library only.
"""
import gzip
import pickle
import sys


def frame(name, filename="??", line=0):
    return {"filename": filename, "line": line, "name": name}


INNER = [
    frame("torch::unwind::unwind()"),
    frame("torch::CapturedTraceback::gather(bool, bool, bool)"),
    frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc("
          "signed char, unsigned long, CUstream_st*)"),
    frame("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc("
          "void**, signed char, unsigned long, CUstream_st*)"),
    frame("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"),
    frame("at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, c10::Allocator*, "
          "c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)"),
    frame("at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType, std::optional<c10::Device>, "
          "std::optional<c10::MemoryFormat>)"),
    frame("at::native::empty_cuda(c10::ArrayRef<long>, std::optional<c10::ScalarType>, "
          "std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, "
          "std::optional<c10::MemoryFormat>)"),
    frame("at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>, "
          "std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, "
          "std::optional<bool>, std::optional<c10::MemoryFormat>)"),
    frame("torch::autograd::THPVariable_empty(_object*, _object*, _object*)"),
]
OUTER = [
    frame("Py_RunMain"),
    frame("Py_BytesMain"),
    frame("__libc_start_main"),
    frame("_start"),
]


def main():
    src, dst = sys.argv[1], sys.argv[2]
    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rb") as f:
        snap = pickle.load(f)
    done = {}

    def convert(frames):
        # one new list per distinct list, so shared lists stay shared
        key = id(frames)
        if key not in done:
            done[key] = INNER + list(frames) + OUTER if frames else frames
        return done[key]

    for trace in snap.get("device_traces", []):
        for e in trace:
            if "frames" in e:
                e["frames"] = convert(e["frames"])
    for seg in snap.get("segments", []):
        for b in seg.get("blocks", []):
            if "frames" in b:
                b["frames"] = convert(b["frames"])
    with gzip.open(dst, "wb", 9) as f:
        pickle.dump(snap, f, protocol=2)


if __name__ == "__main__":
    main()
