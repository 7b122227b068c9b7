#!/usr/bin/env python3
"""Records ground truth for predictions at another size (cupola.trace.scale,
`cupola advise A@4 B@8 --at 32`): the same training program at four sizes,
each in a fresh process, under PyTorch's default allocator and under
expandable_segments:True, with PyTorch's own figures beside each snapshot.

The growing size is the batch, the sequence length or the image side; some
programs record Python frames only (stacks="python": the backward pass's
allocations, made on autograd's threads, have none), others PyTorch's
default C++ frames too (stacks="all": C++ frames first in every stack).
Models are built from configs (no weights), seeded, three steps of training
each (bf16 autocast), small enough that every run here takes seconds:

  gpt2_seq     transformers' GPT-2 (4 layers, 512 wide, eager attention: the
               scores are batch x heads x seq x seq), batch 4, sequence
               128, 256, 512, 1024; stacks="python"
  llama_seq    transformers' Llama (4 layers, 512 wide, 8 heads, 2 KV heads,
               SDPA attention), batch 2, sequence 256, 512, 1024, 2048;
               stacks="all"
  t5_batch     transformers' T5 (4 + 4 layers, 256 wide), source 256 and
               target 64 tokens, batch 4, 8, 16, 32; stacks="python"
  vit_batch    torchvision's VisionTransformer (6 layers, 384 wide, 224 x
               224, patches of 16), batch 8, 16, 32, 64; stacks="all"
  resnet_side  torchvision's resnet18 (channels_last), batch 16, image side
               64, 128, 256, 512; stacks="all"

Each program's four sizes double, so the two smaller predict the third (twice
the larger) and the fourth (four times).

  python3 tests/torch/record_scaling.py OUTDIR [-j N] [--only NAME,...]
        every run, N at a time (default 10), in a folder under /tmp, then
        OUTDIR/scaling.tgz (the snapshots, truth.jsonl, each run's log) and
        OUTDIR/truth.jsonl: two files
  python3 tests/torch/record_scaling.py --one NAME SIZE CONF WORKDIR
        one run (what the above starts per run; CONF "default" or "expandable")
  python3 tests/torch/record_scaling.py --dry-run [OUTDIR]
        the plan and the command of every run, without CUDA; with a snapshot
        pickle given as --compact IN OUT, only the compaction (what each run
        does to its snapshot) of an existing one

A run's snapshot is torch.cuda.memory._snapshot() at its end, history recorded
from the start (enabled="all", context="alloc", max_entries=5,000,000: nothing
cut), written as NAME.sSIZE.CONF.pickle.gz with each entry's action, addr,
size, stream, time_us and frames, the segments and allocator_settings; equal
frames and equal stacks are one object in the pickle (a memo reference), so a
snapshot with C++ stacks stays small.  C++ frames are symbolized with
TORCH_SYMBOLIZE_MODE=fast (PyTorch's own in-process symbolizer; addr2line can
take minutes), unless the environment sets it.  truth.jsonl: one line per run,
PyTorch's figures at its end (max_memory_allocated, max_memory_reserved,
num_device_alloc, num_alloc_retries), the program, the size and what it is,
the setting, the stacks, the device, PyTorch's version, the seconds.
"""
import gzip
import json
import os
import pickle
import subprocess
import sys
import tarfile
import time

CONFS = {"default": "", "expandable": "expandable_segments:True"}

# name -> (what grows, sizes, stacks)
PLAN = {
    "gpt2_seq": ("seq", (128, 256, 512, 1024), "python"),
    "llama_seq": ("seq", (256, 512, 1024, 2048), "all"),
    "t5_batch": ("batch", (4, 8, 16, 32), "python"),
    "vit_batch": ("batch", (8, 16, 32, 64), "all"),
    "resnet_side": ("side", (64, 128, 256, 512), "all"),
}

STEPS = 3


def lm_train(torch, model, batch, seq, vocab, seed):
    """Three steps of a causal language model (labels = inputs)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(STEPS):
        ids = torch.randint(0, vocab, (batch, seq), generator=gen).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del ids, loss
    torch.cuda.synchronize()


def from_config(cfg, attn):
    from transformers import AutoModelForCausalLM
    try:
        return AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
    except TypeError:  # an older transformers
        cfg._attn_implementation = attn
        return AutoModelForCausalLM.from_config(cfg)


def gpt2_seq(torch, seq):
    from transformers import GPT2Config
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=4, n_embd=512, n_head=8, vocab_size=16384, n_positions=2048)
    model = from_config(cfg, "eager").cuda()
    lm_train(torch, model, 4, seq, cfg.vocab_size, 1)


def llama_seq(torch, seq):
    from transformers import LlamaConfig
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=2, vocab_size=16000,
                      max_position_embeddings=4096)
    model = from_config(cfg, "sdpa").cuda()
    lm_train(torch, model, 2, seq, cfg.vocab_size, 2)


def t5_batch(torch, batch):
    from transformers import T5Config, T5ForConditionalGeneration
    torch.manual_seed(0)
    cfg = T5Config(d_model=256, d_kv=32, d_ff=1024, num_layers=4, num_decoder_layers=4,
                   num_heads=8, vocab_size=8192, decoder_start_token_id=0)
    model = T5ForConditionalGeneration(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(3)
    for _ in range(STEPS):
        src = torch.randint(0, cfg.vocab_size, (batch, 256), generator=gen).cuda()
        tgt = torch.randint(0, cfg.vocab_size, (batch, 64), generator=gen).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=src, labels=tgt).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del src, tgt, loss
    torch.cuda.synchronize()


def vision_train(torch, model, batch, side, classes, seed):
    model = model.cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(STEPS):
        x = torch.randn(batch, 3, side, side, generator=gen).cuda()
        x = x.contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, classes, (batch,), generator=gen).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, y, loss
    torch.cuda.synchronize()


def vit_batch(torch, batch):
    from torchvision.models.vision_transformer import VisionTransformer
    torch.manual_seed(0)
    model = VisionTransformer(image_size=224, patch_size=16, num_layers=6, num_heads=6,
                              hidden_dim=384, mlp_dim=1536, num_classes=1000)
    vision_train(torch, model, batch, 224, 1000, 4)


def resnet_side(torch, side):
    import torchvision
    torch.manual_seed(0)
    vision_train(torch, torchvision.models.resnet18(num_classes=1000), 16, side, 1000, 5)


WORKLOADS = {"gpt2_seq": gpt2_seq, "llama_seq": llama_seq, "t5_batch": t5_batch,
             "vit_batch": vit_batch, "resnet_side": resnet_side}

ENTRY_KEYS = ("action", "addr", "size", "stream", "time_us")
SEGMENT_KEYS = ("device", "address", "total_size", "stream", "segment_type", "allocated_size",
                "active_size")


def compact(snap):
    """The snapshot with what cupola reads, equal frames and stacks shared."""
    frames, stacks = {}, {}

    def frame(f):
        k = (f.get("filename"), f.get("line"), f.get("name"))
        if k not in frames:
            frames[k] = {"filename": k[0], "line": k[1], "name": k[2]}
        return frames[k]

    def stack(fl):
        fs = [frame(f) for f in fl]
        k = tuple(id(f) for f in fs)
        if k not in stacks:
            stacks[k] = fs
        return stacks[k]

    traces = []
    for dt in snap["device_traces"]:
        out = []
        for e in dt:
            x = {k: e.get(k) for k in ENTRY_KEYS}
            if e.get("frames"):
                x["frames"] = stack(e["frames"])
            out.append(x)
        traces.append(out)
    segs = [{k: s.get(k) for k in SEGMENT_KEYS} for s in snap.get("segments", [])]
    out = {"device_traces": traces, "segments": segs}
    if "allocator_settings" in snap:
        out["allocator_settings"] = snap["allocator_settings"]
    return out


def one(name, size, conf, workdir):
    import torch
    what, _, stacks = PLAN[name]
    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks=stacks,
                                             max_entries=5_000_000)
    t0 = time.time()
    WORKLOADS[name](torch, size)
    seconds = time.time() - t0
    snap = torch.cuda.memory._snapshot()
    t1 = time.time()
    stats = torch.cuda.memory_stats()
    base = f"{name}.s{size}.{conf}"
    with gzip.open(os.path.join(workdir, base + ".pickle.gz"), "wb", compresslevel=9) as f:
        pickle.dump(compact(snap), f, protocol=4)
    fig = {
        "workload": name, "grows": what, "size": size, "conf": conf, "stacks": stacks,
        "allocated": torch.cuda.max_memory_allocated(),
        "reserved": torch.cuda.max_memory_reserved(),
        "device_allocs": stats.get("num_device_alloc", 0),
        "retries": stats.get("num_alloc_retries", 0),
        "events": len(snap["device_traces"][0]),
        "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
        "seconds": round(seconds, 2), "snapshot_seconds": round(t1 - t0 - seconds, 2),
    }
    with open(os.path.join(workdir, base + ".json"), "w") as f:
        json.dump(fig, f)


def runs(only=None):
    for name, (_, sizes, _) in PLAN.items():
        if only and name not in only:
            continue
        for size in sizes:
            for conf in CONFS:
                yield name, size, conf


def child_cmd(name, size, conf, workdir):
    return [sys.executable, os.path.abspath(__file__), "--one", name, str(size), conf, workdir]


def child_env(conf):
    env = dict(os.environ)
    if CONFS[conf]:
        env["PYTORCH_CUDA_ALLOC_CONF"] = CONFS[conf]
    else:
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env.setdefault("TORCH_SYMBOLIZE_MODE", "fast")
    env.setdefault("TORCH_DISABLE_ADDR2LINE", "1")  # where the mode above is not read
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    return env


def run_all(outdir, jobs, only, per_run=150):
    # the runs' own files outside OUTDIR: only the archive and truth.jsonl come back
    import tempfile
    work = os.path.join(tempfile.mkdtemp(prefix="cupola_scaling_"), "scaling")
    os.makedirs(work, exist_ok=True)
    os.makedirs(outdir, exist_ok=True)
    todo = list(runs(only))
    log = open(os.path.join(work, "record.log"), "w")
    running, failed = [], []
    t0 = time.time()
    while todo or running:
        while todo and len(running) < jobs:
            name, size, conf = todo.pop(0)
            base = f"{name}.s{size}.{conf}"
            f = open(os.path.join(work, base + ".log"), "w")
            p = subprocess.Popen(child_cmd(name, size, conf, work), env=child_env(conf),
                                 stdout=f, stderr=subprocess.STDOUT)
            running.append((p, base, f, time.time()))
        time.sleep(0.2)
        for item in list(running):
            p, base, f, start = item
            if p.poll() is None and time.time() - start > per_run:
                p.kill()
            if p.poll() is not None:
                f.close()
                running.remove(item)
                msg = f"{base}: exit {p.returncode} after {time.time() - start:.1f} s"
                print(msg, flush=True)
                log.write(msg + "\n")
                if p.returncode != 0:
                    failed.append(base)
    lines = []
    for name, size, conf in runs(only):
        path = os.path.join(work, f"{name}.s{size}.{conf}.json")
        if os.path.exists(path):
            with open(path) as f:
                lines.append(f.read().strip())
    with open(os.path.join(work, "truth.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    msg = f"{len(lines)} runs recorded, {len(failed)} failed {failed}, {time.time() - t0:.0f} s"
    print(msg, flush=True)
    log.write(msg + "\n")
    log.close()
    with open(os.path.join(outdir, "truth.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with tarfile.open(os.path.join(outdir, "scaling.tgz"), "w:gz") as tar:
        for fn in sorted(os.listdir(work)):
            if not fn.endswith(".json"):
                tar.add(os.path.join(work, fn), arcname="scaling/" + fn)
    return 1 if failed else 0


def dry_run(outdir):
    n = 0
    for name, size, conf in runs():
        env = child_env(conf)
        print(f"PYTORCH_CUDA_ALLOC_CONF={env.get('PYTORCH_CUDA_ALLOC_CONF', '')!r} "
              + " ".join(child_cmd(name, size, conf, outdir or "WORKDIR")))
        assert name in WORKLOADS
        n += 1
    print(f"{n} runs")
    return 0


def main(argv):
    if len(argv) >= 5 and argv[0] == "--one":
        one(argv[1], int(argv[2]), argv[3], argv[4])
        return 0
    if argv and argv[0] == "--dry-run":
        if len(argv) == 4 and argv[1] == "--compact":
            with gzip.open(argv[2]) if argv[2].endswith(".gz") else open(argv[2], "rb") as f:
                snap = pickle.load(f)
            with gzip.open(argv[3], "wb", compresslevel=9) as f:
                pickle.dump(compact(snap), f, protocol=4)
            return 0
        return dry_run(argv[1] if len(argv) > 1 else None)
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    outdir, jobs, only = argv[0], 10, None
    rest = argv[1:]
    while rest:
        if rest[0] == "-j" and len(rest) > 1:
            jobs = int(rest[1])
            rest = rest[2:]
        elif rest[0] == "--only" and len(rest) > 1:
            only = set(rest[1].split(","))
            rest = rest[2:]
        else:
            print("unknown argument", rest[0])
            return 2
    return run_all(outdir, jobs, only)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
