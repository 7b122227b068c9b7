#!/usr/bin/env python3
"""record_cpp_stacks.py OUTDIR: a snapshot as a user records it by following
the README (torch.cuda.memory._record_memory_history() with its defaults,
whose stacks include C++ frames), of a small MLP trained for three steps and
then run out of memory under a limit, written to OUTDIR/cpp_stacks.pickle.
On the GPU machine (PyTorch there); then, anywhere:

  bin/cupola advise OUTDIR/cpp_stacks.pickle --limit 1GiB

must show where it runs out as "record_cpp_stacks.py:LINE step (in
torch/nn/modules/linear.py:LINE forward)" or the like, never
"??:0 torch::unwind::unwind()" (spec/advise_ux_spec.lua checks the same on a
snapshot written by hand, and on twostream.cppframes.pickle.gz, whose C++
frames tests/torch/cpp_frames.py adds).
"""
import os
import sys

import torch


def step(model, opt, batch):
    x = torch.randn(batch, 4096, device="cuda")
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", ".")
    torch.manual_seed(0)
    torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    model = torch.nn.Sequential(torch.nn.Linear(4096, 8192), torch.nn.ReLU(),
                                torch.nn.Linear(8192, 4096)).cuda()
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(3):
        step(model, opt, 2048)
    # then a batch too large for a limit of 1.5 GiB above what is in use
    torch.cuda.set_per_process_memory_fraction(
        (torch.cuda.memory_allocated() + (3 << 29)) / torch.cuda.get_device_properties(0).total_memory)
    try:
        step(model, opt, 65536)
    except torch.OutOfMemoryError:
        pass
    torch.cuda.memory._dump_snapshot(os.path.join(out, "cpp_stacks.pickle"))
    print("wrote", os.path.join(out, "cpp_stacks.pickle"))


if __name__ == "__main__":
    main()
