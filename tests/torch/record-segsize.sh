#!/bin/sh
# tests/torch/record-segsize.sh: on the GPU machine (python3 with PyTorch), the
# second conf probe and the large_segment_size_mb recordings, in one command.
#
#   sh tests/torch/record-segsize.sh          results in $OUT (the device tool's folder)
#
# Writes $OUT/conf_probe.json and $OUT/conf_probe.lua (PyTorch's verdict on
# every string of record.py's PROBE_CONFS: conf_probe.lua replaces
# examples/traces/torch/conf_probe.lua as it is), and $OUT/segsize.tgz: the
# runs of record.py --segsize (NAME.TAG.pickle.gz, NAME.TAG.json; compact them
# with tests/torch/compact.py, their figures go to truth.lua) and the logs.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/cupola-segsize}
W=/tmp/cupola-segsize-work
rm -rf "$W"
mkdir -p "$OUT" "$W/probe" "$W/runs"
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))' \
    >"$W/runs/versions.txt" 2>&1
python3 tests/torch/record.py --probe-conf "$W/probe" >"$W/runs/probe.log" 2>&1
status=$?
cp "$W/probe/conf_probe.json" "$W/probe/conf_probe.lua" "$OUT/" 2>/dev/null
python3 tests/torch/record.py --segsize "$W/runs" >"$W/runs/segsize.log" 2>&1 || status=1
tar -C "$W" -czf "$OUT/segsize.tgz" runs
ls -l "$W/runs" "$OUT"
exit $status
