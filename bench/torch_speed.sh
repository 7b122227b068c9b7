#!/bin/sh
# bench/torch_speed.sh: instructions per operation of a replay through the
# torch model (kind = "torch", virtual upstream, one stream), counted by
# callgrind inside cp_trace_replay_torch alone: exact and repeatable, unlike
# wall-clock time on a shared machine.
#   sh bench/torch_speed.sh [SNAPSHOT [CONF]]     (after make)
# Default: the 476k-entry beam-search snapshot under PyTorch's defaults.
set -eu
cd "$(dirname "$0")/.."
snap=${1:-examples/traces/torch/gpt2_beam_search.default.cpsnap.gz}
conf=${2:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/once.lua" <<'LUA'
local t = cupola.trace.load(arg[1])
local p = cupola.pool { kind = "torch", upstream = "virtual", conf = arg[2] }
local r = t:replay(p, { progress = false })
io.stderr:write(string.format("ops %d entries %d\n", r.events, t.events))
LUA
CUPOLA_BACKEND=host LUA_PATH="lua/?.lua;lua/?/init.lua;;" LUA_CPATH="build/?.so;;" \
    valgrind --tool=callgrind --toggle-collect=cp_trace_replay_torch \
    --callgrind-out-file="$tmp/cg.out" lua5.4 -e 'cupola = require "cupola"' "$tmp/once.lua" \
    "$snap" "$conf" 2>"$tmp/err" >/dev/null
ops=$(sed -n 's/^ops \([0-9]*\) entries.*/\1/p' "$tmp/err")
ir=$(awk '/^summary:/ { print $2 }' "$tmp/cg.out")
printf '%s (conf "%s"): %s instructions, %s operations, %.0f instructions per operation\n' \
    "$(basename "$snap")" "$conf" "$ir" "$ops" "$(echo "$ir / $ops" | bc -l)"
