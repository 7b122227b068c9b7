"""tests/jax/record_truth.py: JAX's BFC allocator recorded on the GPU, the
ground truth for cupola's pool kind "bfc".

    python3 tests/jax/record_truth.py OUTDIR            # every workload and setting
    python3 tests/jax/record_truth.py --child W S F OUTDIR   # one run (internal)

Each run is a fresh process (XLA reads its environment once): workload W under
setting S ("grow": XLA_PYTHON_CLIENT_PREALLOCATE=false; "pre": preallocated;
F the fraction XLA_CLIENT_MEM_FRACTION, "-" for JAX's default).  The profiler
starts before the workload's first allocation and stops after it, so the
events are those of the whole run.  Each run writes
  NAME.jsonl.gz  the memory events of every allocator, one JSON object a line
                 (event, allocator_name, addr, requested_bytes,
                 allocation_bytes, ts in ns, tid, and every other stat),
                 in the order of their timestamps
  NAME.json      memory_stats() after the run, the device's memory, the
                 setting, whether it ran out and JAX's message
The growth runs go first; the preallocated runs take fractions around each
workload's peak in use: 1.01x and 1.3x (fit expected), 0.9x (may run out),
and growth under a limit of 1.05x.
"""
import gzip, json, os, subprocess, sys, time, glob, traceback


# ---- the workloads -------------------------------------------------------

def w_mlp(jax, jnp):
    import flax.linen as nn, optax
    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            for w in (2048, 2048, 1024, 1024):
                x = nn.relu(nn.Dense(w)(x))
            return nn.Dense(10)(x)
    m = MLP()
    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (512, 1024))
    y = jax.random.randint(key, (512,), 0, 10)
    params = m.init(key, x)
    opt = optax.adam(1e-3)
    st = opt.init(params)
    @jax.jit
    def step(params, st, x, y):
        def loss(p):
            logits = m.apply(p, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        l, g = jax.value_and_grad(loss)(params)
        upd, st = opt.update(g, st, params)
        return optax.apply_updates(params, upd), st, l
    for i in range(25):
        params, st, l = step(params, st, x, y)
    l.block_until_ready()


def w_cnn(jax, jnp):
    import flax.linen as nn, optax
    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            for c in (64, 128, 256):
                x = nn.relu(nn.Conv(c, (3, 3))(x))
                x = nn.relu(nn.Conv(c, (3, 3))(x))
                x = nn.avg_pool(x, (2, 2), (2, 2))
            x = x.reshape((x.shape[0], -1))
            return nn.Dense(100)(x)
    m = CNN()
    key = jax.random.PRNGKey(1)
    x = jax.random.normal(key, (128, 64, 64, 3))
    y = jax.random.randint(key, (128,), 0, 100)
    params = m.init(key, x)
    opt = optax.sgd(1e-2, momentum=0.9)
    st = opt.init(params)
    @jax.jit
    def step(params, st, x, y):
        def loss(p):
            return optax.softmax_cross_entropy_with_integer_labels(m.apply(p, x), y).mean()
        l, g = jax.value_and_grad(loss)(params)
        upd, st = opt.update(g, st, params)
        return optax.apply_updates(params, upd), st, l
    for i in range(15):
        params, st, l = step(params, st, x, y)
    l.block_until_ready()


def w_varlen(jax, jnp):
    # An attention block whose sequence length changes from step to step:
    # every new shape compiles anew, and the buffers differ in size.
    import optax
    key = jax.random.PRNGKey(2)
    d = 512
    ks = jax.random.split(key, 4)
    params = {n: jax.random.normal(k, (d, d)) * 0.02 for n, k in zip("qkvo", ks)}
    opt = optax.adamw(1e-3)
    st = opt.init(params)
    def block(p, x):
        q, k, v = x @ p["q"], x @ p["k"], x @ p["v"]
        a = jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / jnp.sqrt(d), axis=-1)
        return (a @ v) @ p["o"]
    @jax.jit
    def step(p, st, x):
        l, g = jax.value_and_grad(lambda p: jnp.mean(block(p, x) ** 2))(p)
        upd, st = opt.update(g, st, p)
        return optax.apply_updates(p, upd), st, l
    lens = [128, 512, 256, 1024, 384, 768, 128, 1024, 640, 256, 512, 896, 384, 1024, 192, 768]
    for i, n in enumerate(lens):
        x = jax.random.normal(jax.random.fold_in(key, i), (16, n, d))
        params, st, l = step(params, st, x)
    l.block_until_ready()


def w_eager(jax, jnp):
    # Op-by-op code: every operation its own dispatch, arrays of many sizes
    # kept in a sliding window and dropped out of order.
    import random
    rng = random.Random(3)
    key = jax.random.PRNGKey(3)
    live = []
    for i in range(400):
        n = rng.choice([64, 100, 256, 300, 512, 777, 1024, 1500, 2048])
        a = jax.random.normal(jax.random.fold_in(key, i), (n, rng.choice([64, 256, 512])))
        b = jnp.tanh(a) * 2.0 + 1.0
        if rng.random() < 0.3:
            b = b @ b.T[:, :64]
        live.append(b)
        if len(live) > 24:
            del live[rng.randrange(len(live))]
        if i % 50 == 0:
            for x in live:
                x.block_until_ready()
    for x in live:
        x.block_until_ready()


def w_tiny(jax, jnp):
    a = jnp.ones((1024, 1024))
    b = (a @ a).sum()
    c = jnp.arange(100000.0) * 2
    del a
    b.block_until_ready(), c.block_until_ready()


WORKLOADS = {"mlp": w_mlp, "cnn": w_cnn, "varlen": w_varlen, "eager": w_eager, "tiny": w_tiny}


# ---- reading the profile ---------------------------------------------------

def _varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1
        v |= (c & 0x7F) << s
        if c < 0x80:
            return v, i
        s += 7


def _fields(b, i=0, end=None):
    end = len(b) if end is None else end
    while i < end:
        key, i = _varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1:
            v = b[i:i + 8]; i += 8
        elif wt == 2:
            n, i = _varint(b, i)
            v = (i, i + n); i += n
        elif wt == 5:
            v = b[i:i + 4]; i += 4
        else:
            raise ValueError("wire type %d" % wt)
        yield f, wt, v


def read_xplane(path):
    """The memory events of an .xplane.pb, by its protobuf fields (xplane.proto):
    XSpace.planes=1; XPlane name=2 lines=3 event_metadata=4 stat_metadata=5;
    XLine id=1 timestamp_ns=3 events=4; XEvent metadata_id=1 offset_ps=2
    stats=4; XStat metadata_id=1 double=2 uint64=3 int64=4 str=5 bytes=6 ref=7."""
    import struct
    b = open(path, "rb").read()
    out = []
    for f, wt, v in _fields(b):
        if f != 1 or wt != 2:
            continue
        s, e = v
        plane_name, lines, emeta, smeta = "", [], {}, {}
        for pf, pwt, pv in _fields(b, s, e):
            if pf == 2 and pwt == 2:
                plane_name = b[pv[0]:pv[1]].decode("utf-8", "replace")
            elif pf == 3 and pwt == 2:
                lines.append(pv)
            elif pf in (4, 5) and pwt == 2:
                k, name = None, ""
                for mf, mwt, mv in _fields(b, pv[0], pv[1]):
                    if mf == 1 and mwt == 0:
                        k = mv
                    elif mf == 2 and mwt == 2:
                        for nf, nwt, nv in _fields(b, mv[0], mv[1]):
                            if nf == 2 and nwt == 2:
                                name = b[nv[0]:nv[1]].decode("utf-8", "replace")
                (emeta if pf == 4 else smeta)[k if k is not None else 0] = name
        mem_ids = {k for k, n in emeta.items() if n in ("MemoryAllocation", "MemoryDeallocation")}
        if not mem_ids:
            continue
        for ls, le in lines:
            ts0, lid, evs = 0, 0, []
            for lf, lwt, lv in _fields(b, ls, le):
                if lf == 3 and lwt == 0:
                    ts0 = lv
                elif lf == 1 and lwt == 0:
                    lid = lv
                elif lf == 4 and lwt == 2:
                    evs.append(lv)
            for es, ee in evs:
                mid, off, stats = 0, 0, {}
                for ef, ewt, ev in _fields(b, es, ee):
                    if ef == 1 and ewt == 0:
                        mid = ev
                    elif ef == 2 and ewt == 0:
                        off = ev
                    elif ef == 4 and ewt == 2:
                        sid, val = 0, None
                        for sf, swt, sv in _fields(b, ev[0], ev[1]):
                            if sf == 1:
                                sid = sv
                            elif sf == 2:
                                val = struct.unpack("<d", sv)[0]
                            elif sf == 3:
                                val = sv
                            elif sf == 4:
                                val = sv - (1 << 64) if sv >= 1 << 63 else sv
                            elif sf in (5, 6):
                                val = b[sv[0]:sv[1]].decode("utf-8", "replace")
                            elif sf == 7:
                                val = smeta.get(sv, "")
                        stats[smeta.get(sid, str(sid))] = val
                if mid not in mem_ids:
                    continue
                r = {"event": emeta[mid], "ts": ts0 + off // 1000, "ts_ps": off, "tid": lid,
                     "plane": plane_name}
                r.update(stats)
                out.append(r)
    out.sort(key=lambda r: (r["ts"], r["ts_ps"]))
    return out


# ---- one run ----------------------------------------------------------------

def child(wname, setting, frac, outdir):
    name = "%s.%s%s" % (wname, setting, "" if frac == "-" else "-" + frac)
    import jax, jax.numpy as jnp
    tdir = os.path.join("/tmp/jaxprof", name)
    opts = None
    try:
        opts = jax.profiler.ProfileOptions()
        for k, v in (("host_tracer_level", 2), ("python_tracer_level", 0), ("device_tracer_level", 0)):
            try:
                setattr(opts, k, v)
            except Exception:
                pass
    except Exception:
        opts = None
    t0 = time.time()
    if opts is not None:
        jax.profiler.start_trace(tdir, profiler_options=opts)
    else:
        jax.profiler.start_trace(tdir)
    status, msg = "ok", ""
    try:
        WORKLOADS[wname](jax, jnp)
    except Exception as e:
        status, msg = ("oom" if "RESOURCE_EXHAUSTED" in str(e) or "Out of memory" in str(e) else "error"), str(e)[:4000]
    dev = jax.devices()[0]
    stats = dict(dev.memory_stats() or {})
    jax.profiler.stop_trace()
    secs = time.time() - t0
    pbs = glob.glob(os.path.join(tdir, "**", "*.xplane.pb"), recursive=True)
    events, reader = [], None
    if pbs:
        events = read_xplane(pbs[0])
        reader = "own"
    with gzip.open(os.path.join(outdir, name + ".jsonl.gz"), "wt") as f:
        for r in events:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
    if wname in ("tiny",) and pbs:
        import shutil
        with open(pbs[0], "rb") as src, gzip.open(os.path.join(outdir, name + ".xplane.pb.gz"), "wb") as dst:
            shutil.copyfileobj(src, dst)
    meta = {"workload": wname, "setting": setting, "fraction": frac, "status": status, "message": msg,
            "memory_stats": stats, "events": len(events), "reader": reader,
            "xplane_bytes": os.path.getsize(pbs[0]) if pbs else 0, "seconds": secs,
            "device": str(dev.device_kind), "jax": jax.__version__,
            "env": {k: v for k, v in os.environ.items() if k.startswith("XLA_") or k.startswith("JAX_")}}
    try:
        import jaxlib
        meta["jaxlib"] = jaxlib.__version__
    except Exception:
        pass
    with open(os.path.join(outdir, name + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
    print("%-28s %-5s events %6d  peak_in_use %12s  peak_pool %12s  limit %12s  %.1fs" % (
        name, status, len(events), stats.get("peak_bytes_in_use"), stats.get("peak_pool_bytes"),
        stats.get("bytes_limit"), secs), flush=True)


def launch(runs, outdir, par):
    procs = []
    for (w, s, f) in runs:
        env = dict(os.environ)
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false" if s == "grow" else "true"
        env.pop("XLA_CLIENT_MEM_FRACTION", None)
        env.pop("XLA_PYTHON_CLIENT_MEM_FRACTION", None)
        if f != "-":
            env["XLA_CLIENT_MEM_FRACTION"] = f
        env["PYTHONUNBUFFERED"] = "1"
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        while len([p for p in procs if p.poll() is None]) >= par:
            time.sleep(0.2)
        log = open(os.path.join(outdir, "%s.%s%s.log" % (w, s, "" if f == "-" else "-" + f)), "w")
        procs.append(subprocess.Popen([sys.executable, __file__, "--child", w, s, f, outdir],
                                      env=env, stdout=log, stderr=subprocess.STDOUT))
    for p in procs:
        p.wait()


def main():
    if sys.argv[1] == "--child":
        child(*sys.argv[2:6])
        return
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    total = int(subprocess.check_output(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"]).split()[0]) * 1024 * 1024
    names = ["mlp", "cnn", "varlen", "eager"]
    launch([(w, "grow", "-") for w in names] + [("tiny", "grow", "-")], outdir, 5)
    runs = [("mlp", "pre", "-")]
    for w in names:
        try:
            m = json.load(open(os.path.join(outdir, "%s.grow.json" % w)))
        except Exception:
            continue
        peak = m["memory_stats"].get("peak_bytes_in_use", 0)
        if not peak:
            continue
        for k, s in ((1.01, "pre"), (1.3, "pre"), (0.9, "pre"), (1.05, "grow")):
            runs.append((w, s, "%.5f" % (peak * k / total)))
    launch(runs, outdir, 6)
    for p in sorted(glob.glob(os.path.join(outdir, "*.log"))):
        for line in open(p):
            if line.startswith(tuple(WORKLOADS)):
                print(line.rstrip())


if __name__ == "__main__":
    main()
