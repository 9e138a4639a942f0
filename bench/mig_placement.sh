#!/usr/bin/env bash
# MIG placement benchmark (docs/placement.md, "MIG placement"): the openb trace's GPU pods
# as GPU instances on a cluster whose every GPU is an H100 80GB in dynamic MIG mode,
# placed by HAMi v2.10's rule (with its chart's default policies, and with GPU binpack)
# and by vgpu's, in the same arrival order per seed (vgpu-sim --mig).
# Usage: bench/mig_placement.sh BUILD_DIR. Prints a markdown table. The trace is read from
# $VGPU_OPENB_DIR, else ../shared/data/openb next to the repository.
# Exits non-zero, after the table, when vgpu's rule is not better: on each workload, its
# mean unusable slices under churn must be below both HAMi rules', its mean pods left
# pending under churn at most theirs, and its pods pending at 100 % fill-up at most the
# default HAMi rule's.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
sim=$build/bin/vgpu-sim
data=${VGPU_OPENB_DIR:-../shared/data/openb}
if [ ! -r "$data/openb_node_list_gpu_node.csv" ]; then
    echo "mig_placement.sh: the openb trace is not in $data (set VGPU_OPENB_DIR)" >&2
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for w in default gpushare60; do
    "$sim" --nodes "$data/openb_node_list_gpu_node.csv" --pods "$data/openb_pod_list_$w.csv" \
        --mig h100-80gb --seeds 42-51 --json >> "$tmp/mig.json"
done
python3 - "$tmp/mig.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("Command: `vgpu-sim --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_W.csv "
      "--mig h100-80gb --seeds 42-51 --json`\n")
print("| workload | rule | fill-up: unusable slices @100 % | fill-up: pods pending @100 % "
      "| churn: unusable slices (mean, sd) | churn: pods pending (mean, sd) | of pods |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
by = {}
for o in rows:
    by[(o["workload"], o["rule"])] = o
    print(f"| {o['workload']} | {o['rule']} | {o['unusable_slice_pct_at_arrival_100']['mean']:.3f} % "
          f"| {o['unplaced_pods_at_arrival_100']['mean']:.1f} "
          f"| {o['churn_unusable_slice_pct']['mean']:.3f} % ({o['churn_unusable_slice_pct']['sd']:.3f}) "
          f"| {o['churn_unplaced_pods']['mean']:.1f} ({o['churn_unplaced_pods']['sd']:.1f}) "
          f"| {o['churn_pods']} |")
missed = []
for w in sorted({o["workload"] for o in rows}):
    v = by[(w, "vgpu")]
    for h in ("hami", "hami-binpack"):
        b = by[(w, h)]
        if not v["churn_unusable_slice_pct"]["mean"] < b["churn_unusable_slice_pct"]["mean"]:
            missed.append(f"{w}: churn unusable slices not below {h}'s")
        if not v["churn_unplaced_pods"]["mean"] <= b["churn_unplaced_pods"]["mean"]:
            missed.append(f"{w}: more pods pending under churn than {h}")
    if not v["unplaced_pods_at_arrival_100"]["mean"] <= by[(w, "hami")]["unplaced_pods_at_arrival_100"]["mean"]:
        missed.append(f"{w}: more pods pending at 100 % fill-up than hami")
if missed:
    print("\nmissed: " + "; ".join(missed))
    sys.exit(1)
PY
