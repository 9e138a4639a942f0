/* vgpu pods (verbs.h): the pods that ask for GPUs (HAMi's resources, read as the
 * scheduler reads them; Volcano's) or hold a decision (vgpu's, or Volcano's
 * volcano.sh/vgpu-ids-new), with what their decision gave them or, while pending, what
 * they ask for (HAMi's resources; "-" for Volcano's). */
#include <string.h>

#include "base/auto_json.h"
#include "base/str.h"
#include "cli/cli.h"
#include "cli/cluster.h"

/* GPUs, memory, compute and (wide) the allocation cells of a bound pod's decision. */
static void decided_cells(const struct cli_cluster *c, const struct annot_decision *d, char *gpus,
                          size_t gpus_size, char *mem, size_t mem_size, char *cores,
                          size_t cores_size, char *alloc, size_t alloc_size)
{
    unsigned ng = 0, cs = 0;
    uint64_t mib = 0;
    size_t used = 0;
    for (unsigned k = 0; k < d->container_count; k++)
        for (unsigned g = 0; g < d->containers[k].gpu_count; g++) {
            const struct annot_share *s = &d->containers[k].gpus[g];
            ng++;
            mib += s->memory_mib;
            cs += s->cores;
            char b[32];
            cli_format_bytes(s->memory_mib << 20, b, sizeof b);
            int w =
                vg_snprintf(alloc + used, alloc_size - used, "%s%s=%d:%s/%u%%", used ? "," : "",
                            d->containers[k].name, cli_gpu_index(c, d->node, s->uuid), b, s->cores);
            used = w > 0 ? used + (size_t)w : used;
        }
    (void)vg_snprintf(gpus, gpus_size, "%u", ng);
    cli_format_bytes(mib << 20, mem, mem_size);
    (void)vg_snprintf(cores, cores_size, "%u%%", cs);
}

/* GPUs, memory and compute cells of a pending pod's n requests. */
static void requested_cells(const struct sched_container_request *req, int n, char *gpus,
                            size_t gpus_size, char *mem, size_t mem_size, char *cores,
                            size_t cores_size)
{
    unsigned ng = 0, cs = 0;
    for (int k = 0; k < n; k++) {
        ng += req[k].request.gpu_count;
        cs += req[k].request.gpu_milli / 10 * req[k].request.gpu_count;
    }
    (void)vg_snprintf(gpus, gpus_size, "%u", ng);
    cli_request_memory(&req[0].request, mem, mem_size);
    if (n > 1 || req[0].request.gpu_count > 1) {
        char each[32];
        (void)vg_snprintf(each, sizeof each, "%s", mem);
        (void)vg_snprintf(mem, mem_size, "%s each", each);
    }
    (void)vg_snprintf(cores, cores_size, "%u%%", cs);
}

int cli_pods(const struct cli_source *src, const struct cli_options *opt, FILE *out, FILE *diag,
             struct vg_err *err)
{
    char ns[CLI_NAME_MAX];
    (void)vg_strlcpy(ns, cli_namespace(src, opt), sizeof ns);
    VG_AUTO(cli_cluster_free) struct cli_cluster c = {0};
    int rc = cli_cluster_load(src, &c, err);
    if (rc < 0)
        return rc;
    bool all = opt->all_namespaces, wide = opt->output == CLI_OUTPUT_WIDE;
    VG_AUTO(cli_table_free) struct cli_table t = {0};
    cli_table_init(&t, (size_t)((all ? 1 : 0) + (wide ? 7 : 6)));
    char head[256];
    (void)vg_snprintf(head, sizeof head, "%sNAME\tSTATUS\tNODE\tGPUS\tMEMORY\tCOMPUTE%s",
                      all ? "NAMESPACE\t" : "", wide ? "\tALLOCATION" : "");
    cli_table_add_tabbed(&t, head);
    VG_AUTO_JSON json_t *doc = json_pack("{s:[]}", "pods");
    size_t i;
    json_t *pod;
    json_array_foreach(c.pods, i, pod)
    {
        const char *pns = cli_meta(pod, "namespace");
        const char *name = cli_meta(pod, "name");
        if (!name)
            continue;
        if (!pns)
            pns = "default";
        if (!all && strcmp(pns, ns) != 0)
            continue;
        struct sched_container_request req[ANNOT_MAX_CONTAINERS];
        struct vg_err rerr = {0};
        int n = sched_pod_requests(&c.options, pod, req, ANNOT_MAX_CONTAINERS, &rerr);
        struct annot_decision d;
        bool decided =
            cli_pod_decision(pod, &d) ||
            (cli_annotation(pod, ANNOT_KEY_DECISION) == NULL && cli_volcano_decision(pod, &d));
        if (n == 0 && !decided && !cli_volcano_pod(pod))
            continue; /* no GPUs asked, none given */
        const char *phase = sched_json_str(pod, "status", "phase", NULL);
        const char *node = sched_json_str(pod, "spec", "nodeName", NULL);
        char status[128], gpus[64], mem[64], cores[64], alloc[CLI_CELL_MAX] = "";
        (void)vg_snprintf(status, sizeof status, "%s", phase ? phase : "Unknown");
        if (n < 0)
            (void)vg_snprintf(status, sizeof status, "BadRequest");
        else if (node && !decided)
            (void)vg_snprintf(status, sizeof status, "%s (no vgpu decision)",
                              phase ? phase : "Unknown");
        else if (decided && d.generation > 0) /* the spec's requests no longer say them */
            (void)vg_snprintf(status, sizeof status, "%s (resized)", phase ? phase : "Unknown");
        json_t *jp = json_pack("{s:s, s:s, s:s, s:o}", "namespace", pns, "name", name, "phase",
                               phase ? phase : "Unknown", "request",
                               n > 0 ? cli_request_json(req, n) : json_array());
        json_object_set_new(jp, "node", node ? json_string(node) : json_null());
        json_object_set_new(jp, "decision", decided ? cli_decision_json(&d) : json_null());
        if (n < 0)
            json_object_set_new(jp, "error", json_string(rerr.msg));
        json_array_append_new(json_object_get(doc, "pods"), jp);
        if (decided) {
            decided_cells(&c, &d, gpus, sizeof gpus, mem, sizeof mem, cores, sizeof cores, alloc,
                          sizeof alloc);
        } else if (n > 0) {
            requested_cells(req, n, gpus, sizeof gpus, mem, sizeof mem, cores, sizeof cores);
        } else {
            (void)vg_snprintf(gpus, sizeof gpus, "-");
            (void)vg_snprintf(mem, sizeof mem, "-");
            (void)vg_snprintf(cores, sizeof cores, "-");
        }
        char row[CLI_CELL_MAX * 8];
        (void)vg_snprintf(row, sizeof row, "%s%s%s\t%s\t%s\t%s\t%s\t%s%s%s", all ? pns : "",
                          all ? "\t" : "", name, status, node ? node : "<pending>", gpus, mem,
                          cores, wide ? "\t" : "", wide ? alloc : "");
        cli_table_add_tabbed(&t, row);
    }
    if (opt->output == CLI_OUTPUT_JSON)
        return cli_write_json(doc, out, err);
    if (t.rows == 1 && all)
        fprintf(diag, "No GPU pods found.\n");
    else if (t.rows == 1)
        fprintf(diag, "No GPU pods found in %s namespace.\n", ns);
    else
        return cli_write_table(&t, out, err);
    return 0;
}
