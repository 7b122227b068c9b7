#!/bin/sh
# tests/torch/pluggable.sh: cupola's pools inside PyTorch, on the GPU machine
# (bench/cub-gpu.sh runs it; alone it builds what it needs).
#   1. make torch-allocator (build/libcupola_torch.so)
#   2. tests/torch/pluggable.py: each workload under PyTorch's allocator
#      (recording a snapshot), again, and under each cupola pool spec
#      (TORCH_SPECS, default "vmm tlsf") through the pluggable allocator:
#      losses compared, the library's peak reserved read through ctypes
#   3. tests/torch/pluggable_replay.lua: the recorded snapshot replayed through
#      the same pools over the virtual upstream (and the device one): the
#      predicted peak reserved beside the measured one
# Writes $OUT/torch_pluggable.md; the runs' files stay in $WORK.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/torch-pluggable}
WORK=${WORK:-/tmp/torch-pluggable-work}
mkdir -p "$OUT" "$WORK"
commit=${CUPOLA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
if [ ! -f build/cupola/core.so ]; then
    OUT=$WORK/gc LOGS=$WORK/gclogs sh bench/gpu-check.sh build >"$WORK/build.txt" 2>&1 ||
        { tail -30 "$WORK/build.txt"; exit 1; }
fi
. bench/lua-env.sh
# (the flags of gpu-check's build stage: its objects are reused)
make -j8 torch-allocator $MAKE_FLAGS EXTRA_CFLAGS="$MAKE_CFLAGS" >"$WORK/make.txt" 2>&1 ||
    { tail -30 "$WORK/make.txt"; exit 1; }
echo "library: $(ls -l build/libcupola_torch.so)"
python3 tests/torch/pluggable.py "$WORK" build/libcupola_torch.so ${TORCH_SPECS:-vmm tlsf} \
    >"$WORK/pluggable.txt" 2>&1
rc=$?
tail -20 "$WORK/pluggable.txt"
{
    CUPOLA_BACKEND=cuda bin/cupola tests/torch/pluggable_replay.lua "$WORK" "$commit"
    echo
    echo "Loss checks and runs (tests/torch/pluggable.py, rc=$rc):"
    echo
    echo '```'
    cat "$WORK/measured.tsv" 2>/dev/null
    grep -E "^pluggable:|Traceback|Error" "$WORK/pluggable.txt" | head -20
    echo '```'
    echo
    echo "Failures that must raise RuntimeError, not crash (a wrong spec; a 64 MiB pool asked for 128 MiB, then 1 MiB):"
    echo
    echo '```'
    cat "$WORK/errors.txt" 2>/dev/null
    echo '```'
} >"$OUT/torch_pluggable.md" 2>"$WORK/replay.err"
cat "$WORK/replay.err"
grep -E "^Largest" "$OUT/torch_pluggable.md"
exit $rc
