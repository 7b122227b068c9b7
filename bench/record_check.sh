#!/bin/sh
# bench/record_check.sh: `cupola record` on the GPU machine, in one command
# (about 2-3 minutes):
#     OUT=/some/dir sh bench/record_check.sh
#   1. builds cupola, build/libcupola_record.so (make record) and record_known;
#   2. the known program (bench/record_known.cu): every event it logged is in
#      the recording with equal address, size, kind, stream and pool;
#   3. a program killed mid-run (kill -9): the recording loads, cut, with
#      every pair made before it said so;
#   4. (the cost is bench/record_cost.sh's, gpu-check's stage record-cost);
#   5. the frameworks: PyTorch (PYTORCH_NO_CUDA_MEMORY_CACHING=1), JAX
#      (XLA_PYTHON_CLIENT_ALLOCATOR=platform), CuPy (set_allocator(None))
#      recorded, each recording replayed through the framework's model in
#      cupola (kinds torch, bfc, cupy: those this tree has), beside a second
#      run with the framework's caching on (max_memory_reserved,
#      memory_stats(), total_bytes());
#   6. a second CUPTI user under the recorder: torch.profiler, and
#      compute-sanitizer; what each says, and that neither hangs.
# Writes $OUT/record.md (bench/results/record.md-ready) and $OUT/record_log.txt;
# the runs' files stay in $WORK.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/record-check}
WORK=${WORK:-/tmp/record-check-work}
rm -rf "$WORK"
mkdir -p "$OUT" "$WORK"
LOG=$OUT/record_log.txt
: >"$LOG"
commit=${CUPOLA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
log() { echo "$*" | tee -a "$LOG"; }
fail=0

# ---- 1. build ----------------------------------------------------------------
. bench/lua-env.sh
make -j16 $MAKE_FLAGS EXTRA_CFLAGS="$MAKE_CFLAGS" >"$WORK/make.txt" 2>&1 &&
    make record $MAKE_FLAGS EXTRA_CFLAGS="$MAKE_CFLAGS" >>"$WORK/make.txt" 2>&1 ||
    { tail -30 "$WORK/make.txt" | tee -a "$LOG"; exit 1; }
mkdir -p build/bench
nvcc -O2 -arch=sm_90 -o build/bench/record_known bench/record_known.cu -lcuda >>"$WORK/make.txt" 2>&1 ||
    { tail -30 "$WORK/make.txt" | tee -a "$LOG"; exit 1; }
device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
log "device: $device; commit $commit; $(date -u +%Y-%m-%dT%H:%MZ)"
R=bin/cupola

# ---- 2. the known program ------------------------------------------------------
log "== known program"
timeout 120 $R record -o "$WORK/known.csv" -- build/bench/record_known known "$WORK/known.log" \
    >>"$LOG" 2>&1 || { log "record of the known program failed"; fail=1; }
timeout 60 $R bench/record_check.lua known "$WORK/known.csv" "$WORK/known.log" >"$WORK/known.txt" 2>&1 || fail=1
cat "$WORK/known.txt" >>"$LOG"
known_line=$(grep -E '^(PASS|FAIL)' "$WORK/known.txt" | head -1)
grep -c '' "$WORK/known.csv" >/dev/null 2>&1 && cp "$WORK/known.csv" "$OUT/record_known.csv"
# the same with the runtime's callbacks too (CUPOLA_RECORD_LEVEL=runtime):
# whether CUPTI reports the driver calls the runtime makes
CUPOLA_RECORD_LEVEL=runtime timeout 120 $R record -o "$WORK/known_drv.csv" -- build/bench/record_known known "$WORK/known_drv.log" \
    >>"$LOG" 2>&1
timeout 60 $R bench/record_check.lua known "$WORK/known_drv.csv" "$WORK/known_drv.log" >"$WORK/known_drv.txt" 2>&1
cat "$WORK/known_drv.txt" >>"$LOG"
known_drv_line=$(grep -E '^(PASS|FAIL)' "$WORK/known_drv.txt" | head -1)

# ---- 3. killed mid-run -----------------------------------------------------------
log "== killed program"
N=500
( timeout 60 $R record -o "$WORK/killed.csv.gz" -- build/bench/record_known loop $N >"$WORK/loop.out" 2>"$WORK/loop.err" ) &
lp=$!
i=0
while [ $i -lt 300 ] && ! grep -q ready "$WORK/loop.out" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
sleep 0.5
# the recorded program itself (the launcher's child), by its command line
kp=$(pgrep -f "^build/bench/record_known loop $N" | head -1)
[ -n "$kp" ] && kill -9 "$kp"
wait $lp
cat "$WORK/loop.err" >>"$LOG"
timeout 60 $R bench/record_check.lua killed "$WORK/killed.csv.gz" $N >"$WORK/killed.txt" 2>&1 || fail=1
cat "$WORK/killed.txt" >>"$LOG"
killed_line=$(grep -E '^(PASS|FAIL)' "$WORK/killed.txt" | head -1)

# ---- 5. the frameworks -----------------------------------------------------------
log "== frameworks"
fw() { # $1 framework, $2 env of the recorded run
    env $2 timeout 180 $R record -o "$WORK/$1.csv.gz" -- python3 bench/record_frameworks.py $1 run 40 \
        >"$WORK/$1_rec.out" 2>"$WORK/$1_rec.err"
    echo "recorded run exit $?" >>"$WORK/$1_rec.err"
    env XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 180 python3 bench/record_frameworks.py $1 run 40 \
        >"$WORK/$1_cache.out" 2>"$WORK/$1_cache.err"
    tail -5 "$WORK/$1_rec.err" >>"$LOG"
    sed -n 's/^RESULT //p' "$WORK/$1_cache.out" | sed "s/^/$1 caching run: /" >>"$LOG"
}
fw torch "PYTORCH_NO_CUDA_MEMORY_CACHING=1"
fw jax "XLA_PYTHON_CLIENT_ALLOCATOR=platform XLA_PYTHON_CLIENT_PREALLOCATE=false"
fw cupy "CUPOLA_CUPY_NO_POOL=1"
# the run's file: renamed to -o's name when it was the only one, else its
# process's device 0 file with the most lines (the framework's own process)
trace_of() {
    if [ -f "$WORK/$1.csv.gz" ]; then echo "$WORK/$1.csv.gz"; return; fi
    for f in "$WORK/$1".p*.d0.csv.gz; do [ -f "$f" ] && echo "$(zcat "$f" 2>/dev/null | wc -l) $f"; done |
        sort -rn | head -1 | cut -d' ' -f2-
}
replay() {
    f=$(trace_of $1)
    if [ -n "$f" ]; then timeout 120 $R bench/record_check.lua replay "$f" $2 ${3:-} 2>&1
    else echo "replay_$2=unavailable (no recording of $1)"; fi
}
replay torch torch >"$WORK/torch_replay.txt"
replay jax bfc "$(sed -n 's/.*"bytes_limit": \([0-9]*\).*/\1/p' "$WORK/jax_cache.out" | head -1)" \
    >"$WORK/jax_replay.txt"
replay cupy cupy >"$WORK/cupy_replay.txt"
cat "$WORK"/*_replay.txt >>"$LOG"
val() { sed -n "s/.*\"$1\": \([0-9.e+-]*\).*/\1/p" "$2" | head -1; }
kv() { sed -n "s/^$1=\(.*\)/\1/p" "$2" | head -1; }
t_mmr=$(val max_memory_reserved "$WORK/torch_cache.out"); t_rep=$(kv replay_torch_peak_reserved "$WORK/torch_replay.txt")
j_ppb=$(val peak_pool_bytes "$WORK/jax_cache.out"); j_pbu=$(val peak_bytes_in_use "$WORK/jax_cache.out")
j_rep=$(kv replay_bfc_peak_reserved "$WORK/jax_replay.txt"); [ -n "$j_rep" ] || j_rep=$(grep -o 'replay_bfc=.*' "$WORK/jax_replay.txt")
c_tot=$(val peak_total_bytes "$WORK/cupy_cache.out"); c_rep=$(kv replay_cupy_peak_reserved "$WORK/cupy_replay.txt")
[ -n "$c_rep" ] || c_rep=$(grep -o 'replay_cupy=.*' "$WORK/cupy_replay.txt")
t_live=$(kv replay_torch_peak_live "$WORK/torch_replay.txt"); j_live=$(kv replay_bfc_peak_live "$WORK/jax_replay.txt")
c_live=$(kv replay_cupy_peak_live "$WORK/cupy_replay.txt")
rows() { grep -o '[0-9]* device allocations, [0-9]* frees' "$WORK/$1_rec.err" | head -1; }

# ---- 6. a second CUPTI user ---------------------------------------------------------
log "== a second CUPTI user"
timeout 120 $R record -o "$WORK/prof.csv.gz" -- python3 bench/record_frameworks.py torch profile \
    >"$WORK/prof.out" 2>"$WORK/prof.err"
prof_rc=$?
grep -i -m3 'cupti\|subscriber\|cupola record' "$WORK/prof.err" >"$WORK/prof.lines"
prof_res=$(sed -n 's/^RESULT //p' "$WORK/prof.out")
timeout 120 $R record -o "$WORK/san.csv.gz" -- compute-sanitizer --tool memcheck build/bench/record_known known "$WORK/san.log" \
    >"$WORK/san.out" 2>&1
san_rc=$?
grep -m3 -i 'cupola record\|error summary\|cupti' "$WORK/san.out" >"$WORK/san.lines"
cat "$WORK/prof.err" "$WORK/san.out" | tail -40 >>"$LOG"

# ---- the figures ------------------------------------------------------------------
{
echo "# cupola record: checks and cost"
echo
echo "Device: $device. Commit $commit, $(date -u +%Y-%m-%d). Made by \`OUT=... sh bench/record_check.sh\`."
echo
echo "## Correctness"
echo
echo "- $known_line (bench/record_known.cu: cudaMalloc, cudaMallocAsync on a stream, cudaMallocFromPoolAsync,"
echo "  managed, cudaMallocHost, cudaHostAlloc, cuMemAlloc, cuMemAllocAsync, cuMemCreate/Map/Unmap/Release, a failed"
echo "  1 PiB cudaMalloc; \`record_known.csv\` beside this file is the recording)"
echo "- with the runtime's callbacks too (CUPOLA_RECORD_LEVEL=runtime): $known_drv_line"
echo "- $killed_line"
echo
echo "## Cost"
echo
echo "Measured apart, alternated runs of a second each: \`bench/record_cost.sh\` (record_cost.md)."
echo
echo "## Frameworks: the request-level stream, replayed through cupola's model, against the framework's own caching run"
echo
echo "| framework | recorded (requests) | model replay: peak reserved | peak live | caching run's figure |"
echo "| --- | --- | --- | --- | --- |"
echo "| PyTorch (PYTORCH_NO_CUDA_MEMORY_CACHING=1; kind torch) | $(rows torch) | $t_rep | $t_live | max_memory_reserved $t_mmr |"
echo "| JAX (XLA_PYTHON_CLIENT_ALLOCATOR=platform; kind bfc) | $(rows jax) | $j_rep | $j_live | peak_pool_bytes $j_ppb, peak_bytes_in_use $j_pbu |"
echo "| CuPy (set_allocator(None); kind cupy) | $(rows cupy) | $c_rep | $c_live | largest total_bytes() $c_tot |"
echo
echo "## A second CUPTI user"
echo
echo "- torch.profiler under the recorder: exit $prof_rc, $prof_res; the recorder's line: $(grep -m1 'asked for CUPTI' "$WORK/prof.err" || echo none); its lines: $(tr '\n' ' ' <"$WORK/prof.lines")"
echo "- compute-sanitizer under the recorder: exit $san_rc; $(tr '\n' ' ' <"$WORK/san.lines")"
} >"$OUT/record.md"
cat "$OUT/record.md"
exit $fail
