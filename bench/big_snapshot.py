#!/usr/bin/env python3
"""Writes a large, frame-laden PyTorch memory snapshot for the loader's memory test.

    python3 bench/big_snapshot.py OUT.pickle.gz [ENTRIES] [DEPTH]

The shape is what torch.cuda.memory._dump_snapshot writes (Python's pickle,
protocol 4, gzip): `segments`, `device_traces` with alloc / free_requested /
free_completed / segment_alloc entries, `allocator_settings`.  Every entry
carries a stack of DEPTH frames (default 48, as with stacks="all" in a deep
model), each entry its own list, the frame dicts shared between entries as
PyTorch's writers share them (one dict per distinct frame).  Deterministic:
the same arguments give the same file.  bench/advise.lua's memory test loads
it and reports the peak RSS against the file's size.
"""
import gzip
import pickle
import random
import sys


def main():
    out = sys.argv[1]
    entries = int(sys.argv[2]) if len(sys.argv) > 2 else 400000
    depth = int(sys.argv[3]) if len(sys.argv) > 3 else 48
    rnd = random.Random(20261125)
    # distinct frames: model code, library code, PyTorch's own
    files = ["/work/train.py", "/work/model.py", "/opt/venv/lib/python3.12/site-packages/transformers/models/gpt2/modeling_gpt2.py"]
    files += ["/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py",
              "/opt/venv/lib/python3.12/site-packages/torch/_tensor.py"]
    frames = [{"name": "fn%d" % i, "filename": files[i % len(files)], "line": 10 + i}
              for i in range(3000)]
    base = 0x7F0000000000
    seg = 2 << 20
    ev = []
    t = 1_700_000_000_000_000
    live = []
    nseg = 0
    addr = base
    i = 0
    while len(ev) < entries:
        t += 7
        stack = [frames[rnd.randrange(len(frames))] for _ in range(depth)]
        if live and (len(live) > 2000 or rnd.random() < 0.45):
            a, size = live.pop(rnd.randrange(len(live)))
            ev.append({"action": "free_requested", "addr": a, "size": size, "stream": 0,
                       "time_us": t, "frames": stack, "compile_context": "N/A", "user_metadata": ""})
            ev.append({"action": "free_completed", "addr": a, "size": size, "stream": 0,
                       "time_us": t + 1, "frames": list(stack), "compile_context": "N/A",
                       "user_metadata": ""})
            continue
        size = rnd.choice([512, 4096, 65536, 1 << 20, 3 << 20, 8 << 20, 24 << 20])
        size = (size + 511) // 512 * 512
        if addr + size > base + (nseg + 1) * (64 << 20) or nseg == 0:
            nseg += 1
            ev.append({"action": "segment_alloc", "addr": base + (nseg - 1) * (64 << 20) + (1 << 40),
                       "size": 64 << 20, "stream": 0, "time_us": t, "frames": stack,
                       "compile_context": "N/A", "user_metadata": ""})
            addr = base + (nseg - 1) * (64 << 20)
        live.append((addr, size))
        ev.append({"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": t,
                   "frames": stack, "compile_context": "N/A", "user_metadata": ""})
        addr += size
        i += 1
    snap = {"segments": [], "device_traces": [ev],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                   "garbage_collection_threshold": 0.0,
                                   "expandable_segments": False}}
    with gzip.open(out, "wb", compresslevel=3) as f:
        pickle.dump(snap, f, protocol=4)


if __name__ == "__main__":
    main()
