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
mig)
    FAKEGPU_MIG="0:1g.10gb,1g.10gb,3g.40gb;1:2g.10gb" "$probe" mig
    # The creator's layout is what everybody sees; status lists it.
    "$build/bin/fakegpu-ctl" status >"$state/status"
    [ "$(grep -c ' mig ' "$state/status")" = 4 ] || { cat "$state/status"; exit 1; }
    grep -q '^  mig 2 3g.40gb MIG-' "$state/status" || { cat "$state/status"; exit 1; }
    ;;
dynamic)
    # MIG mode without instances; instances made by one process are everybody's.
    export FAKEGPU_MIG="0:"
    uuid=$("$probe" dynamic)
    case $uuid in MIG-*) ;; *) echo "no MIG UUID from the probe: '$uuid'"; exit 1 ;; esac
    "$build/bin/fakegpu-ctl" status >"$state/status"
    grep -q "^  mig [0-9] 3g.40gb $uuid gi [0-9]" "$state/status" || { cat "$state/status"; exit 1; }
    grep -q "^  gi [0-9] 1g.10gb start 0 (no compute instance)" "$state/status" || { cat "$state/status"; exit 1; }
    # CUDA work inside the instance gets its memory and SMs; while it runs, the instance
    # cannot be destroyed; once it is gone, it can.
    out=$state/cuda.out
    CUDA_VISIBLE_DEVICES=$uuid MIG_MIB=40448 MIG_SMS=60 "$build/tests/cuda_api" mig >"$out" &
    pids+=($!)
    for _ in $(seq 100); do
        grep -q ready "$out" 2>/dev/null && break
        kill -0 "${pids[-1]}" 2>/dev/null || { echo "CUDA in the MIG device failed"; exit 1; }
        sleep 0.1
    done
    grep -q ready "$out" || { echo "CUDA process not ready"; exit 1; }
    "$probe" destroy "$uuid" in-use
    kill -9 "${pids[-1]}"
    wait "${pids[-1]}" 2>/dev/null || true
    "$probe" destroy "$uuid" ok
    "$build/bin/fakegpu-ctl" status >"$state/status"
    if grep -q "$uuid" "$state/status"; then cat "$state/status"; exit 1; fi
    grep -q "^  gi [0-9] 1g.10gb start 0 (no compute instance)" "$state/status" || { cat "$state/status"; exit 1; }
    ;;
bad-mig)
    # Every malformed FAKEGPU_MIG is an error naming the variable and the bad part.
    bad=("0" "0:1g.10gb;" ";0:1g.10gb" "0:1g.10gb,,1g.10gb" "2:1g.10gb" "x:1g.10gb"
         "0:1g.5gb" "0:1g.10gb;0:1g.10gb" "0:7g.80gb,1g.10gb" "1:4g.20gb,4g.20gb"
         "0:1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb" "0:1G.10GB")
    for value in "${bad[@]}"; do
        rm -f "$state/fakegpu.state"
        if FAKEGPU_MIG="$value" "$probe" discovery 2>"$state/err" >/dev/null; then
            echo "init succeeded with FAKEGPU_MIG='$value'"
            exit 1
        fi
        grep -q "FAKEGPU_MIG" "$state/err" || { echo "no clear error for '$value':"; cat "$state/err"; exit 1; }
    done
    # A model without MIG cannot be put in MIG mode.
    if FAKEGPU_DEVICES="Tesla T4:16GiB:40" FAKEGPU_MIG="0:1g.10gb" "$probe" discovery 2>"$state/err" >/dev/null; then
        echo "a T4 in MIG mode"
        exit 1
    fi
    grep -q "has no MIG" "$state/err" || { cat "$state/err"; exit 1; }
    ;;
xid)
    out=$state/xid.out
    "$probe" xid 1 48 >"$out" &
    pids+=($!)
    for _ in $(seq 200); do
        grep -q ready "$out" 2>/dev/null && break
        sleep 0.05
    done
    grep -q ready "$out" || { echo "probe not ready"; exit 1; }
    # Bad usage exits 2 and injects nothing (the probe would take it for its event).
    for args in "xid 5 48" "xid 1 0" "xid 1 10000" "xid 1 abc" "xid 1"; do
        rc=0
        "$build/bin/fakegpu-ctl" $args 2>/dev/null || rc=$?
        [ "$rc" = 2 ] || { echo "fakegpu-ctl $args: exit $rc, want 2"; exit 1; }
    done
    "$build/bin/fakegpu-ctl" xid 1 48
    wait "${pids[0]}"
    ;;
*)
    echo "unknown case $case"
    exit 2
    ;;
esac
