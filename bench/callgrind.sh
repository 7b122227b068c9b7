#!/bin/sh
# bench/callgrind.sh: instructions per call of the binding's hot calls, on the
# host backend (bench/callgrind.lua).  Each shape runs under callgrind with
# N1 and N2 repetitions; the figure is the difference per repetition, for
# the main thread alone (the host backend's workers, which run the kernels,
# are counted apart) and for all threads.  Exact and repeatable, unlike
# wall-clock time on a shared machine.
#   sh bench/callgrind.sh [shape ...]     (default: every shape)
# Run from the repository root after `make`.  LUA overrides lua5.4.
set -eu
LUA=${LUA:-lua5.4}
N1=${N1:-2000}
N2=${N2:-12000}
SHAPES=${*:-pair raw sqrt fill user3 user3new event async mempool seed plugin pluginpass pluginlive pluginalign}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# total instructions of the callgrind output files given
total() {
    awk '/^summary:/ { s += $2 } END { printf "%d", s }' "$@"
}

count() { # shape n -> "main all"
    rm -f "$tmp"/cg.*
    CUPOLA_BACKEND=host valgrind --tool=callgrind --separate-threads=yes \
        --callgrind-out-file="$tmp/cg.%p" "$LUA" bench/callgrind.lua "$1" "$2" \
        >"$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
    main=$(ls "$tmp"/cg.*-01)
    printf '%s %s\n' "$(total "$main")" "$(total "$tmp"/cg.*)"
}

printf '%-10s %12s %12s\n' shape "main/call" "all/call"
for sh in $SHAPES; do
    set -- $(count "$sh" "$N1")
    m1=$1 a1=$2
    set -- $(count "$sh" "$N2")
    m2=$1 a2=$2
    awk -v sh="$sh" -v m1="$m1" -v m2="$m2" -v a1="$a1" -v a2="$a2" -v n1="$N1" -v n2="$N2" \
        'BEGIN { printf "%-10s %12.0f %12.0f\n", sh, (m2 - m1) / (n2 - n1), (a2 - a1) / (n2 - n1) }'
done
