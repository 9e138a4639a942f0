#!/usr/bin/env bash
# vgpu-scheduler on a simulated 5,000-node x 8-GPU cluster (tests/kube_api_server.py):
# rebuild time, /filter latency, filter+bind throughput, RSS. usage: bench/scheduler.sh BUILD
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin=$(find "$build" -name vgpu-scheduler -type f -perm -u+x | head -1)
[ -n "$bin" ] || { echo "no vgpu-scheduler under $build"; exit 1; }
exec /usr/bin/python3 bench/scheduler_bench.py "$(realpath "$bin")" "${NODES:-5000}" "${GPUS:-8}" "${PODS:-2000}"
