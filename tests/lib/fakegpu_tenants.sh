# Shared set-up of the shell tests that run libvgpu tenants against fakegpu
# (tests/integration/libvgpu_test.sh, libvgpu_compute_test.sh, tests/security/board_test.sh,
# limits_test.sh, attacks/budget_test.sh, turn_test.sh, dispatch_test.sh), sourced at the
# start; vg_tenants_init takes the script's arguments. Each script keeps its own bounds,
# messages and cases; this file holds only what they do alike (tests/lib/README.md).
# shellcheck shell=bash

# vg_ns_reexec VAR ARGS...: unless VAR is set, re-runs the script ($0 ARGS) as root in a
# private mount namespace with VAR=1 (for vg_private_etc_vgpu); without root or mount
# namespaces it skips through vg_skip (a failure under CI).
vg_ns_reexec() {
    local var=$1
    shift
    [ -z "${!var:-}" ] || return 0
    [ "$(id -u)" = 0 ] || vg_skip "root (a private mount namespace over /etc/vgpu)"
    command -v unshare >/dev/null || vg_skip "unshare (util-linux)"
    unshare --mount --propagation private true 2>/dev/null || vg_skip "mount namespaces"
    export "$var=1"
    exec unshare --mount --propagation private "$0" "$@"
}

# vg_tenants_init NAME BUILD_DIR CASE [ARG...] (NAME and the script's arguments): B, the
# build directory; CASE; T, a fresh directory /tmp/vgpu-NAME-XXXXXX; pids, the background
# processes the exit trap kills (with SIGKILL) before it removes T.
vg_tenants_init() {
    B=$(cd "$2" && pwd)
    CASE=$3
    T=$(mktemp -d "/tmp/vgpu-$1-XXXXXX")
    pids=()
    trap vg_tenants_cleanup EXIT
}

vg_tenants_cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    if [ -n "${VG_PRIVATE_ETC:-}" ]; then
        umount /etc/vgpu 2>/dev/null
        umount /etc 2>/dev/null
    fi
    rm -rf "$T"
}

# vg_private_etc_vgpu: /etc/vgpu, private to this mount namespace (vg_ns_reexec): a tmpfs
# over it, or, when the host has none, an overlay over /etc whose writes land in T. The
# exit trap unmounts them; nothing on the host changes.
vg_private_etc_vgpu() {
    VG_PRIVATE_ETC=1
    if [ -d /etc/vgpu ]; then
        mount -t tmpfs tmpfs /etc/vgpu || vg_skip "a tmpfs over /etc/vgpu"
    else
        mkdir -p "$T/etc.up" "$T/etc.work"
        mount -t overlay overlay -o "lowerdir=/etc,upperdir=$T/etc.up,workdir=$T/etc.work" /etc ||
            vg_skip "an overlay over /etc (to add /etc/vgpu privately)"
        mkdir /etc/vgpu || vg_skip "/etc/vgpu in the overlay"
    fi
}

# vg_fakegpu_env: fakegpu's state in T, one 8 GiB device, its libraries first on the
# library path; none of libvgpu's settings from the caller's environment. Sanitizer
# builds: the test programs carry ASan, libvgpu (UBSan only) is preloaded ahead.
vg_fakegpu_env() {
    export FAKEGPU_STATE_DIR=$T/state FAKEGPU_DEVICES="Test GPU:8GiB:16"
    export LD_LIBRARY_PATH=$B/fakegpu
    unset VGPU_LIMITS_FILE VGPU_LOG_LEVEL CUDA_DEVICE_SM_LIMIT CUDA_VISIBLE_DEVICES
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
}

# vg_compute_env: vg_fakegpu_env for the compute tests: the board in T, no memory limit,
# compute mode or slot from the caller; LIB (VGPU_COMPUTE_LIB runs another build of
# libvgpu), TENANT and TRUTH, the programs.
vg_compute_env() {
    vg_fakegpu_env
    export VGPU_COMPUTE_BOARD=$T/board
    unset CUDA_DEVICE_MEMORY_LIMIT VGPU_COMPUTE_MODE VGPU_COMPUTE_BURST_LIMIT \
        GPU_CORE_UTILIZATION_POLICY VGPU_COMPUTE_SLOT
    LIB=${VGPU_COMPUTE_LIB:-$B/lib/libvgpu.so}
    TENANT=$B/bin/compute_tenant
    TRUTH=$B/bin/libvgpu_compute_truth
}

# shellcheck disable=SC2034 # for the scripts that source this file
MiB=$((1 << 20))
# shellcheck disable=SC2034
GiB=$((1 << 30))

fail() { echo "FAIL: $*" >&2; exit 1; }
# field NAME LINE: the number after NAME= in LINE.
field() { sed -n "s/.*\b$1=\([0-9]*\).*/\1/p" <<<"$2"; }

# tenant NAME SHARE [ENV...] -- ARGS: one container's process (its own region file,
# $T/region.NAME) running compute_tenant ARGS under LD_PRELOAD in the background, after
# DELAY seconds when DELAY is set; its pid is appended to the variable group_NAME.
tenant() {
    local name=$1 share=$2
    shift 2
    local envs=() delay=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    [ -z "${DELAY:-}" ] || delay=(bash -c 'sleep "$0"; exec "$@"' "$DELAY")
    "${delay[@]}" env CUDA_DEVICE_MEMORY_SHARED_CACHE="$T/region.$name" \
        CUDA_DEVICE_SM_LIMIT="$share" "${envs[@]}" LD_PRELOAD="$LIB" "$TENANT" "$@" \
        >"$T/out.$name.$RANDOM" 2>&1 &
    pids+=($!)
    local var=group_$name
    printf -v "$var" '%s' "${!var:+${!var},}$!"
}

# vg_board_uuid: UUID, the GPU's UUID as libvgpu names its board file (from a throwaway
# run of TENANT under LIB).
vg_board_uuid() {
    env CUDA_DEVICE_MEMORY_SHARED_CACHE="$T/region.probe" CUDA_DEVICE_SM_LIMIT=50 \
        VGPU_COMPUTE_BOARD="$T/probe" LD_PRELOAD="$LIB" "$TENANT" 1000 20 >/dev/null 2>&1 ||
        fail "probe tenant failed"
    UUID=$(basename "$(ls "$T"/probe/*.board)" .board)
}

# board_layout NAME PERCENT [PRIORITY]: container NAME's board files as the device plugin
# makes them (pod uid pod-NAME, container main; after vg_board_uuid; PRIORITY: its pod's
# nvidia.com/priority); the slot file's path in slot_NAME.
board_layout() {
    local path
    path=$("$B/bin/board_layout" "$VGPU_COMPUTE_BOARD" "$UUID" "pod-$1" main "${@:2}") ||
        fail "board_layout failed"
    printf -v "slot_$1" '%s' "$path"
}

# truth GROUP...: mean share per group after a 1 s warm-up, one line per group. The truth
# tool's failure, or a group it did not report, is a failure, never a 0 %.
truth() { "$TRUTH" 0 1 "$WINDOWS" "$@" || fail "libvgpu_compute_truth failed"; }
mean_of() {
    local m
    m=$(sed -n "s/^group=$1 mean=\([0-9.]*\).*/\1/p" <<<"$2")
    [ -n "$m" ] || fail "no share measured for group $1: $2"
    echo "$m"
}
# within ACTUAL WANT TOL
within() { awk -v a="$1" -v w="$2" -v t="$3" 'BEGIN { d = a - w; if (d < 0) d = -d; exit !(d <= t) }'; }

# wait_tenants: waits for every process in pids; one that failed fails the test, with the
# tenants' output.
wait_tenants() {
    local rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    pids=()
    [ $rc -eq 0 ] || { cat "$T"/out.* >&2; fail "a tenant failed"; }
}
