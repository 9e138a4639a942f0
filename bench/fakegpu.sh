#!/bin/sh
# fakegpu benchmarks: prints a markdown table.
#   bench/fakegpu.sh BUILD_DIR
# (1) instructions per cuLaunchKernel: callgrind over 1000 and 2000 launches of an ordinary
#     kernel; the difference / 1000 cancels the set-up cost.
# (2) timing fidelity: vgpu_spin of 1, 5 and 20 ms, each timed from launch to the return of
#     cuStreamSynchronize; p50 / p99 of (measured - requested) in microseconds.
set -eu
build=${1:?usage: bench/fakegpu.sh BUILD_DIR}
prog=$build/bench/fakegpu_launch
[ -x "$prog" ] || { echo "fakegpu.sh: $prog not built" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/fakegpu-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
export LD_LIBRARY_PATH="$build/fakegpu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FAKEGPU_KERNEL_NS=1000

instructions() { # N -> total instructions of one run
    FAKEGPU_STATE_DIR="$work/s$1" valgrind --tool=callgrind --callgrind-out-file="$work/cg.$1" \
        "$prog" launch "$1" >/dev/null 2>&1
    sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$work/cg.$1"
}
echo "| fakegpu measure | value |"
echo "| --- | --- |"
if command -v valgrind >/dev/null 2>&1; then
    a=$(instructions 1000)
    b=$(instructions 2000)
    echo "| instructions per cuLaunchKernel (callgrind, (I(2000) - I(1000)) / 1000) | $(( (b - a) / 1000 )) |"
else
    echo "| instructions per cuLaunchKernel | valgrind not installed |"
fi
FAKEGPU_STATE_DIR="$work/fid" "$prog" fidelity "${FAKEGPU_BENCH_REPS:-50}" > "$work/fid.txt"
while read -r ms p50 p99; do
    echo "| vgpu_spin ${ms} ms: launch-to-synchronize error p50 / p99 (us) | $p50 / $p99 |"
done < "$work/fid.txt"
