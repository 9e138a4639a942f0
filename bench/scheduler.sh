#!/usr/bin/env bash
# vgpu-scheduler on a simulated 5,000-node x 8-GPU cluster, two ways:
#  1. against tests/kube_api_server.py (the test API server, Python): first sync, /filter
#     latency from a Python client, filter+bind through that server, RSS, rebuild after
#     kill -9 and whether the rebuilt state equals the one before;
#  2. against bench/kube_stub (C) driven by bench/sched_load (C): /filter and /bind latency
#     and the sustained filter+prioritize+bind rate, with the invariants checked after.
# usage: bench/scheduler.sh BUILD   (NODES, GPUS, PODS, CLIENTS override the defaults)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin=$(find "$build" -name vgpu-scheduler -type f -perm -u+x | head -1)
[ -n "$bin" ] || { echo "no vgpu-scheduler under $build"; exit 1; }
echo "### Against the Python test API server (tests/kube_api_server.py)"
echo
/usr/bin/python3 bench/scheduler_bench.py "$(realpath "$bin")" "${NODES:-5000}" "${GPUS:-8}" "${PODS:-2000}"
echo
echo "### Against the C API stub (bench/kube_stub.c, bench/sched_load.c)"
echo
PODS=${FAST_PODS:-4000} bash bench/scheduler_fast.sh "$build"
