#!/usr/bin/env bash
# vgpu-device-plugin dynamic MIG on fakegpu: Allocate to a ready GPU instance, and pod
# deletion to the instance destroyed (bench/deviceplugin_mig_bench.py).
# usage: bench/deviceplugin_mig.sh BUILD
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ -x "$build/bin/vgpu-device-plugin" ] || { echo "no $build/bin/vgpu-device-plugin: build first"; exit 1; }
[ -x "$build/bin/fakegpu-ctl" ] || { echo "no $build/bin/fakegpu-ctl: build first"; exit 1; }
exec /usr/bin/python3 -W ignore bench/deviceplugin_mig_bench.py "$(realpath "$build")" "$PWD"
