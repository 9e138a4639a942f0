/* vgpu nodes, gpus, pods, explain and sim: the cluster as the API shows it, through the
 * scheduler's own model (src/scheduler: the same inventory and decision readers, the same
 * charging, and for `explain` the same filter), so what is shown is what vgpu-scheduler
 * would see. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "annot/annot.h"
#include "base/auto_json.h"
#include "base/mem.h"
#include "base/str.h"
#include "cli/cli.h"
#include "cmd/vgpu/vgpu.h"
#include "scheduler/pod.h"
#include "scheduler/sched.h"

/* ---- the cluster ------------------------------------------------------------------ */

struct cluster {
    json_t *nodes, *pods; /* the lists' items */
    struct sched_options options;
    struct sched_state *state;
    json_t *dump; /* sched_dump: {"nodes": {name: [gpu...]}} */
};

static void cluster_free(struct cluster *c)
{
    json_decref(c->nodes);
    json_decref(c->pods);
    json_decref(c->dump);
    sched_state_free(c->state);
}

static int list(struct vgpu_api *api, const char *path, json_t **items, struct vg_err *err)
{
    json_t *body = NULL;
    int rc = vgpu_api_get(api, path, &body, err);
    if (rc < 0)
        return rc;
    json_t *it = json_object_get(body, "items");
    if (!json_is_array(it)) {
        json_decref(body);
        return vg_err_set(err, -EBADMSG, "%s: the answer has no items list", path);
    }
    *items = json_incref(it);
    json_decref(body);
    return 0;
}

static int cluster_load(struct vgpu_api *api, struct cluster *c, bool pods, struct vg_err *err)
{
    memset(c, 0, sizeof *c);
    int rc = list(api, "/api/v1/nodes", &c->nodes, err);
    if (rc == 0 && pods)
        rc = list(api, "/api/v1/pods", &c->pods, err);
    if (rc < 0)
        return rc;
    if (c->pods == NULL)
        c->pods = json_array();
    sched_options_default(&c->options);
    if ((rc = sched_state_new(&c->options, &c->state, err)) < 0)
        return rc;
    sched_nodes_resync(c->state, c->nodes);
    sched_pods_resync(c->state, c->pods);
    VG_AUTO_FREE char *text = sched_dump(c->state, true);
    c->dump = text ? json_loads(text, 0, NULL) : NULL;
    if (c->dump == NULL)
        return vg_err_set(err, -ENOMEM, "cannot summarize the cluster");
    return 0;
}

static const char *meta(json_t *obj, const char *key)
{
    return sched_json_str(obj, "metadata", key, NULL);
}

static const char *annotation(json_t *obj, const char *key)
{
    return sched_json_str(obj, "metadata", "annotations", key);
}

static bool pod_finished(json_t *pod)
{
    const char *phase = sched_json_str(pod, "status", "phase", NULL);
    return phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
}

/* The pod's decision when it is bound to the node the decision names. */
static bool pod_decision(json_t *pod, struct annot_decision *d)
{
    const char *node = sched_json_str(pod, "spec", "nodeName", NULL);
    const char *text = annotation(pod, ANNOT_KEY_DECISION);
    struct vg_err err = {0};
    return node && text && annot_decision_decode(text, strlen(text), d, &err) == 0 &&
           strcmp(d->node, node) == 0;
}

static json_t *dump_gpu(const struct cluster *c, const char *node, const char *uuid)
{
    json_t *gpus = json_object_get(json_object_get(c->dump, "nodes"), node);
    size_t i;
    json_t *g;
    json_array_foreach(gpus, i, g)
    {
        const char *u = json_string_value(json_object_get(g, "uuid"));
        if (u && strcmp(u, uuid) == 0)
            return g;
    }
    return NULL;
}

static uint64_t jint(json_t *obj, const char *key)
{
    json_int_t v = json_integer_value(json_object_get(obj, key));
    return v > 0 ? (uint64_t)v : 0;
}

static int open_api(const struct vgpu_cmd *cmd, struct vgpu_api **api)
{
    struct vg_err err = {0};
    if (vgpu_api_open(cmd, api, &err) < 0)
        return vgpu_fail("%s", err.msg);
    return 0;
}

static void print_json(json_t *doc)
{
    json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_SORT_KEYS);
    fputc('\n', stdout);
}

/* ---- nodes and gpus --------------------------------------------------------------- */

int vgpu_nodes(const struct vgpu_cmd *cmd, bool per_gpu)
{
    struct vgpu_api *api = NULL;
    if (open_api(cmd, &api))
        return 1;
    struct cluster c;
    struct vg_err err = {0};
    int rc = cluster_load(api, &c, true, &err);
    vgpu_api_close(api);
    if (rc < 0) {
        cluster_free(&c);
        return vgpu_fail("%s", err.msg);
    }
    int64_t now = (int64_t)time(NULL);
    struct cli_table t;
    if (per_gpu) {
        cli_table_init(&t, cmd->output == OUT_WIDE ? 9 : 8);
        cli_table_add_tabbed(&t,
                             cmd->output == OUT_WIDE
                                 ? "NODE\tGPU\tMODEL\tMEMORY\tCOMPUTE\tTENANTS\tHEALTH\tPODS\tUUID"
                                 : "NODE\tGPU\tMODEL\tMEMORY\tCOMPUTE\tTENANTS\tHEALTH\tPODS");
    } else {
        cli_table_init(&t, cmd->output == OUT_WIDE ? 11 : 8);
        cli_table_add_tabbed(
            &t, cmd->output == OUT_WIDE
                    ? "NODE\tGPUS\tHEALTHY\tFREE\tMEMORY\tCOMPUTE\tPODS\tHEARTBEAT\tMODE\tMODEL\t"
                      "STRANDED"
                    : "NODE\tGPUS\tHEALTHY\tFREE\tMEMORY\tCOMPUTE\tPODS\tHEARTBEAT");
    }
    VG_AUTO_JSON json_t *doc = json_pack("{s:[]}", "nodes");
    json_t *out_nodes = json_object_get(doc, "nodes");
    size_t i;
    json_t *node;
    json_array_foreach(c.nodes, i, node)
    {
        const char *name = meta(node, "name");
        const char *text = annotation(node, ANNOT_KEY_GPUS);
        if (name == NULL || text == NULL)
            continue; /* not a vgpu node */
        char clean[CLI_CELL_MAX];
        cli_sanitize(clean, sizeof clean, name);
        struct annot_inventory inv;
        struct vg_err ierr = {0};
        if (annot_inventory_decode(text, strlen(text), &inv, &ierr) < 0) {
            char row[CLI_CELL_MAX * 2];
            (void)vg_snprintf(row, sizeof row, "%s\t-\t-\t-\t-\t-\t-\tinvalid inventory", clean);
            if (!per_gpu)
                cli_table_add_tabbed(&t, row);
            char why[CLI_CELL_MAX];
            cli_sanitize(why, sizeof why, ierr.msg);
            fprintf(stderr, "warning: node %s: %s\n", clean, why);
            json_array_append_new(out_nodes,
                                  json_pack("{s:s, s:s}", "name", name, "error", ierr.msg));
            continue;
        }
        /* pods bound here, per GPU */
        unsigned pods = 0, gpu_pods[ANNOT_MAX_GPUS] = {0};
        size_t k;
        json_t *pod;
        json_array_foreach(c.pods, k, pod)
        {
            struct annot_decision d;
            if (pod_finished(pod) || !pod_decision(pod, &d) || strcmp(d.node, name) != 0)
                continue;
            pods++;
            for (unsigned g = 0; g < inv.gpu_count; g++) {
                bool on = false;
                for (unsigned ci = 0; ci < d.container_count; ci++)
                    for (unsigned s = 0; s < d.containers[ci].gpu_count; s++)
                        on |= strcmp(d.containers[ci].gpus[s].uuid, inv.gpus[g].uuid) == 0;
                gpu_pods[g] += on;
            }
        }
        uint64_t mem_total = 0, mem_used = 0, cores_total = 0, cores_used = 0;
        uint64_t stranded_mem = 0, stranded_cores = 0;
        unsigned healthy = 0, free_gpus = 0;
        json_t *jgpus = json_array();
        for (unsigned g = 0; g < inv.gpu_count; g++) {
            const struct annot_gpu *gp = &inv.gpus[g];
            json_t *dg = dump_gpu(&c, name, gp->uuid);
            uint64_t used = jint(dg, "memUsedMiB"), cused = jint(dg, "coresUsed");
            uint64_t tenants = jint(dg, "tenants");
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
    if (cmd->output == OUT_JSON)
        print_json(doc);
    else if (t.rows == 1)
        fprintf(stderr, "No GPU nodes found (no node carries a vgpu.io/gpus inventory).\n");
    else
        cli_table_print(&t, stdout, 0);
    cli_table_free(&t);
    cluster_free(&c);
    return 0;
}

/* ---- pods ------------------------------------------------------------------------- */

/* GPU index of uuid on node (from its inventory), -1 when unknown. */
static int gpu_index(const struct cluster *c, const char *node, const char *uuid)
{
    size_t i;
    json_t *n;
    json_array_foreach(c->nodes, i, n)
    {
        const char *name = meta(n, "name");
        const char *text = annotation(n, ANNOT_KEY_GPUS);
        struct annot_inventory inv;
        struct vg_err err = {0};
        if (!name || strcmp(name, node) != 0 || !text ||
            annot_inventory_decode(text, strlen(text), &inv, &err) < 0)
            continue;
        for (unsigned g = 0; g < inv.gpu_count; g++)
            if (strcmp(inv.gpus[g].uuid, uuid) == 0)
                return (int)inv.gpus[g].index;
    }
    return -1;
}

static json_t *decision_json(const struct annot_decision *d)
{
    json_t *cs = json_array();
    for (unsigned i = 0; i < d->container_count; i++) {
        json_t *gs = json_array();
        for (unsigned g = 0; g < d->containers[i].gpu_count; g++)
            json_array_append_new(gs, json_pack("{s:s, s:I, s:i}", "uuid",
                                                d->containers[i].gpus[g].uuid, "memoryMiB",
                                                (json_int_t)d->containers[i].gpus[g].memory_mib,
                                                "cores", (int)d->containers[i].gpus[g].cores));
        json_array_append_new(cs,
                              json_pack("{s:s, s:o}", "name", d->containers[i].name, "gpus", gs));
    }
    return json_pack("{s:s, s:I, s:o}", "node", d->node, "time", (json_int_t)d->time, "containers",
                     cs);
}

static json_t *request_json(const struct sched_container_request *r, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_pack("{s:s, s:i, s:I, s:i, s:i, s:b}", "container", r[i].name,
                                           "gpus", (int)r[i].request.gpu_count, "memoryMiB",
                                           (json_int_t)r[i].request.gpu_mem_mib, "memoryPercent",
                                           (int)r[i].request.gpu_mem_pct, "cores",
                                           (int)(r[i].request.gpu_milli / 10), "exclusive",
                                           r[i].request.exclusive));
    return a;
}

/* "4Gi", "50%" or "all" for one container's memory request on each GPU. */
static void request_memory(const struct place_request *r, char *buf, size_t size)
{
    if (r->gpu_mem_mib)
        cli_format_bytes(r->gpu_mem_mib << 20, buf, size);
    else if (r->gpu_mem_pct)
        (void)vg_snprintf(buf, size, "%u%%", r->gpu_mem_pct);
    else
        (void)vg_snprintf(buf, size, "all");
}

int vgpu_pods(const struct vgpu_cmd *cmd)
{
    struct vgpu_api *api = NULL;
    if (open_api(cmd, &api))
        return 1;
    char ns[CLI_NAME_MAX];
    (void)vg_strlcpy(ns, vgpu_api_namespace(api, cmd), sizeof ns);
    struct cluster c;
    struct vg_err err = {0};
    int rc = cluster_load(api, &c, true, &err);
    vgpu_api_close(api);
    if (rc < 0) {
        cluster_free(&c);
        return vgpu_fail("%s", err.msg);
    }
    struct cli_table t;
    bool all = cmd->all_namespaces, wide = cmd->output == OUT_WIDE;
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
        const char *pns = meta(pod, "namespace");
        const char *name = meta(pod, "name");
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
        bool decided = pod_decision(pod, &d);
        if (n == 0 && !decided)
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
        json_t *jp = json_pack("{s:s, s:s, s:s, s:o}", "namespace", pns, "name", name, "phase",
                               phase ? phase : "Unknown", "request",
                               n > 0 ? request_json(req, n) : json_array());
        json_object_set_new(jp, "node", node ? json_string(node) : json_null());
        json_object_set_new(jp, "decision", decided ? decision_json(&d) : json_null());
        if (n < 0)
            json_object_set_new(jp, "error", json_string(rerr.msg));
        json_array_append_new(json_object_get(doc, "pods"), jp);
        if (decided) {
            unsigned ng = 0, cs = 0;
            uint64_t mib = 0;
            size_t used = 0;
            for (unsigned k = 0; k < d.container_count; k++)
                for (unsigned g = 0; g < d.containers[k].gpu_count; g++) {
                    const struct annot_share *s = &d.containers[k].gpus[g];
                    ng++;
                    mib += s->memory_mib;
                    cs += s->cores;
                    char b[32];
                    cli_format_bytes(s->memory_mib << 20, b, sizeof b);
                    int w = vg_snprintf(alloc + used, sizeof alloc - used, "%s%s=%d:%s/%u%%",
                                        used ? "," : "", d.containers[k].name,
                                        gpu_index(&c, d.node, s->uuid), b, s->cores);
                    used = w > 0 ? used + (size_t)w : used;
                }
            (void)vg_snprintf(gpus, sizeof gpus, "%u", ng);
            cli_format_bytes(mib << 20, mem, sizeof mem);
            (void)vg_snprintf(cores, sizeof cores, "%u%%", cs);
        } else if (n > 0) {
            unsigned ng = 0, cs = 0;
            for (int k = 0; k < n; k++) {
                ng += req[k].request.gpu_count;
                cs += req[k].request.gpu_milli / 10 * req[k].request.gpu_count;
            }
            (void)vg_snprintf(gpus, sizeof gpus, "%u", ng);
            request_memory(&req[0].request, mem, sizeof mem);
            if (n > 1 || req[0].request.gpu_count > 1) {
                char each[32];
                (void)vg_snprintf(each, sizeof each, "%s", mem);
                (void)vg_snprintf(mem, sizeof mem, "%s each", each);
            }
            (void)vg_snprintf(cores, sizeof cores, "%u%%", cs);
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
    if (cmd->output == OUT_JSON)
        print_json(doc);
    else if (t.rows == 1)
        fprintf(stderr, all ? "No GPU pods found.\n" : "No GPU pods found in %s namespace.\n", ns);
    else
        cli_table_print(&t, stdout, 0);
    cli_table_free(&t);
    cluster_free(&c);
    return 0;
}

/* ---- explain ---------------------------------------------------------------------- */

static const char *policy_words(enum place_policy p)
{
    switch (p) {
    case PLACE_POLICY_BINPACK:
        return "binpack: of the nodes that fit, the one already most allocated, so that whole "
               "nodes stay free for large pods";
    case PLACE_POLICY_SPREAD:
        return "spread: of the nodes that fit, the one least allocated, so that pods share "
               "GPUs as little as possible";
    case PLACE_POLICY_FGD:
        return "fgd: of the nodes that fit, the one whose GPU fragmentation grows least";
    default:
        return "vgpu's own ranking of the nodes that fit";
    }
}

static const char *order_words(enum place_gpu_order o)
{
    switch (o) {
    case PLACE_GPU_BINPACK:
        return "inside the node, the most used GPU that fits (binpack)";
    case PLACE_GPU_SPREAD:
        return "inside the node, the least used GPU that fits (spread)";
    default:
        return "inside the node, the policy's own GPU rule";
    }
}

static void request_words(const struct sched_container_request *r, int n, FILE *f)
{
    for (int i = 0; i < n; i++) {
        const struct place_request *q = &r[i].request;
        char mem[32];
        request_memory(q, mem, sizeof mem);
        fprintf(f, "  container %s: %u GPU%s, each with %s%s of memory and ", r[i].name,
                q->gpu_count, q->gpu_count == 1 ? "" : "s", mem,
                q->gpu_mem_mib || q->gpu_mem_pct ? "" : " (the whole card)");
        if (q->exclusive)
            fprintf(f, "the whole card to itself\n");
        else if (q->gpu_milli)
            fprintf(f, "%u%% of its compute\n", q->gpu_milli / 10);
        else
            fprintf(f, "no compute limit\n");
    }
}

/* The node's GPU with the most free memory, in words. */
static void best_gpu_words(const struct cluster *c, const char *node, char *buf, size_t size)
{
    json_t *gpus = json_object_get(json_object_get(c->dump, "nodes"), node);
    json_t *best = NULL;
    uint64_t best_free = 0;
    size_t i;
    json_t *g;
    json_array_foreach(gpus, i, g)
    {
        uint64_t total = jint(g, "memTotalMiB"), used = jint(g, "memUsedMiB");
        uint64_t free_mib = total > used ? total - used : 0;
        if (best == NULL || free_mib > best_free) {
            best = g;
            best_free = free_mib;
        }
    }
    if (best == NULL) {
        (void)vg_snprintf(buf, size, "no GPUs");
        return;
    }
    char fm[32];
    cli_format_bytes(best_free << 20, fm, sizeof fm);
    uint64_t cores = jint(best, "coresUsed"), tenants = jint(best, "tenants"),
             slots = jint(best, "slots");
    const char *uuid = json_string_value(json_object_get(best, "uuid"));
    (void)vg_snprintf(buf, size,
                      "GPU %d has the most free memory: %s, with %llu%% of its compute and %llu "
                      "of %llu tenant slots free",
                      gpu_index(c, node, uuid ? uuid : ""), fm,
                      (unsigned long long)(cores < 100 ? 100 - cores : 0),
                      (unsigned long long)(slots > tenants ? slots - tenants : 0),
                      (unsigned long long)slots);
}

/* The pod's latest FailedScheduling event, or NULL. */
static json_t *last_failed_scheduling(json_t *events, const char *name, const char *uid)
{
    json_t *best = NULL;
    const char *best_at = "";
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e)
    {
        const char *reason = json_string_value(json_object_get(e, "reason"));
        const char *who = sched_json_str(e, "involvedObject", "name", NULL);
        const char *who_uid = sched_json_str(e, "involvedObject", "uid", NULL);
        if (!reason || strcmp(reason, "FailedScheduling") != 0 || !who || strcmp(who, name) != 0 ||
            (uid && who_uid && strcmp(uid, who_uid) != 0))
            continue;
        const char *at = json_string_value(json_object_get(e, "lastTimestamp"));
        if (!at)
            at = json_string_value(json_object_get(e, "eventTime"));
        if (!at)
            at = meta(e, "creationTimestamp");
        if (!at)
            at = "";
        if (best == NULL || strcmp(at, best_at) >= 0) {
            best = e;
            best_at = at;
        }
    }
    return best;
}

static void event_words(json_t *event, FILE *f, json_t *jout)
{
    const char *msg = json_string_value(json_object_get(event, "message"));
    const char *at = json_string_value(json_object_get(event, "lastTimestamp"));
    json_int_t count = json_integer_value(json_object_get(event, "count"));
    char clean[CLI_REASON_TEXT_MAX * 2];
    cli_sanitize(clean, sizeof clean, msg ? msg : "");
    json_t *je = json_pack("{s:s}", "message", msg ? msg : "");
    if (at)
        json_object_set_new(je, "lastTimestamp", json_string(at));
    fprintf(f, "\nkube-scheduler's last FailedScheduling event (%lld time%s%s%s):\n",
            (long long)(count > 0 ? count : 1), count > 1 ? "s" : "", at ? ", last at " : "",
            at ? at : "");
    struct cli_sched_message m;
    struct vg_err err = {0};
    if (msg && cli_sched_message_parse(msg, strlen(msg), &m, &err) == 0) {
        fprintf(f, "  %llu of %llu nodes were available:\n", (unsigned long long)m.available,
                (unsigned long long)m.total);
        json_t *rs = json_array();
        for (size_t i = 0; i < m.count; i++) {
            char r[CLI_REASON_TEXT_MAX];
            cli_sanitize(r, sizeof r, m.reasons[i].text);
            fprintf(f, "    %llu node%s: %s\n", (unsigned long long)m.reasons[i].nodes,
                    m.reasons[i].nodes == 1 ? "" : "s", r);
            json_array_append_new(rs,
                                  json_pack("{s:I, s:s}", "nodes", (json_int_t)m.reasons[i].nodes,
                                            "reason", m.reasons[i].text));
        }
        if (m.tail[0]) {
            char tail[CLI_REASON_TEXT_MAX];
            cli_sanitize(tail, sizeof tail, m.tail);
            fprintf(f, "  then: %s\n", tail);
        }
        json_object_set_new(je, "reasons", rs);
    } else {
        fprintf(f, "  %s\n", clean);
    }
    json_object_set_new(jout, "lastFailedScheduling", je);
}

static int64_t now_unix(void)
{
    return (int64_t)time(NULL);
}

static uint64_t now_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Runs the scheduler's filter for pod over every node: *result (owned) is
 * ExtenderFilterResult. */
static int run_filter(struct cluster *c, json_t *pod, json_t **result, struct vg_err *err)
{
    json_t *names = json_array();
    size_t i;
    json_t *n;
    json_array_foreach(c->nodes, i, n)
    {
        const char *name = meta(n, "name");
        if (name)
            json_array_append_new(names, json_string(name));
    }
    VG_AUTO_JSON json_t *args = json_pack("{s:O, s:o}", "Pod", pod, "NodeNames", names);
    VG_AUTO_FREE char *body = json_dumps(args, JSON_COMPACT);
    VG_AUTO_FREE char *out = NULL;
    struct sched_now now = {.mono_ms = now_mono_ms(), .unix_s = now_unix()};
    int rc = sched_filter(c->state, body, strlen(body), now, &out, err);
    if (rc < 0)
        return rc;
    *result = json_loads(out, 0, NULL);
    return *result ? 0 : vg_err_set(err, -EBADMSG, "the filter's answer is not JSON");
}

static void explain_bound(const struct cluster *c, json_t *pod, const struct annot_decision *d,
                          FILE *f, json_t *jout)
{
    const char *phase = sched_json_str(pod, "status", "phase", NULL);
    fprintf(f, "It runs on node %s (%s).\n", d->node, phase ? phase : "phase unknown");
    char when[64] = "an unknown time";
    time_t t = (time_t)d->time;
    struct tm tm;
    if (d->time > 0 && gmtime_r(&t, &tm) != NULL)
        (void)strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    fprintf(f, "vgpu-scheduler placed it there at %s:\n", when);
    for (unsigned k = 0; k < d->container_count; k++)
        for (unsigned g = 0; g < d->containers[k].gpu_count; g++) {
            const struct annot_share *s = &d->containers[k].gpus[g];
            json_t *dg = dump_gpu(c, d->node, s->uuid);
            char mem[32], total[32];
            cli_format_bytes(s->memory_mib << 20, mem, sizeof mem);
            cli_format_bytes(jint(dg, "memTotalMiB") << 20, total, sizeof total);
            fprintf(f, "  container %s: GPU %d (%s): %s of its %s of memory, ",
                    d->containers[k].name, gpu_index(c, d->node, s->uuid), s->uuid, mem, total);
            if (s->cores == 100)
                fprintf(f, "the whole card to itself\n");
            else if (s->cores)
                fprintf(f, "%u%% of its compute\n", s->cores);
            else
                fprintf(f, "no compute limit\n");
            if (dg != NULL) {
                char used[32];
                cli_format_bytes(jint(dg, "memUsedMiB") << 20, used, sizeof used);
                fprintf(f,
                        "    the GPU holds %llu tenant%s now: %s of %s and %llu%% of its compute "
                        "allocated\n",
                        (unsigned long long)jint(dg, "tenants"),
                        jint(dg, "tenants") == 1 ? "" : "s", used, total,
                        (unsigned long long)jint(dg, "coresUsed"));
            }
        }
    struct sched_pod_policy pp;
    struct vg_err err = {0};
    if (sched_pod_policy_read(&c->options, pod, &pp, &err) == 0) {
        fprintf(f, "Why there: the node policy %s; %s.\n", policy_words(pp.policy),
                order_words(pp.order));
        json_object_set_new(jout, "policy", json_string(place_policy_name(pp.policy)));
    }
    json_object_set_new(jout, "status", json_string("bound"));
    json_object_set_new(jout, "node", json_string(d->node));
    json_object_set_new(jout, "decision", decision_json(d));
}

static void explain_pending(struct cluster *c, json_t *pod, FILE *f, json_t *jout)
{
    json_object_set_new(jout, "status", json_string("pending"));
    VG_AUTO_JSON json_t *result = NULL;
    struct vg_err err = {0};
    if (run_filter(c, pod, &result, &err) < 0) {
        fprintf(f, "vgpu-scheduler's filter refused the pod: %s\n", err.msg);
        json_object_set_new(jout, "error", json_string(err.msg));
        return;
    }
    const char *error = json_string_value(json_object_get(result, "Error"));
    if (error && error[0]) {
        char clean[1024];
        cli_sanitize(clean, sizeof clean, error);
        fprintf(f, "No node can take it: %s\n", clean);
        json_object_set_new(jout, "error", json_string(error));
        return;
    }
    json_t *fits = json_object_get(result, "NodeNames");
    json_t *failed = json_object_get(result, "FailedNodes");
    size_t nfit = json_array_size(fits);
    if (nfit == 0)
        fprintf(f, "No node can take it now. Each node, as vgpu-scheduler's filter sees the "
                   "cluster now:\n");
    else
        fprintf(f, "vgpu-scheduler would place it now (first node below); kube-scheduler has not "
                   "bound it yet: it may be waiting to retry, or another of its filters refuses "
                   "the node. Each node:\n");
    struct cli_table t;
    cli_table_init(&t, 3);
    json_t *jnodes = json_array();
    for (int pass = 0; pass < 2; pass++) { /* the chosen nodes first */
        size_t i;
        json_t *n;
        json_array_foreach(c->nodes, i, n)
        {
            const char *name = meta(n, "name");
            if (!name)
                continue;
            const char *why = json_string_value(json_object_get(failed, name));
            bool chosen = false;
            size_t k;
            json_t *x;
            json_array_foreach(fits, k, x)
            {
                chosen |= json_is_string(x) && strcmp(json_string_value(x), name) == 0;
            }
            if (chosen != (pass == 0))
                continue;
            char detail[512] = "";
            if (annotation(n, ANNOT_KEY_GPUS) != NULL)
                best_gpu_words(c, name, detail, sizeof detail);
            const char *text = chosen ? "fits: the policy's choice"
                               : why  ? why
                                      : "fits, but the policy prefers another node";
            if (strncmp(text, "vgpu: ", 6) == 0)
                text = text + 6;
            const char *cells[3] = {name, text, detail};
            cli_table_add(&t, cells);
            json_array_append_new(jnodes, json_pack("{s:s, s:b, s:b, s:s, s:s}", "name", name,
                                                    "fits", why == NULL, "chosen", chosen, "reason",
                                                    why ? why : "", "detail", detail));
        }
    }
    json_object_set_new(jout, "nodes", jnodes);
    if (t.rows == 0)
        fprintf(f, "  (the cluster has no nodes)\n");
    cli_table_print(&t, f, 0);
    cli_table_free(&t);
}

int vgpu_explain(const struct vgpu_cmd *cmd)
{
    struct vgpu_api *api = NULL;
    if (open_api(cmd, &api))
        return 1;
    char ns[CLI_NAME_MAX];
    (void)vg_strlcpy(ns, vgpu_api_namespace(api, cmd), sizeof ns);
    const char *name = cmd->args[0];
    if (!annot_dns_label(ns) || !annot_dns_subdomain(name)) {
        vgpu_api_close(api);
        return vgpu_fail("\"%s/%s\" is not a namespace and a pod name", ns, name);
    }
    char path[1024];
    (void)vg_snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", ns, name);
    json_t *pod = NULL;
    struct vg_err err = {0};
    int rc = vgpu_api_get(api, path, &pod, &err);
    if (rc == -ENOENT) {
        vgpu_api_close(api);
        return vgpu_fail("pod \"%s\" not found in namespace \"%s\"", name, ns);
    }
    if (rc < 0) {
        vgpu_api_close(api);
        return vgpu_fail("%s", err.msg);
    }
    struct cluster c;
    rc = cluster_load(api, &c, true, &err);
    json_t *events = NULL;
    if (rc == 0) {
        (void)vg_snprintf(path, sizeof path,
                          "/api/v1/namespaces/%s/events?fieldSelector=involvedObject.name%%3D%s",
                          ns, name);
        struct vg_err eerr = {0};
        if (list(api, path, &events, &eerr) < 0)
            events = NULL; /* explained without them */
    }
    vgpu_api_close(api);
    if (rc < 0) {
        json_decref(pod);
        cluster_free(&c);
        return vgpu_fail("%s", err.msg);
    }
    char *text = NULL;
    size_t text_len = 0;
    FILE *f = open_memstream(&text, &text_len);
    VG_AUTO_JSON json_t *jout = json_pack("{s:s, s:s}", "namespace", ns, "name", name);
    fprintf(f, "Pod %s/%s", ns, name);
    struct sched_container_request req[ANNOT_MAX_CONTAINERS];
    struct vg_err rerr = {0};
    int n = sched_pod_requests(&c.options, pod, req, ANNOT_MAX_CONTAINERS, &rerr);
    struct annot_decision d;
    const char *node = sched_json_str(pod, "spec", "nodeName", NULL);
    if (n > 0) {
        fprintf(f, " asks for:\n");
        request_words(req, n, f);
        json_object_set_new(jout, "request", request_json(req, n));
    } else if (n == 0) {
        fprintf(f, " asks for no GPUs.\n");
    } else {
        char clean[1024];
        cli_sanitize(clean, sizeof clean, rerr.msg);
        fprintf(f, " asks for GPUs in a way no node can serve: %s\n", clean);
    }
    if (pod_decision(pod, &d)) {
        explain_bound(&c, pod, &d, f, jout);
    } else if (node != NULL) {
        fprintf(f,
                "It runs on node %s, placed without vgpu (it carries no vgpu.io/decision for "
                "that node): vgpu-scheduler did not bind it%s.\n",
                node, n > 0 ? ", so vgpu's device plugin gives it no GPUs" : "");
        json_object_set_new(jout, "status", json_string("bound-without-decision"));
        json_object_set_new(jout, "node", json_string(node));
    } else if (pod_finished(pod)) {
        fprintf(f, "It has finished and holds nothing.\n");
        json_object_set_new(jout, "status", json_string("finished"));
    } else if (n == 0) {
        fprintf(f, "vgpu does not place it: kube-scheduler's other filters decide.\n");
        json_object_set_new(jout, "status", json_string("pending"));
    } else if (n > 0) {
        explain_pending(&c, pod, f, jout);
    } else {
        json_object_set_new(jout, "status", json_string("pending"));
        json_object_set_new(jout, "error", json_string(rerr.msg));
    }
    if (node == NULL && !pod_finished(pod)) {
        json_t *e = last_failed_scheduling(events, name, meta(pod, "uid"));
        if (e != NULL)
            event_words(e, f, jout);
    }
    fclose(f);
    if (cmd->output == OUT_JSON)
        print_json(jout);
    else
        fputs(text, stdout);
    free(text);
    json_decref(events);
    json_decref(pod);
    cluster_free(&c);
    return 0;
}

/* ---- sim -------------------------------------------------------------------------- */

static uint64_t quantity_of(json_t *obj, const char *key, bool mib)
{
    const char *s = json_string_value(json_object_get(obj, key));
    uint64_t milli = 0;
    struct vg_err err = {0};
    if (s == NULL || cli_quantity_milli(s, &milli, &err) < 0)
        return 0;
    if (!mib)
        return milli;
    uint64_t bytes = milli / 1000 + (milli % 1000 != 0);
    return (bytes >> 20) + ((bytes & ((1u << 20) - 1)) != 0);
}

/* A CSV cell: no commas, quotes or line ends (the format has no quoting). */
static void csv_cell(char *dst, size_t size, const char *s)
{
    cli_sanitize(dst, size, s);
    for (char *p = dst; *p; p++)
        if (*p == ',' || *p == '"' || *p == '?')
            *p = ' ';
}

static int write_exports(const struct cluster *c, const struct vgpu_cmd *cmd, const char *ns,
                         const char *nodes_path, const char *pods_path, unsigned *nnodes,
                         unsigned *npods, struct vg_err *err)
{
    FILE *fn = fopen(nodes_path, "w");
    if (fn == NULL)
        return vg_err_errno(err, errno, "cannot write %s", nodes_path);
    fprintf(fn, "sn,cpu_milli,memory_mib,gpu,model\n");
    uint64_t max_gpu_mib = 0;
    size_t i;
    json_t *n;
    *nnodes = *npods = 0;
    json_array_foreach(c->nodes, i, n)
    {
        const char *name = meta(n, "name");
        const char *text = annotation(n, ANNOT_KEY_GPUS);
        struct annot_inventory inv;
        struct vg_err ierr = {0};
        if (!name || !text || annot_inventory_decode(text, strlen(text), &inv, &ierr) < 0 ||
            inv.gpu_count == 0)
            continue;
        json_t *alloc = json_object_get(json_object_get(n, "status"), "allocatable");
        char model[128], sn[300];
        csv_cell(model, sizeof model, inv.gpus[0].model);
        csv_cell(sn, sizeof sn, name);
        for (unsigned g = 0; g < inv.gpu_count; g++)
            max_gpu_mib =
                inv.gpus[g].memory_mib > max_gpu_mib ? inv.gpus[g].memory_mib : max_gpu_mib;
        fprintf(fn, "%s,%llu,%llu,%u,%s\n", sn,
                (unsigned long long)quantity_of(alloc, "cpu", false),
                (unsigned long long)quantity_of(alloc, "memory", true), inv.gpu_count, model);
        (*nnodes)++;
    }
    if (fclose(fn) != 0)
        return vg_err_errno(err, errno, "cannot write %s", nodes_path);
    FILE *fp = fopen(pods_path, "w");
    if (fp == NULL)
        return vg_err_errno(err, errno, "cannot write %s", pods_path);
    fprintf(fp, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n");
    json_t *pod;
    json_array_foreach(c->pods, i, pod)
    {
        const char *pns = meta(pod, "namespace"), *name = meta(pod, "name");
        if (!name || pod_finished(pod))
            continue;
        if (!pns)
            pns = "default";
        if (!cmd->all_namespaces && cmd->namespace && strcmp(pns, ns) != 0)
            continue;
        struct sched_container_request req[ANNOT_MAX_CONTAINERS];
        struct vg_err rerr = {0};
        int nreq = sched_pod_requests(&c->options, pod, req, ANNOT_MAX_CONTAINERS, &rerr);
        if (nreq < 0)
            continue; /* nobody can serve it, in the cluster or the simulation */
        uint64_t cpu = 0, mem = 0;
        json_t *containers = json_object_get(json_object_get(pod, "spec"), "containers");
        size_t k;
        json_t *ctr;
        json_array_foreach(containers, k, ctr)
        {
            json_t *res = json_object_get(ctr, "resources");
            json_t *rq = json_object_get(res, "requests");
            if (rq == NULL)
                rq = json_object_get(res, "limits");
            cpu += quantity_of(rq, "cpu", false);
            mem += quantity_of(rq, "memory", true);
        }
        unsigned gpus = 0, milli = 0;
        char spec[256] = "";
        for (int r = 0; r < nreq; r++) {
            const struct place_request *q = &req[r].request;
            unsigned m = q->exclusive ? 1000 : q->gpu_milli;
            if (q->gpu_mem_mib && max_gpu_mib) {
                uint64_t mm = (q->gpu_mem_mib * 1000 + max_gpu_mib - 1) / max_gpu_mib;
                m = mm > m ? (unsigned)(mm > 1000 ? 1000 : mm) : m;
            }
            if (q->gpu_mem_pct * 10 > m)
                m = q->gpu_mem_pct * 10;
            if (m == 0)
                m = 1000; /* the whole card: no memory key, no cores */
            gpus += q->gpu_count;
            milli = m > milli ? m : milli;
            size_t used = strlen(spec);
            for (unsigned t = 0; t < q->type_include_count; t++) {
                char model[PLACE_MODEL_MAX];
                csv_cell(model, sizeof model, q->type_include[t]);
                int w =
                    vg_snprintf(spec + used, sizeof spec - used, "%s%s", used ? "|" : "", model);
                used = w > 0 ? used + (size_t)w : used;
            }
        }
        if (gpus > 16)
            gpus = 16;
        char pname[600], a[300], b[300];
        csv_cell(a, sizeof a, pns);
        csv_cell(b, sizeof b, name);
        (void)vg_snprintf(pname, sizeof pname, "%s/%s", a, b);
        fprintf(fp, "%s,%llu,%llu,%u,%u,%s\n", pname, (unsigned long long)cpu,
                (unsigned long long)mem, gpus, gpus ? milli : 0, spec);
        (*npods)++;
    }
    if (fclose(fp) != 0)
        return vg_err_errno(err, errno, "cannot write %s", pods_path);
    return 0;
}

int vgpu_sim(const struct vgpu_cmd *cmd, const char *argv0)
{
    struct vgpu_api *api = NULL;
    if (open_api(cmd, &api))
        return 1;
    char ns[CLI_NAME_MAX];
    (void)vg_strlcpy(ns, vgpu_api_namespace(api, cmd), sizeof ns);
    struct cluster c;
    struct vg_err err = {0};
    int rc = cluster_load(api, &c, true, &err);
    vgpu_api_close(api);
    if (rc < 0) {
        cluster_free(&c);
        return vgpu_fail("%s", err.msg);
    }
    const char *dir = cmd->out_dir ? cmd->out_dir : "vgpu-sim-export";
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        cluster_free(&c);
        return vgpu_fail("cannot create %s: %s", dir, VG_STRERROR(errno));
    }
    char nodes_path[4096], pods_path[4096];
    if (vg_snprintf(nodes_path, sizeof nodes_path, "%s/nodes.csv", dir) < 0 ||
        vg_snprintf(pods_path, sizeof pods_path, "%s/pods.csv", dir) < 0) {
        cluster_free(&c);
        return vgpu_fail("--out %s: path too long", dir);
    }
    unsigned nnodes = 0, npods = 0;
    rc = write_exports(&c, cmd, ns, nodes_path, pods_path, &nnodes, &npods, &err);
    cluster_free(&c);
    if (rc < 0)
        return vgpu_fail("%s", err.msg);
    fprintf(stderr, "exported %u GPU nodes to %s and %u pods to %s\n", nnodes, nodes_path, npods,
            pods_path);
    if (cmd->export_only)
        return 0;
    if (nnodes == 0)
        return vgpu_fail("the cluster has no GPU node with a vgpu.io/gpus inventory to simulate");
    /* vgpu-sim beside this binary, else on PATH. */
    char sim[4096] = "vgpu-sim";
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0) {
        self[len] = '\0';
        char *slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            char cand[4096];
            if (vg_snprintf(cand, sizeof cand, "%s/vgpu-sim", self) >= 0 && access(cand, X_OK) == 0)
                (void)vg_strlcpy(sim, cand, sizeof sim);
        }
    }
    (void)argv0;
    char *args[16];
    size_t na = 0;
    args[na++] = xstrdup(sim);
    args[na++] = xstrdup("--nodes");
    args[na++] = xstrdup(nodes_path);
    args[na++] = xstrdup("--pods");
    args[na++] = xstrdup(pods_path);
    args[na++] = xstrdup("--policy");
    args[na++] = xstrdup(cmd->policy ? cmd->policy : "default,fgd,binpack,spread");
    args[na++] = xstrdup("--seeds");
    args[na++] = xstrdup(cmd->seeds ? cmd->seeds : "42-44");
    if (cmd->report) {
        args[na++] = xstrdup("--report");
        args[na++] = xstrdup(cmd->report);
    }
    if (cmd->jobs) {
        args[na++] = xstrdup("--jobs");
        args[na++] = xstrdup(cmd->jobs);
    }
    args[na] = NULL;
    fflush(stdout);
    execvp(sim, args);
    int e = errno;
    for (size_t i = 0; i < na; i++)
        free(args[i]);
    return vgpu_fail("cannot run %s: %s", sim, VG_STRERROR(e));
}
