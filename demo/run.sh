#!/usr/bin/env bash
# make demo: two tenants on one simulated H100, through the same driver ABI a real
# program uses. Tenant A starts alone, B joins, A leaves: watch the device's time being
# sliced between them and each one's memory, as NVML (nvidia-smi's source) reports it.
# Then the same tenants as vgpu containers: libvgpu holds each to its memory limit and
# compute share.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
state=$(mktemp -d "${TMPDIR:-/tmp}/vgpu-demo.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$state"' EXIT
export LD_LIBRARY_PATH="$PWD/$build/fakegpu" FAKEGPU_STATE_DIR="$state"
export FAKEGPU_DEVICES='NVIDIA H100 80GB HBM3:81559MiB:132'
spin=tests/gpu/vgpu_spin.ptx

echo "== Two tenants share one simulated H100 (fakegpu, time slices of ${FAKEGPU_TIMESLICE_US:-2000} us)"
echo "   A: 20 GiB, 5 ms kernels, 0-6 s     B: 10 GiB, 5 ms kernels, 2-8 s"
echo
"$build/demo/demo_watch" 8 500 &
"$build/demo/demo_worker" A 20480 5 6 "$spin" > "$state/a.log" &
a=$!
sleep 2
"$build/demo/demo_worker" B 10240 5 6 "$spin" > "$state/b.log" &
b=$!
wait $a $b
wait
echo
cat "$state/a.log" "$state/b.log" | grep -E 'holding|share|done'
echo
echo "Alone, a tenant gets the whole GPU; together, the device alternates between them and"
echo "each gets about half; each tenant's memory is its allocation plus its context."

# Part 2: the same two tenants as vgpu containers. libvgpu, preloaded into each, holds A
# to 30 % of the GPU and 8 GiB, and B to 70 % and 16 GiB; the containers' compute limiters
# see each other through a shared board, as the device plugin sets them up.
if [ -e "$build/lib/libvgpu.so" ]; then
    echo
    echo "== The same tenants as vgpu containers: A 30 % and 8 GiB, B 70 % and 16 GiB (libvgpu)"
    mkdir -p "$state/a" "$state/b" "$state/board"
    tenant() { # name sm_percent memory region_dir worker-args...
        local name=$1 sm=$2 mem=$3 dir=$4
        shift 4
        env LD_PRELOAD="$PWD/$build/lib/libvgpu.so" CUDA_DEVICE_SM_LIMIT="$sm" \
            CUDA_DEVICE_MEMORY_LIMIT="$mem" CUDA_DEVICE_MEMORY_SHARED_CACHE="$dir/region" \
            VGPU_COMPUTE_BOARD="$state/board" "$build/demo/demo_worker" "$name" "$@"
    }
    echo "A asks for 12 GiB, more than its 8 GiB:"
    tenant A 30 8g "$state/a" 12288 5 1 "$spin" 2>&1 | sed 's/^/   /' || true
    echo
    "$build/demo/demo_watch" 6 1000 &
    tenant A 30 8g "$state/a" 4096 5 6 "$spin" > "$state/a2.log" &
    a=$!
    tenant B 70 16g "$state/b" 8192 5 6 "$spin" > "$state/b2.log" &
    b=$!
    wait $a $b
    wait
    echo
    cat "$state/a2.log" "$state/b2.log" | grep -E 'looks like|done'
    echo
    echo "Each container sees its own limit as the GPU's memory and gets its share of the"
    echo "GPU's time, whatever the other does."
fi
