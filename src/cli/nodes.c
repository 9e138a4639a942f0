/* vgpu nodes and vgpu gpus (verbs.h): allocation per node and per GPU, from the nodes'
 * vgpu.io/gpus inventories and the bound pods' decisions, charged through the
 * scheduler's model. One walk serves both verbs, so their numbers cannot drift apart. */
#include <string.h>

#include "base/auto_json.h"
#include "base/str.h"
#include "cli/cli.h"
#include "cli/cluster.h"

/* The pods bound to node name, in all and per GPU of inv. */
static unsigned count_pods(const struct cli_cluster *c, const char *name,
                           const struct annot_inventory *inv, unsigned gpu_pods[ANNOT_MAX_GPUS])
{
    unsigned pods = 0;
    size_t k;
    json_t *pod;
    json_array_foreach(c->pods, k, pod)
    {
        struct annot_decision d;
        if (cli_pod_finished(pod) || !cli_pod_decision(pod, &d) || strcmp(d.node, name) != 0)
            continue;
        pods++;
        for (unsigned g = 0; g < inv->gpu_count; g++) {
            bool on = false;
            for (unsigned ci = 0; ci < d.container_count; ci++)
                for (unsigned s = 0; s < d.containers[ci].gpu_count; s++)
                    on |= strcmp(d.containers[ci].gpus[s].uuid, inv->gpus[g].uuid) == 0;
            gpu_pods[g] += on;
        }
    }
    return pods;
}

static int nodes_or_gpus(const struct cli_source *src, const struct cli_options *opt, bool per_gpu,
                         FILE *out, FILE *diag, struct vg_err *err)
{
    VG_AUTO(cli_cluster_free) struct cli_cluster c = {0};
    int rc = cli_cluster_load(src, &c, err);
    if (rc < 0)
        return rc;
    int64_t now = opt->now_unix;
    bool wide = opt->output == CLI_OUTPUT_WIDE;
    VG_AUTO(cli_table_free) struct cli_table t = {0};
    if (per_gpu) {
        cli_table_init(&t, wide ? 9 : 8);
        cli_table_add_tabbed(&t,
                             wide ? "NODE\tGPU\tMODEL\tMEMORY\tCOMPUTE\tTENANTS\tHEALTH\tPODS\tUUID"
                                  : "NODE\tGPU\tMODEL\tMEMORY\tCOMPUTE\tTENANTS\tHEALTH\tPODS");
    } else {
        cli_table_init(&t, wide ? 11 : 8);
        cli_table_add_tabbed(
            &t, wide ? "NODE\tGPUS\tHEALTHY\tFREE\tMEMORY\tCOMPUTE\tPODS\tHEARTBEAT\tMODE\tMODEL\t"
                       "STRANDED"
                     : "NODE\tGPUS\tHEALTHY\tFREE\tMEMORY\tCOMPUTE\tPODS\tHEARTBEAT");
    }
    VG_AUTO_JSON json_t *doc = json_pack("{s:[]}", "nodes");
    json_t *out_nodes = json_object_get(doc, "nodes");
    size_t i;
    json_t *node;
    json_array_foreach(c.nodes, i, node)
    {
        const char *name;
        struct annot_inventory inv;
        struct vg_err ierr = {0};
        int valid = cli_node_inventory(node, &name, &inv, &ierr);
        if (valid == 0)
            continue; /* not a vgpu node */
        char clean[CLI_CELL_MAX];
        cli_sanitize(clean, sizeof clean, name);
        if (valid < 0) {
            char row[CLI_CELL_MAX * 2];
            (void)vg_snprintf(row, sizeof row, "%s\t-\t-\t-\t-\t-\t-\tinvalid inventory", clean);
            if (!per_gpu)
                cli_table_add_tabbed(&t, row);
            char why[CLI_CELL_MAX];
            cli_sanitize(why, sizeof why, ierr.msg);
            fprintf(diag, "warning: node %s: %s\n", clean, why);
            json_array_append_new(out_nodes,
                                  json_pack("{s:s, s:s}", "name", name, "error", ierr.msg));
            continue;
        }
        unsigned gpu_pods[ANNOT_MAX_GPUS] = {0};
        unsigned pods = count_pods(&c, name, &inv, gpu_pods);
        uint64_t mem_total = 0, mem_used = 0, cores_total = 0, cores_used = 0;
        uint64_t stranded_mem = 0, stranded_cores = 0;
        unsigned healthy = 0, free_gpus = 0;
        json_t *jgpus = json_array();
        for (unsigned g = 0; g < inv.gpu_count; g++) {
            const struct annot_gpu *gp = &inv.gpus[g];
            json_t *dg = cli_dump_gpu(&c, name, gp->uuid);
            uint64_t used = cli_json_u64(dg, "memUsedMiB"), cused = cli_json_u64(dg, "coresUsed");
            uint64_t tenants = cli_json_u64(dg, "tenants");
            mem_total += gp->memory_mib;
            mem_used += used;
            cores_total += gp->cores;
            cores_used += cused;
            healthy += gp->healthy;
            if (tenants == 0 && gp->healthy)
                free_gpus++;
            if (tenants > 0 && gp->healthy) {
                stranded_mem += gp->memory_mib > used ? gp->memory_mib - used : 0;
                stranded_cores += gp->cores > cused ? gp->cores - cused : 0;
            }
            json_array_append_new(
                jgpus, json_pack("{s:s, s:i, s:s, s:I, s:I, s:i, s:I, s:I, s:i, s:b, s:i}", "uuid",
                                 gp->uuid, "index", (int)gp->index, "model", gp->model, "memoryMiB",
                                 (json_int_t)gp->memory_mib, "memoryAllocatedMiB", (json_int_t)used,
                                 "cores", (int)gp->cores, "coresAllocated", (json_int_t)cused,
                                 "tenants", (json_int_t)tenants, "slots", (int)gp->slots, "healthy",
                                 gp->healthy, "pods", (int)gpu_pods[g]));
            if (per_gpu) {
                char mu[32], mt[32], row[CLI_CELL_MAX * 4], model[CLI_CELL_MAX];
                cli_format_bytes(used << 20, mu, sizeof mu);
                cli_format_bytes(gp->memory_mib << 20, mt, sizeof mt);
                cli_sanitize(model, sizeof model, gp->model);
                (void)vg_snprintf(row, sizeof row,
                                  "%s\t%u\t%s\t%s/%s\t%llu%%/%u%%\t%llu/%u\t%s\t%u\t%s", clean,
                                  gp->index, model, mu, mt, (unsigned long long)cused, gp->cores,
                                  (unsigned long long)tenants, gp->slots,
                                  gp->healthy ? "Healthy" : "Unhealthy", gpu_pods[g], gp->uuid);
                cli_table_add_tabbed(&t, row);
            }
        }
        json_array_append_new(out_nodes,
                              json_pack("{s:s, s:s, s:I, s:I, s:o, s:i, s:I, s:I}", "name", name,
                                        "mode", annot_mode_name(inv.mode), "heartbeat",
                                        (json_int_t)inv.heartbeat, "heartbeatAgeSeconds",
                                        (json_int_t)(now - inv.heartbeat), "gpus", jgpus, "pods",
                                        (int)pods, "strandedMemoryMiB", (json_int_t)stranded_mem,
                                        "strandedCores", (json_int_t)stranded_cores));
        if (!per_gpu) {
            char mu[32], mt[32], sm[32], age[32], row[CLI_CELL_MAX * 4], model[CLI_CELL_MAX];
            cli_format_bytes(mem_used << 20, mu, sizeof mu);
            cli_format_bytes(mem_total << 20, mt, sizeof mt);
            cli_format_bytes(stranded_mem << 20, sm, sizeof sm);
            cli_format_age(now - inv.heartbeat, age, sizeof age);
            cli_sanitize(model, sizeof model, inv.gpu_count ? inv.gpus[0].model : "-");
            (void)vg_snprintf(
                row, sizeof row, "%s\t%u\t%u\t%u\t%s/%s\t%llu%%/%llu%%\t%u\t%s\t%s\t%s\t%s+%llu%%",
                clean, inv.gpu_count, healthy, free_gpus, mu, mt, (unsigned long long)cores_used,
                (unsigned long long)cores_total, pods, age, annot_mode_name(inv.mode), model, sm,
                (unsigned long long)stranded_cores);
            cli_table_add_tabbed(&t, row);
        }
    }
    if (opt->output == CLI_OUTPUT_JSON)
        return cli_write_json(doc, out, err);
    if (t.rows == 1) {
        fprintf(diag, "No GPU nodes found (no node carries a vgpu.io/gpus inventory).\n");
        return 0;
    }
    return cli_write_table(&t, out, err);
}

int cli_nodes(const struct cli_source *src, const struct cli_options *opt, FILE *out, FILE *diag,
              struct vg_err *err)
{
    return nodes_or_gpus(src, opt, false, out, diag, err);
}

int cli_gpus(const struct cli_source *src, const struct cli_options *opt, FILE *out, FILE *diag,
             struct vg_err *err)
{
    return nodes_or_gpus(src, opt, true, out, diag, err);
}
