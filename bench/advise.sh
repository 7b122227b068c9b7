#!/bin/sh
# bench/advise.sh: cupola advise's timings, predictions and loader memory on
# a machine of many cores (the GPU machine's 16), in one command:
#
#   sh bench/advise.sh        results in $OUT (default bench/results/advise-run)
#
# Builds the module (host backend is enough: advise replays over the virtual
# upstream; the CUDA backend is not used, so the figures compare with the
# 2-core development machine's), then runs bench/advise.lua with the big
# synthetic snapshots (python3) into $OUT/advise.md, and the advise spec.
# Lua comes from .deps when the machine has none (bench/lua-env.sh).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/advise-run}
mkdir -p "$OUT"
. bench/lua-env.sh || exit 1
jobs=$(nproc 2>/dev/null || echo 4)
commit=${CUPOLA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
status=0
sum="$OUT/summary.txt"
say() { echo "$*" | tee -a "$sum"; }
: >"$sum"
say "advise.sh: commit $commit, $(date -u +%Y-%m-%dT%H:%MZ), $jobs cores"
if ! make -j"$jobs" NVCC= $MAKE_FLAGS CFLAGS="-O2 -g $ZFLAGS" >"$OUT/build.log" 2>&1; then
    say "build failed (build.log)"
    exit 1
fi
if ! CUPOLA_COMMIT=$commit CUPOLA_BACKEND=host ADVISE_BIG=1 timeout 900 \
        bin/cupola bench/advise.lua "$OUT/advise.md" >"$OUT/advise.log" 2>&1; then
    say "bench failed (advise.log)"
    status=1
fi
CUPOLA_BACKEND=host BUSTED_ARGS="spec/advise_spec.lua" timeout 600 lua5.4 spec/run.lua \
    >"$OUT/advise_spec.log" 2>&1 || status=1
say "advise spec: $(tail -1 "$OUT/advise_spec.log")"
exit $status
