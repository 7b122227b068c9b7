#!/usr/bin/env python3
"""Records ground truth for cupola's model of PyTorch's caching allocator.

Each recording is a fresh Python process (the allocator reads
PYTORCH_CUDA_ALLOC_CONF once), running one seeded workload under one setting,
optionally under a memory limit (torch.cuda.set_per_process_memory_fraction),
with the allocator's history recorded from the start.  It writes

  NAME.TAG.pickle.gz   a compact snapshot: device_traces entries with action,
                       addr, size, stream, time_us only, and segments (the
                       form cupola.trace.load reads; frames left out)
  NAME.TAG.json        PyTorch's own figures at the end: peaks, counters,
                       the setting, the limit, whether the run ran out

Workloads (all random weights, seeded, on one GPU):
  twostream  ResNet-18 training; inputs copied in on a loader stream and
             handed to the main stream with record_stream; every other step
             an evaluation forward on a third stream whose outputs are read
             on the main stream.  Several streams, events, cross-stream frees.
  varlen     a transformer language model (6 layers, d 768) trained with
             AdamW on batches of changing shape, with an empty_cache() half
             way; run unlimited, then under limits derived from its own
             unlimited peaks: one that forces free-and-retry, one that runs
             out of memory (the snapshot then ends with PyTorch's oom entry).

  python3 tests/torch/record.py OUTDIR            everything, in parallel
  python3 tests/torch/record.py --one NAME TAG CONF LIMIT OUTDIR   one run
  python3 tests/torch/record.py --probe-conf OUTDIR   which conf strings
                       PyTorch accepts (conf_probe.json, and conf_probe.lua:
                       the same in the form examples/traces/torch ships):
                       the keys cupola's parser reads and some it refuses,
                       the edge values, and what one 4 MiB tensor reserves
  python3 tests/torch/record.py --probe-lua JSON LUA   conf_probe.lua from a
                       conf_probe.json
  python3 tests/torch/record.py --extra OUTDIR   the second batch: two
                       streams under a limit with expandable segments, and
                       varlen under a limit with roundup_power2_divisions
  python3 tests/torch/record.py --segsize OUTDIR   the third: large_segment_size_mb
                       (varlen, and twostream with expandable segments)
"""
import gzip
import json
import os
import pickle
import subprocess
import sys
import time

KEEP = ("action", "addr", "size", "stream", "time_us")

ROUNDUP_LIST = "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"

# (workload, tag, conf)
UNLIMITED = [
    ("twostream", "default", ""),
    ("twostream", "expandable", "expandable_segments:True"),
    ("twostream", "split64", "max_split_size_mb:64"),
    ("twostream", "pow2list", ROUNDUP_LIST),
    ("twostream", "split128nsr", "max_split_size_mb:128,max_non_split_rounding_mb:256"),
    ("varlen", "default", ""),
    ("varlen", "expandable", "expandable_segments:True"),
    ("varlen", "split32", "max_split_size_mb:32"),
]

# (workload, tag, conf, which limit): "retry" lies between the unlimited
# run's peak allocated and its peak reserved; "oom" below its peak allocated.
LIMITED = [
    ("varlen", "limit-default", "", "retry"),
    ("varlen", "limit-expandable", "expandable_segments:True", "retry"),
    ("varlen", "limit-gc70", "garbage_collection_threshold:0.7", "retry"),
    ("varlen", "limit-split256-gc80", "max_split_size_mb:256,garbage_collection_threshold:0.8", "retry"),
    ("varlen", "oom-default", "", "oom"),
    ("varlen", "oom-expandable", "expandable_segments:True", "oom"),
    ("twostream", "limit-default", "", "retry"),
]


def workload_twostream(torch):
    import torchvision
    torch.manual_seed(1)
    dev = torch.device("cuda")
    model = torchvision.models.resnet18(num_classes=100).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    main = torch.cuda.current_stream()
    loader = torch.cuda.Stream()
    evals = torch.cuda.Stream()
    gen = torch.Generator().manual_seed(2)
    sizes = [32, 48, 24, 64, 40, 56, 32, 48]
    side = [112, 96, 128, 112, 96, 128, 112, 96]

    def fetch(i):
        n, hw = sizes[i], side[i]
        host = torch.randn(n, 3, hw, hw, generator=gen).pin_memory()
        lab = torch.randint(0, 100, (n,), generator=gen).pin_memory()
        with torch.cuda.stream(loader):
            x = torch.empty(host.shape, device=dev)
            y = torch.empty(lab.shape, dtype=torch.long, device=dev)
            x.copy_(host, non_blocking=True)
            y.copy_(lab, non_blocking=True)
        return x, y

    nxt = fetch(0)
    losses = []
    for i in range(len(sizes)):
        main.wait_stream(loader)
        x, y = nxt
        x.record_stream(main)
        y.record_stream(main)
        if i + 1 < len(sizes):
            nxt = fetch(i + 1)
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        if i % 2 == 1:
            evals.wait_stream(main)
            with torch.cuda.stream(evals):
                with torch.no_grad():
                    ex = torch.randn(16, 3, 128, 128, device=dev)
                    eo = model(ex).softmax(1)
            main.wait_stream(evals)
            eo.record_stream(main)
            losses.append(eo.sum())
            del ex, eo
        del x, y, out, loss
    torch.cuda.synchronize()
    return [float(v) for v in losses]


def workload_varlen(torch):
    torch.manual_seed(3)
    dev = torch.device("cuda")
    vocab, d, layers = 16000, 768, 6
    emb = torch.nn.Embedding(vocab, d).to(dev)
    enc = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(d, 12, 4 * d, dropout=0.0, batch_first=True),
        layers).to(dev)
    head = torch.nn.Linear(d, vocab).to(dev)
    params = list(emb.parameters()) + list(enc.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    gen = torch.Generator().manual_seed(4)
    shapes = [(8, 256), (4, 512), (16, 128), (6, 384), (12, 192), (2, 1024),
              (8, 320), (10, 256), (4, 640), (14, 160), (6, 448), (8, 256)]
    losses = []
    for i, (b, t) in enumerate(shapes):
        tok = torch.randint(0, vocab, (b, t + 1), generator=gen).to(dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = enc(emb(tok[:, :-1]))
            logits = head(h)
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, vocab),
                                                     tok[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        del tok, h, logits, loss
        if i == len(shapes) // 2:
            torch.cuda.empty_cache()
    torch.cuda.synchronize()
    return losses


WORKLOADS = {"twostream": workload_twostream, "varlen": workload_varlen}


def compact(snap):
    traces = [[{k: e.get(k) for k in KEEP} for e in dt] for dt in snap["device_traces"]]
    segs = [{k: s.get(k) for k in ("address", "total_size", "stream", "segment_type",
                                    "allocated_size", "active_size")}
            for s in snap["segments"]]
    out = {"device_traces": traces, "segments": segs}
    if "allocator_settings" in snap:
        out["allocator_settings"] = snap["allocator_settings"]
    return out


def one(name, tag, conf, limit, outdir):
    import torch
    total = torch.cuda.mem_get_info()[1]
    fraction = None
    if limit:
        fraction = limit / total
        torch.cuda.set_per_process_memory_fraction(fraction)
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=5_000_000)
    t0 = time.time()
    oom = None
    losses = None
    try:
        losses = WORKLOADS[name](torch)
    except torch.OutOfMemoryError as e:
        oom = str(e).splitlines()[0][:300]
    seconds = time.time() - t0
    snap = torch.cuda.memory._snapshot()
    stats = torch.cuda.memory_stats()
    with gzip.open(os.path.join(outdir, f"{name}.{tag}.pickle.gz"), "wb") as f:
        pickle.dump(compact(snap), f, protocol=4)
    fig = {
        "name": name, "tag": tag, "conf": conf, "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "allocated": torch.cuda.max_memory_allocated(),
        "reserved": torch.cuda.max_memory_reserved(),
        "device_allocs": stats.get("num_device_alloc"),
        "device_frees": stats.get("num_device_free"),
        "retries": stats.get("num_alloc_retries"),
        "ooms": stats.get("num_ooms"),
        "sync_all_streams": stats.get("num_sync_all_streams"),
        "events": sum(len(dt) for dt in snap["device_traces"]),
        "streams": sorted({e.get("stream") for dt in snap["device_traces"] for e in dt}),
        "total_memory": total, "fraction": fraction, "limit": limit,
        "oom": oom, "losses": losses, "seconds": round(seconds, 2),
        "snapshot_keys": sorted(snap.keys()),
        "stats": {k: v for k, v in stats.items() if "all" in k or "num_" in k},
    }
    if "allocator_settings" in snap:
        fig["allocator_settings"] = snap["allocator_settings"]
    with open(os.path.join(outdir, f"{name}.{tag}.json"), "w") as f:
        json.dump(fig, f, indent=1, default=str)
    print(json.dumps({k: fig[k] for k in ("name", "tag", "allocated", "reserved",
                                          "device_allocs", "retries", "ooms", "events", "oom")}))


def full_snapshot(outdir):
    """A snapshot as users dump it (frames, every key), from both writers."""
    import torch
    torch.cuda.memory._record_memory_history(enabled="all", stacks="python")
    workload_twostream(torch)
    torch.cuda.memory._dump_snapshot(os.path.join(outdir, "twostream.full.pickle"))
    names = [n for n in dir(torch._C) if "napshot" in n or "ickle" in n]
    info = {"torch_C_names": names}
    # PyTorch's C++ pickler (the writer of snapshots dumped from C++, e.g.
    # c10's own _memory_snapshot_pickled): the same snapshot through it.
    snap = torch.cuda.memory._snapshot()
    for n in ("_pickle_save",):
        try:
            data = getattr(torch._C, n)(snap)
            with open(os.path.join(outdir, "twostream.cpp.pickle"), "wb") as f:
                f.write(data)
            info["cpp_writer"] = n
        except Exception as e:  # noqa: BLE001 - a probe: say what happened
            info["cpp_writer_error"] = f"{n}: {e}"[:500]
            try:  # without frames: plain ints, strings and lists only
                data = getattr(torch._C, n)(compact(snap))
                with open(os.path.join(outdir, "twostream.cpp.pickle"), "wb") as f:
                    f.write(data)
                info["cpp_writer"] = n + " (compact)"
            except Exception as e2:  # noqa: BLE001
                info["cpp_writer_error_compact"] = f"{n}: {e2}"[:500]
    with open(os.path.join(outdir, "full.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info))


# Conf strings whose fate in PyTorch 2.11 settles what cupola's parser
# accepts: keys of later PyTorch versions, the host-side keys, edge values.
PROBE_CONFS = [
    "per_process_memory_fraction:0.5",
    "pinned_reserve_segment_size_mb:64",
    "pinned_use_background_threads:True",
    "graph_capture_record_stream_reuse:True",
    "pinned_num_register_threads:8",
    "pinned_use_cuda_host_register:True",
    "release_lock_on_cudamalloc:True",
    "large_segment_size_mb:64",
    "pinned_free_catch_all:True",
    "throw_on_cudamalloc_oom:True",
    "expandable_segments_reserve:0.5",
    "max_split_size_mb:64abc",
    "max_split_size_mb:-1",
    "max_split_size_mb:19",
    "max_non_split_rounding_mb:19",
    "garbage_collection_threshold:1.0",
    "expandable_segments:true",
    "roundup_power2_divisions:[>:4]",
    "roundup_power2_divisions:[1:4,>:0]",
    "roundup_power2_divisions:3",
    "max_split_size_mb:64:expandable_segments:True",
    "max_split_size_mb:64,",
    "backend:native",
    # the second probe: large_segment_size_mb, and how both parsers walk the tokens
    "large_segment_size_mb:10",
    "large_segment_size_mb:11",
    "large_segment_size_mb:64,max_split_size_mb:40",
    "large_segment_size_mb:64,max_split_size_mb:64",
    "max_split_size_mb:40,large_segment_size_mb:32",
    "max_non_split_rounding_mb:30,large_segment_size_mb:40",
    "large_segment_size_mb:12,expandable_segments:True",
    "large_segment_size_mb:64,expandable_segments:True",
    "roundup_power2_divisions:[64]8]",
    "roundup_power2_divisions:[64,4]",
    "roundup_power2_divisions:36028797018963968",
    "max_split_size_mb,64",
    "expandable_segments:True,,max_split_size_mb:64",
    ",",
    "",
    " max_split _size_mb : 64 ",
    "max_split_size_mb",
    "max_split_size_mb:99999999999999999999",
    "garbage_collection_threshold:0x0.8",
    "garbage_collection_threshold:nan",
    "garbage_collection_threshold:1e-400",
    "per_process_memory_fraction:-0",
    "pinned_num_register_threads:256",
    "pinned_reserve_segment_size_mb:0",
    "backend:native:",
    "expandable_segments:True:",
]


def probe_one(conf, outfile):
    """One fresh process: does PyTorch take conf, and what does it report?"""
    import torch
    out = {"conf": conf}
    try:
        try:
            x = torch.empty(1 << 20, device="cuda")  # 4 MiB: a large-pool segment
            out["reserved"] = torch.cuda.memory_reserved()
            del x
        except torch.OutOfMemoryError as e:
            # the allocator took the conf and refused the tensor (a limit
            # of 0 bytes, say): accepted, and the 4 MiB ran out of memory
            out["oom"] = str(e).splitlines()[0][:300]
        out["accepted"] = True
        snap = torch.cuda.memory._snapshot()
        out["allocator_settings"] = snap.get("allocator_settings")
    except Exception as e:  # noqa: BLE001 - a probe: record what happened
        out["accepted"] = False
        out["error"] = str(e).splitlines()[0][:300]
    with open(outfile, "w") as f:
        json.dump(out, f, default=str)


def probe_conf(outdir, jobs=8):
    """Each conf in a fresh process (the allocator reads its conf once), up
    to jobs at a time."""
    os.makedirs(outdir, exist_ok=True)
    procs = {}
    for i, conf in enumerate(PROBE_CONFS):
        outfile = os.path.join(outdir, f"probe{i}.json")
        env = dict(os.environ)
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        while len([p for p in procs.values() if p.poll() is None]) >= jobs:
            time.sleep(0.2)
        procs[i] = subprocess.Popen([sys.executable, __file__, "--probe-one", conf, outfile],
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)
    results = []
    for i, conf in enumerate(PROBE_CONFS):
        outfile = os.path.join(outdir, f"probe{i}.json")
        try:
            out, _ = procs[i].communicate(timeout=300)
        except subprocess.TimeoutExpired:
            procs[i].kill()
            out, _ = procs[i].communicate()
        try:
            results.append(json.load(open(outfile)))
            os.remove(outfile)
        except Exception:  # noqa: BLE001 - the process died before writing
            # (C++'s terminate: its "what():" line says why, else the last)
            lines = (out or "").strip().splitlines()
            what = [ln.split("what():", 1)[1].strip() for ln in lines if "what():" in ln]
            results.append({"conf": conf, "accepted": False, "died": True,
                            "error": (what or lines[-1:] or [""])[0][:300]})
    with open(os.path.join(outdir, "conf_probe.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    probe_lua(os.path.join(outdir, "conf_probe.json"), os.path.join(outdir, "conf_probe.lua"))
    print(json.dumps([(r["conf"], r["accepted"]) for r in results]))


def lua_str(s):
    out = []
    for ch in s.encode():
        if ch in (0x22, 0x5C):
            out.append("\\" + chr(ch))
        elif 0x20 <= ch < 0x7F:
            out.append(chr(ch))
        else:
            out.append("\\%03d" % ch)
    return '"' + "".join(out) + '"'


def probe_lua(src, dst):
    """PyTorch's verdicts in the form the repository ships (a Lua table):
    each conf, whether PyTorch took it, what it read (allocator_settings:
    max_split_size as the int64 it reports, the roundup divisions by
    interval) and what a 4 MiB tensor reserved (or the OutOfMemoryError it
    raised), or its refusal (died: the process ended in C++'s terminate)."""
    results = json.load(open(src))
    lines = ["-- PyTorch 2.11.0's verdict on each conf string (tests/torch/record.py --probe-conf on",
             "-- an H100): accepted or not, and what it read (allocator_settings; reserved: what one",
             "-- 4 MiB tensor made it reserve; oom: the OutOfMemoryError it raised instead) or its",
             "-- error (died: the process ended in C++'s terminate).  spec/torch_conf_spec.lua holds cupola",
             "-- to every line.",
             "return {"]
    for r in results:
        items = ["conf = " + lua_str(r["conf"]), "accepted = " + ("true" if r["accepted"] else "false")]
        if r["accepted"]:
            s = r.get("allocator_settings") or {}
            items.append("max_split_size = %d" % int(s.get("max_split_size", -1)))
            items.append("garbage_collection_threshold = %r" % float(s.get("garbage_collection_threshold", 0.0)))
            for k in ("expandable_segments", "release_lock_on_cudamalloc",
                      "graph_capture_record_stream_reuse", "pinned_use_cuda_host_register"):
                items.append("%s = %s" % (k, "true" if s.get(k) else "false"))
            items.append("pinned_num_register_threads = %d" % int(s.get("pinned_num_register_threads", 1)))
            rd = s.get("roundup_power2_divisions") or {}
            items.append("roundup_power2_divisions = {%s}" % ", ".join(
                "%d" % int(rd.get(str(1 << i), 0)) for i in range(16)))
            if "reserved" in r:
                items.append("reserved = %d" % int(r["reserved"]))
            if r.get("oom"):
                items.append("oom = " + lua_str(r["oom"]))
        else:
            err = r.get("error")
            if isinstance(err, list):
                err = err[0] if err else ""
            items.append("error = " + lua_str(str(err or "")))
            if r.get("died"):
                items.append("died = true")
        lines.append("  {" + ", ".join(items) + "},")
    lines.append("}")
    with open(dst, "w") as f:
        f.write("\n".join(lines) + "\n")


# The third batch: large_segment_size_mb, which PyTorch 2.11 accepts (the
# segment of requests between 1 and 10 MiB, the page of large expandable
# segments).
SEGSIZE = [
    ("varlen", "seg64", "large_segment_size_mb:64"),
    ("varlen", "seg12", "large_segment_size_mb:12"),
    ("twostream", "expandable-seg64", "expandable_segments:True,large_segment_size_mb:64"),
]


def batch(outdir, runs, logname):
    os.makedirs(outdir, exist_ok=True)
    logs = open(os.path.join(outdir, logname), "w")
    procs = [launch(["--one", n, t, c, "0", outdir], c, outdir, logs) for n, t, c in runs]
    for p in procs:
        p.wait()
    logs.close()


# The second batch: what the first left open.
EXTRA = [
    ("twostream", "limit-expandable", "expandable_segments:True", "retry"),
    ("varlen", "limit-pow2div4", "roundup_power2_divisions:4", "retry"),
]


def extra(outdir):
    os.makedirs(outdir, exist_ok=True)
    logs = open(os.path.join(outdir, "record-extra.log"), "w")
    procs = [launch(["--one", n, "default", "", "0", outdir], "", outdir, logs)
             for n in sorted({n for n, _, _, _ in EXTRA})
             if not os.path.exists(os.path.join(outdir, f"{n}.default.json"))]
    for p in procs:
        p.wait()
    limited(EXTRA, outdir, logs)
    logs.close()


def limited(runs, outdir, logs):
    """The runs under a limit, set from each workload's default run (recorded
    before): retry, halfway between the peaks the program needs and what the
    default setting reserved; oom, a tenth below what it needs."""
    procs = []
    for n, t, c, which in runs:
        base = json.load(open(os.path.join(outdir, f"{n}.default.json")))
        a, r = base["allocated"], base["reserved"]
        limit = (a + r) // 2 if which == "retry" else a * 9 // 10
        procs.append(launch(["--one", n, t, c, str(limit), outdir], c, outdir, logs))
    for p in procs:
        p.wait()


def launch(args, env_conf, outdir, log):
    env = dict(os.environ)
    if env_conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = env_conf
    else:
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    return subprocess.Popen([sys.executable, __file__] + args, env=env,
                            stdout=log, stderr=subprocess.STDOUT)


def main():
    if sys.argv[1] == "--one":
        name, tag, conf, limit, outdir = sys.argv[2:7]
        one(name, tag, conf, int(limit), outdir)
        return
    if sys.argv[1] == "--full":
        full_snapshot(sys.argv[2])
        return
    if sys.argv[1] == "--probe-conf":
        probe_conf(sys.argv[2])
        return
    if sys.argv[1] == "--probe-one":
        probe_one(sys.argv[2], sys.argv[3])
        return
    if sys.argv[1] == "--probe-lua":
        probe_lua(sys.argv[2], sys.argv[3])
        return
    if sys.argv[1] == "--segsize":
        batch(sys.argv[2], SEGSIZE, "record-segsize.log")
        return
    if sys.argv[1] == "--extra":
        extra(sys.argv[2])
        return
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    logs = open(os.path.join(outdir, "record.log"), "w")
    procs = [launch(["--one", n, t, c, "0", outdir], c, outdir, logs) for n, t, c in UNLIMITED]
    procs.append(launch(["--full", outdir], "", outdir, logs))
    for p in procs:
        p.wait()
    limited(LIMITED, outdir, logs)
    logs.close()


if __name__ == "__main__":
    main()
