#!/usr/bin/env bash
# vgpu-scheduler on a simulated 5,000-node x 8-GPU cluster, two ways:
#  1. against tests/kube_api_server.py (the test API server, Python): first sync, /filter
#     latency from a Python client, filter+bind through that server, RSS, rebuild after
#     kill -9 and whether the rebuilt state equals the one before;
#  2. against bench/kube_stub (C) driven by bench/sched_load (C), which plays
#     kube-scheduler: /filter and /bind latency (LAT sequential pods), the sustained
#     filter+prioritize+bind rate (CLIENTS connections), the invariants checked after, the
#     scheduler's CPU time and RSS.
# usage: bench/scheduler.sh BUILD
#   NODES, GPUS (5000 x 8), PODS (2000, part 1), FAST_PODS (4000, part 2), CLIENTS (16),
#   LAT (1000); PERF_OUT=FILE records a perf profile of the scheduler during part 2
#   (PERF_ARGS, default -g); part 2 runs once per entry of POLICIES ("binpack default
#   binpack:mixed default:mixed": the scheduler's --policy, and :mixed for the stub's
#   mixed pod shapes), each against a fresh stub; SCHED_ARGS adds scheduler flags.
# Exits non-zero when a documented target is missed (RSS <= 200 MB; for binpack /filter p99
# <= 2 ms, CPU per decision <= 0.5 ms, >= 2,000 decisions/s) or the invariants break.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin=$(find "$build" -name vgpu-scheduler -type f -perm -u+x | head -1)
[ -n "$bin" ] || { echo "no vgpu-scheduler under $build"; exit 1; }
echo "### Against the Python test API server (tests/kube_api_server.py)"
echo
py_rc=0
/usr/bin/python3 bench/scheduler_bench.py "$(realpath "$bin")" "${NODES:-5000}" "${GPUS:-8}" "${PODS:-2000}" || py_rc=$?
echo
echo "### Against the C API stub (bench/kube_stub.c, bench/sched_load.c)"
echo
find_bin() { find "$build" -name "$1" -type f -perm -u+x | head -1; }
sched=$(find_bin vgpu-scheduler)
stub=$(find_bin kube_stub)
load=$(find_bin sched_load)
[ -n "$sched" ] && [ -n "$stub" ] && [ -n "$load" ] || { echo "build $build lacks vgpu-scheduler, kube_stub or sched_load"; exit 1; }
dir=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
wait_file() { for _ in $(seq 600); do [ -s "$1" ] && return 0; sleep 0.05; done; echo "no $1"; exit 1; }

# One run of the C harness against a fresh stub: $1 is POLICY or POLICY:mixed, the
# scheduler's --policy and whether the stub's pods come in mixed shapes.
c_harness() {
    local policy=${1%%:*} shapes=() run
    [ "$1" = "$policy" ] || shapes=(--mixed)
    run=$(mktemp -d "$dir/run.XXXXXX")
    "$stub" --port-file "$run/api.port" --nodes "${NODES:-5000}" --gpus "${GPUS:-8}" \
        --pods "${FAST_PODS:-4000}" "${shapes[@]}" 2>"$run/stub.log" &
    local stub_pid=$!
    pids+=($stub_pid)
    wait_file "$run/api.port"
    cat >"$run/kubeconfig" <<KC
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: 'http://127.0.0.1:$(cat "$run/api.port")'}}]
users: [{name: u, user: {token: bench}}]
KC
    "$sched" --listen 127.0.0.1:0 --debug-state --port-file "$run/sched.port" --kubeconfig "$run/kubeconfig" \
        --assume-ttl 120 --log-level warn --policy "$policy" ${SCHED_ARGS:-} >"$run/sched.log" 2>&1 &
    spid=$!
    pids+=($spid)
    wait_file "$run/sched.port"
    port=$(cat "$run/sched.port")
    for _ in $(seq 1200); do
        code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz" || true)
        [ "$code" = 200 ] && break
        sleep 0.05
    done
    [ "$code" = 200 ] || { echo "vgpu-scheduler never became ready"; cat "$run/sched.log"; exit 1; }
    echo "| figure | value | target |"
    echo "| --- | --- | --- |"
    echo "| cluster (C API stub) | ${NODES:-5000} nodes x ${GPUS:-8} GPUs, ${FAST_PODS:-4000} pods | 5,000 x 8 |"
    local rc=0
    cpu0=$(awk '{print $14 + $15}' /proc/$spid/stat)
    if [ -n "${PERF_OUT:-}" ]; then  # profile the scheduler during the load (perf record -g)
        perf record -q ${PERF_ARGS:--g} -p "$spid" -o "$PERF_OUT" 2>/dev/null &
        pids+=($!)
    fi
    "$load" "$port" "$(cat "$run/api.port")" "${CLIENTS:-16}" "${LAT:-1000}" "$spid" >"$run/load.out" || rc=$?
    cat "$run/load.out"
    cpu1=$(awk '{print $14 + $15}' /proc/$spid/stat)
    local rss_kib
    rss_kib=$(awk '/VmRSS/ {print $2}' /proc/$spid/status)
    echo "| scheduler CPU time, whole run (with the final state dump) | $(awk -v a="$cpu0" -v b="$cpu1" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f s", (b - a) / hz}') | |"
    echo "| scheduler RSS after the run | $((rss_kib / 1024)) MiB | <= 200 MB |"
    if [ "$rc" != 0 ]; then
        echo "sched_load failed (rc $rc); scheduler log:"
        tail -20 "$run/sched.log"
    fi
    # The documented targets, judged here (sched_load prints them): RSS <= 200 MB for
    # every policy; for binpack, the scheduler's default policy, /filter p99 <= 2 ms and
    # CPU per decision <= 0.5 ms (2,000 decisions/s on a core of its own) and 2,000
    # decisions/s sustained (docs/benchmarks.md, "vgpu-scheduler"). `default`'s figures are
    # measured, not held to these (its rescoring costs more: docs/benchmarks.md, rounds 4-5).
    # The other side: every pod bound, no failed request and the invariants ok, which
    # sched_load's own exit status already holds.
    local p99 rate cpu
    p99=$(sed -n 's/^| \/filter p50 \/ p99 (C client.*| [0-9.]* \/ \([0-9.]*\) ms |.*/\1/p' "$run/load.out")
    rate=$(sed -n 's/^| filter+prioritize+bind decisions\/s .*| \([0-9.]*\) |.*/\1/p' "$run/load.out")
    cpu=$(sed -n 's/^| scheduler CPU per decision (throughput phase) | \([0-9.]*\) ms .*/\1/p' "$run/load.out")
    judge() { # WHAT VALUE OP BOUND: a missed target fails the run
        if [ -z "$2" ] || ! awk -v v="$2" -v b="$4" -v op="$3" 'BEGIN { exit !(op == "le" ? v <= b : v >= b) }'; then
            echo "MISSED ($1, --policy $policy): ${2:-no figure}, want $([ "$3" = le ] && echo "<=" || echo ">=") $4" >&2
            rc=1
        fi
    }
    judge "scheduler RSS, MB" "$(awk -v k="$rss_kib" 'BEGIN { printf "%.1f", k * 1024 / 1e6 }')" le 200
    if [ "$policy" = binpack ]; then
        judge "/filter p99, ms" "$p99" le 2
        judge "scheduler CPU per decision, ms" "$cpu" le 0.5
        judge "decisions/s" "$rate" ge 2000
    fi
    kill "$spid" "$stub_pid" 2>/dev/null || true
    wait "$spid" "$stub_pid" 2>/dev/null || true
    return "$rc"
}

rc=0
for policy in ${POLICIES:-binpack default binpack:mixed default:mixed}; do
    echo
    echo "#### --policy ${policy%%:*}, $([ "${policy#*:}" = mixed ] && echo "mixed pod shapes" || echo "one pod shape")"
    echo
    c_harness "$policy" || rc=$?
done
[ "$py_rc" = 0 ] || rc=$py_rc
exit "$rc"
