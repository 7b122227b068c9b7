#!/usr/bin/env python3
"""cupola's pools inside CuPy, checked on the GPU (bench/cupy_inside.sh runs it).

One CuPy workload (FFTs, linear algebra, elementwise code over varying sizes,
work on two streams: cuFFT's and cuSOLVER's workspaces come through the
allocator too), each run in a fresh process:
  default   CuPy's own MemoryPool: the results, and the pool's peak
            total_bytes (read after every step)
  SPEC      python/cupola_cupy.py installed with CUPOLA_CUPY_POOL=SPEC and
            CUPOLA_CUPY_LOG=OUTDIR/SPEC.csv (every request the library saw):
            the results, the library's peak reserved, its device calls
Then the results of each SPEC run are compared with the default run's, and
the log is what bench/cupy_replay.lua replays through a fresh pool of the
same spec (the prediction, beside the measured peak).  Also checks that a
refusal is CuPy's OutOfMemoryError, and that a bad spec is a RuntimeError,
never a crash or a pointer at 0.

  python3 bench/cupy_inside.py OUTDIR LIB [SPEC ...]        (default SPECs: vmm tlsf)
  python3 bench/cupy_inside.py --one TAG OUTDIR [LIB SPEC]
  python3 bench/cupy_inside.py --errors OUTDIR LIB
Writes OUTDIR/TAG.json (figures), OUTDIR/TAG.npz (results), OUTDIR/errors.json.
"""
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

SIZES = [1 << 20, 3 << 20, 700_001, 5 << 20, 123_457, 8 << 20, 2 << 20, 4_000_037]


def tag_of(spec):
    return re.sub(r"[^A-Za-z0-9]+", "_", spec).strip("_")


def workload(cp, after_step):
    """Returns named results (host arrays); after_step() runs after each step."""
    rs = cp.random.RandomState(1234)
    out = {}
    # elementwise and reductions over varying sizes
    acc = []
    for i, n in enumerate(SIZES * 3):
        x = rs.standard_normal(n, dtype=cp.float32)
        y = cp.sin(x) * cp.exp(-x * x) + cp.sqrt(cp.abs(x))
        z = cp.cumsum(y[: n // 2]) if i % 2 else cp.sort(y)
        acc.append(float(z.sum(dtype=cp.float64)))
        after_step()
    out["elementwise"] = acc
    # FFTs (plan workspaces come from the allocator)
    acc = []
    for n in (4096, 1 << 16, 3 * 5 * 7 * 64, 1 << 20):
        x = rs.standard_normal(n * 2, dtype=cp.float64).view(cp.complex128)
        f = cp.fft.fft(x)
        g = cp.fft.ifft(f * cp.conj(f))
        acc.append(float(cp.abs(g).sum()))
        a2 = rs.standard_normal((256, n // 256 if n >= 65536 else 64), dtype=cp.float32)
        acc.append(float(cp.abs(cp.fft.rfft2(a2)).sum(dtype=cp.float64)))
        after_step()
    out["fft"] = acc
    # linear algebra (cuBLAS, cuSOLVER workspaces)
    acc = []
    for n in (256, 1000, 2048, 3000):
        a = rs.standard_normal((n, n), dtype=cp.float64) + n * cp.eye(n)
        b = rs.standard_normal((n, 4), dtype=cp.float64)
        xsol = cp.linalg.solve(a, b)
        q, r = cp.linalg.qr(a[:, : n // 2])
        c = a @ a.T
        acc += [float(cp.abs(xsol).sum()), float(cp.abs(r).sum()), float(c.trace())]
        after_step()
    out["linalg"] = acc
    # two streams at once, each with its own arrays, then joined
    acc = []
    s1 = cp.cuda.Stream(non_blocking=True)
    s2 = cp.cuda.Stream(non_blocking=True)
    for k in range(6):
        with s1:
            p = rs.standard_normal(SIZES[k], dtype=cp.float32)
            p = cp.tanh(p)
            ps = p.sum(dtype=cp.float64)
        with s2:
            m = rs.standard_normal((512, 512), dtype=cp.float32)
            mm = (m @ m).sum(dtype=cp.float64)
        s1.synchronize()
        s2.synchronize()
        acc += [float(ps), float(mm)]
        del p, m
        after_step()
    out["streams"] = acc
    cp.cuda.Device().synchronize()
    return out


def one(tag, outdir, lib=None, spec=None):
    if spec is not None:
        os.environ["CUPOLA_CUPY_POOL"] = spec
        os.environ["CUPOLA_CUPY_LOG"] = os.path.join(outdir, tag + ".csv")
    import cupy as cp
    import numpy as np
    fig = {"tag": tag, "spec": spec, "cupy": cp.__version__}
    peak = [0]
    if spec is None:
        pool = cp.get_default_memory_pool()

        def after():
            peak[0] = max(peak[0], pool.total_bytes())
    else:
        import cupola_cupy
        alloc = cupola_cupy.install(lib)

        def after():
            pass
    t0 = time.time()
    res = workload(cp, after)
    fig["seconds"] = time.time() - t0
    if spec is None:
        fig["peak_reserved"] = peak[0]
        fig["what"] = "CuPy MemoryPool peak total_bytes (read after each step)"
    else:
        st = alloc.stats()
        d = st["devices"][0]
        fig.update(peak_reserved=d["reserved_peak"], used_peak=d["used_peak"],
                   device_allocs=d["device_allocs"], device_frees=d["device_frees"],
                   held_frees=st["held_frees"], free_errors=st["free_errors"], ooms=st["ooms"],
                   foreign_streams=st["foreign_streams"], stats=d,
                   launch_blocking=os.environ.get("CUDA_LAUNCH_BLOCKING", ""))
    np.savez(os.path.join(outdir, tag + ".npz"), **{k: np.array(v) for k, v in res.items()})
    with open(os.path.join(outdir, tag + ".json"), "w") as f:
        json.dump(fig, f)
    print(json.dumps(fig))


def errors(outdir, lib):
    """In one process each: a bad spec, an exhausted pool."""
    code = r'''
import json, os, sys
sys.path.insert(0, %r)
import cupy as cp, cupola_cupy
r = {"spec": os.environ["CUPOLA_CUPY_POOL"]}
try:
    a = cupola_cupy.install(%r)
    r["install"] = "ok"
except Exception as e:
    r["install"] = "%%s: %%s" %% (type(e).__name__, e)
    print(json.dumps(r)); sys.exit(0)
try:
    x = cp.ones(128 << 20, dtype=cp.uint8)
    r["128 MiB"] = "served, sum %%d" %% int(x.sum())
except cp.cuda.memory.OutOfMemoryError as e:
    r["128 MiB"] = "OutOfMemoryError: %%s" %% e
except Exception as e:
    r["128 MiB"] = "%%s: %%s" %% (type(e).__name__, e)
y = cp.arange(1 << 18, dtype=cp.float32)
r["then 1 MiB"] = "served, ptr %%s, sum %%.1f" %% ("nonzero" if y.data.ptr else "ZERO", float(y.sum()))
print(json.dumps(r))
''' % (os.path.join(HERE, "..", "python"), lib)
    rows = []
    for spec in ("tlsf,bogus=1", "vmm,max=64MiB", "tlsf,max=64MiB"):
        env = dict(os.environ, CUPOLA_CUPY_POOL=spec)
        env.pop("CUPOLA_CUPY_LOG", None)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                           timeout=120)
        line = (p.stdout.strip().splitlines() or [""])[-1]
        rows.append({"rc": p.returncode, "out": line, "stderr": p.stderr[-300:]})
    with open(os.path.join(outdir, "errors.json"), "w") as f:
        json.dump(rows, f, indent=1)
    ok = all(r["rc"] == 0 for r in rows) and "RuntimeError" in rows[0]["out"] and \
        all("OutOfMemoryError" in r["out"] and "ptr nonzero" in r["out"] for r in rows[1:])
    for r in rows:
        print("rc=%d %s" % (r["rc"], r["out"]))
    return ok


def main(outdir, lib, specs):
    import numpy as np
    os.makedirs(outdir, exist_ok=True)
    fails = 0
    runs = [("default", None)] + [(tag_of(s), s) for s in specs]
    for tag, spec in runs:
        cmd = [sys.executable, os.path.abspath(__file__), "--one", tag, outdir]
        if spec is not None:
            cmd += [lib, spec]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            fails += 1
            print("cupy_inside: %s failed rc=%d\n%s" % (tag, p.returncode, p.stderr[-1500:]))
    base = os.path.join(outdir, "default.npz")
    rows = []
    for tag, spec in runs[1:]:
        path = os.path.join(outdir, tag + ".npz")
        if not (os.path.exists(base) and os.path.exists(path)):
            continue
        a, b = np.load(base), np.load(path)
        worst = 0.0
        for k in a.files:
            x, y = a[k], b[k]
            d = np.max(np.abs(x - y) / np.maximum(np.abs(x), 1e-30)) if x.shape == y.shape else np.inf
            worst = max(worst, float(d))
        rows.append({"tag": tag, "spec": spec, "identical": worst == 0.0, "max_rel_diff": worst})
        if worst > 1e-6:
            fails += 1
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(rows, f, indent=1)
    for r in rows:
        print("results %-10s %s (max rel diff %.3g)" %
              (r["spec"], "identical" if r["identical"] else "differ", r["max_rel_diff"]))
    if not errors(outdir, lib):
        fails += 1
        print("cupy_inside: the refusal checks failed")
    print("cupy_inside: %d runs, %d failures" % (len(runs), fails))
    return 1 if fails else 0


if __name__ == "__main__":
    a = sys.argv
    if len(a) >= 4 and a[1] == "--one":
        one(a[2], a[3], a[4] if len(a) > 4 else None, a[5] if len(a) > 5 else None)
    elif len(a) == 4 and a[1] == "--errors":
        sys.exit(0 if errors(a[2], a[3]) else 1)
    elif len(a) >= 3:
        sys.exit(main(a[1], os.path.abspath(a[2]), a[3:] or ["vmm", "tlsf"]))
    else:
        sys.exit(__doc__)
