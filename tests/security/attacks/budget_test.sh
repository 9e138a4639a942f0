#!/usr/bin/env bash
# A process of the container forges its compute budget in the region (docs/security.md,
# "Compute budget and the region's fields"), against fakegpu's per-process GPU time:
#   budget_test.sh BUILD_DIR CASE
#   alone  a 30 % tenant, its region's budget and recorded share rewritten every 200 us by
#          budget_forger with each of 0, -1, INT64_MAX and a plausible big budget in turn:
#          it stays within its share (at most 30 + TOL) and still gets it (at least
#          30 - TOL) (before: 99.1-99.3 % for all but 0)
#   pair   the same beside an honest 70 % container on the device plugin's board: the
#          forger's tenant within 30 +- TOL (forged to 0: at most 30 + TOL, at least 3, as
#          zeroing only wipes its own container's kept credit), the neighbour within
#          70 +- TOL (before: 39-55 / 45-61)
#   burst  the pair with the forger's tenant in burst mode (ceiling 100 %): its own view
#          of the board holds it to 30 +- TOL beside the 70 (before: 47-55 %)
# Each tenant runs as in a vgpu container: its share in a read-only limits file at
# libvgpu's fixed path, /etc/vgpu/limits, bind-mounted in a mount namespace of its own
# (the script re-runs itself as root in a private mount namespace first, as
# tests/security/limits_test.sh does; without root or mount namespaces it skips, which
# fails under CI). TOL is the compute tests' bound (3 points). The shares are checked
# before the processes are waited for: a tenant the limiter stalls fails at once (and is
# killed on exit); a value whose run misses a bound runs once more, and the test fails
# when it misses twice. CTest runs these serially.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../../lib/vg_skip.sh"
. "$HERE/../../lib/fakegpu_tenants.sh"
vg_ns_reexec VGPU_BUDGET_TEST_NS "$@"
vg_tenants_init budget "$@"
# /etc/vgpu, private to this namespace, with a file for each tenant's limits to go over.
vg_private_etc_vgpu
vg_compute_env
unset CUDA_DEVICE_MEMORY_SHARED_CACHE
FORGER=$B/bin/budget_forger
TOL=${VGPU_COMPUTE_TOL:-3}
WINDOWS=${VGPU_COMPUTE_WINDOWS:-3}
RUN_MS=$(((WINDOWS + 1) * 1000 + 700))
VALUES=${VGPU_BUDGET_VALUES:-zero minus1 max big}

# fail: tests/lib/fakegpu_tenants.sh; its own tenant (below) runs in a container's mount
# namespace, and a missing share is a missed bound (tried once more), not a failure.

# tenant NAME SHARE [KEY=VALUE...] -- ARGS: one container's process in the background, as
# the device plugin starts it: the limits file (the share, the region $T/region.NAME, the
# board, and the KEY=VALUE lines) read-only at /etc/vgpu/limits in a mount namespace of
# its own, VGPU_COMPUTE_SLOT naming its board slot. unshare and sh exec, so the pid in
# pid_NAME is the tenant's.
tenant() {
    local name=$1 share=$2
    shift 2
    local f=$T/limits.$name
    {
        echo "# written by vgpu-device-plugin for pod t/$name, container main"
        echo "vgpu-limits 1"
        echo "CUDA_DEVICE_SM_LIMIT=$share"
        echo "CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/region.$name"
        echo "VGPU_COMPUTE_BOARD=$VGPU_COMPUTE_BOARD"
        while [ "$1" != "--" ]; do echo "$1"; shift; done
    } >"$f"
    shift
    chmod 0444 "$f"
    unshare --mount --propagation private sh -c 'mount --bind -o ro "$0" /etc/vgpu/limits && exec "$@"' \
        "$f" env VGPU_COMPUTE_SLOT="pod-${name}_main" LD_PRELOAD="$LIB" "$TENANT" "$@" \
        >"$T/out.$name" 2>&1 &
    pids+=($!)
    printf -v "pid_$name" '%s' "$!"
}

mean_of() { sed -n "s/^group=$1 mean=\([0-9.]*\).*/\1/p" <<<"$2"; }

wait_all() {
    local rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    pids=()
    [ $rc -eq 0 ] || { cat "$T"/out.* >&2; fail "a tenant or the forger failed"; }
}

failed=0 vfail=0
check() { # check LABEL ACTUAL LOW HIGH: every value is tried, the test fails at the end
    echo "$1: achieved $2 % (want $3..$4)"
    awk -v a="$2" -v lo="$3" -v hi="$4" 'BEGIN { exit !(a != "" && a >= lo && a <= hi) }' ||
        { echo "missed: $1: achieved $2 %, want $3..$4" >&2; vfail=1; }
}

# The probe runs outside any container: there is no /etc/vgpu/limits yet.
vg_board_uuid # board_layout (tests/lib/fakegpu_tenants.sh) needs it
: >/etc/vgpu/limits # what each tenant's own limits file is mounted over

# settle: after a value's checks, waits for the processes, or kills them when a check
# failed (a stalled tenant would never end).
settle() {
    if [ "$vfail" = 1 ]; then
        for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
        wait 2>/dev/null
        pids=()
        cat "$T"/out.* >&2
    else
        wait_all
        grep -q '^writes=[1-9]' "$T/out.forger" || [ "$1" = none ] || fail "the forger did not write ($1)"
    fi
}

LO=$((30 - TOL)) HI=$((30 + TOL))
# Beside a neighbour, zeroing the budget every 200 us wipes the credit the forger's own
# tenant kept while it waited for its turn (before this defence too: 24.4 % hard, 6.9 %
# burst): it can only cost its own container, so for 0 the floor is only that the limiter
# did not refuse everything.
ZERO_LO=3
# run_value V: one run with the budget forged to V; vfail=1 when a check missed.
run_value() {
    local v=$1
    vfail=0
    rm -rf "$T"/region.* "$T/board" "$T"/out.*
    mkdir -p "$T/board"
    case $CASE in
    alone)
        tenant a 30 -- 1000000 $RUN_MS
        "$FORGER" "$T/region.a" "$v" $((RUN_MS / 1000 + 1)) >"$T/out.forger" 2>&1 &
        pids+=($!)
        out=$("$TRUTH" 0 1 "$WINDOWS" "$pid_a")
        check "30 % tenant, its budget forged to $v every 200 us" "$(mean_of 0 "$out")" $LO $HI
        ;;
    pair)
        board_layout a 30
        board_layout b 70
        tenant a 30 -- 1000000 $RUN_MS
        tenant b 70 -- 1000000 $RUN_MS
        "$FORGER" "$T/region.a" "$v" $((RUN_MS / 1000 + 1)) >"$T/out.forger" 2>&1 &
        pids+=($!)
        out=$("$TRUTH" 0 1 "$WINDOWS" "$pid_a" "$pid_b")
        lo=$LO
        [ "$v" = zero ] && lo=$ZERO_LO
        check "30 % tenant, its budget forged to $v every 200 us" "$(mean_of 0 "$out")" $lo $HI
        check "70 % neighbour of the forger ($v)" "$(mean_of 1 "$out")" $((70 - TOL)) $((70 + TOL))
        ;;
    burst)
        board_layout a 30
        board_layout b 70
        tenant a 30 VGPU_COMPUTE_MODE=burst -- 1000000 $RUN_MS
        tenant b 70 -- 1000000 $RUN_MS
        "$FORGER" "$T/region.a" "$v" $((RUN_MS / 1000 + 1)) >"$T/out.forger" 2>&1 &
        pids+=($!)
        out=$("$TRUTH" 0 1 "$WINDOWS" "$pid_a" "$pid_b")
        lo=$LO
        [ "$v" = zero ] && lo=$ZERO_LO
        check "30 % burst tenant, its budget forged to $v every 200 us" "$(mean_of 0 "$out")" $lo $HI
        # The owner beside an honest burst tenant gets 59-69 % on this machine (also before
        # this defence): the pair case bounds the neighbour; this one the borrower.
        echo "70 % neighbour of the burst forger ($v): achieved $(mean_of 1 "$out") % (not bounded)"
        ;;
    *) fail "unknown case $CASE" ;;
    esac
    settle "$v"
}

# A value whose run misses a bound is run once more: on a machine loaded far beyond its
# cores a share can fall a few points for a run (as in the compute tests), while the
# attack this replays misses by tens of points every time (the table in docs/security.md).
for v in $VALUES; do
    run_value "$v"
    if [ "$vfail" = 1 ]; then
        echo "$v: a bound was missed; once more"
        run_value "$v"
        [ "$vfail" = 0 ] || { echo "FAIL: forged to $v: missed twice" >&2; failed=1; }
    fi
done
[ "$failed" = 0 ] || fail "see above"
echo "ok"
