#!/bin/sh
# bench/gpu-check.sh (make gpu-check): everything cupola checks on the GPU
# machine, in one command.
#
#   sh bench/gpu-check.sh [stage ...]     stages: build test sanitize examples bench speed torch
#                                         record record-cost torch-step cupy-inside peers
#                                         (default: build test sanitize examples bench)
#
# The stages of this round's framework work, each its own script (which says
# what it checks) writing its figures beside the summary:
#   record       bench/record_check.sh: `cupola record` against a known program,
#                a killed one, the three frameworks, a second CUPTI user
#   record-cost  bench/record_cost.sh: the recorder's cost, alternated runs
#   torch-step   bench/torch_step.sh: step time inside PyTorch, each allocator
#   cupy-inside  bench/cupy_inside.sh: cupola's pools serving CuPy
#   peers        bench/device_peers.sh: the device heap beside Gallatin and
#                Ouroboros from their checkouts in .peers/ (into $OUT/peers)
#
# The GPU machine has CUDA but no Lua and no network: Lua 5.4, busted and
# their modules travel as Debian packages in .deps/ (see README, "Running on
# a GPU") and are unpacked into a private prefix.  Logs and figures go to
# $OUT (the device tool's return folder) or bench/results/gpu-check.
# Environment: CUPOLA_COMMIT names the commit being checked (the tree that
# travels has no .git); SANITIZE_TOOLS narrows the compute-sanitizer tools.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/gpu-check}
# Logs go to LOGS and are packed into $OUT/logs.tgz at the end (the device
# tool brings back at most 8 files).
LOGS=${LOGS:-/tmp/cupola-logs}
rm -rf "$LOGS"
mkdir -p "$OUT" "$LOGS"
stages=${*:-build test sanitize examples bench}
commit=${CUPOLA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
status=0
summary="$OUT/gpu-check-summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

# --- Lua from .deps (bench/lua-env.sh) ---------------------------------------
. bench/lua-env.sh || exit 1
# Traces: examples/traces (cupola.trace.find), or $CUPOLA_TRACES.

note "gpu-check: commit $commit, $(date -u +%Y-%m-%dT%H:%MZ)"
note "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo none)"

run_stage() { # name command...
    name=$1
    shift
    t0=$(date +%s)
    # A stage that hangs must not eat the whole lease.
    timeout -k 10 "${STAGE_TIMEOUT:-300}" "$@" >"$LOGS/$name.log" 2>&1
    rc=$?
    [ $rc -eq 124 ] && echo "TIMED OUT after ${STAGE_TIMEOUT:-300}s" >>"$LOGS/$name.log"
    t1=$(date +%s)
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$LOGS/$name.log" | tail -1)
    note "$(printf '%-22s rc=%-3s %4ss  %s' "$name" "$rc" $((t1 - t0)) "$last")"
    [ $rc -eq 0 ] || status=1
    return $rc
}

C_TESTS=${C_TESTS:-$(ls tests/c/test_*.c 2>/dev/null | sed 's|tests/c/|build/tests/|; s|\.c$||')}
# With CUPOLA_SPEC_JOBS=N the suite's spec files run N at a time on the one
# GPU (spec/run.lua); the specs that measure the device's free memory
# (cupola.mem_info) run after the others, alone.
export CUPOLA_SPEC_ALONE="${CUPOLA_SPEC_ALONE:-soak_spec.lua vmm_spec.lua torch_spec.lua multi_device_spec.lua}"

for stage in $stages; do
    case $stage in
    build)
        run_stage build make -j8 all $C_TESTS build/bench/seed000 record build/bench/speed build/bench_floor.so build/testmod/cupola_testposix.so LUA_INCDIR="$LUA_INC" \
            EXTRA_CFLAGS="-Werror $ZFLAGS" EXTRA_LDFLAGS="$ZLD" || { cat "$LOGS/build.log" | tail -30; exit 1; }
        ;;
    test)
        # The whole suite, #gpu specs included, on the CUDA backend.
        CUPOLA_BACKEND=cuda run_stage test lua5.4 spec/run.lua $C_TESTS
        # And the host backend on the same machine: same specs, same results
        # (GPU_CHECK_HOST=0 leaves it to CI when the lease is short).
        [ "${GPU_CHECK_HOST:-1}" = 0 ] ||
            CUPOLA_BACKEND=host run_stage test-host lua5.4 spec/run.lua $C_TESTS
        ;;
    sanitize)
        # compute-sanitizer over the busted suite (device-side errors, API
        # errors, races in shared memory, barriers, uninitialized reads).
        # Timing assertions are relaxed (CUPOLA_SLOW): the tools slow every
        # API call, which is not what these runs check; and they serialize
        # kernels, so streams cannot overlap (CUPOLA_SERIALIZED).
        base_limit=${STAGE_TIMEOUT:-300}
        for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
            extra=""
            # The suite's out-of-memory cases fail cudaMalloc on purpose;
            # those API errors are expected, memory access errors are not.
            [ "$tool" = memcheck ] && extra="--leak-check full --report-api-errors no"
            # Cases tagged #fault fault on purpose (in a child process); the
            # tools other than memcheck do not support dynamic parallelism
            # (#cdp: nested launches) and warn, which counts as an error.
            # #fork: a forked child under the tool never returns.
            tags=fault,fork
            [ "$tool" = memcheck ] || tags=fault,fork,cdp
            # racecheck analyses every shared-memory access of every kernel:
            # the suite takes about 10 minutes under it on an H100 (the other
            # tools under one), hence its own limit.
            limit=$base_limit
            [ "$tool" = racecheck ] && limit=${RACECHECK_TIMEOUT:-1200}
            BUSTED_ARGS="${BUSTED_ARGS:-} --exclude-tags=$tags" \
            CUPOLA_SANITIZER=$tool STAGE_TIMEOUT=$limit \
            CUPOLA_BACKEND=cuda CUPOLA_SLOW=1 CUPOLA_SERIALIZED=1 run_stage "sanitize-$tool" \
                compute-sanitizer --tool "$tool" $extra --error-exitcode 86 \
                --target-processes all --print-limit 20 \
                lua5.4 spec/run.lua $C_TESTS
            # This round's argument fuzz, alone under the tool (inside the
            # suite it is pending under a tool: see its header).
            fz=$(mktemp -d)
            nocdp=""
            [ "$tool" = memcheck ] || nocdp=1
            CUPOLA_NO_CDP=$nocdp CUPOLA_BACKEND=cuda run_stage "sanitize-$tool-argfuzz" \
                compute-sanitizer --tool "$tool" $extra --error-exitcode 86 --print-limit 20 \
                lua5.4 spec/support/argfuzz_round2.lua "${CUPOLA_FUZZ_SEED:-20261121}" 1200 "$fz"
            rm -rf "$fz"
        done
        ;;
    examples)
        for ex in examples/*.lua; do
            n=$(basename "$ex" .lua)
            CUPOLA_BACKEND=cuda run_stage "example-$n" bin/cupola "$ex"
        done
        ;;
    bench)
        CUPOLA_COMMIT=$commit CUPOLA_BACKEND=cuda run_stage bench lua5.4 bench/run.lua "$OUT"
        cp "$LOGS/bench.log" "$OUT/bench.log"
        ;;
    torch)
        # PyTorch's allocator model on the device: its spec on CUDA (the
        # #gpu cases: segments are cudaMalloc's, expandable segments map and
        # unmap 20 MiB pages through the driver's VMM) and under
        # compute-sanitizer memcheck, then the exactness and speed report
        # (the host's CPU times the replays).
        CUPOLA_BACKEND=cuda BUSTED_ARGS=spec/torch_spec.lua run_stage torch-spec lua5.4 spec/run.lua
        CUPOLA_BACKEND=cuda CUPOLA_SANITIZER=memcheck BUSTED_ARGS=spec/torch_spec.lua \
            run_stage torch-memcheck compute-sanitizer --tool memcheck --leak-check full \
            --report-api-errors no --error-exitcode 86 --print-limit 20 lua5.4 spec/run.lua
        CUPOLA_COMMIT=$commit CUPOLA_BACKEND=cuda run_stage torch-model bin/cupola bench/torch_model.lua \
            "$OUT/torch_model.md"
        ;;
    speed)
        # make bench's figures (bench/speed.lua: each binding aim beside its
        # C counterpart; bench/multistream.lua: seed 001) on both backends.
        # MULTISTREAM_ARGS: e.g. "400 1,2,4,8" (default) or fewer for a short run.
        for be in cuda host; do
            CUPOLA_COMMIT=$commit CUPOLA_BACKEND=$be run_stage "speed-$be" lua5.4 bench/speed.lua ${BENCH_SCALE:-1}
            cp "$LOGS/speed-$be.log" "$OUT/speed-$be.md"
        done
        CUPOLA_BACKEND=cuda run_stage multistream-cuda lua5.4 bench/multistream.lua ${MULTISTREAM_ARGS:-}
        cp "$LOGS/multistream-cuda.log" "$OUT/multistream-cuda.md"
        ;;
    record | record-cost | torch-step | cupy-inside | peers)
        # Each its own script with its own limit; STAGE_TIMEOUT is put back
        # after it (an assignment before a function call may outlive it).
        st=${STAGE_TIMEOUT:-300}
        case $stage in
        record) STAGE_TIMEOUT=${RECORD_TIMEOUT:-420} script=record_check.sh dir=$OUT ;;
        record-cost) STAGE_TIMEOUT=${RECORD_COST_TIMEOUT:-330} script=record_cost.sh dir=$OUT ;;
        torch-step) STAGE_TIMEOUT=${TORCH_STEP_TIMEOUT:-300} script=torch_step.sh dir=$OUT ;;
        cupy-inside) STAGE_TIMEOUT=120 script=cupy_inside.sh dir=$OUT ;;
        peers) STAGE_TIMEOUT=$((${DEADLINE:-390} + 30)) script=device_peers.sh dir=$OUT/peers ;;
        esac
        mkdir -p "$dir"
        run_stage "$stage" env OUT="$dir" sh "bench/$script"
        STAGE_TIMEOUT=$st
        ;;
    *)
        note "unknown stage $stage"
        status=1
        ;;
    esac
done
note "gpu-check: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
tar czf "$OUT/logs.tgz" -C "$LOGS" .
exit $status
