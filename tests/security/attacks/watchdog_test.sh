#!/usr/bin/env bash
# The watchdog's round-2 attacks against vgpu-monitor under kill, with processes in real
# cgroups on fakegpu: watchdog_test.sh BUILD CASE (watchdog.cmake lists the cases). The
# cgroup, limits, API-server and log helpers are security.monitor's
# (tests/security/monitor_test.sh). Each case prints its figures before it judges them.
#
# Bounds (docs/security.md, "The watchdog acts on the container"), at the default 100 ms:
#   first sight: a process not registered with libvgpu is killed within one sampling
#   interval of its first appearance, the documented 250 ms p99 checked as it is: over the
#   trials the p99 (with 10 trials, the worst) and every single-trial case <= 250 ms
#   (measured: 76 ms p99, 87 ms worst over 100 trials on the loaded development machine);
#   relay: the container is quarantined and its parent killed within 2 s; the neighbour's
#   512 MiB allocations (one every 20 ms for 5 s) fail at most 25 % of the time.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WD_CASE=$2
MONITOR_TEST_LIB=1
. "$HERE/../monitor_test.sh" "$1" lib
ATTACK=$B/bin/watchdog_attack
# To measure another build's monitor (the figures before a fix): VGPU_WATCHDOG_MONITOR=PATH,
# and VGPU_WATCHDOG_FLAGS for flags of its own (e.g. "--policy kill").
MONITOR=${VGPU_WATCHDOG_MONITOR:-$MONITOR}
read -r -a MORE_FLAGS <<<"${VGPU_WATCHDOG_FLAGS:-}"

# ready_ms NAME: the attacker's own "ready at_ms=..." (after its context exists).
ready_ms() { sed -n 's/^ready at_ms=\([0-9]*\).*/\1/p' "$T/$1.log" | head -1; }

# setup API(yes|no): the two pods' cgroups and limits, the neighbour, the monitor.
setup() {
    cg_a=$(cgpath v2 systemd "$POD_A" "$CID_A" cri-containerd) &&
        cg_b=$(cgpath v2 systemd "$POD_B" "$CID_B" cri-containerd) ||
        vg_skip "a writable cgroup v2 file system under $CGFS (creating cgroups needs root)"
    limits "$POD_A" main 1024
    limits "$POD_B" work 1024
    local flags=(--interval-ms 100 --listen off --region-dir "$CONTAINERS"
        --cgroup-root "/$SUB" --metrics-file "$T/metrics" "${EXTRA_FLAGS[@]}" "${MORE_FLAGS[@]}")
    if [ "$1" = yes ]; then
        api_start containerd
        flags+=(--kubeconfig "$T/kubeconfig" --node-name node-1)
    fi
    "$MONITOR" "${flags[@]}" >"$T/monitor.log" 2>&1 &
    MON=$!
    pids+=($MON)
    wait_for "$T/monitor.log" "watching" 10 || fail "the monitor did not start"
    grep -q "policy=kill" "$T/monitor.log" || fail "the monitor's default policy is not kill"
    if [ "$1" = yes ]; then
        wait_for "$T/monitor.log" "pods listed pods=2 containers=2" 10 ||
            fail "the monitor did not list the node's pods"
    fi
}

# neighbour SECONDS: the other pod's process under libvgpu, allocating 512 MiB every 20 ms.
neighbour() {
    start neighbour "$cg_b" env LD_PRELOAD="$B/lib/libvgpu.so" \
        VGPU_LIMITS_FILE="$CONTAINERS/${POD_B}_work/limits" "$ATTACK" neighbour "$1" \
        $((512 * MiB)) 20
}

# neighbour_result: "attempts failed" once it has finished (call neighbour_wait first:
# a command substitution cannot wait for this shell's children).
neighbour_wait() { wait "$PID_neighbour" 2>/dev/null; }
neighbour_result() {
    sed -n 's/^attempts=\([0-9]*\) failed=\([0-9]*\)$/\1 \2/p' "$T/neighbour.log"
}

# first_sight NAME PROGRAM...: starts an attacker in the attacker's container, returns
# (in LAT) the ms from its ready line to the monitor's kill of it.
first_sight() {
    local name=$1
    shift
    start "$name" "$cg_a" "$@"
    local pid t_ready t_kill
    pid=$(eval echo "\$PID_$name")
    t_ready=$(ready_ms "$name")
    for _ in $(seq 300); do alive "$pid" || break; sleep 0.01; done
    alive "$pid" && fail "$name (pid $pid) still runs 3 s after it was ready"
    wait_for "$T/monitor.log" "killed a process.*pid=$pid " 2 || fail "no kill of $name logged"
    t_kill=$(log_ms "$T/monitor.log" "killed a process.*pid=$pid ")
    LAT=$((t_kill - t_ready))
    [ "$LAT" -lt 0 ] && LAT=0 # the two clocks' ms rounding
    echo "$name: killed $LAT ms after its first appearance"
}

EXTRA_FLAGS=()
case $WD_CASE in
small)
    # An unregistered process holding 1 MiB (plus its context): well under the limit,
    # caught for what it is, not for what it holds. Ten trials (VGPU_WATCHDOG_TRIALS for
    # more: the figures in docs/security.md).
    trials=${VGPU_WATCHDOG_TRIALS:-10}
    setup no
    lats=()
    for i in $(seq "$trials"); do
        first_sight "small$i" "$ATTACK" hold $((1 * MiB))
        lats+=("$LAT")
    done
    sorted=$(printf '%s\n' "${lats[@]}" | sort -n)
    median=$(sed -n "$(((trials + 1) / 2))p" <<<"$sorted")
    p99=$(sed -n "$(((trials * 99 + 99) / 100))p" <<<"$sorted")
    worst=$(tail -1 <<<"$sorted")
    echo "first sight over $trials trials: median $median ms, p99 $p99 ms, worst $worst ms"
    grep -q 'a GPU process not registered with libvgpu.*why="libvgpu not loaded"' "$T/monitor.log" ||
        fail "the reason is not logged"
    [ "$p99" -le 250 ] || fail "first-sight kill p99 $p99 ms (documented 250)"
    grep -q "^vgpu_monitor_unregistered_total $trials$" "$T/metrics" ||
        fail "unregistered_total is not 10: $(grep unregistered "$T/metrics")"
    ;;
burst)
    # The issue's attacker: 1 ms bursts that fill the card every 300 ms, its context kept
    # between them (as the real driver lists it, so does fakegpu's NVML).
    setup no
    neighbour 3
    first_sight burst "$ATTACK" burst 300 1
    neighbour_wait
    read -r attempts failed <<<"$(neighbour_result)"
    echo "neighbour: $failed of $attempts allocations of 512 MiB failed over 3 s"
    [ "$LAT" -le 250 ] || fail "the bursting process was killed $LAT ms after it appeared (documented 250)"
    [ -n "$attempts" ] && [ "$attempts" -gt 0 ] || fail "the neighbour did not report"
    [ $((failed * 100)) -le $((attempts * 5)) ] ||
        fail "the neighbour's allocations failed $failed of $attempts times (bound 5 %)"
    ;;
forge)
    # A process that never loads libvgpu writes a live slot with its own pid into the
    # container's region (and holds the slot's lock): the region is the tenant's to
    # write, so the slot alone does not register it.
    setup no
    # The container's region, made by a registered process as libvgpu would.
    start elder "$cg_a" env LD_PRELOAD="$B/lib/libvgpu.so" \
        VGPU_LIMITS_FILE="$CONTAINERS/${POD_A}_main/limits" "$ATTACK" hold $((64 * MiB))
    first_sight forger "$ATTACK" forge "$CONTAINERS/${POD_A}_main/region" $((1 * MiB))
    grep -q "forged slot" "$T/forger.log" || fail "the forger found no free slot"
    [ "$LAT" -le 250 ] || fail "the forger was killed $LAT ms after it appeared (documented 250)"
    sleep 0.5
    alive "$PID_elder" || fail "the registered elder of the same container was killed"
    ;;
relay)
    # A parent that never touches the GPU forks children one after another, each filling
    # the card without libvgpu.
    # The defaults: quarantine after 3 violations within 60 s, for 600 s.
    setup yes
    neighbour 5
    start relay "$cg_a" "$ATTACK" relay
    t0=$(ready_ms relay)
    neighbour_wait
    read -r attempts failed <<<"$(neighbour_result)"
    children=$(grep -c "^child " "$T/relay.log")
    echo "relay: $children children; neighbour: $failed of $attempts allocations of 512 MiB failed over 5 s"
    alive "$PID_relay" && fail "the relay's parent still runs after 5 s ($children children)"
    t_q=$(log_ms "$T/monitor.log" "container quarantined")
    [ -n "$t_q" ] || fail "no quarantine logged"
    t_parent=$(log_ms "$T/monitor.log" "killed a process of a quarantined container.*pid=$PID_relay ")
    [ -n "$t_parent" ] || fail "the parent's kill is not logged"
    echo "quarantined $((t_q - t0)) ms after the relay started, parent killed at $((t_parent - t0)) ms"
    [ $((t_parent - t0)) -le 2000 ] || fail "the parent was killed $((t_parent - t0)) ms after the start (bound 2000)"
    [ $((failed * 100)) -le $((attempts * 25)) ] ||
        fail "the neighbour's allocations failed $failed of $attempts times (bound 25 %)"
    cat >"$T/quarantine.py" <<'PY'
import json, sys, time, urllib.request
api, uid = sys.argv[1:3]
for _ in range(100):
    events = json.load(urllib.request.urlopen(api + "/api/v1/events"))["items"]
    pod = json.load(urllib.request.urlopen(api + "/api/v1/namespaces/default/pods/attacker"))
    conds = [c for c in pod.get("status", {}).get("conditions", [])
             if c.get("type") == "vgpu.io/GPUIsolationViolated"]
    mine = [e for e in events if e["reason"] == "GPUIsolationViolated"]
    if mine and conds:
        break
    time.sleep(0.05)
ok = [e for e in mine if e["type"] == "Warning" and e["involvedObject"]["uid"] == uid
      and e["involvedObject"].get("fieldPath") == "spec.containers{main}"]
good = [c for c in conds if c["status"] == "True" and c["reason"] == "RepeatedViolations"
        and c.get("lastTransitionTime")]
others = [e for e in events if e["involvedObject"].get("name") != "attacker"]
neighbour = json.load(urllib.request.urlopen(api + "/api/v1/namespaces/team-b/pods/neighbour"))
theirs = [c for c in neighbour.get("status", {}).get("conditions", [])
          if c.get("type") == "vgpu.io/GPUIsolationViolated"]
# The pod's other status is kept (a strategic merge by condition type).
phase = pod.get("status", {}).get("phase")
if len(ok) != 1 or len(good) != 1 or others or theirs or phase != "Running":
    print("events:", json.dumps(events, indent=1))
    print("pod:", json.dumps(pod, indent=1))
    sys.exit(1)
PY
    [ -n "${VGPU_WATCHDOG_SHOW:-}" ] && cat "$T/monitor.log"
    python3 "$T/quarantine.py" "$API" "$POD_A" ||
        fail "no GPUIsolationViolated Event and condition on the attacker's pod alone"
    grep -q "^vgpu_monitor_quarantines_total 1$" "$T/metrics" ||
        fail "quarantines_total is not 1: $(grep quarantine "$T/metrics")"
    ;;
*)
    echo "unknown case $WD_CASE" >&2
    exit 2
    ;;
esac
kill "$MON"
wait "$MON"
rc=$?
[ $rc = 0 ] || fail "the monitor exited $rc on SIGTERM"
echo "ok: $WD_CASE"
