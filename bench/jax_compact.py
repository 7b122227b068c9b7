#!/usr/bin/env python3
"""bench/jax_compact.py: a JAX recording's JSON lines, compacted for shipping.

    python3 bench/jax_compact.py IN.jsonl.gz OUT.jsonl.gz [ALLOCATOR]

Keeps the events of one allocator (default GPU_0_bfc) and, of each, the keys
cupola reads (event, allocator_name, addr, requested_bytes, allocation_bytes,
bytes_allocated, peak_bytes_in_use, ts), with ts made relative to the first
event; the order is the file's.  Written with gzip -9.
"""
import gzip
import json
import sys

KEYS = ("event", "allocator_name", "addr", "requested_bytes", "allocation_bytes",
        "bytes_allocated", "peak_bytes_in_use")


def main():
    src, dst = sys.argv[1], sys.argv[2]
    want = sys.argv[3] if len(sys.argv) > 3 else "GPU_0_bfc"
    t0 = None
    with gzip.open(src, "rt") as f, gzip.open(dst, "wt", compresslevel=9) as out:
        for line in f:
            e = json.loads(line)
            if e.get("allocator_name") != want:
                continue
            row = {k: e[k] for k in KEYS if k in e}
            if "ts" in e:
                t0 = e["ts"] if t0 is None else t0
                row["ts"] = e["ts"] - t0
            out.write(json.dumps(row, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
