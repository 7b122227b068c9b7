#!/usr/bin/env python3
"""Puts back the allocator_settings of shipped compact snapshots whose source
had the key stripped.

The 24 snapshots of the six CSV workloads (examples/traces/torch/
NAME.TAG.cpsnap.gz, TAG default, split64, pow2div4 or expandable) were
recorded with PyTorch 2.11, which writes allocator_settings, under the
setting their tag names (README.md there; truth.lua's conf), but their
sources had the key stripped, so advise read them as "recorded under:
unknown (PyTorch before 2.4)".  This writes the settings section of each
such file as tests/torch/compact.py writes one PyTorch filled: the
PYTORCH_CUDA_ALLOC_CONF string as given, and the allocator's view of it as
compact.py's settings_conf makes it (roundup_power2_divisions:4 is four
divisions in each of PyTorch's 16 intervals).  The rest of the file is
copied byte for byte.  A file that has settings already is left as it is.

  python3 tests/torch/settings_from_tag.py examples/traces/torch/*.cpsnap.gz
"""
import gzip
import re
import sys

# tag -> (PYTORCH_CUDA_ALLOC_CONF, settings conf string)
TAGS = {
    "default": ("", ""),
    "split64": ("max_split_size_mb:64", "max_split_size_mb:64"),
    "pow2div4": ("roundup_power2_divisions:4",
                 "roundup_power2_divisions:[%s]" % ",".join("%d:4" % (1 << i) for i in range(16))),
    "expandable": ("expandable_segments:True", "expandable_segments:True"),
}
WORKLOADS = ("resnet50_train", "gpt2_train", "t5_train_varlen", "mixtral_moe_train",
             "convnext_multires_train", "gpt2_beam_search")


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_varint(buf, i):
    v, shift = 0, 0
    while True:
        c = buf[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def truth_confs(path):
    """truth.lua's conf of each run, to hold the tags to."""
    with open(path) as f:
        return dict(re.findall(r'name = "([^"]+)", conf = "([^"]*)"', f.read()))


def rewrite(path, confs):
    name = path.rsplit("/", 1)[-1][:-len(".cpsnap.gz")]
    workload, _, tag = name.rpartition(".")
    if workload not in WORKLOADS or tag not in TAGS:
        return "not one of the six workloads' snapshots"
    env, conf = TAGS[tag]
    if confs.get(name) != env:
        raise SystemExit("%s: truth.lua says conf %r, the tag %r" % (path, confs.get(name), env))
    with gzip.open(path, "rb") as f:
        buf = f.read()
    if buf[:8] != b"CPSNAP1\n":
        raise SystemExit(path + ": not a compact snapshot")
    i = 8
    version, i = read_varint(buf, i)
    if version != 1:
        raise SystemExit(path + ": not version 1")
    nstreams, i = read_varint(buf, i)
    for _ in range(nstreams):
        _, i = read_varint(buf, i)
    start = i
    has, i = read_varint(buf, i)
    if has:
        return "has its settings"
    for _ in range(2):
        n, i = read_varint(buf, i)
        i += n
    section = varint(1)
    for text in (env.encode(), conf.encode()):
        section += varint(len(text)) + text
    with gzip.GzipFile(path, "wb", compresslevel=9, mtime=0) as f:
        f.write(buf[:start] + section + buf[i:])
    return "settings written: %r" % env


def main():
    confs = None
    for path in sys.argv[1:]:
        if confs is None:
            confs = truth_confs(path.rsplit("/", 1)[0] + "/truth.lua" if "/" in path else "truth.lua")
        print("%s: %s" % (path, rewrite(path, confs)))


if __name__ == "__main__":
    main()
