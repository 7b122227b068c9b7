#!/bin/sh
# bench/device_survey.sh: in-kernel allocation on the GPU machine, in one
# command (at most DEADLINE = 540 s: the device tool stops a command at 10
# minutes), the heap's aims measured first:
#   build        the module and the C tests (nvcc -arch sm_80/sm_90, -Werror)
#   aims         bench/device_survey.lua aims: the heap's alloc+free pairs at
#                every power of two 16 B-8 KiB and 64 KiB (1e6 threads), out
#                of memory and fragmentation, then CUDA's malloc in the same
#                pairs (probed at 1e4 and 1e5 threads first, so that a size
#                whose 1e6-thread launch would not fit its share of the
#                stage is reported at the largest count that did), and the
#                aims' lines with the ratios
#   specs        the device-pool specs on the CUDA backend, #gpu included
#                (device_pool, device_plugin, survey) and test_devpool, each
#                case named in the log as it starts and ends
#                (CUPOLA_SPEC_PROGRESS)
#   memcheck     compute-sanitizer memcheck on the device-pool and plugin
#                specs (2e4 threads per run)
#   racecheck    compute-sanitizer racecheck on the heap and plugin cases
#   survey       bench/device_survey.lua main: every test on heap, slab, the
#                example plugin, bump, warp_bump, then CUDA's malloc, with the
#                time that is left (what is left out is said)
#   malloc-oom   CUDA's malloc in the out-of-memory test, in a process of its
#                own (its heap size is fixed by the first malloc kernel)
#
#   sh bench/device_survey.sh [stage ...]        (default: all, in that order)
#
# Results go to $OUT (at most 8 files come back from the GPU machine):
# device_survey.md (the aims, the checks with the cases that failed or were
# running at a timeout, every table), survey-main.csv, survey-main.json,
# survey-main.html, survey-aims.csv, and logs.tgz (every log, the rows as
# they came), rewritten after every stage, so a run cut short still returns
# what it did.  A stage gets at most its own limit and what is left of the
# deadline; one with less than 20 s left is skipped.  CUPOLA_COMMIT names the
# commit (no .git travels).  SURVEY_SCALE scales the survey's thread counts
# (0.1: quick).  SURVEY_BACKEND=host makes a dry run on the host backend
# (no sanitizer stages there).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/device_survey-run}
LOGS=${LOGS:-/tmp/cupola-survey-logs}
rm -rf "$LOGS"
mkdir -p "$OUT" "$LOGS"
stages=${*:-build aims specs memcheck racecheck survey malloc-oom}
commit=${CUPOLA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export CUPOLA_COMMIT=$commit
BACKEND=${SURVEY_BACKEND:-cuda}
status=0
checks="$LOGS/checks.md"
notes="$LOGS/notes.md"
: >"$checks"
: >"$notes"

# Lua 5.4 and busted: the system's, or .deps/ unpacked (LUA_INC, MAKE_FLAGS)
. bench/lua-env.sh || exit 1
# a cache of compiled modules of this run's own
export CUPOLA_CACHE_DIR=/tmp/cupola-survey-cache

device=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo none)
echo "device_survey: commit $commit, $(date -u +%Y-%m-%dT%H:%MZ), device: $device"

start=$(date +%s)
DEADLINE=${DEADLINE:-540}
left() { echo $((DEADLINE - ($(date +%s) - start))); }

# run_stage name limit command...: the log in $LOGS/name.log, a row in
# checks.md, and for busted stages the cases that failed, or that were
# running when the time ran out, in notes.md
run_stage() {
    name=$1
    limit=$2
    shift 2
    l=$(left)
    [ "$limit" -gt "$l" ] && limit=$l
    if [ "$limit" -lt 20 ]; then
        printf '| %s | skipped | | past the deadline of %s s |\n' "$name" "$DEADLINE" | tee -a "$checks"
        status=1
        return 1
    fi
    echo "== $name (up to $limit s)"
    t0=$(date +%s)
    timeout -k 10 "$limit" "$@" >"$LOGS/$name.log" 2>&1
    rc=$?
    [ $rc -eq 124 ] && echo "TIMED OUT after ${limit}s" >>"$LOGS/$name.log"
    t1=$(date +%s)
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$LOGS/$name.log" | tail -1)
    errs=$(grep -E '^========= ERROR SUMMARY' "$LOGS/$name.log" | tail -1 | sed 's/=* *//')
    printf '| %s | %s | %s s | %s %s |\n' "$name" "$rc" $((t1 - t0)) "$last" "$errs" | tee -a "$checks"
    # the progress lines of spec/support/summary.lua: "[  12.3s] FAILURE  file:line: name: message"
    fails=$(grep -E '^\[ *[0-9.]+s\] (FAILURE|ERROR) ' "$LOGS/$name.log" | sed 's/^\[[^]]*\] //' | cut -c1-400 | head -12)
    ctests=$(grep -E '^not ok ' "$LOGS/$name.log" | head -12)
    if [ -n "$fails$ctests" ]; then
        { echo "- $name, failed:"; printf '%s\n%s\n' "$ctests" "$fails" | grep -v '^$' | sed 's/^/    - /'; } >>"$notes"
    fi
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        run=$(grep -E '^\[ *[0-9.]+s\] (start|describe) ' "$LOGS/$name.log" | tail -1 | sed 's/^\[[^]]*\] //')
        echo "- $name timed out after $limit s; last begun: ${run:-(none)}" >>"$notes"
    fi
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
        if [ -f "$LOGS/survey-aims.md" ]; then
            echo "## The heap's aims, beside CUDA's malloc"
            echo
            cat "$LOGS/survey-aims.md"
            echo
        elif [ -f "$LOGS/survey-aims.rows" ]; then
            echo "## The aims did not finish: the rows they measured"
            echo
            echo '```'
            cat "$LOGS/survey-aims.rows"
            echo '```'
            echo
        fi
        echo "## Checks"
        echo
        echo "| stage | rc | time | result |"
        echo "| --- | ---: | ---: | --- |"
        cat "$checks"
        echo
        cat "$notes"
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
            echo "## CUDA's malloc, out of memory (a process of its own, a 64 MiB heap)"
            echo
            cat "$LOGS/survey-malloc-oom.md"
        fi
    } >"$OUT/device_survey.md"
    for ext in csv json html; do
        [ -f "$LOGS/survey-main.$ext" ] && cp "$LOGS/survey-main.$ext" "$OUT/"
    done
    [ -f "$LOGS/survey-aims.csv" ] && cp "$LOGS/survey-aims.csv" "$OUT/"
    tar czf "$OUT/logs.tgz" -C "$LOGS" .
}

# a part of bench/device_survey.lua with SURVEY_TIME_LIMIT: the stage's
# time less a margin to write its files and end the process
survey_part() {
    name=$1
    part=$2
    limit=$3
    l=$(left)
    [ "$limit" -gt "$l" ] && limit=$l
    tl=$((limit - 25))
    [ $tl -lt 10 ] && tl=$((limit / 2))
    SURVEY_TIME_LIMIT=$tl CUPOLA_BACKEND=$BACKEND \
        run_stage "$name" "$limit" lua5.4 bench/device_survey.lua "$LOGS" "$part"
}

SPECS="spec/device_pool_spec.lua spec/device_plugin_spec.lua"
for stage in $stages; do
    case $stage in
    build)
        run_stage build 240 make -j16 all build/tests/test_devpool \
            $MAKE_FLAGS EXTRA_CFLAGS="$MAKE_CFLAGS" ||
            { tail -30 "$LOGS/build.log"; report; break; }
        ;;
    aims)
        survey_part aims aims 160
        ;;
    specs)
        BUSTED_ARGS="$SPECS spec/survey_spec.lua" CUPOLA_BACKEND=$BACKEND CUPOLA_SPEC_PROGRESS=1 \
            run_stage specs 120 lua5.4 spec/run.lua build/tests/test_devpool
        ;;
    memcheck | racecheck)
        # compute-sanitizer runs kernels one at a time and checks every
        # access: 2e4 threads per run (CUPOLA_DP_THREADS), timing
        # assertions relaxed (CUPOLA_SLOW), no stream overlap expected
        # (CUPOLA_SERIALIZED).  racecheck does not follow nested launches
        # (#cdp) and is slower: the heap and plugin cases only.
        extra="" filter="" tags=fault,fork limit=70
        [ "$stage" = memcheck ] && extra="--leak-check full --report-api-errors no"
        [ "$stage" = racecheck ] && filter="--filter=heap --filter=plugin" tags=fault,fork,cdp limit=45
        BUSTED_ARGS="$SPECS --exclude-tags=$tags $filter" CUPOLA_DP_THREADS=20000 CUPOLA_SPEC_PROGRESS=1 \
        CUPOLA_SANITIZER=$stage CUPOLA_BACKEND=$BACKEND CUPOLA_SLOW=1 CUPOLA_SERIALIZED=1 \
            run_stage "$stage" $limit compute-sanitizer --tool "$stage" $extra --error-exitcode 86 \
                --target-processes all --print-limit 20 lua5.4 spec/run.lua
        ;;
    survey)
        # what is left, less 45 s for malloc-oom
        l=$(($(left) - 45))
        [ $l -gt 300 ] && l=300
        survey_part survey main $l
        ;;
    malloc-oom)
        survey_part malloc-oom malloc-oom 60
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
