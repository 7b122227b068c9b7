#!/usr/bin/env python3
"""Writes PyTorch memory snapshots in cupola's compact form (CPSNAP1).

The snapshots the repository ships for its torch-model specs keep what a
replay needs and nothing else: each entry's action, address, size and stream
(no frames, no times), the segments at the end (for PyTorch's reserved
figure), PYTORCH_CUDA_ALLOC_CONF and the allocator's own view of its settings.
cupola.trace.load reads the result like any snapshot (src/core/trace/
snapshot.c states the format and decodes it).

  python3 tests/torch/compact.py IN.pickle[.gz] OUT.cpsnap.gz

Device 0's entries only (the model is one device).  Addresses are written as
differences from the previous entry's, sizes of frees not at all (they are
the allocation's): a 476k-entry snapshot takes about 0.4 MB.
"""
import gzip
import pickle
import sys

ACTIONS = {"alloc": 0, "free_requested": 1, "free_completed": 2, "segment_alloc": 3,
           "segment_free": 4, "segment_map": 5, "segment_unmap": 6, "oom": 7}
MASK = (1 << 64) - 1


def varint(n, out):
    if n < 0:
        raise ValueError("negative varint")
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return


def zigzag(d):
    """d in the signed 64-bit range, as the decoder's wrapping arithmetic reads it."""
    d &= MASK
    if d >> 63:
        d -= 1 << 64
    return (d << 1) if d >= 0 else ((-d) << 1) - 1


def settings_conf(s):
    """allocator_settings as a conf string (the decoder parses it)."""
    parts = []
    mss = s.get("max_split_size", -1)
    # a size_t written as int64: -1 is unset; "max_split_size_mb:-1" reads
    # as (2^44 - 1) MiB, which PyTorch reports as -2^20
    if isinstance(mss, int) and mss != -1 and (mss & MASK) % (1 << 20) == 0 and mss != 0:
        parts.append("max_split_size_mb:%d" % ((mss & MASK) >> 20))
    gc = s.get("garbage_collection_threshold", 0.0) or 0.0
    if 0.0 < gc < 1.0:
        parts.append("garbage_collection_threshold:%r" % float(gc))
    if s.get("expandable_segments"):
        parts.append("expandable_segments:True")
    if s.get("release_lock_on_cudamalloc"):
        parts.append("release_lock_on_cudamalloc:True")
    rd = s.get("roundup_power2_divisions")
    if isinstance(rd, dict) and any(v for v in rd.values()):
        items = sorted((int(k), int(v)) for k, v in rd.items())
        parts.append("roundup_power2_divisions:[%s]" % ",".join("%d:%d" % kv for kv in items))
    return ",".join(parts)


def compact(snap):
    trace = snap.get("device_traces", [[]])
    trace = trace[0] if trace else []
    streams, order = {}, []

    def sidx(v):
        v = v or 0
        if v not in streams:
            streams[v] = len(order)
            order.append(v)
        return streams[v]

    entries = bytearray()
    n = 0
    prev = 0
    for e in trace:
        a = ACTIONS.get(e.get("action"))
        if a is None:
            continue
        si = sidx(e.get("stream"))
        entries.append(a | (min(si, 31) << 3))
        if si >= 31:
            varint(si, entries)
        if a == 0 or a >= 3:
            varint(int(e.get("size") or 0), entries)
        if a != 7:
            addr = int(e.get("addr") or 0)
            varint(zigzag(addr - prev), entries)
            prev = addr
        n += 1
    segs = bytearray()
    nseg = 0
    for s in snap.get("segments", []):
        varint(int(s.get("address") or 0), segs)
        varint(int(s.get("total_size") or 0), segs)
        varint(sidx(s.get("stream")), segs)
        nseg += 1
    out = bytearray(b"CPSNAP1\n")
    varint(1, out)
    varint(len(order), out)
    for v in order:
        varint(v & MASK, out)
    settings = snap.get("allocator_settings")
    env = (settings or {}).get("PYTORCH_CUDA_ALLOC_CONF", "") or ""
    conf = settings_conf(settings) if settings else ""
    varint(1 if settings else 0, out)
    for text in (env.encode(), conf.encode()):
        varint(len(text), out)
        out += text
    varint(nseg, out)
    out += segs
    varint(n, out)
    out += entries
    return bytes(out)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rb") as f:
        snap = pickle.load(f)
    data = compact(snap)
    with gzip.GzipFile(dst, "wb", compresslevel=9, mtime=0) as f:
        f.write(data)


if __name__ == "__main__":
    main()
