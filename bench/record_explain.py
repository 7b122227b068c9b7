#!/usr/bin/env python3
"""What a `cupola record` file holds, for finding what differs between runs.

  python3 bench/record_explain.py FILE [--same SNAP] [--other SNAP] [--top N]

FILE: a recording (.csv or .csv.gz), best made with CUPOLA_RECORD_CENSUS=1
and CUPOLA_RECORD_CALLERS=1.  Prints:
  - the census notes (every driver and runtime function called, with its
    count), those that allocate, free, map or register memory first;
  - the rows by action, kind and call (with its callers): count, bytes,
    smallest / median / largest size;
  - the device memory live at its peak, by call and caller and by size, and
    what was left live at the end.
--same SNAP: FILE is the recording of the run that dumped the PyTorch snapshot
SNAP (caching on): every device allocation that is not one of PyTorch's
segments (segment_alloc in SNAP's trace) is listed, with its caller.
--other SNAP: FILE recorded the uncached run of the workload SNAP's run made
with caching on: the requests are compared by size (rounded up to PyTorch's
512 bytes), the sizes only FILE has are listed with their callers, and both
peaks of live requested bytes are given.
No third-party module (gzip, pickle and the standard library).
"""
import collections
import gzip
import pickle
import re
import statistics
import sys

MEMISH = re.compile(r"Mem|Alloc|Free|Pool|Host|Malloc|Array|Graph|Reserve|Map|Register|Create|Release")


def opener(path):
    return gzip.open(path, "rt") if path.endswith(".gz") else open(path)


def load(path):
    notes, rows = [], []
    with opener(path) as f:
        try:
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("#"):
                    notes.append(line[1:].strip())
                    continue
                if line.startswith("Thread,"):
                    continue
                c = line.split(",", 9)
                if len(c) < 10:
                    continue
                rows.append({"t": float(c[1]), "action": c[2], "ptr": int(c[3], 16),
                             "size": int(c[4]), "stream": c[5], "kind": c[7], "call": c[9]})
        except (EOFError, OSError) as e:  # a cut recording: what came before
            notes.append("(read stopped: %s)" % e)
    return notes, rows


def mib(n):
    return "%.2f MiB" % (n / 2**20)


def census(notes, top):
    c = []
    for n in notes:
        m = re.match(r"census (\w+) (\S+) (\d+)$", n)
        if m:
            c.append((m.group(1), m.group(2), int(m.group(3))))
    if not c:
        print("census: none in the file (CUPOLA_RECORD_CENSUS=1 was not set, or nothing was called)")
        return
    mem = sorted((x for x in c if MEMISH.search(x[1])), key=lambda x: -x[2])
    print("census, memory functions (%d of %d functions called):" % (len(mem), len(c)))
    for d, name, n in mem:
        print("  %-8s %-40s %10d" % (d, name, n))
    rest = sorted((x for x in c if not MEMISH.search(x[1])), key=lambda x: -x[2])[:top]
    print("census, the other functions most called:")
    for d, name, n in rest:
        print("  %-8s %-40s %10d" % (d, name, n))


def by_call(rows, top):
    g = collections.defaultdict(list)
    for r in rows:
        g[(r["action"], r["kind"], r["call"])].append(r["size"])
    print("rows by action, kind, call (count, bytes, smallest / median / largest):")
    for (a, k, call), sz in sorted(g.items(), key=lambda kv: -len(kv[1]))[:top * 2]:
        print("  %-9s %-8s %7d %14d  %d / %d / %d  %s" % (a, k, len(sz), sum(sz), min(sz),
                                                      int(statistics.median(sz)), max(sz), call))


def live_peak(rows, top, label="device"):
    live, cur, peak, at, snap = {}, 0, 0, 0.0, None
    for r in rows:
        if r["kind"] != "device":
            continue
        if r["action"] == "allocate":
            live[r["ptr"]] = r
            cur += r["size"]
            if cur > peak:
                peak, at, snap = cur, r["t"], dict(live)
        elif r["action"] == "free" and r["ptr"] in live:
            cur -= live.pop(r["ptr"])["size"]
    print("%s memory live: peak %d (%s) at %.3f s; %d allocations left live at the end (%s)" %
          (label, peak, mib(peak), at * 1e-6, len(live), mib(sum(x["size"] for x in live.values()))))
    if snap:
        g = collections.defaultdict(lambda: [0, 0])
        s = collections.defaultdict(lambda: [0, 0])
        for r in snap.values():
            g[r["call"]][0] += 1
            g[r["call"]][1] += r["size"]
            s[r["size"]][0] += 1
            s[r["size"]][1] += r["size"]
        print("  at the peak, by call (count, bytes):")
        for call, (n, b) in sorted(g.items(), key=lambda kv: -kv[1][1])[:top]:
            print("    %6d %14d  %s" % (n, b, call))
        print("  at the peak, by size (count x size = bytes):")
        for size, (n, b) in sorted(s.items(), key=lambda kv: -kv[1][1])[:top]:
            print("    %6d x %12d = %14d" % (n, size, b))
    return peak


def snapshot_trace(path):
    with open(path, "rb") as f:
        snap = pickle.load(f)
    tr = []
    for dev in snap.get("device_traces", []):
        tr.extend(dev)
    return snap, tr


def same(rows, path, top):
    _, tr = snapshot_trace(path)
    segs = {e["addr"] for e in tr if e.get("action") == "segment_alloc"}
    n = sum(1 for e in tr if e.get("action") == "segment_alloc")
    other = [r for r in rows if r["action"] == "allocate" and r["kind"] == "device"
             and r["ptr"] not in segs]
    print("PyTorch's segments (segment_alloc in the snapshot): %d; the recording's device allocations "
          "that are not one of them: %d (%s)" % (n, len(other), mib(sum(r["size"] for r in other))))
    for r in other[:top]:
        print("  %.3f s %12d  %s" % (r["t"] * 1e-6, r["size"], r["call"]))


def rounded(n):
    return 512 if n < 512 else (n + 511) // 512 * 512


def other(rows, path, top):
    _, tr = snapshot_trace(path)
    alloc = [e for e in tr if e.get("action") == "alloc"]
    cur = peak = 0
    for e in tr:
        if e.get("action") == "alloc":
            cur += e["size"]
            peak = max(peak, cur)
        elif e.get("action") == "free_completed":
            cur -= e["size"]
    recs = [r for r in rows if r["action"] == "allocate" and r["kind"] == "device"]
    a = collections.Counter(e["size"] for e in alloc)
    b = collections.Counter(rounded(r["size"]) for r in recs)
    print("requests: the snapshot's (caching run) %d, the recording's %d; peak of live requests: "
          "snapshot %d (%s)" % (len(alloc), len(recs), peak, mib(peak)))
    only_rec = b - a
    only_snap = a - b
    callers = collections.defaultdict(collections.Counter)
    for r in recs:
        callers[rounded(r["size"])][r["call"]] += 1
    print("sizes only the recording has (rounded size: extra count; its callers):")
    for size, n in sorted(only_rec.items(), key=lambda kv: -kv[0] * kv[1])[:top]:
        print("  %12d: %5d  %s" % (size, n, "; ".join("%s x%d" % kv for kv in
                                                       callers[size].most_common(3))))
    print("sizes only the snapshot has (rounded size: extra count):")
    for size, n in sorted(only_snap.items(), key=lambda kv: -kv[0] * kv[1])[:top]:
        frames = next((e.get("frames") for e in alloc if e["size"] == size), None) or []
        where = "; ".join("%s:%s %s" % (f.get("filename", "?").split("/")[-1], f.get("line", "?"),
                                        f.get("name", "?")) for f in frames[:3])
        print("  %12d: %5d  %s" % (size, n, where))


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    path, top = argv[1], 12
    opts = dict(zip(argv[2::2], argv[3::2]))
    if "--top" in opts:
        top = int(opts["--top"])
    notes, rows = load(path)
    print("== %s: %d rows; notes: %s" % (path, len(rows), "; ".join(
        n for n in notes if not n.startswith("census"))[:600]))
    census(notes, top)
    by_call(rows, top)
    live_peak(rows, top)
    if "--same" in opts:
        same(rows, opts["--same"], top)
    if "--other" in opts:
        other(rows, opts["--other"], top)


if __name__ == "__main__":
    main(sys.argv)
