"""tests/cupy/record_truth.py: CuPy's MemoryPool recorded on the GPU, the
ground truth for cupola's pool kind "cupy".

    python3 tests/cupy/record_truth.py OUTDIR
    python3 tests/cupy/record_truth.py --child WORKLOAD LIMIT OUTDIR   (one run)

Each run is a fresh process with CuPy's default pool (limit "-": none; else
set_limit(size=LIMIT) before the workload).  Two hooks watch the pool:
  NAME.debug.jsonl.gz  what CuPy's own DebugPrintHook(file=f) writes
  NAME.jsonl.gz        the same keys, plus "stream" (the current stream's
                       pointer, 0 for the legacy stream), "total_bytes" and
                       "used_bytes" after every event, "malloc_preprocess"
                       lines (where a request began), the workload's own
                       {"hook": "free_all_blocks"} calls, and a refused
                       request as {"hook": "malloc", "size": S, "mem_size": 0,
                       "mem_ptr": 0, ...} (CuPy writes none for it)
  NAME.json            the pool's figures at the end, whether it ran out,
                       CuPy's message
"""
import gzip, json, os, subprocess, sys, time, glob


def make_hook(cupy, f, pool):
    from cupy.cuda import memory_hook

    class Hook(memory_hook.MemoryHook):
        name = "CupolaRecordHook"

        def __init__(self):
            self.last_pre = None

        def _w(self, d):
            d["stream"] = cupy.cuda.get_current_stream().ptr
            d["total_bytes"] = pool.total_bytes()
            d["used_bytes"] = pool.used_bytes()
            f.write(json.dumps(d, separators=(",", ":")) + "\n")

        def alloc_postprocess(self, **kw):
            self._w({"hook": "alloc", "device_id": kw.get("device_id", 0), "mem_size": kw["mem_size"],
                     "mem_ptr": kw["mem_ptr"]})

        def malloc_preprocess(self, **kw):
            self.last_pre = (kw["size"], kw["mem_size"])
            self._w({"hook": "malloc_preprocess", "device_id": kw.get("device_id", 0), "size": kw["size"],
                     "mem_size": kw["mem_size"]})

        def malloc_postprocess(self, **kw):
            self.last_pre = None
            self._w({"hook": "malloc", "device_id": kw.get("device_id", 0), "size": kw["size"],
                     "mem_size": kw["mem_size"], "mem_ptr": kw["mem_ptr"], "pmem_id": hex(kw.get("pmem_id", 0))})

        def free_postprocess(self, **kw):
            self._w({"hook": "free", "device_id": kw.get("device_id", 0), "mem_size": kw["mem_size"],
                     "mem_ptr": kw["mem_ptr"], "pmem_id": hex(kw.get("pmem_id", 0))})

        def refused(self):
            s, m = self.last_pre or (0, 0)
            self._w({"hook": "malloc", "device_id": 0, "size": s, "mem_size": m, "mem_ptr": 0,
                     "pmem_id": "0x0", "refused": True})

        def free_all(self):
            self._w({"hook": "free_all_blocks", "device_id": 0})
    return Hook()


def w_fft(cp, rec):
    import random
    rng = random.Random(1)
    keep = []
    for i in range(120):
        n = rng.choice([1 << 12, 1 << 14, 3000, 5000, 1 << 16, 100000, 1 << 18, 77777])
        x = cp.random.random(n * rng.choice([1, 2, 4])).astype(cp.complex64)
        y = cp.fft.fft(x)
        if i % 3 == 0:
            z = cp.fft.ifft(y * 2)
            keep.append(z.real.sum())
        if i % 5 == 0:
            m = int(n ** 0.5)
            a = cp.random.random((m, m)).astype(cp.float32)
            keep.append(cp.fft.rfft2(a)[:4, :4].copy())
        if len(keep) > 20:
            keep.pop(rng.randrange(len(keep)))
    cp.cuda.Device().synchronize()


def w_linalg(cp, rec):
    import random
    rng = random.Random(2)
    keep = []
    for i in range(40):
        n = rng.choice([64, 100, 256, 500, 1024, 1500, 2048])
        a = cp.random.random((n, n)) + n * cp.eye(n)
        b = cp.random.random((n, 8))
        x = cp.linalg.solve(a, b)
        q, r = cp.linalg.qr(a)
        if n <= 1024 and i % 2 == 0:
            s = cp.linalg.svd(a, compute_uv=False)
            keep.append(s[:4].copy())
        w = cp.linalg.eigh(a + a.T)[0]
        keep.append((x.sum(), w[0]))
        del q, r
        if len(keep) > 12:
            keep.pop(rng.randrange(len(keep)))
    cp.cuda.Device().synchronize()


def w_elementwise(cp, rec):
    import random
    rng = random.Random(3)
    live = []
    for i in range(600):
        n = rng.choice([1, 100, 511, 512, 513, 4096, 10000, 65536, 300000, 1 << 20, 3 << 20])
        a = cp.arange(n, dtype=rng.choice([cp.float32, cp.float64, cp.int32]))
        b = a * 2 + 1
        if rng.random() < 0.3:
            b = cp.sort(b)[::-1].copy()
        if rng.random() < 0.2:
            b = cp.concatenate([b, a.astype(b.dtype)])
        live.append(b.sum())
        live.append(b)
        while len(live) > 30:
            live.pop(rng.randrange(len(live)))
        if i == 300:
            cp.get_default_memory_pool().free_all_blocks()
            rec.free_all()
    cp.cuda.Device().synchronize()


def w_twostream(cp, rec):
    import random
    rng = random.Random(4)
    s1 = cp.cuda.Stream(non_blocking=True)
    s2 = cp.cuda.Stream(non_blocking=True)
    live = []
    for i in range(300):
        s = s1 if i % 2 == 0 else s2
        with s:
            n = rng.choice([1000, 4096, 50000, 1 << 18, 1 << 20, 5 << 20])
            a = cp.random.random(n, dtype=cp.float32)
            b = cp.sqrt(a) + a
            live.append((s, b))
        if len(live) > 16:
            s_, b_ = live.pop(rng.randrange(len(live)))
            with s_:
                del b_
    s1.synchronize(); s2.synchronize()


WORKLOADS = {"fft": w_fft, "linalg": w_linalg, "elementwise": w_elementwise, "twostream": w_twostream}


def child(wname, limit, outdir):
    name = "%s.%s" % (wname, "unlimited" if limit == "-" else "limit" + limit)
    import cupy as cp
    from cupy.cuda import memory_hooks
    pool = cp.get_default_memory_pool()
    if limit != "-":
        pool.set_limit(size=int(limit))
    f = gzip.open(os.path.join(outdir, name + ".jsonl.gz"), "wt")
    fd = gzip.open(os.path.join(outdir, name + ".debug.jsonl.gz"), "wt")
    rec = make_hook(cp, f, pool)
    status, msg = "ok", ""
    peak_total = 0
    t0 = time.time()
    with memory_hooks.DebugPrintHook(file=fd):
        with rec:
            try:
                WORKLOADS[wname](cp, rec)
            except cp.cuda.memory.OutOfMemoryError as e:
                status, msg = "oom", str(e)
                rec.refused()
    f.close(); fd.close()
    # peak of total_bytes from the log
    n = 0
    for line in gzip.open(os.path.join(outdir, name + ".jsonl.gz"), "rt"):
        d = json.loads(line)
        n += 1
        peak_total = max(peak_total, d.get("total_bytes", 0))
    meta = {"workload": wname, "limit": None if limit == "-" else int(limit), "status": status,
            "message": msg, "events": n, "peak_total_bytes": peak_total,
            "end_total_bytes": pool.total_bytes(), "end_used_bytes": pool.used_bytes(),
            "n_free_blocks": pool.n_free_blocks(), "seconds": time.time() - t0,
            "cupy": cp.__version__, "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode()}
    json.dump(meta, open(os.path.join(outdir, name + ".json"), "w"), indent=1)
    print("%-32s %-4s events %6d  peak total %12d  limit %s  %.1fs" % (name, status, n, peak_total, limit, meta["seconds"]), flush=True)


def peaks(path):
    pt = pu = 0
    for line in gzip.open(path, "rt"):
        d = json.loads(line)
        pt = max(pt, d.get("total_bytes", 0))
        pu = max(pu, d.get("used_bytes", 0))
    return pt, pu


def launch(runs, outdir, par):
    procs = []
    for w, lim in runs:
        while len([p for p in procs if p.poll() is None]) >= par:
            time.sleep(0.1)
        log = open(os.path.join(outdir, "%s.%s.log" % (w, "unlimited" if lim == "-" else "limit" + lim)), "w")
        procs.append(subprocess.Popen([sys.executable, __file__, "--child", w, lim, outdir],
                                      stdout=log, stderr=subprocess.STDOUT,
                                      env=dict(os.environ, PYTHONUNBUFFERED="1")))
    for p in procs:
        p.wait()


def main():
    if sys.argv[1] == "--child":
        child(*sys.argv[2:5])
        return
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    names = list(WORKLOADS)
    launch([(w, "-") for w in names], outdir, 4)
    runs = []
    for w in names:
        p = os.path.join(outdir, "%s.unlimited.jsonl.gz" % w)
        if not os.path.exists(p):
            continue
        pt, pu = peaks(p)
        for lim in ((pt + pu) // 2, int(pu * 1.02), int(pu * 0.9)):
            runs.append((w, str(lim)))
    launch(runs, outdir, 6)
    for p in sorted(glob.glob(os.path.join(outdir, "*.log"))):
        print(open(p).read().rstrip()[-600:])


if __name__ == "__main__":
    main()
