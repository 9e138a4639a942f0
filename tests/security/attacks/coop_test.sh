#!/usr/bin/env bash
# Cooperating processes of one container (docs/security.md, "Cooperating processes"):
# coop_test.sh BUILD CASE, in real cgroups on fakegpu with vgpu-monitor under kill (the
# cgroup and log helpers are security.monitor's, tests/security/monitor_test.sh).
#   forged  four CUDA processes of a 30 % container, each held to 30 % by its own bucket,
#           beside a 70 % neighbour, with a fifth process of the container rewriting the
#           budget they share (budget_forger big, every 200 us): the container must be
#           stopped within the compute window plus 2 s (3 + 2 s: NVML's trailing second
#           and one sample), its GPU time over the run stays under (share + margin) x the
#           run, and the neighbour gets 70 +- 3 % once it is stopped (before: the
#           container took far more than its share for the whole run)
#   honest  the same four processes without the forger: they split the share, nothing is
#           killed, no compute violation is counted (no false alarm at the margin)
# Timing bounds are checked, so CTest runs these serially. Figures are printed before they
# are judged. VGPU_COOP_MONITOR / VGPU_COOP_FLAGS run another monitor (the figures before).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CO_CASE=$2
MONITOR_TEST_LIB=1
. "$HERE/../monitor_test.sh" "$1" lib
MONITOR=${VGPU_COOP_MONITOR:-$MONITOR}
read -r -a MORE_FLAGS <<<"${VGPU_COOP_FLAGS:-}"
LIB=$B/lib/libvgpu.so
TENANT=$B/bin/compute_tenant
TRUTH=$B/bin/libvgpu_compute_truth
FORGER=$B/bin/budget_forger
RUN_S=${VGPU_COOP_RUN_S:-12}
WINDOW_S=3 MARGIN=10 SHARE=30 TOL=3
BOARD=$T/board
# within ACTUAL WANT TOL
within() { awk -v a="$1" -v w="$2" -v t="$3" 'BEGIN { d = a - w; if (d < 0) d = -d; exit !(d <= t) }'; }
mkdir -p "$BOARD"

# The GPU's name on the board, as libvgpu makes it (a throwaway tenant).
env CUDA_DEVICE_MEMORY_SHARED_CACHE="$T/region.probe" CUDA_DEVICE_SM_LIMIT=50 \
    VGPU_COMPUTE_BOARD="$T/probe" LD_PRELOAD="$LIB" "$TENANT" 1000 20 >/dev/null 2>&1 ||
    fail "probe tenant failed"
BUUID=$(basename "$(ls "$T"/probe/*.board)" .board)

# climits POD CONTAINER SHARE: the device plugin's files for one container: its share, its
# region, the board, and its board slot.
climits() {
    local d=$CONTAINERS/$1_$2
    mkdir -p "$d"
    printf '# written by the test\nvgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=4g\nCUDA_DEVICE_SM_LIMIT_0=%s\nVGPU_DEVICE_UUID_0=%s\nCUDA_DEVICE_MEMORY_SHARED_CACHE=%s\nVGPU_COMPUTE_BOARD=%s\n' \
        "$3" "$UUID" "$d/region" "$BOARD" >"$d/limits"
    chmod 0444 "$d/limits"
    "$B/bin/board_layout" "$BOARD" "$BUUID" "$1" "$2" "$3" >/dev/null || fail "board_layout failed"
}

# launch NAME CGROUP POD CONTAINER PROGRAM...: a process of that container in the background.
launch() {
    local name=$1 dir=$2 pod=$3 ctr=$4
    shift 4
    sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$dir" env LD_PRELOAD="$LIB" \
        VGPU_LIMITS_FILE="$CONTAINERS/${pod}_$ctr/limits" VGPU_COMPUTE_SLOT="${pod}_$ctr" "$@" \
        >"$T/$name.log" 2>&1 &
    pids+=($!)
    eval "PID_$name=$!"
}

cg_a=$(cgpath v2 systemd "$POD_A" "$CID_A" cri-containerd) &&
    cg_b=$(cgpath v2 systemd "$POD_B" "$CID_B" cri-containerd) ||
    vg_skip "a writable cgroup v2 file system under $CGFS (creating cgroups needs root)"
climits "$POD_A" main $SHARE
climits "$POD_B" work 70
"$MONITOR" --interval-ms 100 --listen off --region-dir "$CONTAINERS" --cgroup-root "/$SUB" \
    --metrics-file "$T/metrics" "${MORE_FLAGS[@]}" >"$T/monitor.log" 2>&1 &
MON=$!
pids+=($MON)
wait_for "$T/monitor.log" "watching" 10 || fail "the monitor did not start"

t0=$(now_ms)
ms=$((RUN_S * 1000 + 1000))
group_a=""
for i in 1 2 3 4; do
    launch "a$i" "$cg_a" "$POD_A" main "$TENANT" 1000000 $ms
    group_a+="${group_a:+,}$(eval echo "\$PID_a$i")"
done
launch b "$cg_b" "$POD_B" work "$TENANT" 1000000 $ms
if [ "$CO_CASE" = forged ]; then
    sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg_a" "$FORGER" \
        "$CONTAINERS/${POD_A}_main/region" big $((RUN_S + 1)) >"$T/forger.log" 2>&1 &
    pids+=($!)
fi
# Every second's share of each container (fakegpu's per-process device time).
"$TRUTH" steps 0 1000 "$RUN_S" "$group_a" "$PID_b" >"$T/truth" || fail "the truth tool failed"
cat "$T/truth"
a_sum=$(awk '{ sub("g0=", "", $2); s += $2 } END { printf "%.0f", s }' "$T/truth")
a_pct=$(awk -v s="$a_sum" -v n="$RUN_S" 'BEGIN { printf "%.1f", s / n }')
echo "container of four at $SHARE %: ${a_pct} % of the GPU over ${RUN_S} s"
alive_a=0
for i in 1 2 3 4; do alive "$(eval echo "\$PID_a$i")" && alive_a=$((alive_a + 1)); done
[ -n "${VGPU_COOP_SHOW:-}" ] && cat "$T/monitor.log"
case $CO_CASE in
forged)
    t_q=$(log_ms "$T/monitor.log" "container over its GPU compute share")
    [ -n "$t_q" ] || fail "no compute violation logged (${a_pct} % over the run; $alive_a processes alive)"
    t_stop=$(log_ms "$T/monitor.log" "container quarantined")
    [ -n "$t_stop" ] || fail "the container was not quarantined"
    echo "over its share logged $((t_q - t0)) ms after the start, quarantined at $((t_stop - t0)) ms"
    after=$(awk -v q=$(((t_stop - t0) / 1000 + 2)) '{ t = $1; sub("t=", "", t); g = $3; sub("g1=", "", g)
        if (t / 1000 >= q) { s += g; n++ } } END { if (n) printf "%.1f", s / n }' "$T/truth")
    echo "the neighbour once the container was stopped: ${after:-none} %"
    [ "$alive_a" = 0 ] || fail "$alive_a of the container's processes still run"
    [ $((t_stop - t0)) -le $(((WINDOW_S + 2) * 1000)) ] ||
        fail "quarantined $((t_stop - t0)) ms after the start (bound $(((WINDOW_S + 2) * 1000)))"
    awk -v a="$a_pct" -v b=$((SHARE + MARGIN)) 'BEGIN { exit !(a <= b) }' ||
        fail "the container took ${a_pct} % of the GPU over the run (bound $((SHARE + MARGIN)))"
    [ -n "$after" ] && within "$after" 70 $TOL ||
        fail "the neighbour got ${after:-nothing} % once the container was stopped (want 70 +- $TOL)"
    grep -q "^vgpu_monitor_compute_violations_total 1$" "$T/metrics" ||
        fail "compute_violations_total is not 1: $(grep compute "$T/metrics")"
    ;;
honest)
    [ "$alive_a" = 4 ] || fail "only $alive_a of the container's honest processes still run"
    grep -q "container over its GPU compute share" "$T/monitor.log" &&
        fail "an honest container was judged over its share"
    within "$a_pct" $SHARE $TOL || fail "the honest container got ${a_pct} % (want $SHARE +- $TOL)"
    grep -q "^vgpu_monitor_compute_violations_total 0$" "$T/metrics" ||
        fail "compute_violations_total is not 0: $(grep compute "$T/metrics")"
    ;;
*) fail "unknown case $CO_CASE" ;;
esac
kill "$MON"
wait "$MON" || fail "the monitor exited $? on SIGTERM"
echo "ok: $CO_CASE"
