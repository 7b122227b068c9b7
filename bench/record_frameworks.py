"""bench/record_frameworks.py: the framework runs of bench/record_check.sh.

    python3 bench/record_frameworks.py FRAMEWORK MODE [STEPS]

FRAMEWORK torch | jax | cupy; MODE:
  run       the workload (deterministic, one stream), with whatever allocator
            the environment selects (the script sets PYTORCH_NO_CUDA_MEMORY_CACHING=1,
            XLA_PYTHON_CLIENT_ALLOCATOR=platform, or CUPOLA_CUPY_NO_POOL=1 for the
            request-level recording; nothing for the caching run)
  profile   torch: torch.profiler with CUDA activity over a few matmuls; jax:
            jax.profiler's trace of a few matmuls, its GPU planes' events counted
            (what a program's own CUPTI use sees under cupola record)
Prints one line "RESULT {json}": the workload's wall time (after a warm-up
step) and the allocator's own figures (PyTorch max_memory_reserved and
memory_stats, JAX memory_stats(), CuPy's largest pool total_bytes()).
"""
import json
import os
import sys
import time


def torch_setup():
    """The MLP and its optimizer on the GPU; returns step(i) (bench/record_cost.py times it)."""
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    dev = "cuda"
    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                          nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sizes = [64, 256, 128, 512, 32, 384, 200, 96]

    def step(i):
        x = torch.randn(sizes[i % len(sizes)], 1024, device=dev)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def torch_run(steps):
    """RECORD_SNAPSHOT=PATH (caching on): PyTorch's own memory history of the
    run, from the start, dumped there (what bench/record_explain.py compares
    the recording with)."""
    import torch
    snap = os.environ.get("RECORD_SNAPSHOT")
    if snap:
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc",
                                                 stacks="python", max_entries=1000000)
    step = torch_setup()
    step(0)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(1, steps):
        step(i)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    st = torch.cuda.memory_stats()
    if snap:
        torch.cuda.memory._dump_snapshot(snap)
    return {"seconds": dt, "max_memory_reserved": torch.cuda.max_memory_reserved(),
            "max_memory_allocated": torch.cuda.max_memory_allocated(),
            "num_device_alloc": st.get("num_device_alloc", 0),
            "num_alloc_retries": st.get("num_alloc_retries", 0)}


def torch_profile():
    import torch
    from torch.profiler import ProfilerActivity, profile
    x = torch.randn(1024, 1024, device="cuda")
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            x = x @ x / 1024
        torch.cuda.synchronize()
    n = sum(1 for e in prof.events() if str(e.device_type).endswith("CUDA"))
    return {"seconds": time.perf_counter() - t0, "cuda_events": n,
            "finite": bool(torch.isfinite(x).all().item())}


def jax_run(steps):
    import jax
    import jax.numpy as jnp
    key = jax.random.PRNGKey(0)
    k1, k2, k3 = jax.random.split(key, 3)
    w1 = jax.random.normal(k1, (1024, 4096)) * 0.01
    w2 = jax.random.normal(k2, (4096, 1024)) * 0.01
    sizes = [64, 256, 128, 512]

    def loss(w1, w2, x):
        return jnp.mean(jnp.square(jnp.tanh(x @ w1) @ w2))

    grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))

    def step(i, w1, w2):
        x = jax.random.normal(jax.random.fold_in(k3, i), (sizes[i % len(sizes)], 1024))
        l, (g1, g2) = grad(w1, w2, x)
        return w1 - 0.01 * g1, w2 - 0.01 * g2, l

    for i in range(len(sizes)):  # compile every shape before timing
        w1, w2, l = step(i, w1, w2)
    l.block_until_ready()
    t0 = time.perf_counter()
    for i in range(steps):
        w1, w2, l = step(i, w1, w2)
    l.block_until_ready()
    dt = time.perf_counter() - t0
    st = jax.devices()[0].memory_stats() or {}
    keep = {k: st[k] for k in ("peak_bytes_in_use", "peak_pool_bytes", "pool_bytes", "bytes_limit",
                               "num_allocs", "largest_alloc_size") if k in st}
    keep["seconds"] = dt
    return keep


def jax_profile():
    """jax.profiler around a few steps: whether its device tracer (CUPTI) got GPU events."""
    import tempfile
    import jax
    import jax.numpy as jnp
    d = tempfile.mkdtemp(prefix="jaxprof")
    x = jnp.ones((1024, 1024))
    t0 = time.perf_counter()
    jax.profiler.start_trace(d)
    for _ in range(5):
        x = (x @ x) / 1024
    x.block_until_ready()
    jax.profiler.stop_trace()
    res = {"seconds": time.perf_counter() - t0}
    try:
        import glob
        from jax.profiler import ProfileData
        f = sorted(glob.glob(os.path.join(d, "**", "*.xplane.pb"), recursive=True))[-1]
        pd = ProfileData.from_file(f)
        res["planes"] = {p.name: sum(1 for line in p.lines for _ in line.events)
                         for p in pd.planes if "GPU" in p.name or "gpu" in p.name}
    except Exception as e:  # the figures are a courtesy
        res["planes_error"] = repr(e)[:200]
    return res


def cupy_run(steps):
    import cupy as cp
    if os.environ.get("CUPOLA_CUPY_NO_POOL") == "1":
        cp.cuda.set_allocator(None)
    pool = cp.get_default_memory_pool()
    cp.random.seed(0)
    sizes = [1 << 16, 3 << 18, 1 << 20, 5 << 17, 1 << 22, 7 << 15]
    peak_total = 0

    def step(i):
        n = sizes[i % len(sizes)]
        a = cp.random.random(n, dtype=cp.float32)
        b = cp.sqrt(a) * 2
        c = (b * a).sum()
        del a, b
        return c

    step(0)
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for i in range(1, steps):
        step(i)
        peak_total = max(peak_total, pool.total_bytes())
    cp.cuda.Device().synchronize()
    return {"seconds": time.perf_counter() - t0, "peak_total_bytes": peak_total,
            "total_bytes": pool.total_bytes(), "used_bytes": pool.used_bytes()}


def main():
    fw, mode = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    if fw == "torch" and mode == "profile":
        res = torch_profile()
    elif fw == "jax" and mode == "profile":
        res = jax_profile()
    elif fw == "torch":
        res = torch_run(steps)
    elif fw == "jax":
        res = jax_run(steps)
    elif fw == "cupy":
        res = cupy_run(steps)
    else:
        raise SystemExit("unknown framework " + fw)
    print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
