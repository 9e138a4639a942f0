#!/usr/bin/env bash
# vgpu-device-plugin figures against the fake kubelet of tests/integration on fakegpu:
# Allocate latency, ListAndWatch update latency after a health change and after an XID,
# RSS, and time to re-register after a kubelet restart. usage: bench/deviceplugin.sh BUILD
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ -x "$build/bin/vgpu-device-plugin" ] || { echo "no $build/bin/vgpu-device-plugin: build first"; exit 1; }
[ -x "$build/bin/fakegpu-ctl" ] || { echo "no $build/bin/fakegpu-ctl: build first"; exit 1; }
exec /usr/bin/python3 -W ignore bench/deviceplugin_bench.py "$(realpath "$build")" "$PWD"
