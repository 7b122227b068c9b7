#!/bin/sh
# bench/vmm-gpu.sh: the vmm pool's checks and figures on the GPU machine in
# one command:
#  1. build (bench/gpu-check.sh build: -Werror, Lua from .deps);
#  2. spec/vmm_spec.lua, the conformance and misuse specs on the CUDA
#     backend (#gpu included), and spec/vmm_spec.lua under compute-sanitizer
#     memcheck (leak check on);
#  3. bench/vmm_decay.c on real device memory: per shipped trace, the
#     replay's wall time with the default vmm pool (its own wall clock, and
#     the trace's clock), with release_threshold = max and with tlsf, beside
#     the trace's recorded duration, and the pages each vmm run mapped;
#     then the same program over the virtual upstream (deterministic: the
#     table of bench/results/vmm_decay.md);
#  4. bench/replay.c over the device upstream (resnet50 and gpt2, every
#     pool) and the vmm steady state over the virtual one;
#  5. with VMM_GPU_SUITE=1, the whole suite on both backends (gpu-check's
#     test stage) and seed 001's multi-stream bench.
#   sh bench/vmm-gpu.sh        figures in $OUT (or /tmp/vmm-gpu): summary.txt,
#                              vmm-decay-device.md, vmm-decay-virtual.md, logs.tgz
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/vmm-gpu}
L=/tmp/vmm-gpu-logs
rm -rf "$L"
mkdir -p "$OUT" "$L"
S="$OUT/summary.txt"
: >"$S"
commit=${CUPOLA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
echo "vmm-gpu: commit $commit, $(date -u +%Y-%m-%dT%H:%MZ)" >>"$S"
# (the device tool brings back at most 8 files: gpu-check's own go to $L)
OUT=$L/gc LOGS=$L/gc-logs sh bench/gpu-check.sh build >"$L/build.txt" 2>&1 || {
    tail -30 "$L/build.txt" "$L/gc-logs/build.log" >>"$S" 2>&1
    cat "$S"
    exit 1
}
R=/tmp/cupola-lua
export PATH=$R/usr/bin:$PATH
export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LUA_PATH="$R/usr/share/lua/5.4/?.lua;$R/usr/share/lua/5.4/?/init.lua;;"
export LUA_CPATH="$R/usr/lib/x86_64-linux-gnu/lua/5.4/?.so;;"
export BUSTED="lua5.4 $R/usr/bin/busted"
export CUPOLA_BACKEND=cuda
echo "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)" >>"$S"

# 2. specs, and memcheck over the vmm spec
BUSTED_ARGS="spec/vmm_spec.lua spec/pool_conformance_spec.lua spec/misuse_spec.lua" timeout 150 \
    lua5.4 spec/run.lua >"$L/specs.txt" 2>&1
echo "specs rc=$? $(grep -E '^[0-9]+ passed' "$L/specs.txt" | tail -1)" >>"$S"
grep -E "^(Failure|Error) →" -A4 "$L/specs.txt" | head -40 >>"$S"
CUPOLA_SLOW=1 CUPOLA_SERIALIZED=1 BUSTED_ARGS="spec/vmm_spec.lua" timeout 200 \
    compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --error-exitcode 86 \
    --target-processes all --print-limit 20 lua5.4 spec/run.lua >"$L/memcheck.txt" 2>&1
echo "memcheck rc=$? $(grep -E '^[0-9]+ passed' "$L/memcheck.txt" | tail -1)" >>"$S"
grep -E "ERROR SUMMARY|LEAK SUMMARY|bytes leaked" "$L/memcheck.txt" | tail -4 >>"$S"

# 3. the default vmm on device memory, beside the traces' durations and tlsf
LINK="$(find build/obj/core -name '*.o') build/obj/cuda/*.o -L/usr/local/cuda/lib64 -lcudadevrt -lcudart_static \
    -lrt -ldl -lstdc++ -lz -lpthread -lm"
cc -O2 -std=c11 -D_GNU_SOURCE -Isrc/core bench/vmm_decay.c $LINK -o build/bench_vmm_decay_cuda \
    >>"$S" 2>&1
cc -O2 -std=c11 -D_GNU_SOURCE -Isrc/core bench/replay.c $LINK -o build/bench_replay_cuda >>"$S" 2>&1
{
    echo "# bench/vmm_decay.c, device upstream: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>&1), commit $commit, $(date -u +%Y-%m-%d)"
    echo
    CUPOLA_BENCH_UPSTREAM=device timeout 300 build/bench_vmm_decay_cuda
    echo "rc=$?"
} >"$OUT/vmm-decay-device.md" 2>&1
echo "vmm-decay device: $(tail -1 "$OUT/vmm-decay-device.md")" >>"$S"
{
    echo "# bench/vmm_decay.c, virtual upstream (deterministic), commit $commit, $(date -u +%Y-%m-%d)"
    echo
    timeout 60 build/bench_vmm_decay_cuda
    echo "rc=$?"
} >"$OUT/vmm-decay-virtual.md" 2>&1
echo "vmm-decay virtual: $(tail -1 "$OUT/vmm-decay-virtual.md")" >>"$S"

# 4. every pool over the device upstream, and the vmm steady state
CUPOLA_BENCH_UPSTREAM=device timeout 120 build/bench_replay_cuda 3 1 \
    examples/traces/resnet50_train.csv.gz examples/traces/gpt2_train.csv.gz >"$L/replay-device.txt" 2>&1
echo "replay-device rc=$?" >>"$S"
CUPOLA_BENCH_STEADY=1 CUPOLA_BENCH_NO_PAIRS=1 timeout 60 build/bench_replay_cuda 5 10 \
    >"$L/replay-virtual.txt" 2>&1
echo "replay-virtual rc=$?" >>"$S"

# 5. optional: the whole suite on both backends, seed 001's multi-stream bench
if [ "${VMM_GPU_SUITE:-0}" = 1 ]; then
    CUPOLA_REPS=3 timeout 90 lua5.4 bench/multistream.lua 400 1,8 >"$L/multistream.txt" 2>&1
    echo "multistream rc=$?" >>"$S"
    STAGE_TIMEOUT=${STAGE_TIMEOUT:-300} OUT=$L/gc LOGS=$L/gc-logs sh bench/gpu-check.sh test \
        >>"$S" 2>&1
    for f in "$L/gc-logs/test.log" "$L/gc-logs/test-host.log"; do
        echo "== $f" >>"$S"
        grep -E "^not ok|Failure →|Error →" -A6 "$f" | head -60 >>"$S"
        grep -E "^[0-9]+ passed" "$f" >>"$S"
    done
fi
tar czf "$OUT/logs.tgz" -C "$L" . 2>>"$S"
cat "$S"
