#!/usr/bin/env python3
"""cupola's pools serving PyTorch through its pluggable allocator, checked
against PyTorch's own allocator on real training (the GPU half of
`make torch-allocator`; tests/torch/pluggable.sh runs it, then the replay).

For each workload of record.py (varlen: a transformer LM on changing shapes,
one stream; twostream: ResNet-18 with a loader stream, record_stream and an
evaluation stream), each in a fresh process:
  native     PyTorch's caching allocator, its history recorded: the compact
             snapshot W.native.pickle.gz (what cupola.trace.replay reads),
             the losses, PyTorch's peak reserved and allocated
  native2    the same again, without recording: how far the losses move
             between two runs of one allocator (0 when deterministic)
  SPEC       for each cupola pool spec (CUPOLA_TORCH_POOL, e.g. "vmm",
             "tlsf"): the same workload under
             torch.cuda.memory.CUDAPluggableAllocator(LIB, "cupola_torch_alloc",
             "cupola_torch_free"), the losses, and the library's stats read
             through ctypes (cupola_torch_stats: JSON), its peak reserved
Every run asks for deterministic kernels (cuDNN deterministic, no benchmark,
torch.use_deterministic_algorithms(warn_only), CUBLAS_WORKSPACE_CONFIG), so
the losses can be compared exactly.  Writes OUTDIR/W.TAG.json per run and
OUTDIR/summary.json, and prints one line per run.

  python3 tests/torch/pluggable.py OUTDIR LIB [SPEC ...]      (default: vmm tlsf)
  python3 tests/torch/pluggable.py --one W TAG OUTDIR [LIB SPEC]
  python3 tests/torch/pluggable.py --errors LIB     (CUPOLA_TORCH_POOL from the environment)
Also writes OUTDIR/errors.txt: a wrong spec and a full pool under PyTorch (each
must raise RuntimeError with cupola's message, and the process carry on).
"""
import ctypes
import gzip
import json
import os
import pickle
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import record  # noqa: E402  (the workloads and the compact snapshot)

WORKLOADS = ("varlen", "twostream")


def tag_of(spec):
    return re.sub(r"[^A-Za-z0-9]+", "_", spec).strip("_")


def deterministic(torch):
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)


def one(name, tag, outdir, lib=None, spec=None):
    import torch
    cdll = None
    if lib:
        # before any CUDA allocation: PyTorch refuses to swap a used allocator
        cdll = ctypes.CDLL(lib)
        cdll.cupola_torch_stats.restype = ctypes.c_int
        cdll.cupola_torch_stats.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        cdll.cupola_torch_check.restype = ctypes.c_int
        if cdll.cupola_torch_check() != 0:
            buf = ctypes.create_string_buffer(1024)
            cdll.cupola_torch_error(buf, ctypes.c_size_t(len(buf)))
            raise SystemExit("cupola: " + buf.value.decode())
        alloc = torch.cuda.memory.CUDAPluggableAllocator(lib, "cupola_torch_alloc", "cupola_torch_free")
        torch.cuda.memory.change_current_allocator(alloc)
    deterministic(torch)
    if tag == "native":
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=5_000_000)
    t0 = time.time()
    losses = record.WORKLOADS[name](torch)
    torch.cuda.synchronize()
    seconds = time.time() - t0
    fig = {"name": name, "tag": tag, "spec": spec, "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0), "losses": losses, "seconds": round(seconds, 2)}
    if cdll is not None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = cdll.cupola_torch_stats(buf, ctypes.c_size_t(len(buf)))
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            cdll.cupola_torch_stats(buf, ctypes.c_size_t(len(buf)))
        st = json.loads(buf.value.decode())
        fig["cupola"] = st
        dev = st["devices"][0] if st["devices"] else {}
        fig["reserved"] = dev.get("reserved_peak")
        fig["allocated"] = dev.get("used_peak")
    else:
        fig["reserved"] = torch.cuda.max_memory_reserved()
        fig["allocated"] = torch.cuda.max_memory_allocated()
        stats = torch.cuda.memory_stats()
        fig["device_allocs"] = stats.get("num_device_alloc")
    if tag == "native":
        snap = torch.cuda.memory._snapshot()
        with gzip.open(os.path.join(outdir, f"{name}.native.pickle.gz"), "wb") as f:
            pickle.dump(record.compact(snap), f, protocol=4)
        fig["events"] = sum(len(dt) for dt in snap["device_traces"])
    with open(os.path.join(outdir, f"{name}.{tag}.json"), "w") as f:
        json.dump(fig, f, indent=1)
    print(json.dumps({k: fig.get(k) for k in ("name", "tag", "reserved", "allocated", "seconds")}),
          flush=True)


def errors(lib):
    """A wrong CUPOLA_TORCH_POOL, and a pool that is full: PyTorch raises
    RuntimeError with cupola's message and the process carries on."""
    import torch
    alloc = torch.cuda.memory.CUDAPluggableAllocator(lib, "cupola_torch_alloc", "cupola_torch_free")
    torch.cuda.memory.change_current_allocator(alloc)
    out = {"spec": os.environ.get("CUPOLA_TORCH_POOL")}
    for step, n in (("128 MiB", 1 << 25), ("then 1 MiB", 1 << 18)):
        try:
            x = torch.ones(n, device="cuda")
            out[step] = f"allocated, sum {float(x.sum())}"
            del x
        except RuntimeError as e:
            out[step] = "RuntimeError: " + str(e).splitlines()[0][:240]
    print("errors: " + json.dumps(out), flush=True)


def child(args, env, log):
    e = dict(os.environ)
    e.update(env)
    e.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    e.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    return subprocess.run([sys.executable, __file__, "--one"] + args, env=e, stdout=log,
                          stderr=subprocess.STDOUT).returncode


def compare(a, b):
    """Exactly equal, and the largest relative difference."""
    if a is None or b is None or len(a) != len(b):
        return False, None
    worst = 0.0
    for x, y in zip(a, b):
        d = abs(x - y) / max(abs(x), 1e-30)
        worst = max(worst, d)
    return a == b, worst


def main():
    if sys.argv[1] == "--errors":
        errors(sys.argv[2])
        sys.stdout.flush()
        os._exit(0)
    if sys.argv[1] == "--one":
        name, tag, outdir = sys.argv[2:5]
        lib, spec = (sys.argv[5], sys.argv[6]) if len(sys.argv) > 6 else (None, None)
        one(name, tag, outdir, lib, spec)
        # Results are written: leave without the interpreter's teardown, in
        # which PyTorch frees its last tensors after the libraries' own
        # destructors may have run (an exit-time fault would read as a
        # failed run).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    outdir, lib = sys.argv[1], os.path.abspath(sys.argv[2])
    specs = sys.argv[3:] or ["vmm", "tlsf"]
    os.makedirs(outdir, exist_ok=True)
    summary = {"specs": specs, "runs": []}
    with open(os.path.join(outdir, "pluggable.log"), "w") as log:
        for w in WORKLOADS:
            runs = [("native", {}, []), ("native2", {}, [])]
            runs += [(tag_of(s), {"CUPOLA_TORCH_POOL": s}, [lib, s]) for s in specs]
            for tag, env, extra in runs:
                rc = child([w, tag, outdir] + extra, env, log)
                log.flush()
                path = os.path.join(outdir, f"{w}.{tag}.json")
                fig = json.load(open(path)) if rc == 0 and os.path.exists(path) else None
                summary["runs"].append({"workload": w, "tag": tag, "rc": rc, "fig": fig})
                print(f"{w} {tag}: rc={rc} reserved={fig and fig.get('reserved')}", flush=True)
        # failures that must raise, not crash
        with open(os.path.join(outdir, "errors.txt"), "w") as ef:
            for spec in ("tlsf,bogus=1", "tlsf,max=64MiB"):
                e = dict(os.environ, CUPOLA_TORCH_POOL=spec)
                r = subprocess.run([sys.executable, __file__, "--errors", lib], env=e,
                                   capture_output=True, text=True)
                lines = [l for l in r.stdout.splitlines() if l.startswith("errors: ")]
                said = lines[0][8:] if lines else r.stderr[-400:].replace("\n", " | ")
                ef.write(f"rc={r.returncode} {said}\n")
                log.write(r.stdout + r.stderr)
    base = {r["workload"]: r["fig"] for r in summary["runs"] if r["tag"] == "native"}
    lines = []
    for r in summary["runs"]:
        ref = base.get(r["workload"])
        same, worst = compare(ref and ref["losses"], r["fig"] and r["fig"]["losses"])
        r["losses_equal"], r["losses_max_rel_diff"] = same, worst
        spec = next((s for s in specs if tag_of(s) == r["tag"]), "")
        fig = r["fig"] or {}
        lines.append(f"{r['workload']}\t{r['tag']}\t{spec}\t{r['rc']}\t{int(same)}\t"
                     f"{worst if worst is not None else -1}\t{fig.get('reserved', -1)}\t"
                     f"{fig.get('allocated', -1)}\t{fig.get('seconds', -1)}")
    with open(os.path.join(outdir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    # a flat file for the Lua step (no JSON reader there)
    with open(os.path.join(outdir, "measured.tsv"), "w") as f:
        f.write("workload\ttag\tspec\trc\tlosses_equal\tmax_rel_diff\treserved_peak\tallocated_peak\tseconds\n")
        f.write("\n".join(lines) + "\n")
    # Losses are compared with PyTorch's own run-to-run spread: a workload
    # whose kernels are not deterministic (atomics in an embedding's
    # backward, say) differs between two runs under PyTorch's allocator too.
    # A pool passes when it is equal, or within 10x that spread.
    floor = {r["workload"]: r["losses_max_rel_diff"] or 0.0 for r in summary["runs"]
             if r["tag"] == "native2"}
    for r in summary["runs"]:
        d = r["losses_max_rel_diff"]
        r["losses_ok"] = r["losses_equal"] or (d is not None and d <= 10 * floor.get(r["workload"], 0.0))
    bad = [r for r in summary["runs"] if r["rc"] != 0 or not r["losses_ok"]]
    print("pluggable: %d runs, %d with a failure or losses beyond PyTorch's own run-to-run spread"
          % (len(summary["runs"]), len(bad)))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
