#!/bin/sh
# bench/peers_explore.sh: one exploration call on the GPU machine (issue 42):
# the heap, its variants and every peer through every test of the survey,
# short, then what explains the peers' faults, in at most DEADLINE (default
# 230) seconds on an H100:
#   build     make -j16 (nothing to do when build/ came along)
#   warm      every peer's modules (nvcc) and every heap variant's module
#             (NVRTC), side by side, into this run's cache
#   heap      the heap and each variant of alloc_heap.cuh ("Variants"), one
#             after another, every test (PEERS_SHORT=1: fewer sizes, a
#             smaller budget), each through bench/device_peers.lua drive
#   peers     Gallatin, Ouroboros-P, Ouroboros-C, FDGMalloc the same way
#             (a measurement that faults or passes PEERS_MEASURE_LIMIT, 15 s,
#             is a fault row and the next child goes on after it)
#   diag      side by side (nothing timed is compared): Ouroboros-P and -C's
#             pairs at 16 B and 1 KiB without the warm-up (each probe's NULLs
#             and corrupt blocks: the chunk locator read stale in the kernel
#             that frees), Gallatin's pairs at 8 KiB and 64 KiB in an 8 GiB
#             pool (its old capacity: out of memory there traps), FDGMalloc's
#             first allocations under compute-sanitizer memcheck (-lineinfo:
#             the line that faults)
#   memcheck  compute-sanitizer memcheck over a small run of the heap and of
#             each variant (2e4 threads: per thread, per warp, mixed, pairs,
#             fragmentation, out of memory), side by side
#   pack      $OUT/explore.md (the checks, every table, the heap against each
#             variant and peer, the diagnostics, the memcheck summaries),
#             $OUT/explore.{json,csv,html} (every row; the page plots every
#             test), $OUT/explore-logs.tgz; a short table printed last
#
#   sh bench/peers_explore.sh                  (PEERS=.peers: the checkouts)
#   SURVEY_BACKEND=host sh bench/peers_explore.sh     a dry run on the host
#                                                     backend (heap and variants)
# EXPLORE_STAGES narrows the stages (default: all, in the order above).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/peers-explore}
LOGS=${LOGS:-/tmp/cupola-explore}
PEERS=${PEERS:-.peers}
case $PEERS in /*) ;; *) PEERS=$(pwd)/$PEERS ;; esac
rm -rf "$LOGS"
mkdir -p "$OUT" "$LOGS"
commit=${CUPOLA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || cat COMMIT 2>/dev/null || echo unknown)}
export CUPOLA_COMMIT=$commit
export CUPOLA_BACKEND=${SURVEY_BACKEND:-cuda}
export CUPOLA_CACHE_DIR=/tmp/cupola-peers-cache
export PEERS_SHORT=1
export PEERS_MEASURE_LIMIT=${PEERS_MEASURE_LIMIT:-15}
stages=${EXPLORE_STAGES:-build warm heap peers diag memcheck pack}
DEADLINE=${DEADLINE:-230}
start=$(date +%s)
left() { echo $((DEADLINE - ($(date +%s) - start))); }
# the timed stages end 55 s before the deadline: the diagnostics, memcheck
# and the packing always get their time
timed_left() { echo $(($(left) - 55)); }
# drive NAME SHARE DIR: one allocator within its share of what the timed
# stages have left
drive() {
    s=$(($2 * scale))
    tl=$(timed_left)
    [ "$s" -gt "$tl" ] && s=$tl
    if [ "$s" -lt 8 ]; then
        printf '| run-%s | skipped | | no time left for the timed stages |\n' "$1" >>"$checks"
        status=1
        return 1
    fi
    step "run-$1" $((s + 10)) $DP "$3" drive "$1" "$s"
}
checks="$LOGS/checks.md"
: >"$checks"
status=0

. bench/lua-env.sh || exit 1
DP="lua5.4 bench/device_peers.lua $PEERS"
device=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo none)
echo "peers_explore: commit $commit, $(date -u +%Y-%m-%dT%H:%MZ), device: $device, peers: $PEERS"
HOST=0
[ "$CUPOLA_BACKEND" = host ] && HOST=1
# the host backend's kernels run on the CPU: a dry run takes its time
scale=1
[ $HOST = 1 ] && scale=${EXPLORE_HOST_SCALE:-12} && export PEERS_MEASURE_LIMIT=60

# step name limit command...: its log in $LOGS/name.log, a row in checks.md
step() {
    name=$1
    limit=$2
    shift 2
    l=$(left)
    [ "$limit" -gt "$l" ] && limit=$l
    if [ "$limit" -lt 5 ]; then
        printf '| %s | skipped | | past the deadline of %s s |\n' "$name" "$DEADLINE" >>"$checks"
        status=1
        return 1
    fi
    t0=$(date +%s)
    timeout -k 5 "$limit" "$@" >"$LOGS/$name.log" 2>&1
    rc=$?
    [ $rc -eq 124 ] && echo "TIMED OUT after ${limit}s" >>"$LOGS/$name.log"
    printf '| %s | %s | %s s | %s |\n' "$name" "$rc" $(($(date +%s) - t0)) \
        "$(grep -E '^(warm|run|drive|harness)|ERROR SUMMARY|successes' "$LOGS/$name.log" | tail -1 | cut -c1-160)" \
        >>"$checks"
    [ $rc -eq 0 ] || status=1
    return $rc
}

peers=""
variants=""
want() { case " $stages " in *" $1 "*) return 0 ;; esac; return 1; }

if want build; then
    step build 120 make -j16 ${MAKE_FLAGS:-} EXTRA_CFLAGS="${MAKE_CFLAGS:-}" all || { tail -30 "$LOGS/build.log"; exit 1; }
fi
variants=$($DP "$LOGS/main" list variants | grep '^heap-' | grep -v counted)
counted=$($DP "$LOGS/main" list variants | grep counted)
[ $HOST = 1 ] || peers=$($DP "$LOGS/main" list | grep -v '^heap$')
echo "heap variants: $(echo $variants $counted); peers: $(echo $peers)"

if want warm; then
    for n in $peers $variants $counted; do
        (step "warm-$n" 90 $DP "$LOGS/warm" warm "$n") &
    done
    wait
fi

# --- timed: the heap and its variants, then the peers, one at a time ---------------
if want heap; then
    for n in heap $variants $counted; do
        drive "$n" 15 "$LOGS/main"
    done
fi
if want peers; then
    for n in $peers; do
        share=25
        [ "$n" = Ouroboros-C ] && share=35
        drive "$n" $share "$LOGS/main"
    done
fi

# --- diagnostics and memcheck, side by side (nothing here is compared) -------------
if want diag && [ $HOST = 0 ]; then
    for n in Ouroboros-P Ouroboros-C; do
        echo "$peers" | grep -qx "$n" || continue
        (PEERS_PLAN="pairs=16,1024" PEERS_SET="capacity=1GiB;pair_capacity=4GiB;pair_warm=false;pair_probe=10000,100000;iterations=1" \
            step "diag-cold-$n" 60 $DP "$LOGS/diag-cold" drive "$n" 50) &
    done
    if echo "$peers" | grep -qx Gallatin; then
        (PEERS_PLAN="pairs=8192,65536" PEERS_SET="capacity=1GiB;pair_capacity=8GiB;iterations=1" \
            step diag-8GiB-Gallatin 60 $DP "$LOGS/diag-8GiB" drive Gallatin 50) &
    fi
    if echo "$peers" | grep -qx FDGMalloc; then
        (PEERS_PLAN="thread=16" PEERS_SET="capacity=1GiB;threads=256;iterations=1" PEERS_CUDA_HEAP=1073741824 \
            PEERS_LINEINFO=1 PEERS_TIME_LIMIT=60 \
            step diag-memcheck-FDGMalloc 80 compute-sanitizer --tool memcheck --print-limit 8 \
            $DP "$LOGS/diag-fdg" run FDGMalloc) &
    fi
fi
if want memcheck; then
    san=""
    [ $HOST = 0 ] && san="compute-sanitizer --tool memcheck --error-exitcode 86 --print-limit 20"
    for n in heap $variants; do
        (PEERS_PLAN="thread=16,1024,8192;warp=16,8192;mixed=4096;pairs=16,1024,65536;frag=16;oom=4096" \
            PEERS_SET="capacity=1GiB;threads=20000;warps=2000;pair_threads=20000;iterations=1;pair_probe=false;pair_warm=2048;oom_capacity=64MiB;frag_capacity=256MiB;pair_capacity=2GiB;oom_threads=20000" \
            PEERS_TIME_LIMIT=100 step "memcheck-$n" 110 $san $DP "$LOGS/memcheck-$n" run "$n") &
    done
fi
wait

# --- pack ------------------------------------------------------------------------
if want pack; then
    step merge 30 $DP "$LOGS/main" merge
    {
        echo "# Exploration for issue 42: $device"
        echo
        echo "- cupola commit $commit, $(date -u '+%Y-%m-%d %H:%M UTC'); \`sh bench/peers_explore.sh\` ($(($(date +%s) - start)) s)"
        echo "- short comparison (PEERS_SHORT=1: pairs at 16 B .. 64 KiB in 7 sizes, budget 300 ms a measurement);" \
            "each allocator's tests in child processes (bench/device_peers.lua drive)"
        echo
        echo "## Checks"
        echo
        echo "| step | rc | time | last line |"
        echo "| --- | ---: | ---: | --- |"
        cat "$checks"
        echo
        echo "## Diagnostics (not timed against anything)"
        echo
        echo "| run | allocator | test | size | threads | what happened |"
        echo "| --- | --- | --- | ---: | ---: | --- |"
        for d in "$LOGS"/diag-cold "$LOGS"/diag-8GiB "$LOGS"/diag-fdg; do
            [ -d "$d/rows" ] && $DP "$d" diag "$(basename "$d")" 2>/dev/null
        done
        if [ -f "$LOGS/diag-memcheck-FDGMalloc.log" ]; then
            echo
            echo "FDGMalloc under memcheck (its first allocations, 256 threads):"
            echo
            echo '```'
            grep -E "Invalid|at 0x|by thread|Address|ERROR SUMMARY|cudaError|^ +at " "$LOGS/diag-memcheck-FDGMalloc.log" |
                head -24 | cut -c1-200
            echo '```'
        fi
        echo
        echo "## The counted variants' events per allocation"
        echo
        $DP "$LOGS/main" events 2>/dev/null
        echo
        echo "## memcheck of the heap and its variants (2e4 threads)"
        echo
        for f in "$LOGS"/memcheck-*.log; do
            [ -f "$f" ] || continue
            n=$(basename "$f" .log)
            bad=$($DP "$LOGS/$n" diag "$n" 2>/dev/null | grep -cE '(^|[^0-9])[1-9][0-9]* (NULL|corrupt)|fault')
            printf -- '- %s: %s; rows with NULLs, corrupt blocks or a fault: %s\n' "$n" \
                "$(grep -E 'ERROR SUMMARY|^run ' "$f" | tr '\n' ' ' | cut -c1-200)" "$bad"
        done
        echo
        echo "## The comparison"
        echo
        cat "$LOGS/main/device_peers-survey.md" 2>/dev/null || echo "(the merge failed: see its log)"
    } >"$OUT/explore.md"
    for ext in json csv html; do
        [ -f "$LOGS/main/device_peers-survey.$ext" ] && cp "$LOGS/main/device_peers-survey.$ext" "$OUT/explore.$ext"
    done
    tar czf "$OUT/explore-logs.tgz" -C "$LOGS" --exclude='device_peers-survey.json' . 2>/dev/null
    # the short table: the heap, its best variant, each peer against it
    echo
    echo "heap: pairs G/s, times ms (alloc+free), fragmentation ratio, share served; variant: x heap's/its;"
    echo "peers: their time / the heap's (above 1: the heap ahead; ! NULLs or corrupt)"
    $DP "$LOGS/main" short 2>&1 | tee "$LOGS/short.md"
    echo
    grep -vE '^\| (warm|memcheck)-' "$checks" | cut -c1-150
    grep -E '^\| memcheck-' "$checks" | awk -F'|' '{printf "%s rc %s; ", $2, $3}'
    echo
fi
echo "peers_explore: $([ $status -eq 0 ] && echo PASS || echo FAIL) in $(($(date +%s) - start)) s; $OUT/explore.md"
exit $status
