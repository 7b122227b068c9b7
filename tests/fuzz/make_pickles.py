#!/usr/bin/env python3
"""Writes the small snapshot-shaped pickles cupola's fuzz corpus and specs use.

Run from the repository root: python3 tests/fuzz/make_pickles.py
Only Python's own pickle module is used: the files have the shape of a
torch.cuda.memory snapshot (segments, device_traces) at protocols 2, 4 and 5,
with an address above 2^63 (LONG1 of 9 bytes), two devices, frames, every
action cupola reads and a few it ignores.  The output is deterministic.
"""
import os
import pickle

OUT = "tests/fuzz/corpus"


def frames(name, line):
    return [
        {"name": "forward", "filename": "/site-packages/torch/nn/modules/linear.py", "line": 125},
        {"name": name, "filename": "train.py", "line": line},
    ]


def snapshot(n_blocks=4, devices=2):
    traces = []
    segments = []
    for d in range(devices):
        base = 0x7F0000000000 + d * 0x100000000
        if d == 1:
            base = 0x8000000000000000  # an unsigned 64-bit address: LONG1 of 9 bytes
        ev = []
        t = 1000 + d
        ev.append({"action": "segment_alloc", "addr": base, "size": 2 << 20, "stream": 0,
                   "time_us": t, "frames": []})
        for i in range(n_blocks):
            t += 10
            ev.append({"action": "alloc", "addr": base + i * 4096, "size": 1000 + i,
                       "stream": 0 if i % 2 == 0 else 0x5555AAAA0000, "time_us": t,
                       "frames": frames("step", 10 + i)})
        ev.append({"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": t + 1,
                   "frames": []})
        for i in range(n_blocks - 1):
            t += 10
            ev.append({"action": "free_requested", "addr": base + i * 4096, "size": 1000 + i,
                       "stream": 0, "time_us": t, "frames": []})
            ev.append({"action": "free_completed", "addr": base + i * 4096, "size": 1000 + i,
                       "stream": 0, "time_us": t + 1, "frames": []})
        traces.append(ev)
        segments.append({"device": d, "address": base, "total_size": 2 << 20,
                         "allocated_size": 1003, "stream": 0, "segment_type": "small",
                         "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                         "blocks": [{"address": base, "size": 4096, "requested_size": 1003,
                                     "state": "active_allocated", "frames": []}]})
    # The same objects again at the end: memo references to late entries
    # (LONG_BINGET once the memo passes 256).
    shared = [e["frames"] for ev in traces for e in ev if e["action"] == "alloc"]
    return {"segments": segments, "device_traces": traces,
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": None, "max_split_size": -1.5,
                                   "expandable_segments": False},
            "external_annotations": shared}


def main():
    os.makedirs(OUT, exist_ok=True)
    s = snapshot()
    for proto in (2, 4, 5):
        with open(f"{OUT}/snapshot_p{proto}.pickle", "wb") as f:
            pickle.dump(s, f, protocol=proto)
    # More than 256 memo entries: LONG_BINPUT and LONG_BINGET at protocol 2.
    with open(f"{OUT}/snapshot_p2_long_memo.pickle", "wb") as f:
        pickle.dump(snapshot(n_blocks=70, devices=1), f, protocol=2)
    # Code, which cupola must refuse: GLOBAL and REDUCE at protocol 2,
    # STACK_GLOBAL at protocol 4.
    with open(f"{OUT}/refused_global_p2.pickle", "wb") as f:
        pickle.dump({"segments": [], "device_traces": [[{"x": range(3)}]]}, f, protocol=2)
    with open(f"{OUT}/refused_stack_global_p4.pickle", "wb") as f:
        pickle.dump({"segments": [], "device_traces": [[{"x": range(3)}]]}, f, protocol=4)
    # One dict in every role: a segment, two trace entries and its own frame.
    d = {"action": "alloc", "addr": 4096, "size": 10, "total_size": 100, "time_us": 1,
         "filename": "x.py", "line": 1, "name": "f"}
    d["frames"] = [d]
    with open(f"{OUT}/hostile_shared_roles.pickle", "wb") as f:
        pickle.dump({"segments": [d], "device_traces": [[d, d]]}, f, protocol=4)
    # Sizes at the bounds cupola keeps (0..2^63-1, sums checked): one that
    # loads (2^63-1 live, a free without a size), one that is refused (2^63,
    # a negative size, segments summing past 2^63-1).
    def ev(action, addr, size, t):
        e = {"action": action, "addr": addr, "stream": 0, "time_us": t, "frames": []}
        if size is not None:
            e["size"] = size
        return e
    with open(f"{OUT}/sizes_max_p2.pickle", "wb") as f:
        pickle.dump({"segments": [{"device": 0, "address": 4096, "total_size": 2**63 - 1}],
                     "device_traces": [[ev("segment_alloc", 4096, 2**63 - 1, 1),
                                        ev("alloc", 4096, 2**63 - 1, 2),
                                        ev("free_completed", 4096, None, 3)]]}, f, protocol=2)
    with open(f"{OUT}/sizes_refused_p4.pickle", "wb") as f:
        pickle.dump({"segments": [{"total_size": 2**63 - 1}, {"total_size": 1}],
                     "device_traces": [[ev("alloc", 4096, 2**63, 1), ev("alloc", 8192, -100, 2)]]},
                    f, protocol=4)
    # Truncated half-way.
    data = pickle.dumps(s, protocol=4)
    with open(f"{OUT}/truncated_p4.pickle", "wb") as f:
        f.write(data[: len(data) // 2])


if __name__ == "__main__":
    main()
