#!/usr/bin/env bash
# libvgpu task priority on fakegpu: bench/libvgpu_priority.sh BUILD_DIR
# Prints markdown: an inference-like high-priority tenant (a request every 25 ms of 4
# kernels of 2 ms; latency from its first launch to the synchronize) alone, beside a
# low-priority tenant that saturates the GPU (0.5 ms kernels) without priority (today's
# behaviour: neither limited) and with it, as one graph per request, and two high beside
# two low; the low tenants' share of what the high ones leave; the hand-back time. Runs
# tests/integration/libvgpu_priority_test.sh with its bounds off (PRIO_REPORT=1) and
# judges the targets itself (docs/compute.md, "Priority"): high p99 <= 1.2 x alone, low
# >= 90 % of what high leaves (with two high tenants too), each on the median of RUNS runs,
# hand-back <= 50 ms; exits non-zero when one is missed.
set -uo pipefail
B=$(cd "${1:-build}" && pwd)
HERE=$(cd "$(dirname "$0")/.." && pwd)
export PRIO_REPORT=1
T=$(mktemp -d /tmp/vgpu-pbench-XXXXXX)
trap 'rm -rf "$T"' EXIT
: >"$T/misses"
echo "### Task priority (fakegpu, load average $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "| scenario | high p50 (ms) | high p99 (ms) | p99 / alone (target ≤ 1.2) | low's share of what high leaves (target ≥ 90 %) | meets the targets |"
echo "| --- | --- | --- | --- | --- | --- |"
# Each judged case runs RUNS times (default 3) and is judged on the median of its runs'
# p99 ratios and low shares: one run is ~120 requests, so its p99 is its second-worst, and a
# single host stall in the run alone or beside decides it (one pair: 0.68-1.53 over runs).
RUNS=${RUNS:-3}
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ms() { awk -v u="$1" 'BEGIN { printf "%.2f", u / 1000 }'; }
for c in nopriority priority graph several; do
    n=$RUNS
    [ "$c" = nopriority ] && n=1
    ratios="" shares="" last=""
    for ((i = 0; i < n; i++)); do
        out=$("$HERE/tests/integration/libvgpu_priority_test.sh" "$B" "$c" 2>&1)
        alone=$(sed -n 's/^high tenant alone (\([^)]*\)): p50 \([0-9]*\) us, p99 \([0-9]*\) us$/\2 \3/p' <<<"$out")
        [ -n "$alone" ] || { echo "$c: no figures: $out" >>"$T/misses"; continue; }
        ratios="$ratios $(sed -n 's/^worst p99 ratio: //p' <<<"$out")"
        shares="$shares $(sed -n 's/.* = \([0-9.]*\) % of the .* left$/\1/p' <<<"$out")"
        last=$out
    done
    [ -n "$last" ] || continue
    worst=$(median <<<"$ratios")
    share=$(median <<<"$shares")
    alone=$(sed -n 's/^high tenant alone (\([^)]*\)): p50 \([0-9]*\) us, p99 \([0-9]*\) us$/\2 \3/p' <<<"$last")
    hi=$(sed -n 's/^high tenant 1 beside .*: p50 \([0-9]*\) us, p99 \([0-9]*\) us = .*/\1 \2/p' <<<"$last")
    ok=-
    if [ "$c" != nopriority ]; then
        ok=$(awk -v r="$worst" -v s="$share" 'BEGIN { print (r <= 1.2 && s >= 90) ? "yes" : "no" }')
        [ "$ok" = yes ] || echo "$c: median p99 $worst x alone, low $share % (runs:$ratios /$shares)" >>"$T/misses"
    fi
    read -r ap50 ap99 <<<"$alone"
    read -r hp50 hp99 <<<"$hi"
    echo "| $c: alone (last run) | $(ms "$ap50") | $(ms "$ap99") | | | |"
    echo "| $c: beside low (last run; ratio and share: median of $n, runs:$ratios /$shares) | $(ms "$hp50") | $(ms "$hp99") | $worst | $share | $ok |"
done
out=$("$HERE/tests/integration/libvgpu_priority_test.sh" "$B" handback 2>&1)
back=$(sed -n 's/^hand-back: \([0-9a-z]*\) ms.*/\1/p' <<<"$out")
ok=$(case $back in [0-9]*) [ "$back" -le 50 ] && echo yes || echo no ;; *) echo no ;; esac)
[ "$ok" = yes ] || echo "hand-back: ${back:-none} ms" >>"$T/misses"
echo
echo "Hand-back after the high tenant's last kernel: ${back:-none} ms (20 ms steps; target ≤ 50): $ok"
echo
if [ -s "$T/misses" ]; then
    echo "targets missed:" >&2
    cat "$T/misses" >&2
    exit 1
fi
