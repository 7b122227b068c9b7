#!/bin/sh
# bench/seeing-gpu.sh: the GPU-machine run of what shows what happened
# (snapshots, NVTX, out-of-memory explanations) in one command; logs to $OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/seeing-out}
mkdir -p "$OUT"
sh bench/gpu-check.sh build >"$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
R=/tmp/cupola-lua
export PATH=$R/usr/bin:$PATH LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu
export LUA_PATH="lua/?.lua;lua/?/init.lua;$R/usr/share/lua/5.4/?.lua;$R/usr/share/lua/5.4/?/init.lua;;"
export LUA_CPATH="build/?.so;$R/usr/lib/x86_64-linux-gnu/lua/5.4/?.so;;"
export BUSTED="lua5.4 $R/usr/bin/busted" CUPOLA_NO_DEPS=1
SPECS="spec/snapshot_spec.lua spec/nvtx_spec.lua spec/trace_spec.lua"
echo "== specs (cuda backend)"
CUPOLA_BACKEND=cuda BUSTED_ARGS="$SPECS" timeout 200 lua5.4 spec/run.lua build/tests/test_snapshot build/tests/test_trace >"$OUT/specs.txt" 2>&1
tail -3 "$OUT/specs.txt"
echo "== nvtx injection (cuda backend)"
mkdir -p build/nvtx
gcc -shared -fPIC -O1 -I/usr/local/cuda/include -o build/nvtx/libnvtx_count.so tests/nvtx/nvtx_count.c -lpthread
CUPOLA_BACKEND=cuda timeout 60 lua5.4 tests/nvtx/check_nvtx.lua build/nvtx/libnvtx_count.so build/nvtx 2>&1 | tee "$OUT/nvtx.txt"
cp build/nvtx/counts_on.txt "$OUT/nvtx_counts_on.txt" 2>/dev/null
echo "== compute-sanitizer memcheck over the specs"
CUPOLA_BACKEND=cuda CUPOLA_SLOW=1 CUPOLA_SERIALIZED=1 BUSTED_ARGS="spec/snapshot_spec.lua spec/nvtx_spec.lua" \
    timeout 200 compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --error-exitcode 86 \
    --target-processes all --print-limit 20 lua5.4 spec/run.lua >"$OUT/memcheck.txt" 2>&1
echo "memcheck rc=$?"; tail -3 "$OUT/memcheck.txt"
echo "== bench"
CUPOLA_BACKEND=cuda timeout 60 lua5.4 bench/snapshot_replay.lua 2>&1 | tee "$OUT/bench.txt"
