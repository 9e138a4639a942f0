#!/usr/bin/env bash
# libvgpu integration tests against fakegpu: libvgpu_test.sh BUILD_DIR CASE.
# Each run gets a fresh FAKEGPU_STATE_DIR and region (mktemp -d), so cases run in parallel.
# On a real GPU: VGPU_TEST_REAL=1 and no FAKEGPU_* (see docs/libvgpu.md, "Testing").
set -uo pipefail
. "$(dirname "$0")/../lib/fakegpu_tenants.sh"
vg_tenants_init libvgpu "$@"
vg_fakegpu_env
export FAKEGPU_CONTEXT_MIB=256 VGPU_CONTEXT_MIB=256
export CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/region CUDA_DEVICE_MEMORY_LIMIT=2g
LIB=$B/lib/libvgpu.so
PROBE=$B/bin/libvgpu_probe
PROBE_LINK=$B/bin/libvgpu_probe_link
TRUTH=$B/bin/libvgpu_truth

# fail, field, MiB, GiB: tests/lib/fakegpu_tenants.sh.
pre() { LD_PRELOAD=$LIB "$@"; }
uuid_of() { sed -n 's/.*\buuid=\(GPU-[0-9a-f-]*\).*/\1/p' <<<"$1"; }
# NVML's view of physical device $1 (NVML ignores CUDA_VISIBLE_DEVICES), through libvgpu.
nvml_view() { LD_PRELOAD=$LIB "$B/bin/libvgpu_nvml" dlsym "$1"; }

# Starts `probe hold BYTES` in the background; waits for its "ready" (or "oom").
hold() {
    local out=$T/hold.$RANDOM
    LD_PRELOAD=$LIB "$PROBE" dlsym hold "$1" >"$out" 2>&1 &
    local pid=$!
    pids+=("$pid")
    for _ in $(seq 1 400); do
        [ -s "$out" ] && break
        sleep 0.025
    done
    HOLD_PID=$pid
    HOLD_OUT=$(cat "$out")
}

case $CASE in
paths_link) pre "$PROBE_LINK" link paths || fail "allocation paths (linked)" ;;
paths_dlsym)
    pre "$PROBE" dlsym paths 2>"$T/err" || fail "allocation paths (dlopen + dlsym)"
    # Silent unless asked; when asked, refusals are logged once (then every 10 s at most).
    [ ! -s "$T/err" ] || fail "libvgpu wrote to stderr unasked: $(cat "$T/err")"
    VGPU_LOG_LEVEL=warn pre "$PROBE" dlsym paths >/dev/null 2>"$T/err" || fail "paths, logging"
    [ "$(grep -c 'memory limit reached' "$T/err")" = 1 ] || fail "OOM log lines: $(cat "$T/err")"
    ;;
paths_procaddr) pre "$PROBE" procaddr paths || fail "allocation paths (cuGetProcAddress)" ;;

view)
    out=$(pre "$PROBE" dlsym info) || fail "info: $out"
    [ "$(field total "$out")" = $((2 * GiB)) ] || fail "cuMemGetInfo total: $out"
    [ "$(field devtotal "$out")" = $((2 * GiB)) ] || fail "cuDeviceTotalMem: $out"
    [ "$(field free "$out")" = $((2 * GiB - 256 * MiB)) ] || fail "free with one context: $out"
    # Another process of the container holds 512 MiB + its context: this one sees it.
    hold $((512 * MiB))
    [ "$HOLD_OUT" = ready ] || fail "hold: $HOLD_OUT"
    out=$(pre "$PROBE" dlsym info)
    [ "$(field free "$out")" = $((2 * GiB - 1024 * MiB)) ] || fail "free with a neighbour: $out"
    # It dies by SIGKILL: its bytes come back at once to the next reader/allocation.
    kill -9 "$HOLD_PID"
    wait "$HOLD_PID" 2>/dev/null
    out=$(pre "$PROBE" dlsym fill) || fail "fill after a SIGKILL: $out"
    [ "$(field filled "${out/filled /filled=}")" = $((2 * GiB - 256 * MiB)) ] || fail "$out"
    ;;

passthrough)
    unset CUDA_DEVICE_MEMORY_LIMIT CUDA_DEVICE_MEMORY_SHARED_CACHE
    out=$(pre "$PROBE" dlsym info) || fail "info: $out"
    [ "$(field total "$out")" = $((8 * GiB)) ] || fail "no limit: real total expected: $out"
    [ "$(field free "$out")" = $((8 * GiB - 256 * MiB)) ] || fail "no limit: real free: $out"
    [ ! -e "$T/region" ] || fail "a region was created without a limit"
    pre "$PROBE" dlsym fill >/dev/null || fail "fill the real card"
    # CUDA_DEVICE_MEMORY_LIMIT=0 is HAMi's explicit "no limit".
    out=$(CUDA_DEVICE_MEMORY_LIMIT=0 pre "$PROBE" dlsym info)
    [ "$(field total "$out")" = $((8 * GiB)) ] || fail "limit 0: $out"
    ;;

config)
    # Every malformed value refuses CUDA initialisation with one line naming it.
    for kv in CUDA_DEVICE_MEMORY_LIMIT=abc CUDA_DEVICE_MEMORY_LIMIT=-1 CUDA_DEVICE_MEMORY_LIMIT= \
        CUDA_DEVICE_MEMORY_LIMIT=4x CUDA_DEVICE_MEMORY_LIMIT_16=1g CUDA_DEVICE_MEMORY_LIMIT_a=1g \
        CUDA_DEVICE_SM_LIMIT=101 CUDA_DEVICE_SM_LIMIT=abc CUDA_DEVICE_MEMORY_SHARED_CACHE=rel \
        VGPU_CONTEXT_MIB=x VGPU_LOG_LEVEL=loud VGPU_LIMITS_FILE=/nonexistent; do
        out=$(env "$kv" LD_PRELOAD="$LIB" "$PROBE" dlsym info 2>"$T/err")
        rc=$?
        [ $rc = 3 ] && grep -q "cuInit=1" <<<"$out" || fail "$kv: rc=$rc out=$out"
        [ "$(wc -l <"$T/err")" = 1 ] || fail "$kv: want one stderr line, got: $(cat "$T/err")"
        grep -q "^vgpu: .*${kv%%=*}" "$T/err" || fail "$kv: message: $(cat "$T/err")"
    done
    # The limits file wins over the environment.
    # (The file names the region: it replaces every key it may hold.)
    printf 'vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT=1g\nCUDA_DEVICE_MEMORY_SHARED_CACHE=%s\n' \
        "$T/region2" >"$T/limits"
    out=$(VGPU_LIMITS_FILE=$T/limits CUDA_DEVICE_MEMORY_LIMIT=6g pre "$PROBE" dlsym info) ||
        fail "$out"
    [ "$(field total "$out")" = $((1 * GiB)) ] || fail "limits file precedence: $out"
    printf 'vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT=lots\n' >"$T/limits"
    out=$(VGPU_LIMITS_FILE=$T/limits pre "$PROBE" dlsym info 2>&1)
    grep -q "cuInit=1" <<<"$out" || fail "malformed limits file accepted: $out"
    ;;

region)
    # A region file that is not a version-1 region of the right size is refused, loudly.
    pre "$PROBE" dlsym info >/dev/null || fail "creating the region"
    size=$(stat -c %s "$T/region")
    for variant in garbage truncated version; do
        cp "$T/region" "$T/r.$variant"
        case $variant in
        garbage) head -c "$size" /dev/urandom >"$T/r.$variant" ;;
        truncated) truncate -s $((size / 2)) "$T/r.$variant" ;;
        version) printf '\x07' | dd of="$T/r.$variant" bs=1 seek=8 conv=notrunc 2>/dev/null ;;
        esac
        out=$(CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/r.$variant LD_PRELOAD=$LIB "$PROBE" dlsym info \
            2>"$T/err")
        grep -q "cuInit=1" <<<"$out" || fail "$variant region accepted: $out"
        grep -q "^vgpu: .*region" "$T/err" || fail "$variant: message: $(cat "$T/err")"
    done
    ;;

stress)
    export FAKEGPU_CONTEXT_MIB=64 VGPU_CONTEXT_MIB=64 CUDA_DEVICE_MEMORY_LIMIT=3g
    # 16 processes allocate and free random sizes for 6 s; fakegpu's per-process truth
    # (allocations + contexts) never passes the limit.
    for i in $(seq 1 16); do
        PROBE_BARRIER=$T/go pre "$PROBE" dlsym random 6 "$i" >"$T/rand.$i" 2>&1 &
        pids+=($!)
    done
    for _ in $(seq 1 1200); do
        [ "$(cat "$T"/rand.* | grep -c '^context')" = 16 ] && break
        sleep 0.05
    done
    "$TRUTH" 0 8 >"$T/truth" &
    tpid=$!
    touch "$T/go"
    for p in "${pids[@]}"; do wait "$p" || fail "a random allocator failed: $(cat "$T"/rand.*)"; done
    pids=()
    wait $tpid
    max=$(field max "$(cat "$T/truth")")
    echo "truth max=$max limit=$((3 * GiB)); $(grep -h ok= "$T"/rand.* | tr '\n' ' ')"
    [ -n "$max" ] && [ "$max" -le $((3 * GiB)) ] || fail "container went past its limit: $max"
    [ "$max" -gt $((GiB)) ] || fail "the allocators never came near the limit: $max"
    grep -q "oom=0" "$T"/rand.* && ! grep -qv "oom=0" "$T"/rand.* && fail "no allocation refused"
    # The last allocation fills the limit to within one granule (2 MiB).
    out=$(pre "$PROBE" dlsym fill) || fail "fill after the stress: $out"
    [ "${out#filled }" = $((3 * GiB - 64 * MiB)) ] || fail "leaked or lost bytes: $out"
    ;;

kill)
    # Hundreds of SIGKILLs at random moments (in start-up, attach, allocation, free),
    # then one process must get the whole limit at once.
    end=$((SECONDS + 25))
    n=0
    while [ $n -lt 300 ] && [ $SECONDS -lt $end ]; do
        for _ in 1 2 3 4; do
            LD_PRELOAD=$LIB "$PROBE" dlsym random 5 $((n + RANDOM)) >/dev/null 2>&1 &
            pids+=($!)
        done
        sleep "0.0$((RANDOM % 9 + 1))"
        for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
        wait 2>/dev/null
        pids=()
        n=$((n + 4))
    done
    echo "killed $n processes"
    [ $n -ge 100 ] || fail "only $n kills in the time box"
    out=$(pre "$PROBE" dlsym fill) || fail "full-limit allocation after the kill storm: $out"
    [ "${out#filled }" = $((2 * GiB - 256 * MiB)) ] || fail "leaked bytes: $out"
    ;;

two_containers)
    # Two containers share the card, each with its own region and limit.
    CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/a hold $((400 * MiB))
    [ "$HOLD_OUT" = ready ] || fail "A: 400 MiB under 1 GiB: $HOLD_OUT"
    a=$HOLD_PID
    CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/a hold $((200 * MiB))
    [ "$HOLD_OUT" = oom ] || fail "A: a second process past A's limit: $HOLD_OUT"
    kill -9 "$HOLD_PID"
    CUDA_DEVICE_MEMORY_LIMIT=3g CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/b hold $((2 * GiB))
    [ "$HOLD_OUT" = ready ] || fail "B: 2 GiB under 3 GiB: $HOLD_OUT"
    b=$HOLD_PID
    ta=$(field last "$("$TRUTH" 0 0 "$a")")
    tb=$(field last "$("$TRUTH" 0 0 "$b")")
    [ "$ta" -le $((GiB)) ] && [ "$tb" -le $((3 * GiB)) ] || fail "truth A=$ta B=$tb"
    out=$(CUDA_DEVICE_MEMORY_LIMIT=3g CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/b pre "$PROBE" dlsym info)
    [ "$(field free "$out")" = $((3 * GiB - 2 * GiB - 512 * MiB)) ] || fail "B's view: $out"
    out=$(CUDA_DEVICE_MEMORY_LIMIT=1g CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/a pre "$PROBE" dlsym info)
    [ "$(field free "$out")" = $((GiB - 400 * MiB - 512 * MiB)) ] || fail "A's view: $out"
    ;;

fork)
    pre "$PROBE" dlsym fork || fail "fork"
    # A parent that never touches CUDA forks workers that do: each attaches on its own.
    out=$(pre "$PROBE" dlsym forkfresh 2 $((600 * MiB)))
    grep -q "children failed=0" <<<"$out" || fail "two workers within the limit: $out"
    out=$(pre "$PROBE" dlsym forkfresh 3 $((600 * MiB)))
    grep -q "children failed=1" <<<"$out" || fail "third worker past the limit: $out"
    ;;

noncuda)
    # Programs that never call cuInit are untouched: shells, tools, dlsym(RTLD_NEXT).
    [ "$(pre sh -c 'echo $((6 * 7))')" = 42 ] || fail "a shell under libvgpu"
    pre "$PROBE_LINK" link dlnext || fail "dlsym(RTLD_NEXT) resolved relative to libvgpu"
    [ ! -e "$T/region" ] || fail "a region appeared for a program that never used CUDA"
    ;;

nvml)
    # nvidia-smi / pynvml inside the container: the limit as total, the container's usage,
    # its processes; linked and dlopened alike.
    hold $((512 * MiB))
    [ "$HOLD_OUT" = ready ] || fail "hold: $HOLD_OUT"
    for mode in link dlsym; do
        bin=$B/bin/libvgpu_nvml
        [ $mode = link ] && bin=$B/bin/libvgpu_nvml_link
        out=$(pre "$bin" $mode) || fail "$mode: $out"
        echo "$mode: $out"
        [ "$(field total "$out")" = $((2 * GiB)) ] || fail "$mode total: $out"
        [ "$(field used "$out")" = $((768 * MiB)) ] || fail "$mode used: $out"
        [ "$(field free "$out")" = $((2 * GiB - 768 * MiB)) ] || fail "$mode free: $out"
        [ "$(field total2 "$out")" = $((2 * GiB)) ] || fail "$mode v2 total: $out"
        grep -q "pids=$HOLD_PID:$((768 * MiB))\b" <<<"$out" || fail "$mode processes: $out"
    done
    # No limit: NVML's own values.
    out=$(env -u CUDA_DEVICE_MEMORY_LIMIT -u CUDA_DEVICE_MEMORY_SHARED_CACHE \
        LD_PRELOAD="$LIB" "$B/bin/libvgpu_nvml" dlsym) || fail "$out"
    [ "$(field total "$out")" = $((8 * GiB)) ] || fail "no limit: $out"
    ;;

multidevice)
    export FAKEGPU_DEVICES="Test GPU:8GiB:16,Test GPU:8GiB:16"
    export CUDA_DEVICE_MEMORY_LIMIT_0=1g CUDA_DEVICE_MEMORY_LIMIT_1=3g
    out0=$(pre "$PROBE" dlsym info) || fail "$out0"
    out1=$(PROBE_DEVICE=1 pre "$PROBE" dlsym info) || fail "$out1"
    [ "$(field total "$out0")" = $((GiB)) ] || fail "device 0: $out0"
    [ "$(field total "$out1")" = $((3 * GiB)) ] || fail "device 1: $out1"
    PROBE_DEVICE=1 pre "$PROBE" dlsym paths >/dev/null || fail "paths on device 1"
    out=$(PROBE_DEVICE=1 pre "$PROBE" dlsym fill) || fail "fill device 1: $out"
    [ "${out#filled }" = $((3 * GiB - 256 * MiB)) ] || fail "device 1 fill: $out"
    ;;

visible)
    # Three 8 GiB cards; CUDA_DEVICE_MEMORY_LIMIT_<n> is the n-th device CUDA_VISIBLE_DEVICES
    # shows, whichever physical card that is, and the limit stays with that card (by UUID)
    # for every process of the container, NVML's physical numbering included.
    export FAKEGPU_DEVICES="Test GPU:8GiB:16,Test GPU:8GiB:16,Test GPU:8GiB:16"
    unset CUDA_DEVICE_MEMORY_LIMIT
    uuid=()
    for d in 0 1 2; do
        out=$("$B/bin/libvgpu_nvml" dlsym $d) || fail "NVML device $d: $out"
        uuid[d]=$(uuid_of "$out")
    done
    [ -n "${uuid[2]}" ] && [ "${uuid[0]}" != "${uuid[1]}" ] && [ "${uuid[1]}" != "${uuid[2]}" ] ||
        fail "UUIDs: ${uuid[*]}"
    # The shortest prefix of device 2's UUID that names it alone.
    for len in $(seq 5 40); do
        prefix=${uuid[2]:0:$len}
        [[ ${uuid[0]} == "$prefix"* || ${uuid[1]} == "$prefix"* ]] || break
    done
    # check TOTAL UUID OUTPUT: the probe sees a device of that total and UUID.
    check() {
        [ "$(field total "$3")" = "$1" ] && [ "$(uuid_of "$3")" = "$2" ] || fail "want total=$1 uuid=$2: $3"
    }

    # "1,0": ordinal 0 is card 1 (2 GiB), ordinal 1 is card 0 (3 GiB).
    export CUDA_VISIBLE_DEVICES=1,0 CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/r1
    export CUDA_DEVICE_MEMORY_LIMIT_0=2g CUDA_DEVICE_MEMORY_LIMIT_1=3g
    check $((2 * GiB)) "${uuid[1]}" "$(pre "$PROBE" dlsym info)"
    check $((3 * GiB)) "${uuid[0]}" "$(PROBE_DEVICE=1 pre "$PROBE" dlsym info)"
    hold $((512 * MiB)) # on ordinal 0: card 1
    [ "$HOLD_OUT" = ready ] || fail "hold: $HOLD_OUT"
    out=$(nvml_view 1) || fail "NVML 1: $out"
    [ "$(field total "$out")" = $((2 * GiB)) ] && [ "$(field used "$out")" = $((768 * MiB)) ] &&
        grep -q "pids=$HOLD_PID:$((768 * MiB))\b" <<<"$out" || fail "NVML card 1: $out"
    out=$(nvml_view 0) || fail "NVML 0: $out"
    [ "$(field total "$out")" = $((3 * GiB)) ] && [ "$(field used "$out")" = 0 ] ||
        fail "NVML card 0: $out"
    out=$(nvml_view 2) || fail "NVML 2: $out"
    [ "$(field total "$out")" = $((8 * GiB)) ] || fail "card 2 is not the container's: $out"
    [ "$(field last "$("$TRUTH" 1 0 "$HOLD_PID")")" = $((768 * MiB)) ] || fail "driver: card 1"
    [ "$(field last "$("$TRUTH" 0 0 "$HOLD_PID")")" = 0 ] || fail "driver: card 0"
    out=$(pre "$PROBE" dlsym fill) || fail "fill card 1 beside the holder: $out"
    [ "${out#filled }" = $((2 * GiB - 768 * MiB - 256 * MiB)) ] || fail "fill card 1: $out"
    kill -9 "$HOLD_PID"
    wait "$HOLD_PID" 2>/dev/null
    # Other processes of the container name the cards differently; the limits follow the
    # cards, whatever their own CUDA_DEVICE_MEMORY_LIMIT_<n> says.
    check $((3 * GiB)) "${uuid[0]}" "$(CUDA_VISIBLE_DEVICES=0 pre "$PROBE" dlsym info)"
    check $((2 * GiB)) "${uuid[1]}" "$(CUDA_VISIBLE_DEVICES=${uuid[1]} pre "$PROBE" dlsym info)"
    check $((8 * GiB)) "${uuid[2]}" "$(CUDA_VISIBLE_DEVICES=2 pre "$PROBE" dlsym info)"
    CUDA_VISIBLE_DEVICES=0,1 PROBE_DEVICE=1 pre "$PROBE" dlsym paths >/dev/null ||
        fail "every path at card 1's limit as ordinal 1"
    # No CUDA device visible: cuInit's CUDA_ERROR_NO_DEVICE reaches the program unchanged,
    # and NVML (which shows every card) still shows the container's cards limited.
    for none in "" -1; do
        out=$(CUDA_VISIBLE_DEVICES=$none pre "$PROBE" dlsym info)
        [ "$out" = "cuInit=100" ] || fail "CUDA_VISIBLE_DEVICES='$none': $out"
        out=$(CUDA_VISIBLE_DEVICES=$none nvml_view 1) || fail "NVML without CUDA: $out"
        [ "$(field total "$out")" = $((2 * GiB)) ] || fail "no CUDA device, NVML card 1: $out"
        out=$(CUDA_VISIBLE_DEVICES=$none nvml_view 0) || fail "NVML without CUDA: $out"
        [ "$(field total "$out")" = $((3 * GiB)) ] || fail "no CUDA device, NVML card 0: $out"
        out=$(CUDA_VISIBLE_DEVICES=$none nvml_view 2) || fail "NVML without CUDA: $out"
        [ "$(field total "$out")" = $((8 * GiB)) ] || fail "no CUDA device, NVML card 2: $out"
    done
    # ... and without a region there is nothing to show: NVML's values, no region made.
    out=$(CUDA_VISIBLE_DEVICES= CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/none nvml_view 0) || fail "$out"
    [ "$(field total "$out")" = $((8 * GiB)) ] && [ ! -e "$T/none" ] || fail "no region: $out"

    # A full UUID: its only device is ordinal 0.
    export CUDA_VISIBLE_DEVICES=${uuid[2]} CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/r2
    export CUDA_DEVICE_MEMORY_LIMIT_0=1536m
    unset CUDA_DEVICE_MEMORY_LIMIT_1
    check $((1536 * MiB)) "${uuid[2]}" "$(pre "$PROBE" dlsym info)"
    for d in 0 1 2; do
        out=$(nvml_view $d) || fail "NVML $d: $out"
        want=$((8 * GiB))
        [ $d = 2 ] && want=$((1536 * MiB))
        [ "$(field total "$out")" = $want ] || fail "UUID list, NVML card $d: $out"
    done
    out=$(pre "$PROBE" dlsym fill) || fail "fill card 2: $out"
    [ "${out#filled }" = $((1536 * MiB - 256 * MiB)) ] || fail "fill card 2: $out"

    # "2", then a UUID prefix and an index mixed.
    export CUDA_VISIBLE_DEVICES=2 CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/r3 CUDA_DEVICE_MEMORY_LIMIT_0=1g
    check $((GiB)) "${uuid[2]}" "$(pre "$PROBE" dlsym info)"
    [ "$(field total "$(nvml_view 2)")" = $((GiB)) ] || fail "\"2\": NVML card 2"
    [ "$(field total "$(nvml_view 0)")" = $((8 * GiB)) ] || fail "\"2\": NVML card 0"
    check $((GiB)) "${uuid[2]}" "$(CUDA_VISIBLE_DEVICES=$prefix pre "$PROBE" dlsym info)"
    export CUDA_VISIBLE_DEVICES=$prefix,1 CUDA_DEVICE_MEMORY_SHARED_CACHE=$T/r4
    export CUDA_DEVICE_MEMORY_LIMIT_0=1g CUDA_DEVICE_MEMORY_LIMIT_1=2g
    check $((GiB)) "${uuid[2]}" "$(pre "$PROBE" dlsym info)"
    check $((2 * GiB)) "${uuid[1]}" "$(PROBE_DEVICE=1 pre "$PROBE" dlsym info)"
    [ "$(field total "$(nvml_view 2)")" = $((GiB)) ] || fail "prefix list: NVML card 2"
    [ "$(field total "$(nvml_view 1)")" = $((2 * GiB)) ] || fail "prefix list: NVML card 1"
    [ "$(field total "$(nvml_view 0)")" = $((8 * GiB)) ] || fail "prefix list: NVML card 0"
    ;;

threads)
    # Eight threads of one process initialise CUDA at once, then allocate and free against
    # one 1 GiB limit while a ninth keeps calling cuInit; the driver's truth never passes
    # the limit, and afterwards one allocation takes exactly what the limit leaves.
    export FAKEGPU_CONTEXT_MIB=64 VGPU_CONTEXT_MIB=64 CUDA_DEVICE_MEMORY_LIMIT=1g
    "$TRUTH" 0 7 >"$T/truth" &
    tpid=$!
    out=$(pre "$PROBE" dlsym threads 8 4 7) || fail "threads: $out"
    wait $tpid
    max=$(field max "$(cat "$T/truth")")
    echo "$out; truth max=$max limit=$((GiB))"
    [ -n "$max" ] && [ "$max" -le $((GiB)) ] || fail "the process went past its limit: $max"
    [ "$max" -gt $((GiB / 2)) ] || fail "the threads never came near the limit: $max"
    [ "$(field oom "$out")" -gt 0 ] || fail "no allocation refused: $out"
    [ "$(field filled "$out")" = $((GiB - 64 * MiB)) ] || fail "leaked or lost bytes: $out"
    out=$(pre "$PROBE_LINK" link threads 4 1 11) || fail "threads, linked: $out"
    [ "$(field filled "$out")" = $((GiB - 64 * MiB)) ] || fail "linked: $out"
    ;;

torture)
    # libvgpu's n-th allocation fails, n = 1, 2, ... until a run needs fewer than n (each
    # run starts without a region, so the region's own allocations come first). Whatever
    # fails, the program is never aborted: CUDA initialisation is refused with a message
    # (no region), or the one allocation libvgpu could not record is refused with
    # CUDA_ERROR_OUT_OF_MEMORY, charges nothing, and works when tried again.
    refused=0
    degraded=0
    for n in $(seq 1 20); do
        rm -f "$T/region"
        VGPU_TORTURE_FAIL_NTH=$n LD_PRELOAD=$B/lib/libvgpu_torture.so "$PROBE" dlsym torture \
            >"$T/out" 2>"$T/err"
        rc=$?
        out=$(cat "$T/out")
        if ! grep -q "vgpu-torture: an allocation failed" "$T/err"; then
            [ "$rc" = 0 ] && [ "$(field oom "$out")" = 0 ] || fail "n=$n, nothing failed: $out"
            break
        fi
        if [ "$rc" = 3 ]; then
            grep -q "out of memory.*CUDA initialisation refused" "$T/err" ||
                fail "n=$n: init refused without saying why: $(cat "$T/err")"
            refused=$((refused + 1))
        else
            [ "$rc" = 0 ] || fail "n=$n: rc=$rc $out $(cat "$T/err")"
            [ "$(field oom "$out")" = 1 ] || fail "n=$n: expected one refusal: $out"
            degraded=$((degraded + 1))
        fi
    done
    echo "torture: $refused runs refused CUDA, $degraded refused one allocation, last n=$n"
    [ "$refused" -ge 2 ] || fail "region creation and opening never failed"
    # The table's first block and its growths at 128, 256 and 512 entries.
    [ "$degraded" -ge 4 ] || fail "only $degraded table allocations failed"
    ;;

*) fail "unknown case $CASE" ;;
esac
echo "ok: $CASE"
