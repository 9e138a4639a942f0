#!/usr/bin/env bash
# vgpu-sim --mig on a sample of the openb trace (every 10th GPU node, every 8th pod of the
# default workload; under a second): the trace's GPU pods as GPU instances on H100s in
# dynamic MIG mode, HAMi v2.10's rule against vgpu's in the same arrival order, and
#   - vgpu's rule (scoring against default's learned mix) leaves fewer slices unusable
#     under churn than both HAMi rules, and no more pods pending; and at 100 % fill-up no
#     more pods pending than HAMi's default rule (docs/placement.md, "MIG placement");
#   - a seed's output is the same on a second run;
#   - bad input (an unknown model) exits with status 2 and names it.
# Needs the openb trace ($VGPU_OPENB_DIR or ../shared/data/openb): skips without it,
# fails without it under CI (tests/lib/openb.sh).
# Usage: sim_mig.sh VGPU_SIM DATA_DIR
set -euo pipefail
. "$(dirname "$0")/../lib/openb.sh"
sim=$1
vg_openb "$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
vg_openb_sample "$tmp"

run() {
    "$sim" --nodes "$tmp/openb_node_list_sample.csv" --pods "$tmp/openb_pod_list_sample.csv" \
        --mig h100-80gb --seeds 42-61 --json
}
run > "$tmp/a.json"
run > "$tmp/b.json"
sed 's/,"seconds":[0-9.]*//' "$tmp/a.json" > "$tmp/a.stripped"
sed 's/,"seconds":[0-9.]*//' "$tmp/b.json" > "$tmp/b.stripped"
cmp "$tmp/a.stripped" "$tmp/b.stripped" || { echo "output differs between two runs"; exit 1; }
python3 - "$tmp/a.json" <<'PY'
import json, sys
rows = {o["rule"]: o for o in map(json.loads, open(sys.argv[1]))}
assert set(rows) == {"hami", "hami-binpack", "vgpu"}, set(rows)
for r, o in sorted(rows.items()):
    assert o["mig"] == "h100-80gb" and o["seeds"] == 20 and o["gpu_pods"] > 500, o
    assert 0 < o["churn_pods"] < o["gpu_pods"], o
    # At 100 % arrival (in slices) the instances hold nearly all slices, under any rule.
    assert 95 <= o["allocated_slice_pct_at_arrival_100"]["mean"] <= 100, o
    print(f"{r}: churn unusable {o['churn_unusable_slice_pct']['mean']:.3f} %, "
          f"pending {o['churn_unplaced_pods']['mean']:.2f}")
v = rows["vgpu"]
# Something is measured: departures leave holes under every rule, vgpu's included.
assert v["churn_unusable_slice_pct"]["mean"] > 0 and v["churn_unplaced_pods"]["mean"] > 0, v
# At 100 % fill-up no more pods pending than under HAMi's default rule (the bench's gate).
assert v["unplaced_pods_at_arrival_100"]["mean"] <= rows["hami"]["unplaced_pods_at_arrival_100"]["mean"], v
for h in ("hami", "hami-binpack"):
    # Deterministic for their seeds: exact comparisons, not timing bounds.
    assert v["churn_unusable_slice_pct"]["mean"] < 0.9 * rows[h]["churn_unusable_slice_pct"]["mean"], (h, v)
    assert v["churn_unplaced_pods"]["mean"] <= rows[h]["churn_unplaced_pods"]["mean"], (h, v)
print("sim mig ok")
PY
set +e
"$sim" --nodes "$tmp/openb_node_list_sample.csv" --pods "$tmp/openb_pod_list_sample.csv" \
    --mig h100-96gb 2> "$tmp/err"
rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "unknown model: exit $rc, want 2"; exit 1; }
grep -q "unknown model 'h100-96gb'" "$tmp/err"
echo "sim mig ok"
