#!/usr/bin/env bash
# libvgpu overhead against fakegpu. Usage: bench/libvgpu.sh BUILD_DIR [check]. Prints
# markdown. "check" (the test bench.libvgpu_alloc): only the allocation figure, for the
# smallest and largest size, one run each. Both modes exit non-zero when a figure misses
# its target (30 added instructions per launch, 400 per allocation+free pair): callgrind
# counts are stable, so a miss is a regression, not noise. The other side fails too: a
# figure of 0 or less (libvgpu not on the path: its preload failed or its wrapper is
# missing, so the bench measured the driver alone), or a benchmark run that failed (an
# allocation refused: a limiter that refuses everything is cheap).
# Instructions per call: callgrind counts for N=2000 minus N=1000 iterations, divided by
# 1000, so start-up cancels. Allocation: the whole program's instructions with libvgpu
# preloaded minus without (libvgpu's own code and every driver call it adds), median of
# RUNS runs, per allocation size.
set -euo pipefail
B=$(cd "${1:-build}" && pwd)
T=$(mktemp -d /tmp/vgpu-bench-XXXXXX)
trap 'rm -rf "$T"' EXIT
export FAKEGPU_STATE_DIR=$T/state FAKEGPU_DEVICES="Bench GPU:80GiB:132" FAKEGPU_KERNEL_NS=0
export LD_LIBRARY_PATH=$B/fakegpu
BIN=$B/bin/libvgpu_bench
LIB=$B/lib/libvgpu.so
MODE=${2:-full}
TARGET=400
LAUNCH_TARGET=30
over=0

# Inclusive instructions of FN in OBJECT (libvgpu.so or libcuda.so.1) in a callgrind file.
incl() {
    callgrind_annotate --inclusive=yes "$1" 2>/dev/null |
        awk -v fn=":$2 " -v obj="$3" 'index($0, fn) && index($0, obj) && /^ *[0-9,]+ \(/ {
            gsub(",", "", $1); print $1; exit }'
}
run_cg() { # run_cg MODE N [preload] -> callgrind file
    local out=$T/cg.$1.$2.${3:-0}
    env ${3:+LD_PRELOAD=$LIB} valgrind --tool=callgrind --callgrind-out-file="$out" \
        "$BIN" "$1" "$2" >/dev/null 2>&1 || echo "libvgpu_bench $1 $2${3:+ under libvgpu}" >>"$T/failed"
    echo "$out"
}
# Per call, N=2000 minus N=1000 (start-up and first-call set-up cancel):
#   base  = the driver's own instructions (real function, inclusive)
#   added = libvgpu's wrapper inclusive minus the real function it calls, same run
measure() { # measure MODE FN... -> "base added"
    local mode=$1
    shift
    local a1 a2 w1 w2 base=0 added=0
    a1=$(run_cg "$mode" 1000 1)
    a2=$(run_cg "$mode" 2000 1)
    for fn in "$@"; do
        local r1 r2 o1 o2
        r1=$(incl "$a1" "$fn" libcuda.so.1)
        r2=$(incl "$a2" "$fn" libcuda.so.1)
        o1=$(incl "$a1" "$fn" libvgpu.so)
        o2=$(incl "$a2" "$fn" libvgpu.so)
        base=$((base + (r2 - r1) / 1000))
        added=$((added + ((o2 - r2) - (o1 - r1)) / 1000))
    done
    echo "$base $added"
}

# judge ADDED TARGET WHAT WHO: WHAT adding more than TARGET instructions fails, and so does
# it adding none (WHO, libvgpu's code, was not on the path).
judge() {
    if [ "$1" -gt "$2" ]; then
        echo "FAIL: $3 adds $1 instructions, over the $2 target" >&2
        over=1
    elif [ "$1" -lt 1 ]; then
        echo "FAIL: $3 adds $1 instructions: $4 was not on the path" >&2
        over=1
    fi
}

unset CUDA_DEVICE_MEMORY_LIMIT CUDA_DEVICE_MEMORY_SHARED_CACHE
if [ "$MODE" = full ]; then
    echo "Instructions per launch (callgrind against fakegpu; N=2000 minus N=1000 calls; the"
    echo "wrapper's inclusive count minus the real function's, measured in the same run):"
    echo
    echo "| call | driver (fakegpu) | added by libvgpu | target |"
    echo "| --- | ---: | ---: | ---: |"
    read -r lb la <<<"$(measure launch cuLaunchKernel)"
    echo "| cuLaunchKernel, no compute limit | $lb | $la | $LAUNCH_TARGET |"
    judge "$la" "$LAUNCH_TARGET" cuLaunchKernel "libvgpu's wrapper"
fi

# Whole program, N=2000 minus N=1000 pairs of SIZE bytes: "preload" (1 or empty).
total() { # total N SIZE [preload] -> Ir
    local out=$T/cg.total
    env ${3:+LD_PRELOAD=$LIB} valgrind --tool=callgrind --callgrind-out-file="$out" \
        "$BIN" alloc "$1" "$2" >/dev/null 2>&1 || echo "libvgpu_bench alloc $1 $2${3:+ under libvgpu}" >>"$T/failed"
    sed -n 's/^summary: //p' "$out"
}
per_pair() { # per_pair SIZE [preload] -> instructions per alloc+free pair
    echo $((($(total 2000 "$1" "${2:-}") - $(total 1000 "$1" "${2:-}")) / 1000))
}
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
RUNS=${RUNS:-3}
SIZES="4096:4KiB 1048576:1MiB 67108864:64MiB 1073741824:1GiB"
if [ "$MODE" = check ]; then
    RUNS=1
    SIZES="4096:4KiB 1073741824:1GiB"
fi
export CUDA_DEVICE_MEMORY_LIMIT=40g CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/region
"$BIN" alloc 1 4096 >/dev/null                   # fakegpu's state exists from here on
env LD_PRELOAD="$LIB" "$BIN" alloc 1 4096 >/dev/null # and so does the region
echo
echo "Instructions per cuMemAlloc_v2 + cuMemFree_v2 pair with a 40 GiB limit: the whole"
echo "program's count with libvgpu preloaded minus without (libvgpu and every driver call it"
echo "adds), N=2000 minus N=1000 pairs, median of $RUNS runs:"
echo
echo "| size | without libvgpu | with libvgpu | added | target |"
echo "| --- | ---: | ---: | ---: | ---: |"
for size in $SIZES; do
    b=${size%%:*}
    : >"$T/runs"
    for _ in $(seq "$RUNS"); do
        w0=$(per_pair "$b")
        w1=$(per_pair "$b" 1)
        echo "$w0 $w1 $((w1 - w0))" >>"$T/runs"
    done
    added=$(cut -d' ' -f3 "$T/runs" | median)
    echo "| ${size#*:} | $(cut -d' ' -f1 "$T/runs" | median) | $(cut -d' ' -f2 "$T/runs" | median)" \
        "| $added | $TARGET |"
    judge "$added" "$TARGET" "a ${size#*:} allocation+free pair" libvgpu
done
if [ -s "$T/failed" ]; then
    echo "FAIL: benchmark runs failed (an allocation or launch refused):" >&2
    sed 's/^/  /' "$T/failed" >&2
    over=1
fi
if [ "$MODE" = check ]; then
    exit "$over"
fi

rate() { # rate [preload] -> total pairs of 16 processes in 3 s
    local total=0
    for i in $(seq 1 16); do
        env ${1:+LD_PRELOAD=$LIB} "$BIN" rate 3 >"$T/rate.$i" &
    done
    wait
    for i in $(seq 1 16); do total=$((total + $(sed -n 's/pairs=//p' "$T/rate.$i"))); done
    echo $total
}
# Alternate without/with three times so that load from other work on the machine falls on
# both sides alike.
r0=0
r1=0
for _ in 1 2 3; do
    r0=$((r0 + $(rate)))
    r1=$((r1 + $(rate 1)))
done
echo
echo "Allocation throughput, 16 processes x 3 s of 1 MiB cuMemAlloc+cuMemFree pairs, three"
echo "alternating rounds each, $(nproc) cores:"
echo
echo "| | pairs | per second | relative |"
echo "| --- | ---: | ---: | ---: |"
echo "| without libvgpu | $r0 | $((r0 / 9)) | 1.00 |"
echo "| with libvgpu (shared 40 GiB limit) | $r1 | $((r1 / 9)) | $(awk "BEGIN{printf \"%.2f\", $r1/$r0}") |"
exit "$over"
