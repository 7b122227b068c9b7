#!/bin/sh
# bench/cub-gpu.sh: on the GPU machine, in one command,
#   1. CUB's real CachingDeviceAllocator (bench/cub_replay.cu) against
#      cupola's model of it (kind = "cub", bench/cub_model.lua) over every
#      trace in examples/traces and two synthetic three-stream traces, under
#      three settings: CUB's defaults (8,3,7,6291455), a 256 MiB cache
#      (8,3,7,268435456) and powers of two from 512 B to 64 MiB with a 4 GiB
#      cache (2,9,26,4294967296).  CUB runs twice over: "sync" (the device
#      synchronized before every allocation: every ready event complete, the
#      deterministic run the model computes) and, on the three-stream traces
#      where timing can matter, "free" (no synchronization, 3 runs: the
#      spread timing gives); cupola's cub pool also replays the traces over
#      the device upstream (real cudaMalloc and events; CUB's defaults).
#   2. cupola's pools serving PyTorch through its pluggable allocator
#      (tests/torch/pluggable.sh), unless CUB_GPU_TORCH=0.
# Results in $OUT (default /tmp/cub-gpu): cub_gpu.md, torch_pluggable.md,
# summary.txt, logs.tgz, snapshots.tgz (the PyTorch runs' snapshots and
# figures, to replay elsewhere).  CUPOLA_COMMIT names the commit (the tree that
# travels has no .git).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cub-gpu}
WORK=${WORK:-/tmp/cub-gpu-work}
rm -rf "$WORK"
mkdir -p "$OUT" "$WORK/traces" "$WORK/logs"
commit=${CUPOLA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
summary=$OUT/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
note "cub-gpu: commit $commit, $(date -u +%Y-%m-%dT%H:%MZ)"
note "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo none)"

# the module, the C tests and Lua (gpu-check's build stage; its own files
# stay out of $OUT)
OUT=$WORK/gc LOGS=$WORK/gclogs sh bench/gpu-check.sh build >"$WORK/logs/build.txt" 2>&1 ||
    { tail -30 "$WORK/logs/build.txt"; note "build FAILED"; tar czf "$OUT/logs.tgz" -C "$WORK" logs; exit 1; }
. bench/lua-env.sh
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
mkdir -p build/bench
$CUDA_HOME/bin/nvcc -O2 -std=c++17 -arch=sm_90 -cudart shared -I$CUDA_HOME/include/cccl \
    -Xlinker --wrap=cudaMalloc -Xlinker --wrap=cudaFree -Xlinker -rpath -Xlinker $CUDA_HOME/lib64 \
    -o build/bench/cub_replay bench/cub_replay.cu >"$WORK/logs/nvcc.txt" 2>&1
note "cub_replay build rc=$?"

SETTINGS="8,3,7,6291455;8,3,7,268435456;2,9,26,4294967296"
bin/cupola bench/cub_model.lua synth "$WORK/traces"
TRACES="$(ls examples/traces/*.csv.gz) $(ls $WORK/traces/*.csv)"
t0=$(date +%s)
bin/cupola bench/cub_model.lua run "$SETTINGS" $TRACES >"$WORK/model.csv" 2>"$WORK/logs/model.err"
note "model (virtual) rc=$? $(( $(date +%s) - t0 ))s"
t0=$(date +%s)
CUPOLA_BACKEND=cuda timeout 200 bin/cupola bench/cub_model.lua run --upstream device "8,3,7,6291455" $TRACES \
    >"$WORK/device.csv" 2>"$WORK/logs/device.err"
note "cupola cub over device rc=$? $(( $(date +%s) - t0 ))s"
for mode in sync free; do
    runs=1 list=$TRACES
    [ $mode = free ] && runs=3 list=$(ls $WORK/traces/*.csv)
    t0=$(date +%s)
    : >"$WORK/$mode.csv"
    for t in $list; do
        name=$(basename "$t" | sed 's/\.csv\.gz$//; s/\.csv$//')
        case $t in *.gz) cat="gzip -dc" ;; *) cat=cat ;; esac
        $cat "$t" | timeout 300 build/bench/cub_replay "$name" $mode $runs $(echo "$SETTINGS" | tr ';' ' ') \
            >>"$WORK/$mode.csv" 2>>"$WORK/logs/cub_replay.err" || note "cub_replay $name $mode rc=$?"
    done
    note "CUB $mode: $(( $(date +%s) - t0 ))s"
done
{
    echo "# CUB's CachingDeviceAllocator on the GPU beside cupola's model (kind = \"cub\")"
    echo
    echo "Device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)," \
         "CUDA $($CUDA_HOME/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')," \
         "commit $commit, $(date -u +%Y-%m-%d)."
    grep -h '^#' "$WORK/sync.csv" | head -1 | sed 's/^# /Replayer: /'
    echo
    echo "Settings are bin_growth,min_bin,max_bin,max_cached_bytes. Counts are calls to cudaMalloc"
    echo "(failed ones included) and cudaFree during the replay (the trace, then what it leaves live"
    echo "freed in allocation order), peak held the largest sum of bytes held from cudaMalloc;"
    echo "CUB's are counted by wrapping cudaMalloc/cudaFree at link time and checked row by row"
    echo "against CUB's cached_bytes (live + free). \"sync\": the device synchronized before each"
    echo "allocation; \"free\": no synchronization, 3 runs (a range where they differ), on the"
    echo "three-stream traces only (on one stream every cached block is the stream's own: timing"
    echo "cannot change CUB's choices)."
    echo
    bin/cupola bench/cub_model.lua table "$WORK/model.csv" "$WORK/sync.csv" "$WORK/free.csv" "$WORK/device.csv"
    echo
    echo "Seconds per replay (CUB sync / free, model):"
    echo
    echo '```'
    grep -hv '^#' "$WORK/sync.csv" "$WORK/free.csv" "$WORK/model.csv" | awk -F, '{print $1, $2","$3","$4","$5, $6, $NF}'
    echo '```'
} >"$OUT/cub_gpu.md"
note "$(grep -E '^[0-9]+ of [0-9]+ ' "$OUT/cub_gpu.md")"
cp "$WORK"/*.csv "$WORK/logs/"

if [ "${CUB_GPU_TORCH:-1}" = 1 ]; then
    OUT=$OUT WORK=$WORK/torch CUPOLA_COMMIT=$commit sh tests/torch/pluggable.sh >"$WORK/logs/torch.txt" 2>&1
    note "torch pluggable rc=$?"
    tail -5 "$WORK/logs/torch.txt" >>"$summary"
fi
# the snapshots apart (larger), so that the logs come back whatever happens
tar czf "$OUT/logs.tgz" -C "$WORK" --exclude='*.pickle.gz' logs $( [ -d "$WORK/torch" ] && echo torch )
[ -d "$WORK/torch" ] && ls "$WORK"/torch/*.pickle.gz >/dev/null 2>&1 &&
    tar czf "$OUT/snapshots.tgz" -C "$WORK/torch" $(cd "$WORK/torch" && ls *.pickle.gz *.json)
cat "$summary"
