#!/bin/sh
# bench/multi_gpu.sh: the two-GPU run (devices, peers, IPC), in one command on a
# machine with two GPUs (after `sh bench/gpu-check.sh build`, which unpacks
# Lua from .deps and builds the module):
#   C figures (bench/multi_gpu.cu) beside the same from Lua (bench/multi_gpu.lua),
#   the streams experiment (examples/multi_gpu.lua), the IPC example, the
#   multi-device and IPC specs on the CUDA backend (#gpu included) and under
#   compute-sanitizer memcheck.  Output: $OUT/multi_gpu.txt (the summary) and
#   $OUT/multi_gpu.log (every step's output, appended as it runs, so a run cut
#   short still brings back what it did).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/gpu-check}
mkdir -p "$OUT"
R=/tmp/cupola-lua
if ! command -v lua5.4 >/dev/null 2>&1; then
    export PATH=$R/usr/bin:$PATH
    export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LUA_PATH="$R/usr/share/lua/5.4/?.lua;$R/usr/share/lua/5.4/?/init.lua;;"
    export LUA_CPATH="$R/usr/lib/x86_64-linux-gnu/lua/5.4/?.so;;"
    BUSTED="lua5.4 $R/usr/bin/busted"
else
    BUSTED="lua5.4 $(command -v busted)"
fi
export CUPOLA_BACKEND=cuda
res="$OUT/multi_gpu.txt"
log="$OUT/multi_gpu.log"
: >"$res"
: >"$log"
say() { echo "$*" | tee -a "$res"; }
say "multi_gpu: commit ${CUPOLA_COMMIT:-unknown}, $(date -u +%Y-%m-%dT%H:%MZ)"
say "devices: $(nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>/dev/null | tr '\n' ';')"
nvidia-smi topo -m 2>/dev/null | head -4 >>"$res"
step() { # name command...: runs with a time limit, keeps the log, notes rc
    name=$1
    shift
    t0=$(date +%s)
    timeout -k 5 "${STEP_TIMEOUT:-120}" "$@" >/tmp/multi_gpu_step.log 2>&1
    rc=$?
    { echo "===== $name rc=$rc $(( $(date +%s) - t0 ))s"; cat /tmp/multi_gpu_step.log; } >>"$log"
    say "== $name rc=$rc $(( $(date +%s) - t0 ))s"
    grep -E "successes|passed|ERROR SUMMARY|_gbps|_ns|ms per round|ok$|shared/each|sum|devices|Error|error" /tmp/multi_gpu_step.log | head -40 | tee -a "$res"
}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
step bench-c sh -c "$NVCC -O2 -arch=sm_90 -o /tmp/multi_gpu_c bench/multi_gpu.cu && /tmp/multi_gpu_c"
step bench-lua bin/cupola bench/multi_gpu.lua
step example-multi_gpu bin/cupola examples/multi_gpu.lua 50
step example-ipc bin/cupola examples/ipc.lua
step specs $BUSTED -o utfTerminal spec/multi_device_spec.lua spec/ipc_spec.lua spec/misuse_spec.lua
export CUPOLA_SLOW=1 CUPOLA_SERIALIZED=1
step memcheck compute-sanitizer --tool memcheck --leak-check full \
    --report-api-errors no --error-exitcode 86 --target-processes all --print-limit 20 \
    $BUSTED -o utfTerminal spec/multi_device_spec.lua spec/ipc_spec.lua
exit 0
