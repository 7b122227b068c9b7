#!/bin/sh
# bench/gpu41-explore.sh: issue 41's exploration on the GPU machine, one
# command, about 4 minutes on an H100 (at most TOTAL_S=290 seconds: each part
# has its own timeout, cut to what is left; a part with under 15 s left is
# skipped and says so):
#     sh bench/gpu41-explore.sh            (files in $OUT, default /tmp/gpu41)
# Parts, in this order:
#   build  make all record record-floor cupy-allocator torch-allocator, the
#          cost benchmark (80 s)
#   fw     the frameworks through the recorder, in parallel, every recording
#          with CUPOLA_RECORD_CENSUS=1 CUPOLA_RECORD_CALLERS=1: PyTorch uncached
#          (the request stream), PyTorch caching with its own snapshot of the
#          same run, JAX platform allocator (driver level, and runtime level
#          without callers),
#          JAX's default BFC; torch.profiler and jax.profiler under the
#          recorder (the preload's line) and torch.profiler without it; how
#          torch and jaxlib link CUPTI.  bench/record_explain.py on each, the
#          replays through kinds torch and bfc (60 s)
#   cupy   vmm inside CuPy twice (the measured peak's own spread), with
#          CUDA_LAUNCH_BLOCKING=1 (no frees pending on the GPU: the replay's
#          assumption), vmm,release_threshold=0 (no clock), tlsf; each log
#          replayed on its clock with the streams as CUDA answers and idle (45 s)
#   step   PyTorch's own rounds with the new step-time design (default and
#          cupola caching, gpt2 and varshape, up to 3 rounds) (60 s)
#   cost   the recorder's cost, bench/record_cost.sh with COST_RUNS=4 (the
#          final run: 20) and the recorder writing plain text too (85 s)
# Writes under $OUT (at most 8 files): summary.txt, frameworks.txt,
# cupy_explore.md, torch_step.md, torch_step.json, record_cost.md, logs.tgz
# (every log and the small recordings).  The summary is printed last.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu41}
W=${WORK:-/tmp/gpu41-work}
SELF=bench/gpu41-explore.sh

part_build() {
    . bench/lua-env.sh
    # shellcheck disable=SC2086
    make -j16 all record record-floor cupy-allocator torch-allocator $MAKE_FLAGS \
        EXTRA_CFLAGS="$MAKE_CFLAGS" >"$W/make.txt" 2>&1 || { tail -30 "$W/make.txt"; return 1; }
    mkdir -p build/bench
    nvcc -O3 -arch=sm_90 -o build/bench/record_cost bench/record_cost.cu >>"$W/make.txt" 2>&1 ||
        { tail -30 "$W/make.txt"; return 1; }
    ls -l build/*.so
}

# one recording of the frameworks' runs: $1 name, $2 environment, $3... the command
fw_rec() {
    name=$1 envs=$2
    shift 2
    # shellcheck disable=SC2086
    env CUPOLA_RECORD_CENSUS=1 CUPOLA_RECORD_CALLERS=1 $envs \
        timeout 50 bin/cupola record -o "$W/fw/$name.csv.gz" -- "$@" >"$W/fw/$name.out" 2>"$W/fw/$name.err"
    echo "exit $?" >>"$W/fw/$name.err"
}

part_fw() {
    . bench/lua-env.sh
    mkdir -p "$W/fw"
    F=$W/fw
    P=bench/record_frameworks.py
    fw_rec torch_nc "PYTORCH_NO_CUDA_MEMORY_CACHING=1" python3 $P torch run 40 &
    fw_rec torch_c "RECORD_SNAPSHOT=$F/torch_c.pickle" python3 $P torch run 40 &
    fw_rec jax_platform "XLA_PYTHON_CLIENT_ALLOCATOR=platform XLA_PYTHON_CLIENT_PREALLOCATE=false" \
        python3 $P jax run 40 &
    # (no callers here: one JAX recording that a backtrace in the callback cannot disturb)
    fw_rec jax_platform_rt "CUPOLA_RECORD_CALLERS=0 CUPOLA_RECORD_LEVEL=runtime XLA_PYTHON_CLIENT_ALLOCATOR=platform XLA_PYTHON_CLIENT_PREALLOCATE=false" \
        python3 $P jax run 40 &
    fw_rec jax_bfc "XLA_PYTHON_CLIENT_PREALLOCATE=false" python3 $P jax run 40 &
    fw_rec torch_prof "X=1" python3 $P torch profile &
    fw_rec jax_prof "XLA_PYTHON_CLIENT_PREALLOCATE=false" python3 $P jax profile &
    timeout 50 python3 $P torch profile >"$F/torch_prof_plain.out" 2>"$F/torch_prof_plain.err" &
    XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 50 python3 $P jax profile \
        >"$F/jax_prof_plain.out" 2>"$F/jax_prof_plain.err" &
    {
        echo "== how torch and jaxlib take CUPTI (NEEDED, and the subscribe they import)"
        python3 - <<'EOF'
import glob, os, subprocess
roots = []
for mod in ("torch", "jaxlib", "jax_plugins", "nvidia"):
    try:
        m = __import__(mod)
        roots += [os.path.dirname(p) for p in getattr(m, "__path__", [])] or [os.path.dirname(m.__file__)]
    except Exception as e:
        print(mod, "not importable:", e)
keep = ("torch", "jax", "xla", "kineto", "cupti", "pjrt", "plugin")
for root in roots:
    for so in sorted(glob.glob(os.path.join(root, "**", "*.so*"), recursive=True)):
        if not any(k in os.path.basename(so).lower() for k in keep):
            continue
        try:
            d = subprocess.run(["readelf", "-d", so], capture_output=True, text=True).stdout
            u = subprocess.run(["nm", "-D", "--undefined-only", so], capture_output=True, text=True).stdout
        except Exception:
            continue
        need = [l.split("[")[1].rstrip("]") for l in d.splitlines() if "NEEDED" in l and "cupti" in l]
        subs = [l.split()[-1] for l in u.splitlines() if "cuptiSubscribe" in l]
        strs = ""
        if not need and not subs and "cupti" in os.path.basename(so).lower():
            strs = " (a libcupti itself)"
        if need or subs or strs:
            print(so, "NEEDED", need, "imports", subs, strs)
EOF
    } >"$F/linkage.txt" 2>&1 &
    wait
    {
        for n in torch_nc torch_c jax_platform jax_platform_rt jax_bfc; do
            f=$F/$n.csv.gz
            echo
            echo "########## $n: $(tail -4 "$F/$n.err" | tr '\n' ' ')"
            sed -n 's/^RESULT /RESULT: /p' "$F/$n.out"
            [ -f "$f" ] || f=$(ls "$F/$n".p*.d0.csv.gz 2>/dev/null | head -1)
            [ -n "$f" ] || continue
            case $n in
                torch_nc) python3 bench/record_explain.py "$f" --other "$F/torch_c.pickle" --top 15 ;;
                torch_c) python3 bench/record_explain.py "$f" --same "$F/torch_c.pickle" --top 15 ;;
                *) python3 bench/record_explain.py "$f" --top 15 ;;
            esac 2>&1 | head -150
        done
        echo
        echo "########## replays (bench/record_check.lua replay)"
        [ -f "$F/torch_nc.csv.gz" ] && timeout 60 bin/cupola bench/record_check.lua replay "$F/torch_nc.csv.gz" torch 2>&1
        [ -f "$F/jax_platform.csv.gz" ] && timeout 60 bin/cupola bench/record_check.lua replay "$F/jax_platform.csv.gz" bfc 2>&1
        echo
        echo "########## profilers: under the recorder (stderr lines about CUPTI), and without it"
        for n in torch_prof jax_prof torch_prof_plain jax_prof_plain; do
            echo "-- $n: $(sed -n 's/^RESULT //p' "$F/$n.out" | head -1)"
            grep -i 'cupti\|cupola record\|subscriber' "$F/$n.err" | head -6
        done
        echo
        cat "$F/linkage.txt"
    } >"$OUT/frameworks.txt" 2>&1
    grep -c '' "$OUT/frameworks.txt"
}

part_cupy() {
    . bench/lua-env.sh
    C=$W/cupy
    mkdir -p "$C"
    L=build/libcupola_cupy.so
    one() { tag=$1 spec=$2; shift 2
        env "$@" timeout 40 python3 bench/cupy_inside.py --one "$tag" "$C" $L "$spec" >"$C/$tag.out" 2>&1
        echo "$tag rc=$?"; }
    timeout 40 python3 bench/cupy_inside.py --one default "$C" >"$C/default.out" 2>&1
    one vmm vmm X=1
    one vmm_again vmm X=1
    one vmm_blocking vmm CUDA_LAUNCH_BLOCKING=1
    one vmm_rt0 "vmm,release_threshold=0" X=1
    one tlsf tlsf X=1
    bin/cupola bench/cupy_replay.lua "$C" "$(git rev-parse --short HEAD 2>/dev/null)" \
        vmm vmm_again vmm_blocking vmm_rt0 tlsf >"$OUT/cupy_explore.md" 2>"$C/replay.err"
    cat "$C/replay.err"
    for t in vmm vmm_again vmm_blocking vmm_rt0; do
        echo "-- $t stats: $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d.get('seconds'), json.dumps(d.get('stats')))" "$C/$t.json" 2>&1)"
    done >>"$OUT/cupy_explore.md"
}

part_step() {
    S=$W/step
    mkdir -p "$S"
    ALLOCS="default cupola:caching" ROUNDS=3 BUDGET_S=${STEP_BUDGET_S:-45} WORKLOADS=gpt2,varshape \
        CUPOLA_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) \
        python3 bench/torch_step.py "$S" build/libcupola_torch.so
}

part_cost() {
    COST_RUNS=${COST_RUNS:-4} COST_TORCH_RUNS=${COST_TORCH_RUNS:-4} \
        COST_CONDS=${COST_CONDS:-plain floor rec recplain} OUT=$OUT WORK=$W/cost \
        sh bench/record_cost.sh
}

case "${1:-}" in
    --part)
        "part_$2"
        exit $?
        ;;
esac

rm -rf "$W"
mkdir -p "$OUT" "$W"
TOTAL=${TOTAL_S:-290}
T0=$(date +%s)
: >"$W/parts.txt"
run_part() { # $1 name, $2 its own timeout
    left=$((TOTAL - ($(date +%s) - T0)))
    lim=$2
    [ "$lim" -gt "$left" ] && lim=$left
    if [ "$lim" -lt 15 ]; then
        echo "$1: skipped ($left s left of TOTAL_S=$TOTAL)" >>"$W/parts.txt"
        return
    fi
    s=$(date +%s)
    timeout -k 5 "$lim" sh "$SELF" --part "$1" >"$W/$1.log" 2>&1
    echo "$1: rc=$? $(($(date +%s) - s)) s (limit $lim)" >>"$W/parts.txt"
}
run_part build 80
run_part fw 60
run_part cupy 45
run_part step "${STEP_LIMIT_S:-60}"
# a step run cut short: the table from the processes that finished
[ -f "$W/step/torch_step.md" ] || ALLOCS="default cupola:caching" \
    python3 bench/torch_step.py --table "$W/step" >/dev/null 2>&1
cp "$W/step/torch_step.md" "$W/step/torch_step.json" "$OUT/" 2>/dev/null
run_part cost "${COST_LIMIT_S:-85}"

{
    echo "gpu41-explore: commit $(git rev-parse --short HEAD 2>/dev/null), $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
    cat "$W/parts.txt"
    echo "-- fw: rows, census and peaks"
    grep -E '^########## |^RESULT|memory live: peak|not one of them|requests: the snapshot|^-- ' \
        "$OUT/frameworks.txt" 2>/dev/null | cut -c1-220 | head -40
    grep -m3 'cupola record: process' "$W"/fw/*.err 2>/dev/null | cut -c1-220
    echo "-- cupy"
    grep -E '^\| `|Largest' "$OUT/cupy_explore.md" 2>/dev/null
    echo "-- step"
    grep -E '^\| (gpt2|varshape)|agree' "$OUT/torch_step.md" 2>/dev/null
    echo "-- cost"
    grep -E '^\| seeds|^\| PyTorch' "$OUT/record_cost.md" 2>/dev/null | cut -c1-200
} >"$OUT/summary.txt"
# every log and the small recordings (at most 20 MB each) in one archive
(cd "$W" && find . -type f -size -20M | tar czf "$OUT/logs.tgz" -T - 2>/dev/null)
cat "$OUT/summary.txt"
