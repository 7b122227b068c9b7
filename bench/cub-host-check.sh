#!/bin/sh
# bench/cub-host-check.sh: CUB's real CachingDeviceAllocator (its header from
# the CUDA Toolkit, bench/cub_replay.cu) run on the CPU over a stand-in CUDA
# runtime (bench/cub_cudart_stub.c), beside cupola's model (kind = "cub"), on
# a machine without a GPU.  Every shipped trace and two synthetic three-stream
# traces, three settings, three conditions:
#   complete  every ready event complete when CUB looks (the GPU replay's
#             "sync" mode; the model over the virtual upstream)
#   never     no event ever completes (the model with reuse = "stream")
#   full      cudaMalloc refuses past 1.02 x the trace's peak of live bytes
#             (CUB frees its cache and retries, and may still fail; the model
#             with max = the same bytes)
# Needs nvcc (the toolkit), no GPU.  Markdown on stdout.
set -eu
cd "$(dirname "$0")/.."
W=${WORK:-/tmp/cub-host-check}
rm -rf "$W"
mkdir -p "$W/stub" "$W/traces"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
cc -shared -fPIC -O2 -std=c11 -Wall -Wextra -I$CUDA_HOME/include -Wl,-soname,libcudart.so.13 \
    -Wl,--version-script=bench/cub_cudart_stub.map -o "$W/stub/libcudart.so.13" bench/cub_cudart_stub.c
$CUDA_HOME/bin/nvcc -O2 -std=c++17 -arch=sm_90 -cudart shared -I$CUDA_HOME/include/cccl \
    -Xlinker --wrap=cudaMalloc -Xlinker --wrap=cudaFree -o "$W/cub_replay" bench/cub_replay.cu
bin/cupola bench/cub_model.lua synth "$W/traces"
SETTINGS="8,3,7,6291455;8,3,7,268435456;2,9,26,4294967296"
TRACES="$(ls examples/traces/*.csv.gz) $(ls $W/traces/*.csv)"
for cond in complete never full; do
    : >"$W/$cond.model.csv"
    : >"$W/$cond.cub.csv"
    for t in $TRACES; do
        name=$(basename "$t" | sed 's/\.csv\.gz$//; s/\.csv$//')
        case $t in *.gz) cat="gzip -dc" ;; *) cat=cat ;; esac
        flags="" env=""
        case $cond in
        never) flags="--reuse stream" env="CUB_STUB_EVENTS=never" ;;
        full)
            limit=$(( $(bin/cupola bench/cub_model.lua peak "$t") * 102 / 100 ))
            flags="--max $limit" env="CUB_STUB_LIMIT=$limit" ;;
        esac
        bin/cupola bench/cub_model.lua run $flags "$SETTINGS" "$t" >>"$W/$cond.model.csv"
        $cat "$t" | env LD_LIBRARY_PATH="$W/stub" $env "$W/cub_replay" "$name" sync 1 \
            $(echo "$SETTINGS" | tr ';' ' ') >>"$W/$cond.cub.csv"
    done
    echo "## events $cond"
    echo
    grep -h '^#' "$W/$cond.cub.csv" | head -1 | sed 's/^# /Replayer: /'
    echo
    bin/cupola bench/cub_model.lua table "$W/$cond.model.csv" "$W/$cond.cub.csv"
    echo
done
