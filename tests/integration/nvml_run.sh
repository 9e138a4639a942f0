#!/usr/bin/env bash
# Runs one NVML integration case against build/fakegpu/libnvidia-ml.so.1 with a fresh
# FAKEGPU_STATE_DIR, so cases run in parallel without seeing each other's GPUs.
#   nvml_run.sh BUILD_DIR before-init|discovery|processes|utilization
set -euo pipefail
build=$1
case=$2
state=$(mktemp -d /tmp/fakegpu-nvml-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$state"
}
trap cleanup EXIT
export FAKEGPU_STATE_DIR=$state
export FAKEGPU_DEVICES="NVIDIA H100 80GB HBM3:81559MiB:132,NVIDIA A100-SXM4-40GB:40GiB:108"
export FAKEGPU_CONTEXT_MIB=100
export LD_LIBRARY_PATH=$build/fakegpu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
probe=$build/tests/nvml_probe
gpu_proc=$build/tests/nvml_gpu_proc

# Starts a GPU process in the background and waits (at most 10 s) until it is set up.
start_gpu_proc() {
    local out=$state/proc.$#.$RANDOM
    "$gpu_proc" "$@" >"$out" &
    pids+=($!)
    for _ in $(seq 100); do
        grep -q ready "$out" 2>/dev/null && return 0
        kill -0 "${pids[-1]}" 2>/dev/null || { echo "gpu process failed"; exit 1; }
        sleep 0.1
    done
    echo "gpu process not ready after 10 s"
    exit 1
}

case $case in
before-init | discovery)
    "$probe" "$case"
    ;;
processes)
    # 100 MiB context + 300 MiB allocated, on device 1, seen from another process.
    start_gpu_proc 1 300 0
    "$probe" processes 1 "${pids[0]}" $(((100 + 300) * 1024 * 1024))
    # Once it dies, it is gone from the list and its memory is free again.
    kill -9 "${pids[0]}"
    wait "${pids[0]}" 2>/dev/null || true
    if "$probe" processes 1 "${pids[0]}" 0 2>/dev/null; then
        echo "a killed process is still listed"
        exit 1
    fi
    ;;
utilization)
    start_gpu_proc 0 10 60000
    start_gpu_proc 0 10 60000
    sleep 1.5 # a full 1 s window of both saturating the device
    "$probe" utilization 0 "${pids[0]}" "${pids[1]}"
    ;;
bad-devices)
    # A malformed FAKEGPU_DEVICES is an error naming the variable, never a default.
    if FAKEGPU_DEVICES="NVIDIA H100:80GiB" "$probe" discovery 2>"$state/err"; then
        echo "init succeeded with a malformed FAKEGPU_DEVICES"
        exit 1
    fi
    grep -q "FAKEGPU_DEVICES" "$state/err" || { echo "no clear error:"; cat "$state/err"; exit 1; }
    ;;
*)
    echo "unknown case $case"
    exit 2
    ;;
esac
