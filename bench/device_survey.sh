#!/bin/sh
# bench/device_survey.sh: in-kernel allocation on the GPU machine, in one
# command (about 9 minutes on an H100; the survey comes last and gets what
# is left of the deadline):
#   build        the module and test_devpool (nvcc -arch sm_80/sm_90, -Werror)
#   specs        the device-pool specs on the CUDA backend, #gpu included
#                (device_pool, device_plugin, survey) and test_devpool
#   memcheck     compute-sanitizer memcheck on the device-pool and plugin
#                specs (2e4 threads per run)
#   racecheck    compute-sanitizer racecheck on the heap and plugin cases
#   malloc-oom   CUDA's malloc in the out-of-memory test, in a process of its
#                own (its heap size is fixed by the first malloc kernel)
#   survey       bench/device_survey.lua: the survey's benchmarks on heap,
#                slab, the example plugin, CUDA's malloc, bump and warp_bump,
#                with the heap's aims checked (the pairs test first)
#
#   sh bench/device_survey.sh [stage ...]        (default: all, in that order)
#
# Results go to $OUT (at most 8 files come back from the GPU machine):
# device_survey.md (the checks, the aims, every table), survey-main.csv,
# survey-main.json, survey-main.html, and logs.tgz (every log, the rows as
# they came, the malloc-oom files), rewritten after every stage, so a run cut
# short still returns what it did.  The stages share a deadline (DEADLINE,
# 540 s: the device tool stops a command at 10 minutes): a stage gets what is
# left of it, and one with less than 20 s left is skipped.  CUPOLA_COMMIT
# names the commit (no .git travels).  SURVEY_SCALE scales the survey's
# thread counts (0.1: quick).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/device_survey-run}
LOGS=${LOGS:-/tmp/cupola-survey-logs}
rm -rf "$LOGS"
mkdir -p "$OUT" "$LOGS"
stages=${*:-build specs memcheck racecheck malloc-oom survey}
commit=${CUPOLA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export CUPOLA_COMMIT=$commit
status=0
checks="$LOGS/checks.md"
: >"$checks"

# Lua 5.4 and busted: the system's, or .deps/ unpacked (LUA_INC, MAKE_FLAGS)
. bench/lua-env.sh || exit 1
# a cache of compiled modules of this run's own
export CUPOLA_CACHE_DIR=/tmp/cupola-survey-cache

device=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo none)
echo "device_survey: commit $commit, $(date -u +%Y-%m-%dT%H:%MZ), device: $device"

start=$(date +%s)
DEADLINE=${DEADLINE:-540}

# run_stage name limit command...: the log in $LOGS/name.log, a row in checks.md
run_stage() {
    name=$1
    limit=$2
    shift 2
    left=$((DEADLINE - ($(date +%s) - start)))
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$limit" -lt 20 ]; then
        printf '| %s | skipped | | past the deadline of %s s |\n' "$name" "$DEADLINE" | tee -a "$checks"
        status=1
        return 1
    fi
    t0=$(date +%s)
    timeout -k 10 "$limit" "$@" >"$LOGS/$name.log" 2>&1
    rc=$?
    [ $rc -eq 124 ] && echo "TIMED OUT after ${limit}s" >>"$LOGS/$name.log"
    t1=$(date +%s)
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$LOGS/$name.log" | tail -1)
    errs=$(grep -E '^========= ERROR SUMMARY' "$LOGS/$name.log" | tail -1 | sed 's/=* *//')
    printf '| %s | %s | %s s | %s %s |\n' "$name" "$rc" $((t1 - t0)) "$last" "$errs" | tee -a "$checks"
    [ $rc -eq 0 ] || status=1
    return $rc
}

# --- the report: $OUT/device_survey.md, the survey's files, logs.tgz -----------
report() {
    {
        echo "# In-kernel allocators, the survey's benchmarks: $device"
        echo
        echo "- commit $commit, $(date -u '+%Y-%m-%d %H:%M UTC'); command: \`CUPOLA_COMMIT=$commit sh bench/device_survey.sh\`"
        echo
        echo "## Checks"
        echo
        echo "| stage | rc | time | result |"
        echo "| --- | ---: | ---: | --- |"
        cat "$checks"
        echo
        if [ -f "$LOGS/survey-main.md" ]; then
            echo "## The survey (heap, slab, a plugin, bump, warp_bump, CUDA's malloc)"
            echo
            cat "$LOGS/survey-main.md"
        elif [ -f "$LOGS/survey-main.rows" ]; then
            echo "## The survey did not finish: the rows it measured"
            echo
            echo '```'
            cat "$LOGS/survey-main.rows"
            echo '```'
        fi
        if [ -f "$LOGS/survey-malloc-oom.md" ]; then
            echo
            echo "## CUDA's malloc, out of memory (a process of its own)"
            echo
            cat "$LOGS/survey-malloc-oom.md"
        fi
    } >"$OUT/device_survey.md"
    for ext in csv json html; do
        [ -f "$LOGS/survey-main.$ext" ] && cp "$LOGS/survey-main.$ext" "$OUT/"
    done
    tar czf "$OUT/logs.tgz" -C "$LOGS" .
}

SPECS="spec/device_pool_spec.lua spec/device_plugin_spec.lua"
for stage in $stages; do
    case $stage in
    build)
        run_stage build 240 make -j16 all build/tests/test_devpool $MAKE_FLAGS EXTRA_CFLAGS="$MAKE_CFLAGS" ||
            { tail -30 "$LOGS/build.log"; break; }
        ;;
    specs)
        BUSTED_ARGS="$SPECS spec/survey_spec.lua" CUPOLA_BACKEND=cuda \
            run_stage specs 150 lua5.4 spec/run.lua build/tests/test_devpool
        ;;
    survey)
        # the survey stops measuring in time to write its files
        left=$((DEADLINE - ($(date +%s) - start)))
        [ $left -gt 400 ] && left=400
        SURVEY_TIME_LIMIT=$((left - 30)) CUPOLA_BACKEND=cuda \
            run_stage survey 400 lua5.4 bench/device_survey.lua "$LOGS" main
        ;;
    malloc-oom)
        CUPOLA_BACKEND=cuda run_stage malloc-oom 60 lua5.4 bench/device_survey.lua "$LOGS" malloc-oom
        ;;
    memcheck | racecheck)
        # compute-sanitizer runs kernels one at a time and checks every
        # access: 2e4 threads per run (CUPOLA_DP_THREADS), timing
        # assertions relaxed (CUPOLA_SLOW), no stream overlap expected
        # (CUPOLA_SERIALIZED).  racecheck does not follow nested launches
        # (#cdp) and is slower: the heap and plugin cases only.
        extra="" filter="" tags=fault,fork
        [ "$stage" = memcheck ] && extra="--leak-check full --report-api-errors no"
        [ "$stage" = racecheck ] && filter="--filter=heap --filter=plugin" tags=fault,fork,cdp
        BUSTED_ARGS="$SPECS --exclude-tags=$tags $filter" CUPOLA_DP_THREADS=20000 \
        CUPOLA_SANITIZER=$stage CUPOLA_BACKEND=cuda CUPOLA_SLOW=1 CUPOLA_SERIALIZED=1 \
            run_stage "$stage" 100 compute-sanitizer --tool "$stage" $extra --error-exitcode 86 \
                --target-processes all --print-limit 20 lua5.4 spec/run.lua
        ;;
    *)
        echo "unknown stage $stage"
        status=1
        ;;
    esac
    report
done

echo "device_survey: $([ $status -eq 0 ] && echo PASS || echo FAIL); $OUT/device_survey.md"
exit $status
