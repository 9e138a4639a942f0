#!/usr/bin/env bash
# vgpu-dra-plugin figures against the kubelet stand-in of tests/dra on fakegpu:
# NodePrepareResources latency for one-device claims (read from the API, and answered
# from the checkpoint), one call preparing 100 claims, and RSS; then ResourceSlice
# publication time after a GPU health change (against tests/kube_api_server.py); then
# NodePrepareResources with a MIG instance made (--mig-mode=dynamic, bench/dra_mig_bench.py).
# usage: bench/dra_plugin.sh BUILD
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ -x "$build/bin/vgpu-dra-plugin" ] || { echo "no $build/bin/vgpu-dra-plugin: build first"; exit 1; }
# A missed target (the first part's 5 ms p99, the MIG part's 10 ms added at p99) fails the
# script after every part.
rc=0
/usr/bin/python3 -W ignore bench/dra_plugin_bench.py "$(realpath "$build")" "$PWD" \
    "$(realpath "$build")/gen/dra/proto/dra.desc" || rc=$?
echo
/usr/bin/python3 -W ignore bench/dra_slices_bench.py "$(realpath "$build")" "$PWD" \
    "$(realpath "$build")/gen/dra/proto/dra.desc"
echo
/usr/bin/python3 -W ignore bench/dra_mig_bench.py "$(realpath "$build")" "$PWD" \
    "$(realpath "$build")/gen/dra/proto/dra.desc" || rc=$?
exit "$rc"
