#!/usr/bin/env bash
# Attacks on libvgpu's memory limit by a hostile tenant process, against fakegpu:
# limits_test.sh BUILD_DIR CASE. Each case plays the tenant inside a vgpu container, whose
# read-only limits file the device plugin mounts at /etc/vgpu/limits, and checks that the
# attack changes nothing (docs/security.md, "Limits a tenant cannot lift").
#
# The file must be at that fixed path, so the script re-runs itself as root in a private
# mount namespace (unshare --mount) and puts /etc/vgpu there on a tmpfs (or, when the
# host has no /etc/vgpu, an overlay over /etc whose writes land in a temporary
# directory): nothing on the host changes. Without root or mount namespaces it skips
# through vg_skip, which fails under CI.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../lib/vg_skip.sh"
. "$HERE/../lib/fakegpu_tenants.sh"
vg_ns_reexec VGPU_LIMITS_TEST_NS "$@"
vg_tenants_init seclimits "$@"
vg_private_etc_vgpu
FIXED=/etc/vgpu/limits

vg_fakegpu_env
export FAKEGPU_CONTEXT_MIB=256
# What the device plugin gives a container: the environment and the same file.
export CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/ctr/region VGPU_LIMITS_FILE=$T/ctr/limits
export CUDA_DEVICE_MEMORY_LIMIT_0=1024m
unset CUDA_DEVICE_MEMORY_LIMIT VGPU_CONTEXT_MIB
mkdir -p "$T/ctr"
LIB=$B/lib/libvgpu.so
PROBE=$B/bin/libvgpu_probe
TRUTH=$B/bin/libvgpu_truth

# fail, field, MiB, GiB: tests/lib/fakegpu_tenants.sh.
pre() { LD_PRELOAD=$LIB "$@"; }

# limits FILE LINE...: a limits file as the device plugin writes it, read-only.
limits() {
    local f=$1
    shift
    rm -f "$f"
    {
        echo "# written by vgpu-device-plugin for pod t/p, container main"
        echo "vgpu-limits 1"
        printf '%s\n' "$@"
        echo "CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/ctr/region"
    } >"$f"
    chmod 0444 "$f"
}
container_limits() {
    limits "$T/ctr/limits" "$@"
    limits "$FIXED" "$@"
}

# Starts `probe hold BYTES` in the background; waits for its "ready" (or "oom").
hold() {
    local out=$T/hold.$RANDOM
    LD_PRELOAD=$LIB "$PROBE" dlsym hold "$1" >"$out" 2>&1 &
    local pid=$!
    pids+=("$pid")
    for _ in $(seq 1 400); do
        [ -s "$out" ] && break
        sleep 0.025
    done
    HOLD_PID=$pid
    HOLD_OUT=$(cat "$out")
}

# want_total BYTES OUT: the probe saw a card of that size.
want_total() {
    [ "$(field total "$2")" = "$1" ] || fail "want total=$1 ($(($1 / MiB)) MiB): $2"
}

case $CASE in
unset_env)
    # The tenant drops every variable that names its limits; the fixed file still holds.
    container_limits CUDA_DEVICE_MEMORY_LIMIT_0=1024m
    out=$(env -u VGPU_LIMITS_FILE -u CUDA_DEVICE_MEMORY_SHARED_CACHE -u CUDA_DEVICE_MEMORY_LIMIT_0 \
        LD_PRELOAD="$LIB" "$PROBE" dlsym info) || fail "info: $out"
    want_total $GiB "$out"
    out=$(env -u VGPU_LIMITS_FILE -u CUDA_DEVICE_MEMORY_SHARED_CACHE -u CUDA_DEVICE_MEMORY_LIMIT_0 \
        LD_PRELOAD="$LIB" "$PROBE" dlsym fill) || fail "fill: $out"
    [ "${out#filled }" = $((GiB - 256 * MiB)) ] || fail "filled past the limit: $out"
    # Nor does pointing the variables elsewhere help: another region, no limits file.
    out=$(env -u VGPU_LIMITS_FILE CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/mine CUDA_DEVICE_MEMORY_LIMIT=0 \
        LD_PRELOAD="$LIB" "$PROBE" dlsym fill) || fail "fill: $out"
    [ "${out#filled }" = $((GiB - 256 * MiB)) ] || fail "another region lifted the limit: $out"
    [ ! -e "$T/mine" ] || fail "the environment chose the region"
    ;;

env_precedence)
    container_limits CUDA_DEVICE_MEMORY_LIMIT_0=1024m
    # Raising: every variable, and another limits file, above the fixed file's limit.
    for kv in CUDA_DEVICE_MEMORY_LIMIT=6g CUDA_DEVICE_MEMORY_LIMIT_0=6g CUDA_DEVICE_MEMORY_LIMIT_0=0 \
        VGPU_CONTEXT_MIB=0 GPU_CORE_UTILIZATION_POLICY=disable; do
        out=$(env "$kv" LD_PRELOAD="$LIB" "$PROBE" dlsym info) || fail "$kv: $out"
        want_total $GiB "$out"
        [ "$(field free "$out")" = $((GiB - 256 * MiB)) ] || fail "$kv changed the context charge: $out"
    done
    limits "$T/other" CUDA_DEVICE_MEMORY_LIMIT=6g
    out=$(VGPU_LIMITS_FILE=$T/other CUDA_DEVICE_MEMORY_LIMIT_0=6g pre "$PROBE" dlsym info) ||
        fail "another limits file: $out"
    want_total $GiB "$out"
    out=$(VGPU_LIMITS_FILE=$T/other CUDA_DEVICE_MEMORY_LIMIT_0=6g pre "$PROBE" dlsym fill) ||
        fail "fill: $out"
    [ "${out#filled }" = $((GiB - 256 * MiB)) ] || fail "raised by another file: $out"
    # Lowering works, from the environment or another file; the lower one wins.
    out=$(CUDA_DEVICE_MEMORY_LIMIT_0=512m pre "$PROBE" dlsym info) || fail "lower: $out"
    want_total $((512 * MiB)) "$out"
    out=$(env -u CUDA_DEVICE_MEMORY_LIMIT_0 CUDA_DEVICE_MEMORY_LIMIT=768m LD_PRELOAD="$LIB" \
        "$PROBE" dlsym info) || fail "lower: $out"
    want_total $((768 * MiB)) "$out"
    limits "$T/other" CUDA_DEVICE_MEMORY_LIMIT=600m
    out=$(VGPU_LIMITS_FILE=$T/other CUDA_DEVICE_MEMORY_LIMIT_0=700m pre "$PROBE" dlsym info) ||
        fail "lower by file: $out"
    want_total $((600 * MiB)) "$out"
    # A limit where the file sets none is a lowering too.
    container_limits CUDA_DEVICE_MEMORY_LIMIT_0=0
    out=$(env -u CUDA_DEVICE_MEMORY_LIMIT_0 LD_PRELOAD="$LIB" "$PROBE" dlsym info) || fail "$out"
    want_total $((8 * GiB)) "$out"
    out=$(CUDA_DEVICE_MEMORY_LIMIT_0=2g pre "$PROBE" dlsym info) || fail "$out"
    want_total $((2 * GiB)) "$out"
    # An invalid value is still refused, as outside a container.
    out=$(CUDA_DEVICE_MEMORY_LIMIT=lots pre "$PROBE" dlsym info 2>/dev/null)
    grep -q "cuInit=1" <<<"$out" || fail "invalid value accepted: $out"
    ;;

region_forged)
    # Process A holds 512 MiB (+ its 256 MiB context) of the container's 2 GiB. The
    # tenant then writes the region file (mapped read-write into every container): the
    # limit the creator recorded, and the usage counter, zeroed or garbage. The next
    # process still gets only what is left, and the container stays under its limit.
    container_limits CUDA_DEVICE_MEMORY_LIMIT_0=2048m
    export CUDA_DEVICE_MEMORY_LIMIT_0=2048m # as the device plugin sets it
    hold $((512 * MiB))
    [ "$HOLD_OUT" = ready ] || fail "A: $HOLD_OUT"
    a=$HOLD_PID
    dev0=64 # docs/protocol.md: device 0's record; memory_limit at +64, used at +80
    for forged in zero garbage; do
        for off in $((dev0 + 64)) $((dev0 + 80)); do
            if [ $forged = zero ]; then
                head -c 8 /dev/zero | dd of="$T/ctr/region" bs=1 seek=$off conv=notrunc status=none
            else
                printf '\xef\xbe\xad\xde\xef\xbe\xad\x7e' |
                    dd of="$T/ctr/region" bs=1 seek=$off conv=notrunc status=none
            fi
        done
        out=$(pre "$PROBE" dlsym fill) || fail "$forged: fill beside A: $out"
        [ "${out#filled }" = $((2 * GiB - 768 * MiB - 256 * MiB)) ] ||
            fail "$forged region: the next process got $out"
        hold $((1100 * MiB))
        [ "$HOLD_OUT" = oom ] || fail "$forged: a process past what is left: $HOLD_OUT"
        kill -9 "$HOLD_PID"
        wait "$HOLD_PID" 2>/dev/null
    done
    # The driver's truth: A and a full neighbour together stay within 2 GiB.
    hold $((1024 * MiB))
    [ "$HOLD_OUT" = ready ] || fail "B beside A: $HOLD_OUT"
    ta=$(field last "$("$TRUTH" 0 0 "$a")")
    tb=$(field last "$("$TRUTH" 0 0 "$HOLD_PID")")
    [ -n "$ta" ] && [ -n "$tb" ] && [ $((ta + tb)) -le $((2 * GiB)) ] ||
        fail "container past its limit: A=$ta B=$tb"
    # The monitor sees the repairs (the region's repaired counter, header offset 40).
    rep=$(od -An -t u8 -j 40 -N 8 "$T/ctr/region" | tr -d ' ')
    [ "$rep" -ge 2 ] || fail "repaired counter: $rep"
    ;;

file_unusable)
    # A limits file at the fixed path that cannot be read or parsed: every allocation is
    # refused, with one line on stderr, and counted in the container's region.
    container_limits CUDA_DEVICE_MEMORY_LIMIT_0=1024m
    pre "$PROBE" dlsym info >/dev/null || fail "creating the region"
    n=0
    for variant in garbage version empty directory bad_value; do
        rm -rf "$FIXED"
        case $variant in
        garbage) head -c 300 /dev/urandom >"$FIXED" ;;
        version) printf 'vgpu-limits 2\nCUDA_DEVICE_MEMORY_LIMIT=1g\n' >"$FIXED" ;;
        empty) : >"$FIXED" ;;
        directory) mkdir "$FIXED" ;;
        bad_value) printf 'vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT=lots\n' >"$FIXED" ;;
        esac
        out=$(LD_PRELOAD=$LIB timeout 20 "$PROBE" dlsym hold $MiB 2>"$T/err")
        rc=$?
        [ $rc = 5 ] && [ "$out" = context-oom ] || fail "$variant: allocations not refused: rc=$rc $out"
        [ "$(wc -l <"$T/err")" = 1 ] || fail "$variant: want one stderr line: $(cat "$T/err")"
        grep -q "^vgpu: .*limits file.*GPU memory allocations refused" "$T/err" ||
            fail "$variant: message: $(cat "$T/err")"
        n=$((n + 1))
        closed=$(od -An -t u8 -j 32 -N 8 "$T/ctr/region" | tr -d ' ')
        [ "$closed" -ge $n ] || fail "$variant: closed counter $closed, want >= $n"
    done
    # The same with no region to count in: still refused, still one line.
    out=$(CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/nowhere LD_PRELOAD=$LIB timeout 20 "$PROBE" dlsym hold \
        $MiB 2>"$T/err")
    [ "$out" = context-oom ] && [ "$(wc -l <"$T/err")" = 1 ] || fail "no region: $out $(cat "$T/err")"
    [ ! -e "$T/nowhere" ] || fail "a closed process created a region"
    ;;

*) fail "unknown case $CASE" ;;
esac
echo "ok $CASE"
