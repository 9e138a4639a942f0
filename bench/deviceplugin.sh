#!/usr/bin/env bash
# vgpu-device-plugin figures against the fake kubelet of tests/integration on fakegpu:
# Allocate latency (timeSlicing, vgpu mode, Volcano mode), ListAndWatch update latency after
# a health change and after an XID, RSS, and time to re-register after a kubelet restart;
# then the instructions one Allocate spends matching, in vgpu and Volcano mode (callgrind
# over bench/deviceplugin_match.c). usage: bench/deviceplugin.sh BUILD
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ -x "$build/bin/vgpu-device-plugin" ] || { echo "no $build/bin/vgpu-device-plugin: build first"; exit 1; }
[ -x "$build/bin/fakegpu-ctl" ] || { echo "no $build/bin/fakegpu-ctl: build first"; exit 1; }
# A missed target (the Python part says which) fails the script after the tables.
rc=0
/usr/bin/python3 -W ignore bench/deviceplugin_bench.py "$(realpath "$build")" "$PWD" || rc=$?

prog=$build/bench/deviceplugin_match
if [ -x "$prog" ] && command -v valgrind >/dev/null 2>&1; then
    work=$(mktemp -d "${TMPDIR:-/tmp}/dp-match.XXXXXX")
    trap 'rm -rf "$work"' EXIT INT TERM
    instructions() { # MODE PODS ROUNDS -> total instructions of one run
        valgrind --tool=callgrind --callgrind-out-file="$work/cg" "$prog" "$@" >/dev/null 2>&1
        sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$work/cg"
    }
    echo
    echo "| matching one Allocate (callgrind, (I(200 calls) - I(100 calls)) / 100) | instructions |"
    echo "| --- | --- |"
    for pods in 100 300; do
        for mode in cache decode volcano volcano-worst; do
            a=$(instructions $mode $pods 100)
            b=$(instructions $mode $pods 200)
            echo "| $pods pods, $mode | $(( (b - a) / 100 )) |"
        done
    done
fi
exit "$rc"
