#!/usr/bin/env bash
# vgpu-monitor against processes in real cgroups on fakegpu: monitor_test.sh BUILD CASE.
#
# The attacker is a process in a container limited to 1 GiB that runs WITHOUT libvgpu
# and fills the card (the bypass libvgpu cannot stop). The neighbour is a process of
# another pod that holds 512 MiB of its 1 GiB through libvgpu. Each case puts them in
# kubepods-like cgroups created under a test-owned subtree (removed at exit) and runs
# vgpu-monitor with --cgroup-root on that subtree:
#
#   truth       fakegpu's NVML reports each process's own memory (allocations + context)
#               with and without libvgpu in the process, whatever libvgpu's estimate
#   v1-warn     cgroup v1 (the pids hierarchy), cgroupfs layout, with the stand-in API
#               server: the violation is logged once with the container's name, an
#               Event reaches the API server, the metric counts it, nothing is killed
#   v2-kill     cgroup v2, systemd layout (cri-containerd scopes), no API server: the
#               attacker is killed within the target, an older in-limit process of the
#               same container and the neighbour survive
#   v1-kill     cgroup v1, systemd layout (crio scopes), with the API server: killed,
#               an Event names the kill
#   v2-warn     cgroup v2, cgroupfs layout, no API server: logged per pod, left running
#   nocgroup    without a writable cgroup file system the test cannot run: skipped
#               locally, a failure under CI (tests/lib/vg_skip.sh)
#
# Targets (docs/security.md): detection within 250 ms p99 of the attacker starting, plus
# a stated 100 ms margin for the attacker's own start-up on a loaded machine (its process
# start, cuInit and context, which the figure counts); the kill within 100 ms of
# detection (documented: 8 ms p99, in the same sample). bench/monitor.sh measures p50/p99
# over 50 trials.
set -uo pipefail
B=$(cd "$1" && pwd)
CASE=$2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$ROOT/tests/lib/vg_skip.sh"
T=$(mktemp -d /tmp/vgpu-monitor-XXXXXX)
CGFS=${VGPU_MONITOR_CGROUP_FS:-/sys/fs/cgroup}
SUB=vgpu-monitor-test-$$-$RANDOM
pids=()
cgdirs=("$CGFS/pids/$SUB" "$CGFS/unified/$SUB" "$CGFS/$SUB")
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    for d in "${cgdirs[@]}"; do
        [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    rm -rf "$T"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    for f in "$T"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done
    exit 1
}

MiB=$((1 << 20))
export FAKEGPU_STATE_DIR=$T/state FAKEGPU_DEVICES="Test GPU:16GiB:16" FAKEGPU_CONTEXT_MIB=256
export LD_LIBRARY_PATH=$B/fakegpu
unset LD_PRELOAD VGPU_LIMITS_FILE CUDA_DEVICE_MEMORY_SHARED_CACHE CUDA_DEVICE_MEMORY_LIMIT \
    CUDA_VISIBLE_DEVICES VGPU_LOG_LEVEL
# Sanitizer builds: the probe carries ASan, libvgpu (UBSan only) is preloaded ahead.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
PROBE=$B/bin/libvgpu_probe_link
MONITOR=$B/bin/vgpu-monitor
UUID=$("$B/bin/fakegpu-ctl" status | awk '{print $2}')
[ -n "$UUID" ] || fail "fakegpu-ctl status gave no UUID"

POD_A=0a1b2c3d-1111-2222-3333-444455556666 # the attacker's pod
POD_B=99999999-8888-7777-6666-555555555555 # the neighbour's pod
CID_A=$(printf 'a%.0s' {1..64})
CID_B=$(printf 'b%.0s' {1..64})
CONTAINERS=$T/containers

now_ms() { date +%s%3N; }
# alive PID: running (a zombie no longer holds GPU memory: the driver freed it at exit).
alive() { [ -r "/proc/$1/stat" ] && [ "$(sed 's/.*) //' "/proc/$1/stat" | cut -c1)" != Z ]; }

# limits POD CONTAINER MIB: the device plugin's files for one container.
limits() {
    mkdir -p "$CONTAINERS/$1_$2"
    printf '# written by the test\nvgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=%sm\nVGPU_DEVICE_UUID_0=%s\nCUDA_DEVICE_MEMORY_SHARED_CACHE=%s\n' \
        "$3" "$UUID" "$CONTAINERS/$1_$2/region" >"$CONTAINERS/$1_$2/limits"
    chmod 0444 "$CONTAINERS/$1_$2/limits"
}

# cgpath VERSION LAYOUT POD CID RUNTIME: the container's cgroup directory, created.
cgpath() {
    local version=$1 layout=$2 pod=$3 cid=$4 runtime=$5 base rel
    if [ "$version" = v1 ]; then base=$CGFS/pids; else base=$CGFS/unified; fi
    [ -d "$base" ] || base=$CGFS # a pure cgroup v2 machine mounts it at the top
    if [ "$layout" = cgroupfs ]; then
        rel=kubepods/burstable/pod$pod/$cid
    else
        rel=kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod${pod//-/_}.slice/$runtime-$cid.scope
    fi
    mkdir -p "$base/$SUB/$rel" 2>/dev/null || return 1
    [ -e "$base/$SUB/$rel/cgroup.procs" ] || return 1 # not a cgroup file system
    echo "$base/$SUB/$rel"
}

# start NAME CGROUP_DIR PROGRAM...: runs the program inside the cgroup; waits for "ready".
start() {
    local name=$1 dir=$2
    shift 2
    sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$dir" "$@" >"$T/$name.log" 2>&1 &
    pids+=($!)
    eval "PID_$name=$!"
    for _ in $(seq 500); do
        grep -q ready "$T/$name.log" && return 0
        kill -0 "$!" 2>/dev/null || fail "$name exited before it was ready"
        sleep 0.01
    done
    fail "$name never got ready"
}

# log_ms FILE PATTERN: the timestamp (ms since the epoch) of the first matching log line.
log_ms() {
    local ts
    ts=$(grep -m1 -- "$2" "$1" | awk '{print $2}')
    [ -n "$ts" ] && date -d "$ts" +%s%3N
}

wait_for() { # FILE PATTERN SECONDS
    for _ in $(seq $(($3 * 50))); do
        grep -q -- "$2" "$1" && return 0
        sleep 0.02
    done
    return 1
}

api_start() {
    cat >"$T/fixture.json" <<EOF
{"pods": [
 {"metadata": {"name": "attacker", "namespace": "default", "uid": "$POD_A"},
  "spec": {"nodeName": "node-1", "schedulerName": "vgpu-scheduler",
           "containers": [{"name": "main"}]},
  "status": {"phase": "Running",
             "containerStatuses": [{"name": "main", "containerID": "$1://$CID_A"}]}},
 {"metadata": {"name": "neighbour", "namespace": "team-b", "uid": "$POD_B"},
  "spec": {"nodeName": "node-1", "schedulerName": "vgpu-scheduler",
           "containers": [{"name": "work"}]},
  "status": {"phase": "Running",
             "containerStatuses": [{"name": "work", "containerID": "$1://$CID_B"}]}}
]}
EOF
    python3 "$ROOT/tests/kube_api_server.py" --port 0 --port-file "$T/port" \
        --fixture "$T/fixture.json" >"$T/api.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 500); do [ -s "$T/port" ] && break; sleep 0.01; done
    [ -s "$T/port" ] || fail "the API server did not start"
    API=http://127.0.0.1:$(cat "$T/port")
    printf 'apiVersion: v1\nkind: Config\ncurrent-context: t\ncontexts: [{name: t, context: {cluster: k, user: u}}]\nclusters: [{name: k, cluster: {server: "%s"}}]\nusers: [{name: u, user: {token: test}}]\n' \
        "$API" >"$T/kubeconfig"
}

# run_case VERSION LAYOUT RUNTIME POLICY API(yes|no)
run_case() {
    local version=$1 layout=$2 runtime=$3 policy=$4 api=$5
    local cg_a cg_b
    cg_a=$(cgpath "$version" "$layout" "$POD_A" "$CID_A" "$runtime") &&
        cg_b=$(cgpath "$version" "$layout" "$POD_B" "$CID_B" "$runtime") ||
        vg_skip "a writable cgroup $version file system under $CGFS (creating cgroups needs root)"
    limits "$POD_A" main 1024
    limits "$POD_B" work 1024
    local flags=(--policy "$policy" --interval-ms 100 --listen 127.0.0.1:0 --region-dir "$CONTAINERS"
        --cgroup-root "/$SUB" --metrics-file "$T/metrics")
    if [ "$api" = yes ]; then
        case $runtime in cri-containerd) api_start containerd ;; crio) api_start cri-o ;; *) api_start docker ;; esac
        flags+=(--kubeconfig "$T/kubeconfig" --node-name node-1)
    fi
    # The neighbour, held to its limit by libvgpu, and an older in-limit process of the
    # attacker's own container, registered with libvgpu as every honest process is.
    start neighbour "$cg_b" env LD_PRELOAD="$B/lib/libvgpu.so" \
        VGPU_LIMITS_FILE="$CONTAINERS/${POD_B}_work/limits" "$PROBE" link hold $((512 * MiB))
    start elder "$cg_a" env LD_PRELOAD="$B/lib/libvgpu.so" \
        VGPU_LIMITS_FILE="$CONTAINERS/${POD_A}_main/limits" "$PROBE" link hold $((256 * MiB))
    "$MONITOR" "${flags[@]}" >"$T/monitor.log" 2>&1 &
    local mon=$!
    pids+=($mon)
    wait_for "$T/monitor.log" "watching" 10 || fail "the monitor did not start"
    if [ "$api" = yes ]; then
        wait_for "$T/monitor.log" "pods listed pods=2 containers=2" 10 ||
            fail "the monitor did not list the node's pods"
    fi
    sleep 0.3
    grep -q "over its GPU memory limit" "$T/monitor.log" && fail "a violation before the attack"
    # The attack: no libvgpu, and the whole card that is left.
    local t0
    t0=$(now_ms)
    start attacker "$cg_a" "$PROBE" link hold $(((16384 - 256 - 768 - 512 - 256) * MiB))
    wait_for "$T/monitor.log" "container over its GPU memory limit" 5 || fail "no violation logged"
    local t_over
    t_over=$(log_ms "$T/monitor.log" "container over its GPU memory limit")
    echo "detected $((t_over - t0)) ms after the attacker started"
    [ $((t_over - t0)) -le 350 ] || fail "detection took $((t_over - t0)) ms (target 250 + 100 margin)"
    local who="container=main"
    [ "$api" = yes ] || who="container=(whole pod)"
    grep "container over its GPU memory limit" "$T/monitor.log" | grep -q -- "pod_uid=$POD_A" ||
        fail "the violation does not name the attacker's pod"
    grep "container over its GPU memory limit" "$T/monitor.log" | grep -qF -- "$who" ||
        fail "the violation does not name $who"
    if [ "$policy" = kill ]; then
        local t_dead=""
        for _ in $(seq 150); do
            alive "$PID_attacker" || { t_dead=$(now_ms); break; }
            sleep 0.01
        done
        [ -n "$t_dead" ] || fail "the attacker still runs 1.5 s after detection"
        local t_kill
        t_kill=$(log_ms "$T/monitor.log" "killed a process")
        [ -n "$t_kill" ] || fail "no kill logged"
        echo "killed $((t_kill - t_over)) ms after detection, gone $((t_dead - t0)) ms after the start"
        [ $((t_kill - t_over)) -le 100 ] || fail "the kill took $((t_kill - t_over)) ms after detection (target 100)"
        grep "killed a process" "$T/monitor.log" | grep -q "pid=$PID_attacker " ||
            fail "the kill was not the attacker's"
        [ "$(grep -c "killed a process" "$T/monitor.log")" = 1 ] || fail "more than one kill"
        grep -q "container back under its GPU memory limit" "$T/monitor.log" ||
            wait_for "$T/monitor.log" "container back under its GPU memory limit" 2 ||
            fail "the container was not seen back under its limit"
    else
        sleep 1
        alive "$PID_attacker" || fail "warn killed the attacker"
        [ "$(grep -c "container over its GPU memory limit" "$T/monitor.log")" = 1 ] ||
            fail "warn logged the episode more than once"
    fi
    # Nothing else was touched.
    alive "$PID_neighbour" || fail "the neighbour was killed"
    alive "$PID_elder" || fail "the in-limit elder of the attacker's container was killed"
    grep -q "pod_uid=$POD_B" "$T/monitor.log" && fail "the neighbour was reported"
    grep -q "vgpu_monitor_violations_total{policy=\"$policy\"} 1$" "$T/metrics" ||
        fail "the metric does not count one violation: $(grep violations_total "$T/metrics")"
    if [ "$api" = yes ]; then
        # The metrics endpoint names the container the watchdog acted on, and only it.
        local port
        port=$(sed -n 's/.*serving metrics .* port=\([0-9]*\).*/\1/p' "$T/monitor.log")
        curl -sf "http://127.0.0.1:$port/metrics" >"$T/scrape" || fail "no /metrics on port $port"
        local kills=0
        [ "$policy" = kill ] && kills=1
        grep -q "^vgpu_container_watchdog_violations_total{.*container=\"main\",pod_uid=\"$POD_A\"} 1$" "$T/scrape" ||
            fail "/metrics does not count the attacker's violation: $(grep watchdog "$T/scrape")"
        grep -q "^vgpu_container_watchdog_kills_total{.*container=\"main\",pod_uid=\"$POD_A\"} $kills$" "$T/scrape" ||
            fail "/metrics does not count $kills kills: $(grep watchdog "$T/scrape")"
        grep -q "^vgpu_container_watchdog_violations_total{.*pod_uid=\"$POD_B\"} 0$" "$T/scrape" ||
            fail "/metrics counts a violation on the neighbour: $(grep watchdog "$T/scrape")"
    fi
    if [ "$api" = yes ]; then
        local reason=GPUMemoryOverLimit
        [ "$policy" = kill ] && reason=GPUMemoryLimitKill
        cat >"$T/events.py" <<'EOF'
import json, sys, time, urllib.request
api, reason, uid = sys.argv[1:4]
for _ in range(100):
    items = json.load(urllib.request.urlopen(api + "/api/v1/events"))["items"]
    mine = [e for e in items if e["reason"] == reason]
    if mine:
        break
    time.sleep(0.05)
want = {"apiVersion": "v1", "kind": "Pod", "name": "attacker", "namespace": "default",
        "uid": uid, "fieldPath": "spec.containers{main}"}
ok = [e for e in mine if e["type"] == "Warning" and e["involvedObject"] == want
      and e["metadata"]["namespace"] == "default"
      and e["source"]["component"] == "vgpu-monitor" and "GPU-" in e["message"]]
others = [e for e in items if e["involvedObject"].get("name") != "attacker"]
# One Event per episode: one GPUMemoryOverLimit, and under kill one GPUMemoryLimitKill.
overs = [e for e in items if e["reason"] == "GPUMemoryOverLimit"]
if not ok or others or len(overs) != 1 or len(mine) != 1:
    print("events:", json.dumps(items, indent=1))
    sys.exit(1)
EOF
        python3 "$T/events.py" "$API" "$reason" "$POD_A" ||
            fail "no $reason Event on the attacker's pod alone"
    fi
    kill "$mon"
    wait "$mon"
    local rc=$?
    [ $rc = 0 ] || fail "the monitor exited $rc on SIGTERM"
    grep -q "stopping signal=15" "$T/monitor.log" || fail "the monitor did not stop cleanly"
    echo "ok: $CASE"
}

# Sourced by another replay (tests/security/attacks/watchdog_test.sh) for the helpers above.
[ "${MONITOR_TEST_LIB:-}" = 1 ] && return 0

case $CASE in
truth)
    # Processes with and without libvgpu hold memory; NVML must show each one's own,
    # libvgpu's context estimate (VGPU_CONTEXT_MIB=64) notwithstanding.
    mkdir -p "$T/r"
    "$PROBE" link hold $((700 * MiB)) >"$T/bare.log" 2>&1 &
    pids+=($!)
    bare=$!
    LD_PRELOAD=$B/lib/libvgpu.so CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/r/region \
        CUDA_DEVICE_MEMORY_LIMIT=2g VGPU_CONTEXT_MIB=64 "$PROBE" link hold $((300 * MiB)) \
        >"$T/vgpu.log" 2>&1 &
    pids+=($!)
    vgpu=$!
    LD_PRELOAD=$B/lib/libvgpu.so CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/r/region \
        CUDA_DEVICE_MEMORY_LIMIT=2g "$B/bin/libvgpu_probe" procaddr hold $((100 * MiB)) \
        >"$T/vgpu2.log" 2>&1 &
    pids+=($!)
    vgpu2=$!
    for f in bare vgpu vgpu2; do wait_for "$T/$f.log" ready 10 || fail "$f never got ready"; done
    cat >"$T/nvml.py" <<'EOF'
# NVML's process list of GPU 0 must be exactly the given PID=MiB pairs.
import ctypes, sys
want = {int(p): int(m) << 20 for p, m in (a.split("=") for a in sys.argv[1:])}
n = ctypes.CDLL("libnvidia-ml.so.1")
assert n.nvmlInit_v2() == 0
h = ctypes.c_void_p()
assert n.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
class P(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong),
                ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]
class P1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong)]
for fn, T in (("nvmlDeviceGetComputeRunningProcesses_v3", P),
              ("nvmlDeviceGetComputeRunningProcesses_v2", P),
              ("nvmlDeviceGetComputeRunningProcesses", P1)):
    arr = (T * 16)(); c = ctypes.c_uint(16)
    assert getattr(n, fn)(h, ctypes.byref(c), arr) == 0
    got = {arr[i].pid: arr[i].used for i in range(c.value)}
    if got != want:
        print("%s: %s, want %s" % (fn, got, want))
        sys.exit(1)
EOF
    python3 "$T/nvml.py" "$bare=956" "$vgpu=556" "$vgpu2=356" ||
        fail "NVML does not show each process's own memory"
    # A killed process's memory leaves NVML's list (the driver frees it at exit).
    kill -9 "$bare"
    wait "$bare" 2>/dev/null
    python3 "$T/nvml.py" "$vgpu=556" "$vgpu2=356" || fail "a dead process is still listed"
    echo "ok: truth"
    ;;
v1-warn) run_case v1 cgroupfs cri-containerd warn yes ;;
v2-kill) run_case v2 systemd cri-containerd kill no ;;
v1-kill) run_case v1 systemd crio kill yes ;;
v2-warn) run_case v2 cgroupfs docker warn no ;;
nocgroup)
    # The same case on a cgroup file system that is not there: it must skip locally and
    # fail under CI, never pass.
    out=$(env -u CI VGPU_MONITOR_CGROUP_FS="$T/none" "$0" "$B" v2-kill 2>&1)
    rc=$?
    [ $rc = 77 ] && grep -q "skipping: missing" <<<"$out" || fail "without CI: exit $rc: $out"
    out=$(env CI=true VGPU_MONITOR_CGROUP_FS="$T/none" "$0" "$B" v2-kill 2>&1)
    rc=$?
    [ $rc != 0 ] && [ $rc != 77 ] && grep -q "missing under CI" <<<"$out" ||
        fail "with CI=true: exit $rc: $out"
    echo "ok: nocgroup"
    ;;
*)
    echo "unknown case $CASE" >&2
    exit 2
    ;;
esac
