#!/usr/bin/env python3
"""Step time of PyTorch training under each allocator (bench/torch_step.sh runs it on the GPU).

Allocators: PyTorch's own (default), PyTorch with expandable segments, and
cupola's pools through libcupola_torch.so (CUPOLA_TORCH_POOL=SPEC), each in a
process of its own (PyTorch reads its allocator settings once).  Workloads,
all with random weights (nothing is downloaded):
  gpt2     a GPT-2-small-like decoder built from torch.nn (12 layers, d 768,
           12 heads, vocab 50257, batch 8 x 512, bf16 autocast, AdamW)
  resnet50 torchvision's ResNet-50 (weights=None), batch 64 at 224, SGD
  varshape a 6-layer decoder on batch and sequence length changing every
           step (a seeded sequence, the same for every allocator), AdamW
Each process runs the three workloads in turn (the cache emptied between
them: torch.cuda.empty_cache, or cupola_torch_trim), WARMUP steps each, then
STEPS timed steps (host wall time from the step's start to a device
synchronisation at its end, as a loop that reads its loss each step does).
varshape cycles through SHAPES: its warm-up is at least two whole cycles, so
that every shape has been seen (kernel selection, lazily loaded modules and
the allocator's growth happen on a shape's first step, not in the timing),
and its timed steps are whole cycles, the same shapes in every round.
Rounds are interleaved: every allocator runs once per round, in an order
rotated each round.  A round's figure is the median of its timed steps
(varshape: their mean over whole cycles, each cycle the same work); the table
gives, per workload and allocator, the median of the rounds' figures, their
spread ((largest - smallest) / median: PyTorch's own must be within 2 % for
the row to decide anything), the ratio to PyTorch's default, and the device
calls per timed step (cudaMalloc/cudaFree: PyTorch's num_device_alloc/free;
cupola: its pool's upstream calls, vmm's page maps included).

The cupola rows are the pools as `cupola advise` recommends them and the
library serves them: CUPOLA_TORCH_POOL=tlsf, vmm, caching, with the serving
policy (src/core/pool/spec.c: tlsf and caching keep their idle chunks, no
upstream call once warm).  `tlsf,release_threshold=0` is tlsf before that
policy (cupola.pool's default: idle chunks returned whenever the pool grows,
taken back the next step), a row when named, to show the cause on the GPU.

  python3 bench/torch_step.py OUTDIR LIB [SPEC ...]   (default SPECs: tlsf vmm caching)
  python3 bench/torch_step.py --one ALLOC OUTFILE [LIB]   (one process; ALLOC: default,
                                                       expandable or cupola:SPEC)
  python3 bench/torch_step.py --table OUTDIR [LIB SPEC ...]   the table again from the
                                                       processes' files (a run cut short)
Environment: ROUNDS (3), STEPS (24), WARMUP (10), WORKLOADS (gpt2,resnet50,varshape),
ALLOCS (default: "default expandable" and cupola:SPEC for each SPEC), BUDGET_S (150: no
round starts after this many seconds).
"""
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time


def env_int(name, default):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


# ---- workloads -------------------------------------------------------------

def decoder(torch, layers, d, heads, vocab):
    nn = torch.nn

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(1024, d)
            layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, activation="gelu",
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(d)

        def forward(self, idx):
            t = idx.shape[1]
            pos = torch.arange(t, device=idx.device)
            x = self.emb(idx) + self.pos(pos)
            mask = nn.Transformer.generate_square_subsequent_mask(t, device=idx.device)
            x = self.blocks(x, mask=mask, is_causal=True)
            return self.norm(x) @ self.emb.weight.t()  # tied head

    return Decoder().cuda()


def make_gpt2(torch):
    model = decoder(torch, 12, 768, 12, 50257)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(0)

    def step(i):
        idx = torch.randint(0, 50257, (8, 512), device="cuda", generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(idx[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                     idx[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def make_resnet50(torch):
    import torchvision
    model = torchvision.models.resnet50(weights=None).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator(device="cuda").manual_seed(0)

    def step(i):
        x = torch.randn(64, 3, 224, 224, device="cuda", generator=gen)
        y = torch.randint(0, 1000, (64,), device="cuda", generator=gen)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


# batch x sequence, cycled: shapes change every step, the same for everyone
SHAPES = [(8, 384), (4, 1000), (16, 128), (6, 640), (12, 256), (2, 1024), (10, 448), (8, 200),
          (5, 900), (14, 320), (3, 768), (9, 512)]


def make_varshape(torch):
    model = decoder(torch, 6, 512, 8, 32000)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(0)

    def step(i):
        b, t = SHAPES[i % len(SHAPES)]
        idx = torch.randint(0, 32000, (b, t + 1), device="cuda", generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(idx[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                     idx[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


WORKLOADS = {"gpt2": make_gpt2, "resnet50": make_resnet50, "varshape": make_varshape}


# ---- one process -------------------------------------------------------------

def one(alloc, outfile, lib=None):
    if alloc == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    else:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    import torch
    cdll = None
    if alloc.startswith("cupola:"):
        os.environ["CUPOLA_TORCH_POOL"] = alloc[len("cupola:"):]
        cdll = ctypes.CDLL(lib)
        cdll.cupola_torch_stats.restype = ctypes.c_int
        cdll.cupola_torch_stats.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        cdll.cupola_torch_trim.argtypes = [ctypes.c_int, ctypes.c_size_t]
        if cdll.cupola_torch_check() != 0:
            raise SystemExit("cupola: CUPOLA_TORCH_POOL=%s refused" % os.environ["CUPOLA_TORCH_POOL"])
        a = torch.cuda.memory.CUDAPluggableAllocator(lib, "cupola_torch_alloc", "cupola_torch_free")
        torch.cuda.memory.change_current_allocator(a)

    def cupola_stats():
        buf = ctypes.create_string_buffer(1 << 16)
        cdll.cupola_torch_stats(buf, len(buf))
        return json.loads(buf.value.decode())

    def device_calls():
        if cdll:
            d = cupola_stats()["devices"]
            return sum(x["device_allocs"] + x["device_frees"] for x in d)
        s = torch.cuda.memory_stats()
        return s.get("num_device_alloc", 0) + s.get("num_device_free", 0)

    def reserved_peak():
        if cdll:
            return max((x["reserved_peak"] for x in cupola_stats()["devices"]), default=0)
        return torch.cuda.max_memory_reserved()

    steps, warmup = env_int("STEPS", 24), env_int("WARMUP", 10)
    names = [w for w in os.environ.get("WORKLOADS", "gpt2,resnet50,varshape").split(",") if w]
    torch.backends.cudnn.benchmark = False
    out = {"alloc": alloc, "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "workloads": {}}
    if cdll:  # the policy the library serves with (src/core/pool/spec.c)
        out["release_threshold"] = cupola_stats().get("release_threshold")
    for name in names:
        torch.manual_seed(0)
        step = WORKLOADS[name](torch)
        w, n = warmup, steps
        if name == "varshape":  # whole cycles: every shape seen, the same ones timed
            c = len(SHAPES)
            w = max(2 * c, (w + c - 1) // c * c)
            n = max(c, (n + c - 1) // c * c)
        warm = []
        for i in range(w):
            t0 = time.perf_counter()
            step(i).item()
            warm.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
        c0, times = device_calls(), []
        for i in range(w, w + n):
            t0 = time.perf_counter()
            loss = step(i)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
            loss.item()
        calls = device_calls() - c0
        out["workloads"][name] = {"ms": times, "warm_ms": warm, "device_calls": calls,
                                  "reserved_peak": reserved_peak(),
                                  "figure": statistics.mean(times) if name == "varshape"
                                  else statistics.median(times)}
        del step
        import gc
        gc.collect()
        torch.cuda.synchronize()
        if cdll:
            cdll.cupola_torch_trim(-1, 0)
        else:
            torch.cuda.empty_cache()
    with open(outfile, "w") as f:
        json.dump(out, f)


# ---- the driver ------------------------------------------------------------------

def label(alloc):
    if alloc == "default":
        return "PyTorch"
    if alloc == "expandable":
        return "PyTorch expandable_segments"
    spec = alloc[len("cupola:"):]
    if "release_threshold=0" in spec.replace(" ", ""):
        return "cupola `%s` (before: idle chunks returned)" % spec
    return "cupola `%s`" % spec


def allocs_of(specs):
    if os.environ.get("ALLOCS"):
        return os.environ["ALLOCS"].split()
    return ["default", "expandable"] + ["cupola:" + s for s in specs]


def file_of(outdir, r, a):
    return os.path.join(outdir, "r%d.%s.json" % (r, "".join(c if c.isalnum() else "_" for c in a)))


def main(outdir, lib, specs):
    os.makedirs(outdir, exist_ok=True)
    allocs = allocs_of(specs)
    rounds, budget = env_int("ROUNDS", 3), env_int("BUDGET_S", 150)
    t_start = time.time()
    failures = []
    done = 0
    for r in range(rounds):
        if r > 0 and time.time() - t_start > budget:
            print("torch_step: stopping after %d rounds (%.0f s > BUDGET_S %d)" %
                  (r, time.time() - t_start, budget), flush=True)
            break
        order = allocs[r % len(allocs):] + allocs[:r % len(allocs)]
        for a in order:
            path = file_of(outdir, r, a)
            cmd = [sys.executable, os.path.abspath(__file__), "--one", a, path, lib]
            t0 = time.time()
            if os.path.exists(path):
                os.remove(path)
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0 or not os.path.exists(path):
                failures.append((r, a, p.returncode, (p.stderr or "")[-600:]))
                print("torch_step: round %d %s failed rc=%d\n%s" % (r, a, p.returncode, p.stderr[-600:]),
                      flush=True)
                continue
            print("torch_step: round %d %-34s %.1f s" % (r, a, time.time() - t0), flush=True)
        done = r + 1
    return table(outdir, allocs, done, failures)


def spread(xs):
    return (max(xs) - min(xs)) / statistics.median(xs) if len(xs) > 1 else float("nan")


def table(outdir, allocs, done=None, failures=()):
    """The table from the processes' files in outdir (r<round>.<alloc>.json)."""
    runs = {a: [] for a in allocs}
    r = 0
    while any(os.path.exists(file_of(outdir, r, a)) for a in allocs):
        for a in allocs:
            if os.path.exists(file_of(outdir, r, a)):
                with open(file_of(outdir, r, a)) as f:
                    runs[a].append(json.load(f))
        r += 1
    done = r if done is None else done
    device = next((x[0]["device"] for x in runs.values() if x), "?")
    torch_v = next((x[0]["torch"] for x in runs.values() if x), "?")
    names = []
    for x in runs.values():
        for run in x:
            for w in run["workloads"]:
                if w not in names:
                    names.append(w)
    lines = ["# Step time under each allocator (bench/torch_step.py)", "",
             "Device: %s, PyTorch %s, %d rounds (interleaved, rotated), %s timed steps after %s "
             "warm-up per workload and process (varshape: whole cycles of %d shapes, at least two "
             "of warm-up); commit %s, %s." %
             (device, torch_v, done, os.environ.get("STEPS", "24"), os.environ.get("WARMUP", "10"),
              len(SHAPES), os.environ.get("CUPOLA_COMMIT", "?"),
              time.strftime("%Y-%m-%d %H:%MZ", time.gmtime())),
             "",
             "| workload | allocator | ms/step | rounds' figures | spread | vs PyTorch | device calls/step | peak reserved so far |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    summary = {}
    for w in names:
        base = None
        for a in allocs:
            rs = [run["workloads"][w] for run in runs[a] if w in run["workloads"]]
            if not rs:
                continue
            figs = [x.get("figure", statistics.median(x["ms"])) for x in rs]
            steps = sum(len(x["ms"]) for x in rs)
            calls = sum(x["device_calls"] for x in rs)
            peak = max(x["reserved_peak"] for x in rs)
            med = statistics.median(figs)
            sp = spread(figs)
            if a == "default":
                base = med
            ratio = "%+.1f %%" % ((med / base - 1) * 100) if base else "-"
            summary.setdefault(w, {})[a] = {"median_ms": med, "round_figures": figs, "spread": sp,
                                            "calls_per_step": calls / steps, "reserved_peak": peak,
                                            "vs_default": med / base - 1 if base else None}
            lines.append("| %s | %s | %.2f | %s | %s | %s | %.1f | %.0f MiB |" %
                         (w, label(a), med, " ".join("%.1f" % m for m in figs),
                          "%.1f %%" % (sp * 100) if sp == sp else "-", ratio, calls / steps,
                          peak / 2**20))
    decided = {w: summary[w]["default"]["spread"] <= 0.02 for w in summary if "default" in summary[w]
               and summary[w]["default"]["spread"] == summary[w]["default"]["spread"]}
    lines += ["", "PyTorch's own rounds agree within 2 %% (the table decides) on: %s; not on: %s." %
              (", ".join(w for w in decided if decided[w]) or "none",
               ", ".join(w for w in decided if not decided[w]) or "none"),
              "", "Within 2 % of PyTorch's default is the aim for every pool `cupola advise` "
              "recommends.  Device calls are cudaMalloc/cudaFree (PyTorch's num_device_alloc + "
              "num_device_free; cupola: its pool's upstream allocations and frees, vmm's page "
              "maps and unmaps) during the timed steps.  Peak reserved is the process's so far: the "
              "workloads run in the order listed, each after the cache of the one before was "
              "emptied."]
    if failures:
        lines += ["", "Failed runs:", ""] + ["- round %d %s rc=%d: `%s`" %
                                             (r, a, rc, e.strip().splitlines()[-1] if e.strip() else "")
                                             for r, a, rc, e in failures]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(outdir, "torch_step.md"), "w") as f:
        f.write(text)
    with open(os.path.join(outdir, "torch_step.json"), "w") as f:
        json.dump({"summary": summary, "decided": decided, "failures": len(failures),
                   "rounds": done}, f, indent=1)
    print(text)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--one":
        one(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
    elif len(sys.argv) >= 3 and sys.argv[1] == "--table":
        sys.exit(table(sys.argv[2], allocs_of(sys.argv[4:] or ["tlsf", "vmm", "caching"])))
    elif len(sys.argv) >= 3:
        sys.exit(main(sys.argv[1], os.path.abspath(sys.argv[2]),
                      sys.argv[3:] or ["tlsf", "vmm", "caching"]))
    else:
        sys.exit(__doc__)
