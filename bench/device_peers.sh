#!/bin/sh
# bench/device_peers.sh: cupola's heap beside Gallatin, Ouroboros (pages,
# chunks) and FDGMalloc on the GPU machine, in one command of at most
# DEADLINE (default 390) seconds:
#   build   the module (make -j16; nothing to do when build/ came along)
#   warm    every peer's modules compiled by nvcc into this run's cache, the
#           peers side by side (and, at the same time, the peers' own
#           benchmarks built: Gallatin's tests/src/gallatin_test.cu,
#           Ouroboros's src/main.cu with TEST_PAGES and with TEST_CHUNKS;
#           and the specs of plugins created on the host run: the
#           interface on this backend, nothing timed)
#   run     bench/device_peers.lua drive NAME for each allocator in turn,
#           each with its share of the time left: its tests in child
#           processes, a measurement that faults or hangs (PEERS_MEASURE_LIMIT
#           seconds, default 30) a `fault` row naming what happened and the
#           next child going on from the next measurement; what a peer cannot
#           run (sizes above Ouroboros's largest page, FDGMalloc's pairs and
#           fragmentation: it frees nothing) is an "n/a" row with the reason
#   own     one figure of each peer's own benchmark beside the harness's
#           figure for the same count and size, on the same GPU:
#             gallatin_test 500 1 4096 (90% of 500 segments of 16 MiB as
#             4 KiB blocks: 1,843,200 allocations) vs the harness's
#             per-thread test at 1,843,200 x 4096 B;
#             Ouroboros main 100000 16 (pages, chunks) vs the harness's at
#             100,000 x 16 B
#   merge   one table per test, every allocator a column
#
#   sh bench/device_peers.sh                (PEERS=.peers: the checkouts)
#
# The checkouts (docs/API.md, "A peer's allocator from its checkout"):
# $PEERS/gallatin (saltsystemslab/gallatin), $PEERS/ouroboros
# (GPUPeople/Ouroboros), $PEERS/survey (GPUPeople/GPUMemManSurvey: its
# frameworks/fdg); each one's commit is read from `git rev-parse HEAD` there
# or from a file COMMIT in it (a copy without .git).  A missing checkout is
# left out and said so.
#
# Results in $OUT (at most 8 files come back): device_peers.md (the checks,
# the commits, the own-benchmark figures, every table),
# device_peers-survey.{csv,json,html} (the html plots each test) and
# logs.tgz (every log, the rows as they came), rewritten after each stage.
# SURVEY_BACKEND=host makes a dry run on the host backend (heap alone).
# HEAP_VARIANTS=1 adds the heap's variants (alloc_heap.cuh, "Variants") as
# allocators of their own.  PEERS_SANITIZE=1 adds, after the merge,
# compute-sanitizer memcheck and racecheck side by side over a small run of
# the heap (2e4 threads: per thread, per warp, mixed sizes, pairs,
# fragmentation, out of memory), their summaries among the checks.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/device_peers-run}
LOGS=${LOGS:-/tmp/cupola-peers-logs}
PEERS=${PEERS:-.peers}
case $PEERS in /*) ;; *) PEERS=$(pwd)/$PEERS ;; esac
rm -rf "$LOGS"
mkdir -p "$OUT" "$LOGS"
commit=${CUPOLA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || cat COMMIT 2>/dev/null || echo unknown)}
export CUPOLA_COMMIT=$commit
export CUPOLA_BACKEND=${SURVEY_BACKEND:-cuda}
# this run's own cache of compiled modules (the peers' nvcc builds)
export CUPOLA_CACHE_DIR=/tmp/cupola-peers-cache
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
status=0
checks="$LOGS/checks.md"
own="$LOGS/own.md"
: >"$checks"
: >"$own"

. bench/lua-env.sh || exit 1

device=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo none)
echo "device_peers: commit $commit, $(date -u +%Y-%m-%dT%H:%MZ), device: $device, peers: $PEERS"
start=$(date +%s)
DEADLINE=${DEADLINE:-390}
left() { echo $((DEADLINE - ($(date +%s) - start))); }

# step name limit command...: its log in $LOGS/name.log, a row in checks.md
step() {
    name=$1
    limit=$2
    shift 2
    l=$(left)
    [ "$limit" -gt "$l" ] && limit=$l
    if [ "$limit" -lt 5 ]; then
        printf '| %s | skipped | | past the deadline of %s s |\n' "$name" "$DEADLINE" | tee -a "$checks"
        status=1
        return 1
    fi
    t0=$(date +%s)
    timeout -k 5 "$limit" "$@" >"$LOGS/$name.log" 2>&1
    rc=$?
    [ $rc -eq 124 ] && echo "TIMED OUT after ${limit}s" >>"$LOGS/$name.log"
    printf '| %s | %s | %s s | %s |\n' "$name" "$rc" $(($(date +%s) - t0)) \
        "$(grep -E '^(warm|run|harness|drive) | successes /' "$LOGS/$name.log" | tail -1 | cut -c1-200)" | tee -a "$checks"
    [ $rc -eq 0 ] || status=1
    return $rc
}

peer_commit() {
    d=$PEERS/$1
    if [ -d "$d/.git" ] || [ -f "$d/.git" ]; then
        git -C "$d" rev-parse HEAD 2>/dev/null
    elif [ -f "$d/COMMIT" ]; then
        head -1 "$d/COMMIT"
    else
        echo "(no checkout)"
    fi
}

report() {
    {
        echo "# cupola's heap beside the field's in-kernel allocators: $device"
        echo
        echo "- cupola commit $commit, $(date -u '+%Y-%m-%d %H:%M UTC'); command: \`sh bench/device_peers.sh\`"
        echo "- peers measured: Gallatin $(peer_commit gallatin), Ouroboros $(peer_commit ouroboros)," \
            "GPUMemManSurvey (FDGMalloc) $(peer_commit survey)"
        echo
        echo "## Checks"
        echo
        echo "| step | rc | time | last line |"
        echo "| --- | ---: | ---: | --- |"
        cat "$checks"
        echo
        echo "## Each peer's own benchmark beside the harness (same GPU, same run)"
        echo
        cat "$own"
        echo
        if [ -f "$LOGS/device_peers-survey.md" ]; then
            echo "## The survey, every allocator in one table per test"
            echo
            cat "$LOGS/device_peers-survey.md"
        else
            echo "## The survey did not merge: the rows as they came"
            echo
            echo '```'
            cat "$LOGS"/rows/*.jsonl 2>/dev/null | cut -c1-240
            echo '```'
        fi
    } >"$OUT/device_peers.md"
    for ext in csv json html; do
        [ -f "$LOGS/device_peers-survey.$ext" ] && cp "$LOGS/device_peers-survey.$ext" "$OUT/"
    done
    tar czf "$OUT/logs.tgz" -C "$LOGS" --exclude='device_peers-survey.json' --exclude='own-bin' . 2>/dev/null
}

# --- build ---------------------------------------------------------------------
step build 240 make -j16 $MAKE_FLAGS EXTRA_CFLAGS="$MAKE_CFLAGS" || { tail -30 "$LOGS/build.log"; report; exit 1; }
names=$(lua5.4 bench/device_peers.lua "$PEERS" "$LOGS" list)
[ "$CUPOLA_BACKEND" = host ] && names=heap
[ "${HEAP_VARIANTS:-0}" = 1 ] && names="$names $(lua5.4 bench/device_peers.lua "$PEERS" "$LOGS" list variants | grep '^heap-')"
names=$(echo $names)
echo "allocators: $(echo $names)"

# --- warm: the peers' modules and their own benchmarks, side by side -------------
BIN=$LOGS/own-bin
mkdir -p "$BIN"
t0=$(date +%s)
for n in $names; do
    [ "$n" = heap ] && continue
    (step "warm-$n" 150 lua5.4 bench/device_peers.lua "$PEERS" "$LOGS" warm "$n") &
done
if [ "$CUPOLA_BACKEND" != host ]; then
    if [ -d "$PEERS/gallatin/include" ]; then
        (step own-build-gallatin 150 "$NVCC" -O3 -arch=sm_90 -std=c++17 -w -I"$PEERS/gallatin/include" \
            -o "$BIN/gallatin_test" "$PEERS/gallatin/tests/src/gallatin_test.cu") &
    fi
    if [ -d "$PEERS/ouroboros/include" ]; then
        # CUDA 13 removed cudaDeviceProp::clockRate, which Ouroboros's
        # statistics printer reads: the same int field as the adapter's
        for v in PAGES CHUNKS; do
            (step "own-build-ouroboros-$v" 150 "$NVCC" -O3 -arch=sm_90 -std=c++17 -w --expt-relaxed-constexpr \
                -DTEST_$v -DclockRate=memoryBusWidth -I"$PEERS/ouroboros/include" \
                -o "$BIN/ouroboros_$v" "$PEERS/ouroboros/src/main.cu") &
        done
    fi
fi
# the interface itself on this backend (nvcc modules, the host part, create,
# reset, destroy), while the peers compile: the specs of plugins created on
# the host
(step specs 120 $BUSTED --filter=created.on.the.host spec/device_plugin_spec.lua spec/survey_spec.lua) &
wait
grep -E "successes|Failure|Error" "$LOGS/specs.log" | head -8 | sed 's/^/    specs: /'
echo "warm: $(($(date +%s) - t0)) s"
report

# --- run: each allocator in turn, its tests in child processes, its share ------
count=$(echo $names | wc -w)
# what is left less the own-benchmark step (60 s) and the merge (10 s)
i=0
for n in $names; do
    l=$(($(left) - 70))
    share=$((l / (count - i)))
    [ $share -gt ${PEERS_SHARE_MAX:-90} ] && share=${PEERS_SHARE_MAX:-90}
    i=$((i + 1))
    if [ $share -lt 15 ]; then
        printf '| run-%s | skipped | | no time left |\n' "$n" | tee -a "$checks"
        status=1
        continue
    fi
    # the driver stops starting children past its share; the survey in a
    # child stops starting measurements at the time it was given
    step "run-$n" $((share + 20)) lua5.4 bench/device_peers.lua "$PEERS" "$LOGS" drive "$n" "$share"
    report
done

# --- own: one figure of each peer's own benchmark, the harness's beside it ------
if [ "$CUPOLA_BACKEND" != host ]; then
    if [ -x "$BIN/gallatin_test" ]; then
        step own-gallatin 30 "$BIN/gallatin_test" 500 1 4096
        step own-gallatin-harness 30 lua5.4 bench/device_peers.lua "$PEERS" "$LOGS" own Gallatin 1843200 4096
        {
            echo "- Gallatin's gallatin_test 500 1 4096: $(grep -E '^(Malloced|Freed|Missed)' "$LOGS/own-gallatin.log" | tr '\n' ' ')"
            echo "- the $(grep -E '^harness ' "$LOGS/own-gallatin-harness.log" | tail -1)"
        } >>"$own"
    fi
    for v in PAGES CHUNKS; do
        [ -x "$BIN/ouroboros_$v" ] || continue
        a=Ouroboros-P
        [ $v = CHUNKS ] && a=Ouroboros-C
        step "own-ouroboros-$v" 30 "$BIN/ouroboros_$v" 100000 16
        step "own-ouroboros-$v-harness" 30 lua5.4 bench/device_peers.lua "$PEERS" "$LOGS" own "$a" 100000 16
        {
            echo "- Ouroboros's main ($v, its MultiOuro type) 100000 16, mean of 10: $(grep -E '^Timing' "$LOGS/own-ouroboros-$v.log" | tr -s ' ' | tr '\n' ' ')"
            echo "- the $(grep -E '^harness ' "$LOGS/own-ouroboros-$v-harness.log" | tail -1)"
        } >>"$own"
    done
fi

# --- merge ------------------------------------------------------------------------
step merge 20 lua5.4 bench/device_peers.lua "$PEERS" "$LOGS" merge &&
    cp "$LOGS/merge.log" "$LOGS/device_peers-survey.txt"

# --- the heap under compute-sanitizer (PEERS_SANITIZE=1) ----------------------------
if [ "${PEERS_SANITIZE:-0}" = 1 ] && [ "$CUPOLA_BACKEND" != host ]; then
    for tool in memcheck racecheck; do
        (PEERS_PLAN="thread=16,1024,8192;warp=16,8192;mixed=4096;pairs=16,1024,65536;frag=16;oom=4096" \
            PEERS_SET="capacity=1GiB;threads=20000;warps=2000;pair_threads=20000;iterations=1;pair_probe=false;pair_warm=2048;oom_capacity=64MiB;frag_capacity=256MiB;pair_capacity=2GiB;oom_threads=20000" \
            PEERS_TIME_LIMIT=150 step "sanitize-$tool" 170 compute-sanitizer --tool $tool --error-exitcode 86 \
            --print-limit 20 lua5.4 bench/device_peers.lua "$PEERS" "$LOGS/sanitize-$tool" run heap) &
    done
    wait
    for tool in memcheck racecheck; do
        printf '| sanitize-%s summary | | | %s |\n' "$tool" \
            "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^run ' "$LOGS/sanitize-$tool.log" | tr '\n' ' ' | cut -c1-200)" >>"$checks"
    done
fi
report
echo "device_peers: $([ $status -eq 0 ] && echo PASS || echo FAIL) in $(($(date +%s) - start)) s; $OUT/device_peers.md"
exit $status
