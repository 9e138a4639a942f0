#!/usr/bin/env bash
# Instructions per /filter (callgrind) with and without the closed endpoints' promise
# rules: bench/endpoints_filter_cost.c at FILTERS_A and FILTERS_B filters; the difference
# divided by FILTERS_B - FILTERS_A is the cost of one filter, set-up excluded.
# usage: bench/endpoints_filter_cost.sh BUILD   (NODES 1000, FILTERS_A 100, FILTERS_B 600)
# MIG=1: every GPU in dynamic MIG mode, the pods keeping their instances (MIG decisions
# against the learned mix; endpoints_filter_cost.c); the table then has one row per check.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin=$build/bin/endpoints_filter_cost
[ -x "$bin" ] || { echo "no $bin: build the endpoints_filter_cost target"; exit 1; }
command -v valgrind >/dev/null || { echo "needs valgrind"; exit 1; }
a=${FILTERS_A:-100}
b=${FILTERS_B:-600}
nodes=${NODES:-1000}
mig=${MIG:-0}
count() { # CHECK FILTERS -> instructions
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" "$nodes" "$mig" 2>&1 |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
echo "| /filter, $nodes nodes x 8 GPUs$([ "$mig" = 1 ] && echo " in dynamic MIG mode") offered by name | instructions per filter |"
echo "| --- | --- |"
for check in 0 1; do
    ia=$(count "$check" "$a")
    ib=$(count "$check" "$b")
    per=$(( (ib - ia) / (b - a) ))
    eval "per_$check=$per"
    echo "| $([ "$check" = 1 ] && echo "with the pending-pod check and namespace bound" || echo "without (require_pending off, no bound)") | $per |"
done
echo "| added by the promise rules | $((per_1 - per_0)) |"
