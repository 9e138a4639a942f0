#!/usr/bin/env bash
# Attacks on the compute limiter and its node-wide board, against fakegpu:
# board_test.sh BUILD_DIR CASE. Each case plays a hostile tenant next to an honest one
# and checks that the honest one still gets its share (within TOL points, the compute
# tests' bound) or that the hostile one stays at its own. fakegpu's timeline is the
# truth (libvgpu_compute_truth). CTest runs these serially (label security;compute).
#   events  a 30 % tenant that holds every CUDA event it can before launching stays at
#           30 % (the limiter used to forward its launches unthrottled: 99.95 %)
#   forge   a hostile process rewrites a 30 % tenant's and a 70 % tenant's board slots
#           (share, claim, pending, heartbeat, garbage) all run long: both keep their
#           shares
#   turn    a hostile process holds the GPU's turn (far-future expiry, then rewriting it
#           continually): the honest tenants are delayed a bounded time, then keep their
#           shares
set -uo pipefail
B=$(cd "$1" && pwd)
CASE=$2
T=$(mktemp -d /tmp/vgpu-board-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT

export FAKEGPU_STATE_DIR=$T/state FAKEGPU_DEVICES="Test GPU:8GiB:16"
export LD_LIBRARY_PATH=$B/fakegpu VGPU_COMPUTE_BOARD=$T/board
unset VGPU_LIMITS_FILE VGPU_LOG_LEVEL CUDA_DEVICE_SM_LIMIT CUDA_DEVICE_MEMORY_LIMIT \
    CUDA_VISIBLE_DEVICES VGPU_COMPUTE_MODE VGPU_COMPUTE_BURST_LIMIT GPU_CORE_UTILIZATION_POLICY \
    VGPU_COMPUTE_SLOT
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
LIB=${VGPU_COMPUTE_LIB:-$B/lib/libvgpu.so}
TENANT=$B/bin/compute_tenant
TRUTH=$B/bin/libvgpu_compute_truth
HOSTILE=$B/bin/board_hostile
TOL=${VGPU_COMPUTE_TOL:-3}
WINDOWS=${VGPU_COMPUTE_WINDOWS:-3}
RUN_MS=$(((WINDOWS + 1) * 1000 + 700))

fail() { echo "FAIL: $*" >&2; exit 1; }

# tenant NAME SHARE [ENV...] -- ARGS: one container's process in the background; its pid
# is appended to group_NAME.
tenant() {
    local name=$1 share=$2
    shift 2
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    env CUDA_DEVICE_MEMORY_SHARED_CACHE="$T/region.$name" CUDA_DEVICE_SM_LIMIT="$share" \
        "${envs[@]}" LD_PRELOAD="$LIB" "$TENANT" "$@" >"$T/out.$name.$RANDOM" 2>&1 &
    pids+=($!)
    local var=group_$name
    printf -v "$var" '%s' "${!var:+${!var},}$!"
}

truth() { "$TRUTH" 0 1 "$WINDOWS" "$@"; }
mean_of() { sed -n "s/^group=$1 mean=\([0-9.]*\).*/\1/p" <<<"$2"; }
within() { awk -v a="$1" -v w="$2" -v t="$3" 'BEGIN { d = a - w; if (d < 0) d = -d; exit !(d <= t) }'; }

wait_tenants() {
    local rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    pids=()
    [ $rc -eq 0 ] || { cat "$T"/out.* >&2; fail "a tenant failed"; }
}

check() { # check LABEL ACTUAL WANT
    echo "$1: achieved $2 % (want $3 ± $TOL)"
    within "$2" "$3" "$TOL" || { cat "$T"/out.* >&2; fail "$1: achieved $2 %, want $3 ± $TOL"; }
}

case $CASE in
events) # before its first launch: the limiter has no events and charges wall time,
    # which covers more than the GPU time (at most the share, at least 2/3 of it)
    tenant a 30 COMPUTE_HOG_EVENTS=before -- 1000000 $RUN_MS
    out=$(truth "$group_a")
    wait_tenants
    cat "$T"/out.a.*
    got=$(mean_of 0 "$out")
    echo "30 % tenant holding every event from the start: achieved $got % (want 20..$((30 + TOL)))"
    awk -v a="$got" -v hi=$((30 + TOL)) 'BEGIN { exit !(a >= 20 && a <= hi) }' ||
        fail "30 % tenant holding every event: achieved $got %"
    grep -q "vgpu: compute limiter: no timing events" "$T"/out.a.* ||
        fail "the limiter did not say on stderr that it could not time the launches"
    [ "$(grep -c "vgpu: compute limiter" "$T"/out.a.*)" = 1 ] || fail "said more than once"
    "$B/bin/board_region" "$T/region.a" | tee "$T/counters"
    grep -q "closed_why=1 " "$T/counters" || fail "the region does not count the reason"
    awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^closed_n=/) { split($i, kv, "="); exit !(kv[2] > 100) } }' \
        "$T/counters" || fail "the region does not count the launches"
    # after its first launch: the reserve was made, the hog changes nothing
    group_a=
    tenant a 30 COMPUTE_HOG_EVENTS=after CUDA_DEVICE_MEMORY_SHARED_CACHE="$T/region.b" -- 1000000 $RUN_MS
    out=$(truth "$group_a")
    wait_tenants
    check "30 % tenant holding every event after its first launch" "$(mean_of 0 "$out")" 30
    ;;
*) fail "unknown case $CASE" ;;
esac
echo "ok"
