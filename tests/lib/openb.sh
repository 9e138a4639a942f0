# The openb trace for the vgpu-sim tests (sourced, after `set -euo pipefail`).
#   vg_openb DATA_DIR      sets $nodes and $pods to the trace's GPU node list and default
#                          pod list ($VGPU_OPENB_DIR first), and skips through vg_skip
#                          (a failure under CI) when either cannot be read;
#   vg_openb_sample DIR    writes the sample most tests run on (every 10th GPU node, every
#                          8th pod, headers kept) to DIR/openb_node_list_sample.csv and
#                          DIR/openb_pod_list_sample.csv.
. "$(dirname "${BASH_SOURCE[0]}")/vg_skip.sh"

vg_openb() {
    local data=${VGPU_OPENB_DIR:-$1}
    nodes=$data/openb_node_list_gpu_node.csv
    pods=$data/openb_pod_list_default.csv
    if [ ! -r "$nodes" ] || [ ! -r "$pods" ]; then
        vg_skip "the openb trace in $data (openb_node_list_gpu_node.csv, openb_pod_list_default.csv; set VGPU_OPENB_DIR)"
    fi
}

vg_openb_sample() {
    awk 'NR == 1 || NR % 10 == 2' "$nodes" > "$1/openb_node_list_sample.csv"
    awk 'NR == 1 || NR % 8 == 2' "$pods" > "$1/openb_pod_list_sample.csv"
}
