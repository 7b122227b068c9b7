#!/bin/sh
# bench/torch_step.sh: step time of PyTorch training under PyTorch's allocator,
# expandable segments and cupola's pools (bench/torch_step.py says how), on
# the GPU machine.  Builds build/libcupola_torch.so, then runs every allocator
# in its own process, rounds interleaved: ROUNDS=3, WARMUP=10 and STEPS=24
# (varshape: two whole cycles of its shapes each), no round starts after
# BUDGET_S=150 seconds; about 12 s a process on an H100, so 5 allocators x 3
# rounds is about 3 minutes.
#   sh bench/torch_step.sh            (OUT=/tmp/torch-step by default)
#   TORCH_STEP_SPECS="vmm tlsf" sh bench/torch_step.sh
# The default rows: PyTorch, PyTorch's expandable segments, and tlsf, vmm,
# caching as advise recommends them (served with the library's policy: no
# upstream call once warm).  `tlsf,release_threshold=0`, the pool before that
# policy (the cause of the gap issue 34 measured), is a row when named in
# TORCH_STEP_SPECS.
# Writes $OUT/torch_step.md (the table, for bench/results/) and
# $OUT/torch_step.json; each process's figures stay in $WORK.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/torch-step}
WORK=${WORK:-/tmp/torch-step-work}
mkdir -p "$OUT" "$WORK"
CUPOLA_COMMIT=${CUPOLA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export CUPOLA_COMMIT
# The library needs no Lua; where bench/lua-env.sh can set up the other
# stages' build flags (MAKE_FLAGS), they are used, so that nothing the other
# stages built is rebuilt for a flag that differs.
MAKE_FLAGS="" MAKE_CFLAGS=""
{ command -v lua5.4 >/dev/null 2>&1 || [ -d .deps ]; } && . bench/lua-env.sh
# shellcheck disable=SC2086
make -j16 torch-allocator $MAKE_FLAGS ${MAKE_CFLAGS:+EXTRA_CFLAGS="$MAKE_CFLAGS"} >"$WORK/make.txt" 2>&1 ||
    { tail -30 "$WORK/make.txt"; exit 1; }
[ -f build/libcupola_torch.so ] || { echo "torch_step: no build/libcupola_torch.so"; tail -5 "$WORK/make.txt"; exit 1; }
# shellcheck disable=SC2086
python3 bench/torch_step.py "$WORK" build/libcupola_torch.so \
    ${TORCH_STEP_SPECS:-tlsf vmm caching}
rc=$?
cp "$WORK/torch_step.md" "$WORK/torch_step.json" "$OUT/" 2>/dev/null
exit $rc
