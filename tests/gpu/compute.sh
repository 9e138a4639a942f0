#!/usr/bin/env bash
# Compute shares on a real GPU: tests/gpu/compute.sh OUT BIN DRIVER_DIR [ENFORCER]
# Called by tests/gpu/run.sh with the enforcer under test (default $BIN/libvgpu.so, which
# run.sh built); prints a markdown section to
# stdout and keeps the raw outputs under $OUT/compute/. Tenants, each a container of its
# own (its own region file), all on GPU 0 at once:
#   - spin-kernel tenants (compute_tenant with tests/gpu/compute_spin.ptx, 1 ms kernels,
#     and a 4-kernel CUDA graph), 30/70 and 10/20/30/40; ground truth: the kernel counts
#     only the time it is on the GPU, so launches x length is the tenant's GPU time;
#   - PyTorch matmul and CUDA-graph loops at 30/70 when PyTorch with CUDA is present
#     (tests/gpu/compute_torch.py; ground truth: iterations x the time one takes alone).
# Achieved share = GPU time after a warm-up / wall time after it. With VGPU_DRIVER_DIR
# set (fakegpu: a dry run) the runs are short.
# Exits non-zero when a tenant misses the tolerance docs/benchmarks.md states: on a real
# GPU at most 1 point above its target and 3 below (switching between contexts costs the
# largest tenant of a full card up to 3 points). The dry run on fakegpu checks the
# plumbing with 1.5 s runs, whose first half-second includes the limiter's settling and
# whose launchers share the CPU with the simulated device: at most 2 points above the
# target and at least half of it (a do-nothing enforcer gives a 30 % tenant of a 30/70
# pair 50 %, one that refuses everything 0 %). fakegpu's accuracy itself (2 points) is
# checked by the integration.libvgpu_compute_* tests.
set -uo pipefail
OUT=$1
BIN=$2
DRV=$3
LIB=${4:-$2/libvgpu.so}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$OUT/compute
mkdir -p "$dir"
cd "$root"

if [ -n "${VGPU_DRIVER_DIR:-}" ]; then
    run_ms=1500 warm_ms=500
else
    run_ms=8000 warm_ms=2000
fi
cc=${CC:-gcc}
base="src/base/buf.c src/base/err.c src/base/parse.c src/base/str.c src/base/log.c src/base/mem.c src/base/prng.c"
if ! $cc -O2 -std=gnu11 -Wall -I"$root/src" -o "$BIN/compute_tenant" tests/gpu/compute_tenant.c \
    $base -L"$DRV" -Wl,-rpath,"$DRV" -l:libcuda.so.1 -lm 2>"$dir/build.txt"; then
    echo "- compute_tenant: build FAILED (compute/build.txt)"
    exit 1
fi
[ -f "$LIB" ] || { echo "- enforcer $LIB missing: FAILED"; exit 1; }

export VGPU_COMPUTE_BOARD=$dir/board COMPUTE_PTX=$root/tests/gpu/compute_spin.ptx
unset CUDA_DEVICE_SM_LIMIT VGPU_COMPUTE_MODE GPU_CORE_UTILIZATION_POLICY VGPU_LIMITS_FILE
failed=0
worst=0

if [ -n "${VGPU_DRIVER_DIR:-}" ]; then
    below=half above=2
else
    below=3 above=1
fi

# row LABEL TARGET ACHIEVED: a table row; remembers the largest error and fails the run
# on a tenant outside [target - below, target + above].
row() {
    local err verdict=""
    err=$(awk -v a="$3" -v w="$2" 'BEGIN { printf "%+.2f", a - w }')
    worst=$(awk -v e="$err" -v m="$worst" 'BEGIN { e = e < 0 ? -e : e; print (e > m ? e : m) }')
    local lo=$below
    [ "$below" != half ] || lo=$(awk -v w="$2" 'BEGIN { print w / 2 }')
    if ! awk -v e="$err" -v lo="$lo" -v hi="$above" 'BEGIN { exit !(e >= -lo && e <= hi) }'; then
        verdict=" FAILED (outside -$lo/+$above)"
        failed=1
    fi
    echo "| $1 | $2 | $3 | $err$verdict |"
}

# spin NAME MODE KERNEL_NS SHARE...: one run of spin tenants side by side.
spin() {
    local name=$1 mode=$2 kns=$3
    shift 3
    local pids=() i=0 s
    for s in "$@"; do
        env CUDA_DEVICE_MEMORY_SHARED_CACHE="$dir/region.$name.$i" CUDA_DEVICE_SM_LIMIT="$s" \
            COMPUTE_WARMUP_MS=$warm_ms LD_PRELOAD="$LIB" \
            "$BIN/compute_tenant" "$kns" $run_ms "$mode" >"$dir/$name.$i.txt" 2>&1 &
        pids+=($!)
        i=$((i + 1))
    done
    i=0
    for s in "$@"; do
        if wait "${pids[$i]}"; then
            local got
            got=$(awk -F'[ =]' '/^window_ns=/ { printf "%.2f", 100 * $4 / $2 }' "$dir/$name.$i.txt")
            row "$name: $s % tenant ($mode)" "$s" "${got:-0}"
        else
            echo "| $name: $s % tenant ($mode) | $s | FAILED ($name.$i.txt) | - |"
            failed=1
        fi
        i=$((i + 1))
    done
}

echo "Shares on GPU 0, ${run_ms} ms runs, ${warm_ms} ms warm-up, hard mode. Error = achieved − target."
echo
echo "| run | target % | achieved % | error (points) |"
echo "| --- | --- | --- | --- |"
spin split steady 1000000 30 70
spin four steady 1000000 10 20 30 40
spin graph graph 1000000 30 70
spin alone steady 1000000 30

# PyTorch, when present.
py=${PYTHON:-python3}
if $py -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null &&
    [ -z "${VGPU_DRIVER_DIR:-}" ]; then
    secs=$((run_ms / 1000))
    wsecs=$((warm_ms / 1000))
    for mode in matmul graph; do
        # Calibration: one iteration's GPU time alone, without libvgpu.
        if ! $py tests/gpu/compute_torch.py $mode 4 1 >"$dir/torch.$mode.calib.txt" 2>&1; then
            echo "| torch $mode | - | FAILED (torch.$mode.calib.txt) | - |"
            failed=1
            continue
        fi
        per=$(awk -F'[ =]' '/^iters=/ { print $4 / $2 }' "$dir/torch.$mode.calib.txt")
        pids=()
        for s in 30 70; do
            env CUDA_DEVICE_MEMORY_SHARED_CACHE="$dir/region.torch.$mode.$s" CUDA_DEVICE_SM_LIMIT=$s \
                LD_PRELOAD="$LIB" $py tests/gpu/compute_torch.py $mode $secs $wsecs \
                >"$dir/torch.$mode.$s.txt" 2>&1 &
            pids+=($!)
        done
        i=0
        for s in 30 70; do
            if wait "${pids[$i]}"; then
                got=$(awk -F'[ =]' -v per="$per" '/^iters=/ { printf "%.2f", 100 * $2 * per / $4 }' \
                    "$dir/torch.$mode.$s.txt")
                row "torch $mode: $s % tenant (alone: $(awk -v p="$per" 'BEGIN { printf "%.3f", p * 1000 }') ms/iter)" $s "$got"
            else
                echo "| torch $mode: $s % tenant | $s | FAILED (torch.$mode.$s.txt) | - |"
                failed=1
            fi
            i=$((i + 1))
        done
    done
else
    echo
    echo "- PyTorch runs: skipped (no PyTorch with CUDA here, or a dry run)"
fi
echo
echo "Largest error: $worst points (tolerance: $([ "$below" = half ] && echo "half the target" || echo "$below points") below, $above above)."
[ -n "${VGPU_DRIVER_DIR:-}" ] && echo "(dry run on fakegpu: the figures check the plumbing, not a GPU)"
exit $failed
