#!/usr/bin/env bash
# vgpu-device-plugin in MPS mode with the fake nvidia-cuda-mps-control of tests/integration,
# on fakegpu (2 GPUs): time from start to every replica Healthy, and from a daemon's
# SIGKILL to its replicas Unhealthy and Healthy again. usage: bench/deviceplugin_mps.sh BUILD
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ -x "$build/bin/vgpu-device-plugin" ] || { echo "no $build/bin/vgpu-device-plugin: build first"; exit 1; }
[ -x "$build/bin/fake_mps_control" ] || { echo "no $build/bin/fake_mps_control: build first"; exit 1; }
exec /usr/bin/python3 -W ignore tests/integration/deviceplugin_mps.py "$(realpath "$build")" "$PWD" \
  "$(realpath "$build/bin/fake_mps_control")" Bench 2>&1 | grep -E '^\| |FAIL|Error'
