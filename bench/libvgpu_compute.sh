#!/usr/bin/env bash
# libvgpu compute-share benchmark on fakegpu: bench/libvgpu_compute.sh BUILD_DIR
# Prints a markdown table: every accuracy scenario (achieved share from fakegpu's
# timeline, mean of 1 s windows after a 1 s warm-up) and the launch overhead.
set -uo pipefail
B=$(cd "${1:-build}" && pwd)
HERE=$(cd "$(dirname "$0")/.." && pwd)
export VGPU_COMPUTE_TOL=100 VGPU_COMPUTE_WINDOWS=${VGPU_COMPUTE_WINDOWS:-5}
echo "### Compute shares (fakegpu, $VGPU_COMPUTE_WINDOWS × 1 s windows)"
echo
echo "| scenario | target % | achieved % | error (points) |"
echo "| --- | --- | --- | --- |"
for c in split four alone burst handback graph paths procs long bursty; do
    "$HERE/tests/integration/libvgpu_compute_test.sh" "$B" "$c" 2>&1 |
        sed -n 's/^\(.*\): achieved \([0-9.]*\) % *(want \([0-9]*\).*/\1|\3|\2/p; s/^\(.*\): achieved \([0-9.]*\) %$/\1|-|\2/p' |
        while IFS='|' read -r label want got; do
            err=-
            [ "$want" != - ] && err=$(awk -v a="$got" -v w="$want" 'BEGIN { printf "%+.2f", a - w }')
            echo "| $c: $label | $want | $got | $err |"
        done
done
echo
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export FAKEGPU_STATE_DIR=$T/state LD_LIBRARY_PATH=$B/fakegpu VGPU_COMPUTE_BOARD=$T/board
launches() { sed -n 's/^launches=\([0-9]*\).*/\1/p'; }
base=$("$B/bin/compute_tenant" 1000 2000 | launches)
full=$(CUDA_DEVICE_SM_LIMIT=100 CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/r1 LD_PRELOAD=$B/lib/libvgpu.so \
    "$B/bin/compute_tenant" 1000 2000 | launches)
half=$(CUDA_DEVICE_SM_LIMIT=50 CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/r2 LD_PRELOAD=$B/lib/libvgpu.so \
    "$B/bin/compute_tenant" 1000 2000 | launches)
echo "### Launch overhead (1 µs kernels, 2 s, launches completed)"
echo
echo "| configuration | launches | vs no libvgpu |"
echo "| --- | --- | --- |"
echo "| no libvgpu | $base | 100 % |"
echo "| libvgpu, limit 100 % | $full | $(awk -v a="$full" -v b="$base" 'BEGIN { printf "%.1f %%", 100 * a / b }') |"
echo "| libvgpu, limit 50 % | $half | $(awk -v a="$half" -v b="$base" 'BEGIN { printf "%.1f %%", 100 * a / b }') |"
