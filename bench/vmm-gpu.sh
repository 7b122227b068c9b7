#!/bin/sh
# bench/vmm-gpu.sh: the vmm pool's checks and figures on the GPU machine in
# one command: build, the vmm and conformance specs on the CUDA
# backend (#gpu included), compute-sanitizer memcheck over the vmm spec, and
# bench/replay.c over the device upstream (trace replays with real maps, the
# alloc+free pair of every pool), the vmm steady state, two streams, and
# bench/multistream.lua at K = 1 and 8; then the whole suite unless
# VMM_GPU_SUITE=0.
#   sh bench/vmm-gpu.sh            logs and figures in $OUT (or /tmp/vmm-gpu)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/vmm-gpu}
mkdir -p "$OUT"
# (the device tool brings back at most 8 files: gpu-check's own go to /tmp)
OUT=/tmp/vmm-gc sh bench/gpu-check.sh build >/tmp/vmm-build.txt 2>&1 || { tail -30 /tmp/vmm-build.txt; exit 1; }
R=/tmp/cupola-lua
export PATH=$R/usr/bin:$PATH
export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LUA_PATH="$R/usr/share/lua/5.4/?.lua;$R/usr/share/lua/5.4/?/init.lua;;"
export LUA_CPATH="$R/usr/lib/x86_64-linux-gnu/lua/5.4/?.so;;"
export BUSTED="lua5.4 $R/usr/bin/busted"
export CUPOLA_BACKEND=cuda
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT/device.txt" 2>&1
BUSTED_ARGS="spec/vmm_spec.lua spec/pool_conformance_spec.lua spec/misuse_spec.lua" timeout 100 lua5.4 spec/run.lua \
    >"$OUT/specs.txt" 2>&1
echo "specs rc=$?" >>"$OUT/summary.txt"
tail -3 "$OUT/specs.txt" >>"$OUT/summary.txt"
CUPOLA_SLOW=1 CUPOLA_SERIALIZED=1 BUSTED_ARGS="spec/vmm_spec.lua" timeout 100 \
    compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --error-exitcode 86 \
    --target-processes all --print-limit 20 lua5.4 spec/run.lua >"$OUT/memcheck.txt" 2>&1
echo "memcheck rc=$?" >>"$OUT/summary.txt"
tail -5 "$OUT/memcheck.txt" >>"$OUT/summary.txt"
cc -O2 -std=c11 -D_GNU_SOURCE -Isrc/core bench/replay.c $(find build/obj/core -name '*.o') \
    build/obj/cuda/*.o -L/usr/local/cuda/lib64 -lcudart_static -lrt -ldl -lstdc++ -lz -lpthread -lm \
    -o build/bench_replay_cuda >>"$OUT/summary.txt" 2>&1
CUPOLA_BENCH_UPSTREAM=device timeout 60 build/bench_replay_cuda 3 1 \
    examples/traces/resnet50_train.csv.gz examples/traces/gpt2_train.csv.gz >"$OUT/replay-device.txt" 2>&1
echo "replay-device rc=$?" >>"$OUT/summary.txt"
CUPOLA_BENCH_STEADY=1 CUPOLA_BENCH_NO_PAIRS=1 timeout 40 build/bench_replay_cuda 5 10 \
    >"$OUT/replay-virtual.txt" 2>&1
echo "replay-virtual rc=$?" >>"$OUT/summary.txt"
# seed 001's multi-stream bench (K = 1 and 8): reuse=wait growth, caching speed
CUPOLA_REPS=3 timeout 90 lua5.4 bench/multistream.lua 400 1,8 >"$OUT/multistream.txt" 2>&1
echo "multistream rc=$?" >>"$OUT/summary.txt"
[ "${VMM_GPU_SUITE:-1}" = 1 ] || { cat "$OUT/summary.txt"; exit 0; }
CUPOLA_BENCH_NO_PAIRS=1 CUPOLA_BENCH_STREAMS=2 timeout 40 build/bench_replay_cuda 5 10 \
    >"$OUT/replay-2streams.txt" 2>&1
echo "replay-2streams rc=$?" >>"$OUT/summary.txt"
CUPOLA_BACKEND=host CUPOLA_BENCH_NO_PAIRS=1 CUPOLA_BENCH_STREAMS=2 timeout 40 build/bench_replay_cuda 5 10 \
    >>"$OUT/replay-2streams.txt" 2>&1
echo "replay-2streams-host rc=$?" >>"$OUT/summary.txt"
timeout 60 bin/cupola examples/vmm_pool.lua >>"$OUT/summary.txt" 2>&1
# the whole suite on both backends (gpu-check's test stage), last
STAGE_TIMEOUT=${STAGE_TIMEOUT:-120} OUT=/tmp/vmm-gc sh bench/gpu-check.sh test >>"$OUT/summary.txt" 2>&1
for f in /tmp/cupola-logs/test.log /tmp/cupola-logs/test-host.log; do
    echo "== $f" >>"$OUT/summary.txt"
    grep -E "^not ok|Failure →|Error →" -A6 "$f" | head -60 >>"$OUT/summary.txt"
    grep -E "^[0-9]+ passed" "$f" >>"$OUT/summary.txt"
done
cat "$OUT/summary.txt"
