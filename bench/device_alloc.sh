#!/bin/sh
# bench/device_alloc.sh: allocation inside kernels on the GPU machine, in one
# command: build, the whole suite on both backends and every example
# (bench/gpu-check.sh build test examples), compute-sanitizer memcheck and
# racecheck on the device-pool and misuse specs (fewer threads:
# CUPOLA_DP_THREADS), and bench/device_alloc.lua into $OUT/device_alloc.md.  CUPOLA_COMMIT names the commit (no .git travels).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/device_alloc-run}
mkdir -p "$OUT"
status=0
# The whole suite and every example on both backends (the module now has
# relocatable device code: nothing else may break) ...
OUT=$OUT/check LOGS=/tmp/cupola-dp-check STAGE_TIMEOUT=200 sh bench/gpu-check.sh build test examples || status=1
make build/bench/device_alloc_seed >"$OUT/seed-build.log" 2>&1 || status=1
# ... and the sanitizers on the device-pool and misuse specs.
C_TESTS=" " BUSTED_ARGS="spec/device_pool_spec.lua spec/misuse_spec.lua" \
    OUT=$OUT/sanitize LOGS=/tmp/cupola-dp-sanitize STAGE_TIMEOUT=${SANITIZE_TIMEOUT:-100} \
    SANITIZE_TOOLS="memcheck racecheck" CUPOLA_DP_THREADS=20000 sh bench/gpu-check.sh sanitize || status=1
# Lua as gpu-check.sh unpacked it.
R=/tmp/cupola-lua
if [ -x $R/usr/bin/lua5.4 ]; then
    export PATH=$R/usr/bin:$PATH
    export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LUA_PATH="$R/usr/share/lua/5.4/?.lua;$R/usr/share/lua/5.4/?/init.lua;;"
    export LUA_CPATH="$R/usr/lib/x86_64-linux-gnu/lua/5.4/?.so;;"
fi
CUPOLA_BACKEND=cuda timeout -k 5 ${BENCH_TIMEOUT:-150} lua5.4 bench/device_alloc.lua "$OUT/device_alloc.md" \
    >"$OUT/bench.log" 2>&1 || status=1
tail -5 "$OUT/bench.log"
cat "$OUT"/check/gpu-check-summary.txt "$OUT"/sanitize/gpu-check-summary.txt 2>/dev/null
exit $status
