#!/usr/bin/env bash
# make demo: two tenants on one simulated H100, through the same driver ABI a real
# program uses. Tenant A starts alone, B joins, A leaves: watch the device's time being
# sliced between them and each one's memory, as NVML (nvidia-smi's source) reports it.
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
