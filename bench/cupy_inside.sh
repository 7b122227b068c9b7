#!/bin/sh
# bench/cupy_inside.sh: cupola's pools inside CuPy, on the GPU machine.
#   1. make cupy-allocator (build/libcupola_cupy.so) and the Lua module
#   2. bench/cupy_inside.py: a CuPy workload (FFTs, linear algebra, varying
#      elementwise sizes, two streams) under CuPy's own pool and under
#      python/cupola_cupy.py with CUPOLA_CUPY_POOL=SPEC (CUPY_SPECS, default
#      "vmm tlsf"), results compared; a bad spec and a full pool must raise
#      RuntimeError / OutOfMemoryError, never crash or give a pointer at 0
#   3. bench/cupy_replay.lua: each run's request log replayed through the
#      same spec: the predicted peak beside the measured one (aim 1 %)
# Writes $OUT/cupy_inside.md; about a minute.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cupy-inside}
WORK=${WORK:-/tmp/cupy-inside-work}
mkdir -p "$OUT" "$WORK"
commit=${CUPOLA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
. bench/lua-env.sh
make -j16 all cupy-allocator $MAKE_FLAGS EXTRA_CFLAGS="$MAKE_CFLAGS" >"$WORK/make.txt" 2>&1 ||
    { tail -30 "$WORK/make.txt"; exit 1; }
SPECS=${CUPY_SPECS:-vmm tlsf}
# shellcheck disable=SC2086
python3 bench/cupy_inside.py "$WORK" build/libcupola_cupy.so $SPECS >"$WORK/run.txt" 2>&1
rc=$?
cat "$WORK/run.txt"
tags=$(for s in $SPECS; do echo "$s" | sed 's/[^A-Za-z0-9][^A-Za-z0-9]*/_/g; s/^_//; s/_$//'; done)
{
    # shellcheck disable=SC2086
    bin/cupola bench/cupy_replay.lua "$WORK" "$commit" $tags
    echo
    echo "Results against CuPy's own pool, refusals (bench/cupy_inside.py, rc=$rc):"
    echo
    echo '```'
    grep -E "^results|^rc=|^cupy_inside" "$WORK/run.txt"
    echo '```'
} >"$OUT/cupy_inside.md" 2>"$WORK/replay.err"
cat "$WORK/replay.err"
cat "$OUT/cupy_inside.md"
exit $rc
