#!/usr/bin/env bash
# libvgpu compute-share benchmark on fakegpu: bench/libvgpu_compute.sh BUILD_DIR
# Prints markdown: every accuracy scenario of issue 4 (achieved share from fakegpu's
# timeline, mean of 1 s windows after a 1 s warm-up; the hand-back time in 50 ms windows),
# instructions per launch (callgrind) and the launch throughput of tiny kernels.
# The test script's own bounds are off here; this script judges the documented figures
# itself (every share within 2 points, burst mode alone at least 90 %, the hand-back
# within 150 ms, the bursty tenant at 10-32 %) and exits non-zero after the tables when
# one is missed.
set -uo pipefail
B=$(cd "${1:-build}" && pwd)
HERE=$(cd "$(dirname "$0")/.." && pwd)
export VGPU_COMPUTE_TOL=100 VGPU_HANDBACK_MS=100000 VGPU_BURST_MIN=0 VGPU_COMPUTE_WINDOWS=${VGPU_COMPUTE_WINDOWS:-5}
echo "### Compute shares (fakegpu, $VGPU_COMPUTE_WINDOWS × 1 s windows, load average $(cut -d' ' -f1-3 /proc/loadavg))"
echo
T=$(mktemp -d /tmp/vgpu-cbench-XXXXXX)
trap 'rm -rf "$T"' EXIT
: >"$T/misses"
miss() { echo "$*" >>"$T/misses"; }

echo "| scenario | target % | achieved % | error (points) | meets the documented figure |"
echo "| --- | --- | --- | --- | --- |"
for c in split four alone burst handback graph paths procs long bursty; do
    "$HERE/tests/integration/libvgpu_compute_test.sh" "$B" "$c" 2>&1 |
        sed -n 's/^\(.*\): achieved \([0-9.]*\) % *(want \([0-9]*\).*/\1|\3|\2/p
                s/^\(.*\): achieved \([0-9.]*\) %$/\1|-|\2/p
                s/^hand-back: \([0-9a-z]*\) ms.*/hand-back time (ms, 50 ms windows)|≤ 150|\1/p' >"$T/rows"
    [ -s "$T/rows" ] || miss "$c: no figures (the scenario failed to run)"
    while IFS='|' read -r label want got; do
        err=- ok=-
        case $label in
        *"alone (burst"*)
            want="≥ 90"
            ok=$(awk -v a="$got" 'BEGIN { print (a >= 90) ? "yes" : "no" }') ;;
        "burst tenant alone before")
            # Under the hand-back case's 50 ms step sampler (the test's bound; the
            # unsampled burst case above checks 90).
            want="≥ 75"
            ok=$(awk -v a="$got" 'BEGIN { print (a >= 75) ? "yes" : "no" }') ;;
        "bursty 30 % tenant"*)
            # Never above its share (+2); on about half the time, it gets about half of it
            # (15 %, less a 5-point margin): a limiter that starves it fails as well.
            want="10–32"
            ok=$(awk -v a="$got" 'BEGIN { print (a >= 10 && a <= 32) ? "yes" : "no" }') ;;
        hand-back*)
            ok=$(case $got in [0-9]*) [ "$got" -le 150 ] && echo yes || echo no ;; *) echo no ;; esac) ;;
        *)
            err=$(awk -v a="$got" -v w="$want" 'BEGIN { printf "%+.2f", a - w }')
            ok=$(awk -v e="$err" 'BEGIN { print (e >= -2 && e <= 2) ? "yes" : "no" }') ;;
        esac
        [ "$ok" = yes ] || miss "$c: $label: $got (want $want)"
        echo "| $c: $label | $want | $got | $err | $ok |"
    done <"$T/rows"
done
echo

# Kernel shapes: saturating tenants at 30/70 and 10/20/30/40 whose kernels have one shape
# (fixed lengths, random lengths of one function and launch shape, CUDA graphs of 1, 4 and
# 16 kernels of 1 ms, and a graph tenant beside plain ones), each run REPEAT times; the
# median of the runs per tenant.
REPEAT=${VGPU_COMPUTE_REPEAT:-3}
SHAPES=${VGPU_COMPUTE_SHAPES:-"fixed-50000 fixed-1000000 fixed-3000000 fixed-20000000 uniform-1-5ms loguniform-20us-20ms graph-1 graph-4 graph-16 graph-beside-plain"}
for r in $(seq "$REPEAT"); do
    for shape in $SHAPES; do
        for split in 30,70 10,20,30,40; do
            "$HERE/tests/integration/libvgpu_compute_test.sh" "$B" shape "$shape" "$split" 2>&1 |
                sed -n "s/^.*, \([0-9]*\) % tenant of .*: achieved \([0-9.]*\) %.*/$shape $split \1 \2/p" >>"$T/shapes"
        done
    done
done
echo "### Compute shares by kernel shape (fakegpu, median of $REPEAT runs of $VGPU_COMPUTE_WINDOWS × 1 s windows, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
echo
echo "| kernels | shares | achieved % (each tenant) | largest error (points) | within 2 points |"
echo "| --- | --- | --- | --- | --- |"
for shape in $SHAPES; do
    for split in 30,70 10,20,30,40; do
        got="" worst=0
        for s in ${split//,/ }; do
            m=$(awk -v sh="$shape" -v sp="$split" -v s="$s" '$1 == sh && $2 == sp && $3 == s { v[n++] = $4 }
                END { if (n == 0) { print "-"; exit }
                      for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
                      printf "%.2f", n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2 }' "$T/shapes")
            got="$got${got:+ / }$m"
            worst=$(awk -v m="$m" -v s="$s" -v w="$worst" 'BEGIN { d = m - s; if (d < 0) d = -d; if (m == "-") d = 99; printf "%.2f", (d > w ? d : w) }')
        done
        ok=$(awk -v w="$worst" 'BEGIN { print (w <= 2) ? "yes" : "no" }')
        [ "$ok" = yes ] || miss "shape $shape at $split: largest error $worst points"
        echo "| $shape | $split | $got | $worst | $ok |"
    done
done
echo
export FAKEGPU_STATE_DIR=$T/state LD_LIBRARY_PATH=$B/fakegpu VGPU_COMPUTE_BOARD=$T/board
unset CUDA_DEVICE_SM_LIMIT CUDA_DEVICE_MEMORY_LIMIT VGPU_COMPUTE_MODE GPU_CORE_UTILIZATION_POLICY

# Instructions per cuLaunchKernel (callgrind; N=2000 minus N=1000 launches of a 0 ns
# kernel, so start-up cancels). "Launching thread": the inclusive cost of main's calls to
# cuLaunchKernel with libvgpu minus without (the driver's own launch cancels; with a limit
# this includes the driver calls libvgpu makes: two event records and a capture query).
# "libvgpu's own code": the instructions executed inside libvgpu.so, both threads (the
# poller's settling included), driver calls excluded.
if command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null; then
    site() { # site FILE: inclusive instructions of main's calls to cuLaunchKernel
        callgrind_annotate --inclusive=yes --tree=calling "$1" 2>/dev/null |
            awk '/^ *[0-9,]+ .*\* .*:main \[/ { m = 1; next }
                 m && /\* / { m = 0 }
                 m && /:cuLaunchKernel \(/ { gsub(",", "", $1); print $1; exit }'
    }
    own() { # own FILE: self instructions inside libvgpu.so
        callgrind_annotate --inclusive=no --threshold=100 "$1" 2>/dev/null |
            awk '/libvgpu\.so\]/ && /^ *[0-9,]+ / { gsub(",", "", $1); s += $1 } END { print s + 0 }'
    }
    cg() { # cg N LIMIT|none|off -> callgrind file
        local out=$T/cg.$1.$2 envs=(FAKEGPU_KERNEL_NS=0)
        case $2 in
        off) ;;
        none) envs+=(LD_PRELOAD="$B/lib/libvgpu.so") ;;
        *) envs+=(CUDA_DEVICE_SM_LIMIT="$2" CUDA_DEVICE_MEMORY_SHARED_CACHE="$T/r.$1.$2"
            LD_PRELOAD="$B/lib/libvgpu.so") ;;
        esac
        timeout 300 env "${envs[@]}" valgrind --tool=callgrind --callgrind-out-file="$out" \
            "$B/bin/libvgpu_bench" launch "$1" >/dev/null 2>&1
        echo "$out"
    }
    o1=$(cg 1000 off)
    o2=$(cg 2000 off)
    driver=$((($(site "$o2") - $(site "$o1")) / 1000))
    echo "### Instructions per cuLaunchKernel (callgrind, fakegpu, 0 ns kernels)"
    echo
    echo "The driver's own launch (fakegpu): $driver instructions."
    echo
    echo "| configuration | added in the launching thread | libvgpu's own code |"
    echo "| --- | ---: | ---: |"
    for lim in none 100 50; do
        a1=$(cg 1000 $lim)
        a2=$(cg 2000 $lim)
        added=$((($(site "$a2") - $(site "$a1")) / 1000 - driver))
        mine=$((($(own "$a2") - $(own "$a1")) / 1000))
        case $lim in
        none) label="libvgpu, no compute limit" ;;
        *) label="libvgpu, CUDA_DEVICE_SM_LIMIT=$lim" ;;
        esac
        echo "| $label | $added | $mine |"
    done
    echo
else
    echo "(valgrind not installed: instruction counts skipped)"
    echo
fi

# Launch throughput of 1 µs kernels for 2 s, three alternating rounds so that load from
# other work on the machine falls on every configuration alike. A run that does not end
# within 30 s is counted as 0 and reported (fakegpu can lose an event record: its
# fg_event_record completes a marker pushed onto an idle stream during push_item's reap
# before the event's generation is set, and cuEventSynchronize then never returns).
launches() { sed -n 's/^launches=\([0-9]*\).*/\1/p'; }
one() { # one [LIMIT]: launches of one 2 s run
    local n
    if [ -z "${1:-}" ]; then
        n=$(timeout 30 "$B/bin/compute_tenant" 1000 2000 | launches)
    else
        n=$(CUDA_DEVICE_SM_LIMIT=$1 CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/tp.$1.$RANDOM \
            LD_PRELOAD=$B/lib/libvgpu.so timeout 30 "$B/bin/compute_tenant" 1000 2000 | launches)
    fi
    [ -n "$n" ] || { echo x >>"$T/hung"; n=0; }
    echo "$n"
}
base=0 full=0 half=0
for i in 1 2 3; do
    base=$((base + $(one)))
    full=$((full + $(one 100)))
    half=$((half + $(one 50)))
done
pct() { awk -v a="$1" -v b="$base" 'BEGIN { printf "%.1f %%", b ? 100 * a / b : 0 }'; }
echo "### Launch throughput (1 µs kernels, 3 × 2 s alternating, launches completed)"
echo
echo "| configuration | launches | vs no libvgpu |"
echo "| --- | --- | --- |"
echo "| no libvgpu | $base | 100 % |"
echo "| libvgpu, limit 100 % | $full | $(pct "$full") |"
echo "| libvgpu, limit 50 % (two event records and a capture query per launch) | $half | $(pct "$half") |"
[ ! -s "$T/hung" ] || echo "($(wc -l <"$T/hung") run(s) hung and counted 0: fakegpu's lost event record, see the script)"
if [ -s "$T/misses" ]; then
    echo
    echo "Missed the documented figures:"
    sed 's/^/- /' "$T/misses"
    exit 1
fi
