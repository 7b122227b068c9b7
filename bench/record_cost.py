#!/usr/bin/env python3
"""The recorder's cost: PyTorch's runs, and the table of bench/record_cost.sh.

  python3 bench/record_cost.py torch RUNS SECONDS OUTFILE COND...
      COND: plain, rec (libcupola_record.so: $COST_REC_LIB) or floor (the same
      callbacks, empty: $COST_FLOOR_LIB).  The parent imports torch (CUDA is not
      started by an import), then for each run, conditions in an order rotated
      every run, forks a child that sets the condition's CUDA_INJECTION64_PATH
      before CUDA starts, builds bench/record_frameworks.py's MLP, runs 3 steps
      to warm up, then steps until SECONDS have passed, timed inside the child
      around the steps (ended by a synchronize).  Set
      PYTORCH_NO_CUDA_MEMORY_CACHING=1 in the environment for the uncached runs.
      Appends one line per child to OUTFILE:
        cost cond=rec run=3 mode=torch iters=N seconds=S us_per_iter=X cpu=C injected=1
      (injected: the recorder's library is mapped in the child: the condition
      took effect).  A fork saves each run PyTorch's import (seconds); the
      child exits through C's exit(), so the recorder closes its file.
  python3 bench/record_cost.py table FILE...
      The markdown table from the lines of record_cost (the seeds' benchmark)
      and of the torch runs: per mode and condition the median time per
      iteration with the spread beside it, and the change against `plain`
      with its 95 % interval (bootstrap of the two medians, seeded).
"""
import os
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def child(cond, run, seconds, out_dir):
    env = {"rec": os.environ.get("COST_REC_LIB"), "floor": os.environ.get("COST_FLOOR_LIB")}
    if cond != "plain":
        if not env[cond]:
            raise SystemExit("record_cost: no library for %s (COST_REC_LIB, COST_FLOOR_LIB)" % cond)
        os.environ["CUDA_INJECTION64_PATH"] = env[cond]
        os.environ["CUPOLA_RECORD_OUT"] = os.path.join(out_dir, "torch_%s_%d.csv.gz" % (cond, run))
    else:
        os.environ.pop("CUDA_INJECTION64_PATH", None)
    sys.path.insert(0, HERE)
    import record_frameworks
    import torch
    step = record_frameworks.torch_setup()
    for i in range(3):
        step(i)
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step(n)
        n += 1
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    with open("/proc/self/maps") as f:
        injected = int("libcupola_record" in f.read())
    return ("cost cond=%s run=%d mode=torch iters=%d seconds=%.6f us_per_iter=%.4f cpu=%d "
            "injected=%d" % (cond, run, n, dt, dt * 1e6 / n, cpu_now(), injected))


def cpu_now():
    """The CPU this thread runs on (field 39 of /proc/thread-self/stat); -1 if unknown."""
    try:
        with open("/proc/thread-self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return -1


def torch_runs(runs, seconds, outfile, conds):
    import ctypes
    import torch  # noqa: F401  (imported once, before any fork; CUDA not started)
    out_dir = os.path.dirname(os.path.abspath(outfile))
    for r in range(runs):
        order = conds[r % len(conds):] + conds[:r % len(conds)]
        for cond in order:
            rd, wr = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(rd)
                code = 0
                try:
                    line = child(cond, r, seconds, out_dir)
                except BaseException as e:  # the child never returns into the parent's loop
                    line, code = "cost cond=%s run=%d mode=torch failed=%r" % (cond, r, e), 1
                os.write(wr, (line + "\n").encode())
                os.close(wr)
                sys.stdout.flush()
                sys.stderr.flush()
                ctypes.CDLL(None).exit(code)  # C's exit: the recorder's atexit closes its file
            os.close(wr)
            with os.fdopen(rd) as f:
                text = f.read()
            _, status = os.waitpid(pid, 0)
            with open(outfile, "a") as f:
                f.write(text if text else "cost cond=%s run=%d mode=torch failed=status %d\n" %
                        (cond, r, status))
            print(text.strip() or "torch run %d %s: status %d" % (r, cond, status), flush=True)


def parse(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            for line in f:
                if not line.startswith("cost "):
                    continue
                kv = dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
                if "us_per_iter" in kv:
                    rows.append(kv)
    return rows


def boot_ratio(a, b, n=2000):
    rnd = random.Random(1)
    rs = sorted(statistics.median(rnd.choices(b, k=len(b))) /
                statistics.median(rnd.choices(a, k=len(a))) for _ in range(n))
    return rs[int(0.025 * n)], rs[int(0.975 * n) - 1]


def table(paths):
    rows = parse(paths)
    by = {}
    for r in rows:
        by.setdefault(r["mode"], {}).setdefault(r["cond"], []).append(float(r["us_per_iter"]))
    label = {"malloc": "seeds' benchmark, cudaMalloc/cudaFree",
             "async": "seeds' benchmark, cudaMallocAsync/cudaFreeAsync",
             "kernels": "seeds' benchmark, kernels alone",
             "torch": "PyTorch MLP, PYTORCH_NO_CUDA_MEMORY_CACHING=1 (per step)"}
    cname = {"plain": "without", "rec": "recorder", "floor": "empty callbacks (floor)",
             "recplain": "recorder, plain text"}
    out = ["| workload | run | n | median us/iteration | spread: min, quartiles, max | change | 95 % interval |",
           "| --- | --- | ---: | ---: | --- | ---: | --- |"]
    for mode in ("malloc", "async", "kernels", "torch"):
        conds = by.get(mode)
        if not conds:
            continue
        base = conds.get("plain")
        for cond in ("plain", "floor", "rec", "recplain"):
            x = conds.get(cond)
            if not x:
                continue
            q = statistics.quantiles(x, n=4, method="inclusive") if len(x) >= 2 else [x[0]] * 3
            med = statistics.median(x)
            if base and cond != "plain":
                lo, hi = boot_ratio(base, x)
                ch = "%+.2f %%" % ((med / statistics.median(base) - 1) * 100)
                ci = "%+.2f .. %+.2f %%" % ((lo - 1) * 100, (hi - 1) * 100)
            else:
                ch, ci = "", ""
            out.append("| %s | %s | %d | %.3f | %.3f, %.3f, %.3f, %.3f, %.3f | %s | %s |" %
                       (label.get(mode, mode), cname.get(cond, cond), len(x), med, min(x), q[0], q[1],
                        q[2], max(x), ch, ci))
    print("\n".join(out))


if __name__ == "__main__":
    a = sys.argv
    if len(a) >= 6 and a[1] == "torch":
        torch_runs(int(a[2]), float(a[3]), a[4], a[5:])
    elif len(a) >= 3 and a[1] == "table":
        table(a[2:])
    else:
        sys.exit(__doc__)
