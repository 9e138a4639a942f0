#!/usr/bin/env bash
# libvgpu overhead against fakegpu. Usage: bench/libvgpu.sh BUILD_DIR. Prints markdown.
# Instructions per call: callgrind's total for N=2000 minus N=1000 iterations, divided by
# 1000, so start-up cancels; "added" is with libvgpu minus without.
set -euo pipefail
B=$(cd "${1:-build}" && pwd)
T=$(mktemp -d /tmp/vgpu-bench-XXXXXX)
trap 'rm -rf "$T"' EXIT
export FAKEGPU_STATE_DIR=$T/state FAKEGPU_DEVICES="Bench GPU:80GiB:132" FAKEGPU_KERNEL_NS=0
export LD_LIBRARY_PATH=$B/fakegpu
BIN=$B/bin/libvgpu_bench
LIB=$B/lib/libvgpu.so

instr() { # instr MODE N [preload]
    local out=$T/cg.$RANDOM
    env ${3:+LD_PRELOAD=$LIB} valgrind --tool=callgrind --callgrind-out-file="$out" \
        "$BIN" "$1" "$2" >/dev/null 2>&1
    sed -n 's/^summary: *//p' "$out"
}
per_call() { # per_call MODE [preload]
    local a b
    a=$(instr "$1" 1000 "${2:-}")
    b=$(instr "$1" 2000 "${2:-}")
    echo $(((b - a) / 1000))
}

echo "Instructions per call (callgrind, fakegpu, N=2000 minus N=1000):"
echo
echo "| call | without libvgpu | with libvgpu | added | target |"
echo "| --- | ---: | ---: | ---: | ---: |"
unset CUDA_DEVICE_MEMORY_LIMIT CUDA_DEVICE_MEMORY_SHARED_CACHE
l0=$(per_call launch)
l1=$(per_call launch 1)
echo "| cuLaunchKernel, no compute limit | $l0 | $l1 | $((l1 - l0)) | 30 |"
export CUDA_DEVICE_MEMORY_LIMIT=40g CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/region
a0=$(per_call alloc)
a1=$(per_call alloc 1)
echo "| cuMemAlloc + cuMemFree, 40 GiB limit | $a0 | $a1 | $((a1 - a0)) | 400 |"

rate() { # rate [preload] -> total pairs of 16 processes in 3 s
    local total=0
    for i in $(seq 1 16); do
        env ${1:+LD_PRELOAD=$LIB} "$BIN" rate 3 >"$T/rate.$i" &
    done
    wait
    for i in $(seq 1 16); do total=$((total + $(sed -n 's/pairs=//p' "$T/rate.$i"))); done
    echo $total
}
r0=$(rate)
r1=$(rate 1)
echo
echo "Allocation throughput, 16 processes x 3 s of 1 MiB cuMemAlloc+cuMemFree pairs, $(nproc) cores:"
echo
echo "| | pairs | per second | relative |"
echo "| --- | ---: | ---: | ---: |"
echo "| without libvgpu | $r0 | $((r0 / 3)) | 1.00 |"
echo "| with libvgpu (shared 40 GiB limit) | $r1 | $((r1 / 3)) | $(awk "BEGIN{printf \"%.2f\", $r1/$r0}") |"
