#!/bin/sh
# bench/house_check.sh OUTDIR: what a user sees of every shipped recording, written
# to OUTDIR so that a change to the house (readers, models, advise's layers) can be
# held to the tree before it: `diff -r BEFORE AFTER` must show nothing.
#
#   sh bench/house_check.sh /tmp/before    # on the old tree
#   sh bench/house_check.sh /tmp/after     # on the new one
#   diff -r /tmp/before /tmp/after
#
# For each recording in examples/traces: `cupola advise` as text (COLUMNS=100)
# and as --json, with and without a limit; then bench/torch_model.lua,
# bench/jax_truth.lua and bench/cupy_check.lua.  Timings (ns per event, seconds)
# are masked, since they are the only thing allowed to change.
set -u
cd "$(dirname "$0")/.."
out=${1:?usage: sh bench/house_check.sh OUTDIR}
mkdir -p "$out"
mask() { sed -E -e 's/[0-9]+(\.[0-9]+)? ?(ns|ms|µs|us)( per [a-z]+|\/ev)?/T/g' \
                -e 's/"(seconds|elapsed|time|wall|ms)": *[0-9.e+-]+/"\1": T/g' \
                -e 's/[0-9]+\.[0-9]+ s\b/T s/g' \
                -e 's/(took|in) [0-9.]+ ?s\b/\1 T s/g' \
                -e 's/commit [0-9a-f]{7,40}/commit C/g' -e 's/20[0-9]{2}-[0-9]{2}-[0-9]{2}/DATE/g'; }
# advise's JSON comes from Lua tables, whose key order changes from run to run.
canon() { python3 -c 'import json,sys
t=sys.stdin.read()
try: print(json.dumps(json.loads(t), sort_keys=True, indent=1))
except ValueError: print(t)'; }
export COLUMNS=100 CUPOLA_BACKEND=host
find examples/traces -type f \( -name '*.gz' -o -name '*.pickle' -o -name '*.pb' \) | sort |
while read -r f; do
    n=$(echo "$f" | sed 's|examples/traces/||; s|/|__|g')
    bin/cupola advise "$f" --threads 2 > "$out/$n.txt" 2>&1; echo "rc=$?" >> "$out/$n.txt"
    bin/cupola advise "$f" --threads 2 --json 2>&1 | canon | mask > "$out/$n.json"
    bin/cupola advise "$f" --threads 2 --limit 200MiB --json 2>&1 | canon | mask > "$out/$n.limit.json"
    mask < "$out/$n.txt" > "$out/$n.txt.m" && mv "$out/$n.txt.m" "$out/$n.txt"
done
bin/cupola bench/torch_model.lua 2>&1 | mask |
    sed -E -e 's/( [0-9]+ \| [0-9]+)( \| [0-9]+\.[0-9]+){4} \|$/\1 | T | T | T | T |/' \
           -e 's/[0-9]+ instructions, ([0-9]+ operations), [0-9]+ instructions per/I instructions, \1, I instructions per/' > "$out/torch_model.txt"
bin/cupola bench/jax_truth.lua examples/traces/jax 1 2>&1 | mask |
    sed -E 's/\| [0-9]+\.[0-9] \|$/| T |/'  > "$out/jax_truth.txt"
bin/cupola bench/cupy_check.lua examples/traces/cupy 2>&1 | mask > "$out/cupy_check.txt"
echo "house_check: $(ls "$out" | wc -l) files in $out"
