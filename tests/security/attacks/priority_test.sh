#!/usr/bin/env bash
# A tenant raises its own task priority (docs/security.md, "Task priority"), against
# fakegpu's per-process GPU time: priority_test.sh BUILD_DIR CASE
#   env      a low-priority container (its limits file says 1, its slot file is named low)
#            whose environment says CUDA_DEVICE_TASK_PRIORITY=0 and CUDA_TASK_PRIORITY=0,
#            saturating the GPU beside a high-priority container that saturates it too:
#            it stays low, held while the high one works: at most HELD_MAX (5) % of the
#            GPU, the high one at least 90 % (had the environment counted, it would run
#            beside the high one at about half).
#   board    a process of a low-priority container rewrites its own slot file every
#            200 us to look like a busy high-priority container (work pending, just
#            drained, no low bits: priority_forger.py) beside an honest low-priority
#            container that saturates the GPU: the honest one is not held, at least 90 %.
#   control  the same forger on a slot file the plugin named high (what a real high
#            container may do): the honest one is held, at most HELD_MAX %. It shows that
#            the board case measures a hold when there is one.
# Each tenant runs as in a vgpu container: its limits in a read-only file at libvgpu's
# fixed path, /etc/vgpu/limits, bind-mounted in a mount namespace of its own (the script
# re-runs itself as root in a private mount namespace first, as budget_test.sh does;
# without root or mount namespaces it skips, which fails under CI). CTest runs these
# serially.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../../lib/vg_skip.sh"
. "$HERE/../../lib/fakegpu_tenants.sh"
vg_ns_reexec VGPU_PRIORITY_TEST_NS "$@"
vg_tenants_init priority "$@"
vg_private_etc_vgpu
vg_compute_env
unset CUDA_DEVICE_MEMORY_SHARED_CACHE
HELD_MAX=${VGPU_PRIORITY_HELD_MAX:-5}
WINDOWS=3
RUN_MS=$(((WINDOWS + 1) * 1000 + 700))

# ctenant NAME PRIORITY [ENV...] -- ARGS: one container's process in the background, as
# the device plugin starts it: its board files (board_layout, the plugin's code, priority
# in the slot file's name), its limits file with CUDA_DEVICE_TASK_PRIORITY read-only at
# /etc/vgpu/limits in a mount namespace of its own; its pid in pid_NAME.
ctenant() {
    local name=$1 prio=$2
    shift 2
    board_layout "$name" 100 "$prio"
    local f=$T/limits.$name envs=()
    printf '%s\n' "vgpu-limits 1" "CUDA_DEVICE_TASK_PRIORITY=$prio" \
        "CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/region.$name" \
        "VGPU_COMPUTE_BOARD=$VGPU_COMPUTE_BOARD" >"$f"
    chmod 0444 "$f"
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    unshare --mount --propagation private sh -c 'mount --bind -o ro "$0" /etc/vgpu/limits && exec "$@"' \
        "$f" env "${envs[@]}" VGPU_COMPUTE_SLOT="pod-${name}_main" LD_PRELOAD="$LIB" "$TENANT" "$@" \
        >"$T/out.$name" 2>&1 &
    pids+=($!)
    printf -v "pid_$name" '%s' "$!"
}

share() { # share GROUP...: the truth's per-group means, one per line
    "$TRUTH" 0 1 "$WINDOWS" "$@" | sed -n 's/^group=[0-9]* mean=\([0-9.]*\).*/\1/p'
}
between() { awk -v a="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(a != "" && a >= lo && a <= hi) }'; }

# The probe runs outside any container: there is no /etc/vgpu/limits yet.
vg_board_uuid
: >/etc/vgpu/limits # what each tenant's own limits file is mounted over

case $CASE in
env)
    ctenant high 0 -- 2000000 $RUN_MS
    ctenant forger 1 CUDA_DEVICE_TASK_PRIORITY=0 CUDA_TASK_PRIORITY=0 -- 500000 $RUN_MS
    read -r -d '' hi lo < <(share "$pid_high" "$pid_forger")
    wait_tenants
    echo "high-priority tenant: $hi %; low one claiming 0 in its environment: $lo %"
    between "$lo" 0 "$HELD_MAX" || fail "the tenant raised its priority from its environment: $lo % beside a busy high one, want <= $HELD_MAX"
    between "$hi" 90 100 || fail "the high-priority tenant got $hi %, want >= 90"
    ;;
board | control)
    ctenant honest 1 -- 500000 $RUN_MS
    if [ "$CASE" = board ]; then board_layout forger 100 1; else board_layout forger 100 0; fi
    python3 "$HERE/priority_forger.py" "$slot_forger" $((RUN_MS / 1000 + 1)) &
    pids+=($!)
    read -r honest < <(share "$pid_honest")
    wait_tenants
    echo "$CASE: honest low-priority tenant beside the forger: $honest %"
    if [ "$CASE" = board ]; then
        between "$honest" 90 100 || fail "a forged slot file held a neighbour: $honest %, want >= 90"
    else
        between "$honest" 0 "$HELD_MAX" || fail "a slot file named high did not hold the low tenant: $honest %"
    fi
    ;;
*) fail "unknown case $CASE" ;;
esac
