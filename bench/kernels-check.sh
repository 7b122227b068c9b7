#!/bin/sh
# bench/kernels-check.sh: the own-kernel checks on the GPU machine,
# in one command, each stage time-boxed and logged as it goes:
#   build     the module, the C tests, build/bench/launch
#   spec      test_compile + spec/module_spec.lua on the CUDA backend (#gpu
#             included), then on the host backend
#   bench     bench/launch.lua (C beside Lua) -> $OUT/launch.md
#   memcheck, racecheck
#             compute-sanitizer over spec/module_spec.lua (the case that faults
#             on purpose, tagged #fault, is left out; racecheck does not
#             support dynamic parallelism, so it leaves out the #cdp cases)
#   example   examples/own_kernel.lua on the CUDA backend
#   suite     the whole busted suite on the CUDA backend (what else the
#             backend changes touch)
# Lua comes from .deps as in bench/gpu-check.sh.  Logs go to $OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/kernels-check}
mkdir -p "$OUT"
stages=${*:-build spec bench memcheck racecheck example suite}
R=/tmp/cupola-lua
if ! command -v lua5.4 >/dev/null 2>&1; then
    [ -x $R/usr/bin/lua5.4 ] || for f in .deps/*.deb; do dpkg -x "$f" $R || exit 1; done
    export PATH=$R/usr/bin:$PATH
    export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LUA_PATH="$R/usr/share/lua/5.4/?.lua;$R/usr/share/lua/5.4/?/init.lua;;"
    export LUA_CPATH="$R/usr/lib/x86_64-linux-gnu/lua/5.4/?.so;;"
    BUSTED_BIN=$R/usr/bin/busted
    LUA_INC=$R/usr/include/lua5.4
    ZFLAGS="-I$R/usr/include -I$R/usr/include/x86_64-linux-gnu" ZLD="-L$R/usr/lib/x86_64-linux-gnu"
else
    BUSTED_BIN=$(command -v busted)
    LUA_INC=/usr/include/lua5.4
    ZFLAGS="" ZLD=""
fi
export BUSTED="lua5.4 $BUSTED_BIN" CUPOLA_NO_DEPS=1
export CUPOLA_CACHE_DIR=/tmp/cupola-kernels-cache
summary="$OUT/summary.txt"
echo "kernels-check: ${CUPOLA_COMMIT:-unknown} $(date -u +%Y-%m-%dT%H:%MZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)" >"$summary"
status=0
stage() { # name seconds command...
    name=$1 secs=$2
    shift 2
    t0=$(date +%s)
    timeout -k 5 "$secs" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    echo "$(printf '%-10s rc=%-3s %4ss' "$name" "$rc" $(($(date +%s) - t0))) $(grep -E '[0-9]+ (passed|successes)' "$OUT/$name.log" | tail -1)" >>"$summary"
    [ $rc -eq 0 ] || status=1
}
for s in $stages; do
    case $s in
    build) stage build 200 make -j16 all build/tests/test_compile build/bench/launch LUA_INCDIR="$LUA_INC" \
               EXTRA_CFLAGS="-Werror $ZFLAGS" EXTRA_LDFLAGS="$ZLD" || true ;;
    spec)
        CUPOLA_BACKEND=cuda BUSTED_ARGS="spec/module_spec.lua" stage spec-cuda 120 lua5.4 spec/run.lua build/tests/test_compile
        CUPOLA_BACKEND=host BUSTED_ARGS="spec/module_spec.lua" stage spec-host 120 lua5.4 spec/run.lua ;;
    bench) CUPOLA_BACKEND=cuda stage bench 90 lua5.4 bench/launch.lua
           cp "$OUT/bench.log" "$OUT/launch.md" ;;
    memcheck|racecheck)
        extra="" tags=fault
        [ "$s" = memcheck ] && extra="--leak-check full --report-api-errors no"
        [ "$s" = memcheck ] || tags=fault,cdp
        CUPOLA_BACKEND=cuda CUPOLA_SLOW=1 CUPOLA_SERIALIZED=1 stage "$s" 150 \
            compute-sanitizer --tool "$s" $extra --error-exitcode 86 --target-processes all --print-limit 20 \
            lua5.4 "$BUSTED_BIN" --exclude-tags=$tags spec/module_spec.lua ;;
    example) CUPOLA_BACKEND=cuda stage example 60 bin/cupola examples/own_kernel.lua ;;
    suite) CUPOLA_BACKEND=cuda stage suite 200 lua5.4 spec/run.lua ;;
    esac
done
echo "kernels-check: $([ $status -eq 0 ] && echo PASS || echo FAIL)" >>"$summary"
cat "$summary"
exit $status
