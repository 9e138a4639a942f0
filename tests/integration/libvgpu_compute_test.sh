#!/usr/bin/env bash
# libvgpu compute-share tests against fakegpu: libvgpu_compute_test.sh BUILD_DIR CASE.
# Every tenant is a container of its own (its own region file) running compute_tenant
# under LD_PRELOAD; fakegpu's timeline is the truth (libvgpu_compute_truth). Bounds (CTest
# runs these serially, label compute) are the documented figures (docs/compute.md): every
# share within TOL = 2 points; burst mode alone at least 90 % of the GPU; the hand-back,
# after the borrower was seen bursting (at least 75 % under the step sampler, against
# its 50 % share), within 150 ms, measured as the end of the
# first 50 ms window in which the borrower is back at its share (so the window is the
# margin: a hand-back of 101-150 ms reads 150). VGPU_COMPUTE_LIB runs another build of
# libvgpu (to watch a test fail on a broken one); the benchmark
# (bench/libvgpu_compute.sh) sets the bounds off and judges the figures itself.
set -uo pipefail
. "$(dirname "$0")/../lib/fakegpu_tenants.sh"
vg_tenants_init compute "$@"
vg_compute_env
TOL=${VGPU_COMPUTE_TOL:-2}
BURST_MIN=${VGPU_BURST_MIN:-90}
WINDOWS=${VGPU_COMPUTE_WINDOWS:-3}
RUN_MS=$(((WINDOWS + 1) * 1000 + 700))

# tenant (DELAY: seconds before it starts), truth, mean_of, within, wait_tenants:
# tests/lib/fakegpu_tenants.sh.
atleast() { awk -v a="$1" -v w="$2" 'BEGIN { exit !(a >= w) }'; }

check() { # check LABEL ACTUAL WANT
    echo "$1: achieved $2 % (want $3 ± $TOL)"
    within "$2" "$3" "$TOL" || fail "$1: achieved $2 %, want $3 ± $TOL"
}

case $CASE in
split) # two containers 30/70, both saturating with 1 ms kernels
    tenant a 30 -- 1000000 $RUN_MS
    tenant b 70 -- 1000000 $RUN_MS
    out=$(truth "$group_a" "$group_b")
    wait_tenants
    check "30 % tenant" "$(mean_of 0 "$out")" 30
    check "70 % tenant" "$(mean_of 1 "$out")" 70
    ;;
alone) # hard mode: never above the share, even alone on the GPU
    tenant a 30 -- 1000000 $RUN_MS
    out=$(truth "$group_a")
    wait_tenants
    check "30 % tenant alone (hard)" "$(mean_of 0 "$out")" 30
    ;;
burst) # burst mode alone takes idle time
    tenant a 30 VGPU_COMPUTE_MODE=burst VGPU_COMPUTE_BURST_LIMIT=100 -- 1000000 $RUN_MS
    out=$(truth "$group_a")
    wait_tenants
    got=$(mean_of 0 "$out")
    echo "30 % tenant alone (burst, limit 100): achieved $got %"
    atleast "$got" "$BURST_MIN" || fail "burst alone: $got %, want >= $BURST_MIN"
    ;;
handback) # a burst tenant alone for 1.5 s, then the owner of the other half comes back
    tenant a 50 VGPU_COMPUTE_MODE=burst -- 1000000 $((RUN_MS + 2500))
    DELAY=1.5 tenant b 50 -- 1000000 $((RUN_MS + 1000))
    "$TRUTH" steps 0 50 60 "$group_a" "$group_b" >"$T/steps" &
    sampler=$!
    out=$("$TRUTH" 0 3 "$WINDOWS" "$group_a" "$group_b")
    wait $sampler
    [ -n "${VGPU_COMPUTE_STEPS:-}" ] && cp "$T/steps" "$VGPU_COMPUTE_STEPS"
    wait_tenants
    # The first 50 ms window after the owner's start in which the borrower is back under
    # its share (+2 points): that window's end, from the owner's process start (its
    # cuInit and context creation included).
    alone=$(awk -F'[ =]' '$2 > 500 && $2 <= 1500 { s += $4; n++ } END { printf "%.1f", s / n }' "$T/steps")
    back=$(awk -F'[ =]' '$2 > 1500 && $4 <= 52 { print $2 - 1500; exit }' "$T/steps")
    echo "burst tenant alone before: achieved $alone %"
    echo "hand-back: ${back:-never} ms after the owner started (50 ms windows)"
    # A burst mode that never borrows would hand back at once: the borrower must have
    # been bursting first, well above its 50 % share. The 50 ms step sampler that times
    # the hand-back takes fakegpu's lock 20 times a second and costs the lone borrower
    # some of the device (80-95 % measured here where the burst case, unsampled, gets
    # 97 %), so the bound here is HANDBACK_BURST_MIN = 75 %; the burst case checks 90 %.
    atleast "$alone" "${VGPU_HANDBACK_BURST_MIN:-75}" ||
        { cat "$T/steps" >&2; fail "the burst tenant alone reached $alone %, want >= ${VGPU_HANDBACK_BURST_MIN:-75} (it did not borrow)"; }
    [ -n "$back" ] && [ "$back" -le "${VGPU_HANDBACK_MS:-150}" ] ||
        { cat "$T/steps" >&2; fail "hand-back took ${back:-forever} ms, want <= ${VGPU_HANDBACK_MS:-150}"; }
    check "burst tenant with its neighbour back" "$(mean_of 0 "$out")" 50
    check "hard 50 % neighbour" "$(mean_of 1 "$out")" 50
    ;;
graph) # CUDA graphs of four 1 ms kernels (captured through libvgpu, replayed with
    # cuGraphLaunch)
    tenant a 30 -- 1000000 $RUN_MS graph
    tenant b 70 -- 1000000 $RUN_MS graph
    out=$(truth "$group_a" "$group_b")
    wait_tenants
    check "30 % graph tenant" "$(mean_of 0 "$out")" 30
    check "70 % graph tenant" "$(mean_of 1 "$out")" 70
    ;;
paths) # cuLaunchKernelEx and cooperative launches are limited too
    tenant a 20 -- 1000000 $RUN_MS ex
    tenant b 40 -- 1000000 $RUN_MS coop
    out=$(truth "$group_a" "$group_b")
    wait_tenants
    check "20 % cuLaunchKernelEx tenant" "$(mean_of 0 "$out")" 20
    check "40 % cooperative tenant" "$(mean_of 1 "$out")" 40
    ;;
procs) # one container, 4 processes, one 40 % budget
    for _ in 1 2 3 4; do tenant a 40 -- 1000000 $RUN_MS; done
    out=$(truth "$group_a")
    wait_tenants
    check "container of 4 processes at 40 %" "$(mean_of 0 "$out")" 40
    ;;
four) # four containers 10/20/30/40 (benchmark scenario)
    for s in 10 20 30 40; do tenant "t$s" "$s" -- 1000000 $RUN_MS; done
    out=$(truth "$group_t10" "$group_t20" "$group_t30" "$group_t40")
    wait_tenants
    i=0
    for s in 10 20 30 40; do check "$s % tenant of four" "$(mean_of $i "$out")" "$s"; i=$((i + 1)); done
    ;;
bursty) # a tenant with random on/off periods next to a saturating one
    tenant a 30 -- 1000000 $RUN_MS bursty 7
    tenant b 70 -- 1000000 $RUN_MS
    out=$(truth "$group_a" "$group_b")
    wait_tenants
    got=$(mean_of 0 "$out")
    echo "bursty 30 % tenant (on about half the time): achieved $got %"
    atleast $((30 + TOL)) "$got" || fail "bursty tenant above its share: $got %"
    # On about half the time at 30 %: about 15 %; a limiter that starves it fails.
    atleast "$got" 10 || fail "bursty tenant starved: $got %"
    check "70 % tenant next to a bursty one" "$(mean_of 1 "$out")" 70
    ;;
killed) # a container killed mid-run (it may hold the GPU's turn, with work in flight)
    # stalls nobody: its turn expires and its neighbour gets its share from then on
    tenant a 30 -- 1000000 $RUN_MS
    tenant b 70 -- 1000000 $((RUN_MS + 1000))
    "$TRUTH" 0 2 "$WINDOWS" "$group_b" >"$T/truth" &
    sampler=$!
    sleep 1
    kill -9 "$group_a"
    wait "$group_a" 2>/dev/null
    pids=("$group_b")
    wait $sampler
    out=$(cat "$T/truth")
    wait_tenants
    check "70 % tenant after its neighbour was killed" "$(mean_of 0 "$out")" 70
    ;;
long) # 20 ms kernels: one kernel is 2 % of a window
    tenant a 30 -- 20000000 $RUN_MS
    tenant b 70 -- 20000000 $RUN_MS
    out=$(truth "$group_a" "$group_b")
    wait_tenants
    check "30 % tenant, 20 ms kernels" "$(mean_of 0 "$out")" 30
    check "70 % tenant, 20 ms kernels" "$(mean_of 1 "$out")" 70
    ;;
shape) # shape SHAPE SPLIT: saturating tenants with kernels of one shape at shares SPLIT
    # (comma-separated); every tenant within TOL of its share.
    shape=${3:?shape}
    split=${4:?split}
    i=0 groups=()
    for s in ${split//,/ }; do
        seed=$((i + 11))
        case $shape in
        fixed-*) args=("${shape#fixed-}" $RUN_MS steady) ;;
        uniform-1-5ms) args=(5000000 $RUN_MS uniform:1000000 $seed) ;;
        loguniform-20us-20ms) args=(20000000 $RUN_MS loguniform:20000 $seed) ;;
        graph-beside-plain) # 4-kernel graphs of 1 ms kernels and plain 1 ms launches in turn
            mode=steady
            [ $((i % 2)) != 0 ] || mode=graph:4
            args=(1000000 $RUN_MS $mode)
            ;;
        graph-*) args=(1000000 $RUN_MS "graph:${shape#graph-}") ;;
        *) fail "unknown shape $shape" ;;
        esac
        tenant "t$i" "$s" -- "${args[@]}"
        var=group_t$i
        groups+=("${!var}")
        i=$((i + 1))
    done
    out=$(truth "${groups[@]}")
    wait_tenants
    i=0
    for s in ${split//,/ }; do check "$shape, $s % tenant of $split" "$(mean_of $i "$out")" "$s"; i=$((i + 1)); done
    ;;
config) # bad values refuse CUDA; disable turns the limit off
    for bad in VGPU_COMPUTE_MODE=soft VGPU_COMPUTE_BURST_LIMIT=0 VGPU_COMPUTE_BURST_LIMIT=101 \
        GPU_CORE_UTILIZATION_POLICY=sometimes VGPU_COMPUTE_BOARD=relative/dir; do
        if err=$(env CUDA_DEVICE_SM_LIMIT=30 CUDA_DEVICE_MEMORY_SHARED_CACHE="$T/region.bad" \
            "$bad" LD_PRELOAD="$LIB" "$TENANT" 1000000 100 2>&1); then
            fail "$bad was accepted"
        fi
        grep -q "${bad%%=*}" <<<"$err" || fail "$bad: error does not name the key: $err"
        echo "$bad refused: $(head -1 <<<"$err")"
    done
    tenant a 30 GPU_CORE_UTILIZATION_POLICY=disable -- 1000000 $RUN_MS
    out=$(truth "$group_a")
    wait_tenants
    got=$(mean_of 0 "$out")
    echo "policy disable: achieved $got %"
    atleast "$got" 90 || fail "GPU_CORE_UTILIZATION_POLICY=disable still limited: $got %"
    ;;
*)
    fail "unknown case $CASE"
    ;;
esac
echo "PASS: $CASE"
