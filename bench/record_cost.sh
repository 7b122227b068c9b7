#!/bin/sh
# bench/record_cost.sh: the recorder's cost, measured so that 1 % shows, on
# the GPU machine:
#     OUT=/some/dir sh bench/record_cost.sh
# Three conditions, each a fresh process, alternated (the order rotated every
# run): plain (no injection), floor (build/libcupola_record_floor.so: the
# recorder's CUPTI subscription and callbacks, empty: what any recorder over
# CUPTI's callbacks pays) and rec (build/libcupola_record.so as `cupola
# record` loads it, writing gzip).  Time is taken inside each process around
# the work, after a warm-up (process and CUDA start are not timed):
#   - the seeds' benchmark (bench/record_cost.cu: 4 MiB alloc, kernel, free),
#     a window of COST_WINDOW_S seconds (default 1) with cudaMalloc, then one
#     with cudaMallocAsync, COST_RUNS runs (default 20) of each condition
#     (COST_CONDS, default "plain floor rec"; recplain: the recorder writing
#     plain text, which tells gzip's share);
#   - PyTorch's MLP (bench/record_frameworks.py) with
#     PYTORCH_NO_CUDA_MEMORY_CACHING=1, a window of COST_WINDOW_S,
#     COST_TORCH_RUNS runs (default COST_RUNS) of plain and rec (and floor with
#     COST_TORCH_FLOOR=1), forked from one process that imported torch.
# About 2.5 s a seeds' process and 2.5 s a PyTorch child: with the defaults
# 60 x 2.5 + 40 x 2.5 s + 10 s, about 4 minutes on an H100.
# Writes $OUT/record_cost.md (the table, bench/record_cost.py table) and
# $WORK/cost.txt (every window); the GPU's clocks and temperature before and
# after go in the table's notes.  Needs make record record-floor (built here).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/record-cost}
WORK=${WORK:-/tmp/record-cost-work}
RUNS=${COST_RUNS:-20}
WIN=${COST_WINDOW_S:-1}
TRUNS=${COST_TORCH_RUNS:-$RUNS}
CONDS=${COST_CONDS:-plain floor rec}
mkdir -p "$OUT" "$WORK"
rm -f "$WORK"/cost.txt "$WORK"/seed_rec_*
commit=${CUPOLA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
. bench/lua-env.sh # the build flags of the other stages (MAKE_FLAGS): nothing is rebuilt for them
# shellcheck disable=SC2086
make record record-floor $MAKE_FLAGS EXTRA_CFLAGS="$MAKE_CFLAGS" >"$WORK/make.txt" 2>&1 &&
    mkdir -p build/bench &&
    { [ build/bench/record_cost -nt bench/record_cost.cu ] ||
        nvcc -O3 -arch=sm_90 -o build/bench/record_cost bench/record_cost.cu >>"$WORK/make.txt" 2>&1; } ||
    { tail -20 "$WORK/make.txt"; exit 1; }
REC=$PWD/build/libcupola_record.so
FLOOR=$PWD/build/libcupola_record_floor.so
gpu() { nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader 2>/dev/null | head -1; }
device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
gpu_before=$(gpu)
t_start=$(date +%s)

# ---- the seeds' benchmark --------------------------------------------------------
events=""
i=1
while [ "$i" -le "$RUNS" ]; do
    # the conditions, rotated by one each run
    set -- $CONDS
    k=$((i % $#))
    while [ "$k" -gt 0 ]; do c=$1; shift; set -- "$@" "$c"; k=$((k - 1)); done
    for c in "$@"; do
        case $c in
            plain) env -u CUDA_INJECTION64_PATH build/bench/record_cost "$WIN" malloc async ;;
            floor) CUDA_INJECTION64_PATH=$FLOOR build/bench/record_cost "$WIN" malloc async ;;
            rec) CUDA_INJECTION64_PATH=$REC CUPOLA_RECORD_OUT=$WORK/seed_rec_$i.csv.gz \
                     build/bench/record_cost "$WIN" malloc async ;;
            recplain) CUDA_INJECTION64_PATH=$REC CUPOLA_RECORD_OUT=$WORK/seed_recplain_$i.csv \
                     build/bench/record_cost "$WIN" malloc async ;;
        esac 2>>"$WORK/seed.err" | sed "s/^cost /cost cond=$c run=$i /" >>"$WORK/cost.txt"
    done
    rm -f "$WORK"/seed_recplain_"$i".*
    # the recorder recorded: its rows of one run, then the file goes (tens of MB a run)
    if [ -z "$events" ]; then
        events=$(zcat "$WORK"/seed_rec_"$i".p*.csv.gz 2>/dev/null | grep -c ',device,')
    fi
    rm -f "$WORK"/seed_rec_"$i".*
    i=$((i + 1))
done
t_seed=$(($(date +%s) - t_start))

# ---- PyTorch, caching off ----------------------------------------------------------
conds="plain rec"
[ "${COST_TORCH_FLOOR:-0}" = 1 ] && conds="plain floor rec"
# shellcheck disable=SC2086
PYTORCH_NO_CUDA_MEMORY_CACHING=1 COST_REC_LIB=$REC COST_FLOOR_LIB=$FLOOR \
    python3 bench/record_cost.py torch "$TRUNS" "$WIN" "$WORK/cost.txt" $conds \
    >"$WORK/torch.out" 2>"$WORK/torch.err"
torch_rc=$?
torch_events=$(zcat "$WORK"/torch_rec_0.p*.csv.gz 2>/dev/null | grep -c ',device,')
rm -f "$WORK"/torch_rec_* "$WORK"/torch_floor_*
t_all=$(($(date +%s) - t_start))
gpu_after=$(gpu)
{
    echo "# cupola record: its cost"
    echo
    echo "Device: $device. Commit $commit, $(date -u +%Y-%m-%d). \`OUT=... sh bench/record_cost.sh\`"
    echo "(COST_RUNS=$RUNS, COST_TORCH_RUNS=$TRUNS, windows of $WIN s; seeds' part ${t_seed} s, all ${t_all} s)."
    echo
    python3 bench/record_cost.py table "$WORK/cost.txt"
    echo
    echo "Each row: fresh processes, conditions alternated (order rotated each run), time inside the process"
    echo "around the work after a warm-up. Change: the median against the median without the recorder; the"
    echo "interval: 95 % bootstrap of that ratio. Recorded rows in one seeds' run: ${events:-?}; in one"
    echo "PyTorch run: ${torch_events:-?} (PyTorch's runs: rc=$torch_rc, $(grep -c 'injected=1' "$WORK/cost.txt") windows"
    echo "with the library mapped, $(grep -c 'failed=' "$WORK/cost.txt") failed). GPU (SM MHz, memory MHz, °C, W)"
    echo "before: $gpu_before; after: $gpu_after."
} >"$OUT/record_cost.md"
cat "$OUT/record_cost.md"
tail -3 "$WORK/torch.err"
