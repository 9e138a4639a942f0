#!/usr/bin/env bash
# The admission webhook's DRA mode (--webhook-dra): time to answer an AdmissionReview
# over HTTPS against the test API server, for a pod without GPUs, a HAMi pod in the
# classic mode, a HAMi pod whose template exists (409 read back) and one whose template
# is new (created), and vgpu-scheduler's RSS after them.
# usage: bench/dra_webhook.sh BUILD
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ -x "$build/bin/vgpu-scheduler" ] || { echo "no $build/bin/vgpu-scheduler: build first"; exit 1; }
/usr/bin/python3 bench/dra_webhook_bench.py "$(realpath "$build")/bin/vgpu-scheduler"
