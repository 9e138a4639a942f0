#!/usr/bin/env bash
# vgpu-monitor benchmarks: prints a markdown table.
#   bench/monitor.sh BUILD_DIR
# (1) cost of one sample on a node of 8 GPUs and 64 containers: fakegpu with 8 GPUs and
#     64 GPU processes (8 per GPU, each its own container with a limits file, all within
#     their limits, so the sample is the steady state). Their cgroups are given through
#     --proc-root (a directory of <pid>/cgroup files with cgroup v1 systemd paths, as on
#     a real node), so this part needs no root. No API server: pods are judged whole.
#     callgrind instructions of mon_daemon_sample (one dump per sample; median over 40
#     samples) and wall time per sample from the monitor's debug log (median and p99 over
#     200 samples, run natively).
# (2) detection and kill latency: one vgpu-monitor (--policy kill, default 100 ms
#     interval) and MONITOR_BENCH_TRIALS (50) attackers, one after the other, each in a
#     real cgroup v2 container scope limited to 1 GiB, filling the card without libvgpu.
#     Detection: from just before the attacker is started to the monitor's "over" log
#     line; kill: from that line to the kill's log line; gone: from the start to the
#     attacker no longer running (its exit seen by polling /proc every millisecond).
#     Needs root (cgroups); without it the script fails.
# Exits non-zero when a documented figure is missed: detection p99 over 250 ms (+100 ms
# for the attacker's own start-up), or the kill p99 over 100 ms after detection.
set -euo pipefail
build=$(cd "${1:?usage: bench/monitor.sh BUILD_DIR}" && pwd)
monitor=$build/bin/vgpu-monitor
gpuproc=$build/tests/nvml_gpu_proc
probe=$build/bin/libvgpu_probe_link
for p in "$monitor" "$gpuproc" "$probe"; do
    [ -x "$p" ] || { echo "monitor.sh: $p not built" >&2; exit 1; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/monitor-bench.XXXXXX")
pids=()
cg=""
# The shell's notes on the processes it kills go to a file, shown only on failure.
exec 3>&2 2>"$work/stderr"
cleanup() {
    rc=$?
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ -n "$cg" ] && [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
    [ "$rc" = 0 ] || cat "$work/stderr" >&3
    rm -rf "$work"
}
trap cleanup EXIT
export LD_LIBRARY_PATH="$build/fakegpu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset LD_PRELOAD VGPU_LIMITS_FILE CUDA_VISIBLE_DEVICES

percentile() { # P < numbers (one per line) -> the P-th percentile (nearest rank)
    sort -n | awk -v p="$1" '{v[NR]=$1} END {if (NR == 0) {print "-"; exit} i=int((p*NR+99)/100); if (i<1) i=1; print v[i]}'
}

# ---- (1) cost per sample -------------------------------------------------------------
export FAKEGPU_STATE_DIR=$work/state8
devs="H100:81559MiB:132"
for _ in 2 3 4 5 6 7 8; do devs="$devs,H100:81559MiB:132"; done
export FAKEGPU_DEVICES=$devs
mapfile -t uuids < <("$build/bin/fakegpu-ctl" status | awk '{print $2}')
[ "${#uuids[@]}" = 8 ] || { echo "monitor.sh: fakegpu did not give 8 GPUs" >&2; exit 1; }
mkdir -p "$work/proc" "$work/containers"
for i in $(seq 0 63); do
    gpu=$((i % 8))
    uid=$(printf '0a1b2c3d-1111-2222-3333-%012x' "$i")
    cid=$(printf '%064x' $((i + 1)))
    "$gpuproc" "$gpu" 1024 0 >"$work/p$i.out" 2>&1 &
    pid=$!
    pids+=("$pid")
    mkdir -p "$work/proc/$pid" "$work/containers/${uid}_main"
    ln -s "/proc/$pid/stat" "$work/proc/$pid/stat"
    path=/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod${uid//-/_}.slice/cri-containerd-$cid.scope
    {
        for c in 13:misc 12:rdma 11:hugetlb 10:net_cls,net_prio 9:perf_event 8:pids 7:blkio \
            6:freezer 5:devices 4:memory 3:cpuset 2:cpu,cpuacct 1:name=systemd; do
            echo "$c:$path"
        done
        echo "0::/"
    } >"$work/proc/$pid/cgroup"
    printf 'vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=8192m\nVGPU_DEVICE_UUID_0=%s\nCUDA_DEVICE_SM_LIMIT_0=10\n' \
        "${uuids[$gpu]}" >"$work/containers/${uid}_main/limits"
done
for i in $(seq 0 63); do
    for _ in $(seq 500); do grep -q ready "$work/p$i.out" && break; sleep 0.01; done
done
# The memory check alone, as before round 2: the fake /proc has no maps for the
# registration check to read (docs/monitor.md, "Registration"), so it is off here.
flags=(--listen 127.0.0.1:0 --region-dir "$work/containers" --proc-root "$work/proc" --interval-ms 10
    --policy warn --registration-check off)
valgrind --tool=callgrind --toggle-collect=mon_daemon_sample --dump-after=mon_daemon_sample \
    --callgrind-out-file="$work/cg.out" "$monitor" "${flags[@]}" --samples 40 \
    --log-level error >"$work/cg.log" 2>&1
ir_median=$(for f in "$work"/cg.out.*; do
    sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$f"
done | percentile 50)
valgrind --tool=callgrind --toggle-collect=mon_judge --dump-after=mon_judge \
    --callgrind-out-file="$work/cj.out" "$monitor" "${flags[@]}" --samples 40 \
    --log-level error >"$work/cj.log" 2>&1
judge_median=$(for f in "$work"/cj.out.*; do
    sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$f"
done | percentile 50)
"$monitor" "${flags[@]}" --samples 200 --log-level debug >"$work/wall.log" 2>&1
grep -q "processes=64 " "$work/wall.log" || { echo "monitor.sh: the monitor did not see 64 processes" >&2; exit 1; }
grep -q "over its GPU memory limit" "$work/wall.log" && { echo "monitor.sh: a violation in the steady state" >&2; exit 1; }
sed -n 's/.* sample n=[0-9]* processes=64 us=\([0-9]*\).*/\1/p' "$work/wall.log" >"$work/us"
echo "| vgpu-monitor measure | value |"
echo "| --- | --- |"
echo "| instructions per sample, 8 GPUs x 64 containers, NVML (fakegpu's) included (callgrind, median of 40) | $ir_median |"
echo "| of which the monitor's own work, mon_judge: cgroups, limits, verdicts (callgrind, median of 40) | $judge_median |"
echo "| wall time per sample, 8 GPUs x 64 containers (us, p50 / p99 of 200) | $(percentile 50 <"$work/us") / $(percentile 99 <"$work/us") |"
for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()

# ---- (2) latency ---------------------------------------------------------------------
trials=${MONITOR_BENCH_TRIALS:-50}
base=/sys/fs/cgroup/unified
[ -d "$base" ] || base=/sys/fs/cgroup
uid=0a1b2c3d-1111-2222-3333-444455556666
cid=$(printf 'a%.0s' {1..64})
sub=vgpu-monitor-bench-$$
dir=$base/$sub/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod${uid//-/_}.slice/cri-containerd-$cid.scope
if ! mkdir -p "$dir" 2>/dev/null || [ ! -e "$dir/cgroup.procs" ]; then
    echo "monitor.sh: the latency part needs root and a writable cgroup v2 file system ($base)" >&2
    exit 1
fi
cg=$base/$sub
export FAKEGPU_STATE_DIR=$work/state1 FAKEGPU_DEVICES="H100:81559MiB:132"
uuid=$("$build/bin/fakegpu-ctl" status | awk '{print $2}')
mkdir -p "$work/c1/${uid}_main"
printf 'vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=1024m\nVGPU_DEVICE_UUID_0=%s\n' "$uuid" \
    >"$work/c1/${uid}_main/limits"
# 50 attackers in one container would quarantine it at the third (docs/monitor.md,
# "Quarantine"), and the registration check would kill an attacker seen before it filled
# the card as unregistered, with another log line (its first-sight kill is measured by
# security.attacks.watchdog.small): both off, so every trial measures the memory check's
# detection and kill.
"$monitor" --policy kill --quarantine-after 0 --registration-check off --listen 127.0.0.1:0 \
    --region-dir "$work/c1" --cgroup-root "/$sub" >"$work/mon.log" 2>&1 &
mon=$!
pids+=("$mon")
for _ in $(seq 500); do grep -q watching "$work/mon.log" && break; sleep 0.01; done
log_ms() { date -d "$1" +%s%3N; }
# alive PID: running (a zombie holds no GPU memory: the driver freed it at exit).
alive() {
    local state
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
    [ -n "$state" ] && [ "$state" != Z ]
}
: >"$work/detect"
: >"$work/kill"
: >"$work/gone"
for t in $(seq "$trials"); do
    t0=$(date +%s%3N)
    sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$dir" "$probe" link hold $((80000 << 20)) \
        >/dev/null 2>&1 &
    attacker=$!
    while alive "$attacker"; do
        sleep 0.001
        [ $(($(date +%s%3N) - t0)) -lt 10000 ] || { echo "monitor.sh: trial $t: not killed" >&2; exit 1; }
    done
    t_gone=$(date +%s%3N)
    wait "$attacker" 2>/dev/null || true
    for _ in $(seq 200); do [ "$(grep -c "killed a process" "$work/mon.log")" -ge "$t" ] && break; sleep 0.01; done
    over=$(grep "container over its GPU memory limit" "$work/mon.log" | sed -n "${t}p" | awk '{print $2}')
    killed=$(grep "killed a process" "$work/mon.log" | sed -n "${t}p" | awk '{print $2}')
    [ -n "$over" ] && [ -n "$killed" ] || { echo "monitor.sh: trial $t: no log lines" >&2; exit 1; }
    echo $(($(log_ms "$over") - t0)) >>"$work/detect"
    echo $(($(log_ms "$killed") - $(log_ms "$over"))) >>"$work/kill"
    echo $((t_gone - t0)) >>"$work/gone"
    sleep 0.15 # the episode ends: the next attacker starts a new one
done
echo "| detection latency, attacker start to the violation (ms, p50 / p99 of $trials) | $(percentile 50 <"$work/detect") / $(percentile 99 <"$work/detect") |"
echo "| kill latency, violation to SIGKILL (ms, p50 / p99 of $trials) | $(percentile 50 <"$work/kill") / $(percentile 99 <"$work/kill") |"
echo "| attacker start to attacker gone (ms, p50 / p99 of $trials) | $(percentile 50 <"$work/gone") / $(percentile 99 <"$work/gone") |"
# The documented figures (docs/security.md, docs/monitor.md): detection within 250 ms at
# p99, with the 100 ms margin security.monitor.* states for the attacker's own start-up
# (process start, cuInit, context: counted here, tens of ms under load), and the kill in
# the same sample (100 ms, as those tests). The other side: a trial the monitor did not
# detect and kill already failed above.
detect_p99=$(percentile 99 <"$work/detect")
kill_p99=$(percentile 99 <"$work/kill")
missed=0
[ "$detect_p99" -le 350 ] || { echo "monitor.sh: detection p99 $detect_p99 ms, over the 250 ms documented (+100 ms start-up margin)" >&3; missed=1; }
[ "$kill_p99" -le 100 ] || { echo "monitor.sh: kill p99 $kill_p99 ms after detection, over 100 ms" >&3; missed=1; }
exit "$missed"
