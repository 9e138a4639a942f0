#!/usr/bin/env bash
# The real-GPU suite: one script, one call, results under $OUT (default ./gpu-results).
# It checks on a real NVIDIA GPU what fakegpu simulates, with the same programs:
#   1. the driver and devices as NVML and CUDA see them;
#   2. vgpu_spin timing: launch-to-synchronize and event-measured durations, launch cost;
#   3. time slicing: 2 and 4 processes saturating one GPU, each one's share, NVML's view;
# and writes summary.md next to the raw outputs. It never changes the GPU's settings.
#
# Needs only gcc and the NVIDIA driver (nvcc is used when present). For a dry run on a
# machine without a GPU: VGPU_DRIVER_DIR=build/fakegpu tests/gpu/run.sh
#
# The enforcer under test is libvgpu built from this tree, or VGPU_ENFORCER=/path/lib.so:
# any in-container enforcer loaded with LD_PRELOAD (HAMi-core's libvgpu.so, say) is
# measured by the same checks, side by side. The suite exits non-zero when any claim it
# prints fails: memory limits (every allocation path stops at the limit, the limit is the
# total that CUDA, NVML and nvidia-smi report) and compute shares within the tolerance
# docs/benchmarks.md states (tests/gpu/compute.sh), and task priority's targets
# (tests/gpu/priority.sh: a high-priority tenant's p99 beside a saturating low one).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$root/gpu-results}
mkdir -p "$OUT"
bin=$OUT/bin
mkdir -p "$bin"
summary=$OUT/summary.md
exec > >(tee "$OUT/log.txt") 2>&1
cd "$root"

note() { printf '%s\n' "$*" >> "$summary"; }
: > "$summary"
note "# vgpu real-GPU suite ($(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
note ""

# --- 1. driver and devices ---------------------------------------------------------------
if [ -n "${VGPU_DRIVER_DIR:-}" ]; then
    driver_dir=$(cd "$VGPU_DRIVER_DIR" && pwd)
    export LD_LIBRARY_PATH="$driver_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export FAKEGPU_STATE_DIR=${FAKEGPU_STATE_DIR:-$(mktemp -d)}
    note "Driver: simulated (fakegpu from $VGPU_DRIVER_DIR) — a dry run, not a GPU result."
else
    driver_dir=$(dirname "$(ldconfig -p | sed -n 's/.*libcuda\.so\.1 (libc6,x86-64) => //p' | head -n 1)")
    if [ ! -e "$driver_dir/libcuda.so.1" ]; then # a driver mounted outside ld.so.conf
        for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do
            [ -e "$d/libcuda.so.1" ] && driver_dir=$d && break
        done
    fi
    echo "driver libraries: $driver_dir"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi -L | tee "$OUT/devices.txt"
        nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode,mig.mode.current \
            --format=csv | tee -a "$OUT/devices.txt"
        note "Devices (nvidia-smi):"
        note '```'
        cat "$OUT/devices.txt" >> "$summary"
        note '```'
    fi
fi
note ""

# --- build, with gcc alone -------------------------------------------------------------
cc=${CC:-gcc}
cflags="-O2 -std=gnu11 -Wall -I$root/src"
base="src/base/buf.c src/base/err.c src/base/parse.c src/base/str.c src/base/log.c src/base/mem.c src/base/prng.c"
link="-L$driver_dir -Wl,-rpath,$driver_dir"
ptx=tests/gpu/vgpu_spin.ptx
if command -v nvcc >/dev/null; then
    nvcc -arch=compute_80 -ptx tests/gpu/vgpu_spin.cu -o "$OUT/vgpu_spin.nvcc.ptx" &&
        echo "nvcc built vgpu_spin ($(nvcc --version | tail -n 1))"
fi
build() { # name sources... (extra flags last)
    local name=$1
    shift
    $cc $cflags -o "$bin/$name" "$@" || { note "- build of $name FAILED"; return 1; }
}
build spin_timing tests/gpu/spin_timing.c $base $link -l:libcuda.so.1
build demo_worker demo/worker.c $base $link -l:libcuda.so.1
build demo_watch demo/watch.c $base $link -l:libnvidia-ml.so.1

# --- 2. vgpu_spin timing --------------------------------------------------------------
if [ -x "$bin/spin_timing" ] && "$bin/spin_timing" "$ptx" 50 > "$OUT/spin_timing.txt"; then
    note "## vgpu_spin timing (50 runs each; error = measured − requested)"
    note ""
    note "| kernel | launch→sync error p50 | p99 | event-measured error p50 |"
    note "| --- | --- | --- | --- |"
    awk '$1 == "spin" { printf "| %s ms | %s µs | %s µs | %s µs |\n", $2, $3, $4, $5 }' \
        "$OUT/spin_timing.txt" >> "$summary"
    awk '$1 == "launch_us" { printf "\nLaunch call (zero-length vgpu_spin): p50 %s µs, p99 %s µs.\n", $2, $3 }' \
        "$OUT/spin_timing.txt" >> "$summary"
else
    note "- spin_timing FAILED (see log.txt)"
fi
note ""

# --- 3. time slicing between processes ------------------------------------------------
share_run() { # n: n workers, 5 ms kernels, 6 s together
    local n=$1
    local dir=$OUT/share$n
    mkdir -p "$dir"
    "$bin/demo_watch" 6 1000 > "$dir/nvml.txt" 2>&1 &
    local watch=$! pids=()
    for i in $(seq "$n"); do
        "$bin/demo_worker" "w$i" 1024 5 6 "$ptx" > "$dir/worker$i.txt" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    wait $watch
    note "### $n processes, 5 ms kernels, 6 s"
    note ""
    note "| process | GPU time | share of 6 s |"
    note "| --- | --- | --- |"
    for i in $(seq "$n"); do
        sed -n 's/.*done: [0-9]* kernels, \([0-9.]*\) s of GPU time in \([0-9.]*\) s/\1 \2/p' \
            "$dir/worker$i.txt" |
            awk -v w="w$i" '{ printf "| %s | %.2f s | %.0f %% |\n", w, $1, 100 * $1 / $2 }' >> "$summary"
    done
    note ""
    note "NVML during the run (demo_watch):"
    note '```'
    cat "$dir/nvml.txt" >> "$summary"
    note '```'
    note ""
}
if [ -x "$bin/demo_worker" ] && [ -x "$bin/demo_watch" ]; then
    note "## Time slicing (no MPS): processes saturating one GPU"
    note ""
    share_run 2
    share_run 4
else
    note "- time-slicing runs skipped: demo programs did not build"
fi

# --- 4. libvgpu against the real driver ------------------------------------------------
libvgpu_sources="$(ls src/libvgpu/*.c) src/region/region.c"
if [ -z "${VGPU_DRIVER_DIR:-}" ] || [ -n "${VGPU_GPU_SUITE_LIBVGPU:-}" ]; then
    note "## libvgpu on this driver (4 GiB limit)"
    note ""
    if [ -n "${VGPU_ENFORCER:-}" ]; then
        enforcer=$(cd "$(dirname "$VGPU_ENFORCER")" && pwd)/$(basename "$VGPU_ENFORCER")
        [ -f "$enforcer" ] || { note "- enforcer $VGPU_ENFORCER: not a file, FAILED"; enforcer=/nonexistent; }
        note "Enforcer under test: $VGPU_ENFORCER"
    else
        build libvgpu.so -shared -fPIC -fvisibility=hidden \
            -Wl,--version-script=src/libvgpu/libvgpu.map $libvgpu_sources $base -ldl -lpthread
        enforcer=$bin/libvgpu.so
        note "Enforcer under test: libvgpu built from this tree"
    fi
    note ""
    build libvgpu_probe tests/integration/libvgpu_probe.c -ldl -lpthread
    build libvgpu_probe_link -DPROBE_LINKED tests/integration/libvgpu_probe.c $link \
        -l:libcuda.so.1 -ldl -lpthread
    build libvgpu_nvml tests/integration/libvgpu_nvml.c -ldl
    build libvgpu_nvml_link -DPROBE_LINKED tests/integration/libvgpu_nvml.c $link \
        -l:libnvidia-ml.so.1 -ldl
    limited() { # runs a command under libvgpu with a fresh region and a 4 GiB limit
        local region
        region=$(mktemp -d)
        env LD_PRELOAD="$enforcer" VGPU_TEST_REAL=1 VGPU_CONTEXT_MIB=${VGPU_CONTEXT_MIB:-512} \
            CUDA_DEVICE_MEMORY_LIMIT=4g CUDA_DEVICE_MEMORY_SHARED_CACHE="$region/region" "$@"
    }
    run_check() { # name command...
        local name=$1
        shift
        if "$@" > "$OUT/libvgpu_$name.txt" 2>&1; then
            note "- $name: passed"
        else
            note "- $name: FAILED (libvgpu_$name.txt)"
        fi
    }
    # claim NAME: a check of what a command printed; "FAILED" in the summary fails the suite.
    claim() {
        if [ "$2" = ok ]; then note "- $1: passed"; else note "- $1: FAILED ($2)"; fi
    }
    limit=$((4 << 30))
    run_check paths_link limited "$bin/libvgpu_probe_link" link paths
    run_check paths_dlsym limited "$bin/libvgpu_probe" dlsym paths
    run_check paths_procaddr limited "$bin/libvgpu_probe" procaddr paths
    run_check view limited "$bin/libvgpu_probe" dlsym info
    run_check nvml_link limited "$bin/libvgpu_nvml_link" link
    run_check nvml_dlsym limited "$bin/libvgpu_nvml" dlsym
    # The limit is the device's total memory wherever the program looks.
    total=$(sed -n 's/^total=\([0-9]*\) .*/\1/p' "$OUT/libvgpu_view.txt")
    claim "cuMemGetInfo total is the 4 GiB limit" \
        "$([ "$total" = "$limit" ] && echo ok || echo "total=${total:-none}")"
    for how in link dlsym; do
        total=$(sed -n 's/^total=\([0-9]*\) .*/\1/p' "$OUT/libvgpu_nvml_$how.txt")
        claim "nvmlDeviceGetMemoryInfo ($how) total is the 4 GiB limit" \
            "$([ "$total" = "$limit" ] && echo ok || echo "total=${total:-none}")"
    done
    if command -v nvidia-smi >/dev/null; then
        run_check nvidia_smi limited nvidia-smi --query-gpu=memory.total,memory.used --format=csv
        smi=$(tail -n 1 "$OUT/libvgpu_nvidia_smi.txt")
        note "  nvidia-smi under a 4 GiB limit: $smi"
        claim "nvidia-smi memory.total is 4096 MiB" \
            "$(case "$smi" in "4096 MiB,"*) echo ok ;; *) echo "got: $smi" ;; esac)"
    fi
    if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
        run_check pytorch limited env VGPU_EXPECT_LIMIT=$((4 << 30)) python3 tests/gpu/pytorch_check.py
    else
        note "- pytorch: skipped (no PyTorch with CUDA on this machine)"
    fi
    note ""
fi

# --- 5. compute shares (libvgpu's limiter), when present ------------------------------
if [ -x tests/gpu/compute.sh ] && [ -n "${enforcer:-}" ]; then
    note "## Compute shares"
    note ""
    if tests/gpu/compute.sh "$OUT" "$bin" "$driver_dir" "$enforcer" >> "$summary"; then
        :
    else
        note "- compute.sh FAILED (log.txt)"
    fi
fi

# --- 6. task priority (libvgpu's limiter), when present --------------------------------
if [ -x tests/gpu/priority.sh ] && [ -n "${enforcer:-}" ] && [ -x "$bin/compute_tenant" ]; then
    note "## Task priority"
    note ""
    if tests/gpu/priority.sh "$OUT" "$bin" "$driver_dir" "$enforcer" >> "$summary"; then
        :
    else
        note "- priority.sh FAILED (log.txt)"
    fi
fi

echo "results in $OUT"
cat "$summary"
! grep -q 'FAILED' "$summary"
