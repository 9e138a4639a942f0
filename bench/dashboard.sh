#!/usr/bin/env bash
# The dashboard page of a 500-node cluster (8 GPUs each, 12,000 containers) loaded in
# headless Chromium, and the cost of /ui/state.json and /metrics at that size
# (docs/benchmarks.md, "vgpu-scheduler: the dashboard"). NODES, GPUS, PODS, RUNS resize it.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
exec /usr/bin/python3 bench/dashboard_bench.py "$build/bin/vgpu-scheduler"
