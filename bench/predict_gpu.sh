#!/bin/sh
# bench/predict_gpu.sh: ground truth for predictions at a size not recorded,
# on the GPU machine, and the predictions against it in the same call.
#   1. tests/torch/record_scaling.py: five programs (sequence length, batch,
#      image side; Python and C++ stacks) at four doubling sizes, default and
#      expandable_segments:True, each run a fresh process, ten at a time
#      (about 2-3 minutes on an H100), in parallel with
#   2. make (the Lua module; the host backend is enough for the predictions)
#   3. bin/cupola bench/predict.lua over the runs: every prediction from
#      default runs against PyTorch's own run, the straight line beside it
# Writes into $OUT: scaling.tgz (the snapshots, truth.jsonl, the runs' logs),
# truth.jsonl, predict.md (the report), predict_log.txt: four files.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/predict-gpu}
WORK=${WORK:-/tmp/predict-gpu-work}
mkdir -p "$OUT" "$WORK"
. bench/lua-env.sh
{
    python3 tests/torch/record_scaling.py "$OUT" ${RECORD_ARGS:-} >"$WORK/record.txt" 2>&1
    echo "record rc=$?" >>"$WORK/record.txt"
} &
rec=$!
make -j8 all $MAKE_FLAGS EXTRA_CFLAGS="$MAKE_CFLAGS" >"$WORK/make.txt" 2>&1
mrc=$?
wait $rec
{
    cat "$WORK/record.txt"
    echo "make rc=$mrc"
    [ $mrc -eq 0 ] || tail -30 "$WORK/make.txt"
} >"$OUT/predict_log.txt"
[ $mrc -eq 0 ] && [ -f "$OUT/scaling.tgz" ] || { cat "$OUT/predict_log.txt"; exit 1; }
rm -rf "$WORK/scaling" && tar xzf "$OUT/scaling.tgz" -C "$WORK"
CUPOLA_BACKEND=host bin/cupola bench/predict.lua "$WORK/scaling" --out "$OUT/predict.md" \
    >>"$OUT/predict_log.txt" 2>&1
rc=$?
tail -40 "$OUT/predict_log.txt"
exit $rc
