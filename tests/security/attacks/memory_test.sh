#!/usr/bin/env bash
# memory_test.sh BUILD_DIR CASE: runs one memory attack replay (memory_attack.c) under
# libvgpu against a fresh fakegpu (16 GiB card, so the attack has room to overrun) with a
# 1 GiB limit from the environment; fails when the tenant held more than its limit or a
# charge was left behind.
set -uo pipefail
B=$(cd "$1" && pwd)
CASE=$2
T=$(mktemp -d /tmp/vgpu-memattack-XXXXXX)
trap 'rm -rf "$T"' EXIT
export FAKEGPU_STATE_DIR=$T/state FAKEGPU_DEVICES="Test GPU:16GiB:16" FAKEGPU_CONTEXT_MIB=256
export VGPU_CONTEXT_MIB=256 LD_LIBRARY_PATH=$B/fakegpu
export CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/region CUDA_DEVICE_MEMORY_LIMIT=1g
unset VGPU_LIMITS_FILE VGPU_LOG_LEVEL CUDA_DEVICE_SM_LIMIT CUDA_VISIBLE_DEVICES
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
out=$(LD_PRELOAD=$B/lib/libvgpu.so "$B/bin/memory_attack" "$CASE" 2>&1)
rc=$?
echo "$CASE: $out"
exit $rc
