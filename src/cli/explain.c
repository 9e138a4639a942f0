/* vgpu explain POD (verbs.h): why a pod runs where it runs (its decision, in words), or
 * why it is pending: each node's reason from vgpu-scheduler's filter, run on the cluster
 * as the API shows it now, and kube-scheduler's last FailedScheduling event. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "base/auto.h"
#include "base/auto_json.h"
#include "base/str.h"
#include "cli/cli.h"
#include "cli/cluster.h"

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
        cli_request_memory(q, mem, sizeof mem);
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
static void best_gpu_words(const struct cli_cluster *c, const char *node, char *buf, size_t size)
{
    json_t *gpus = json_object_get(json_object_get(c->dump, "nodes"), node);
    json_t *best = NULL;
    uint64_t best_free = 0;
    size_t i;
    json_t *g;
    json_array_foreach(gpus, i, g)
    {
        uint64_t total = cli_json_u64(g, "memTotalMiB"), used = cli_json_u64(g, "memUsedMiB");
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
    uint64_t cores = cli_json_u64(best, "coresUsed"), tenants = cli_json_u64(best, "tenants"),
             slots = cli_json_u64(best, "slots");
    const char *uuid = json_string_value(json_object_get(best, "uuid"));
    (void)vg_snprintf(buf, size,
                      "GPU %d has the most free memory: %s, with %llu%% of its compute and %llu "
                      "of %llu tenant slots free",
                      cli_gpu_index(c, node, uuid ? uuid : ""), fm,
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
            at = cli_meta(e, "creationTimestamp");
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

/* Runs the scheduler's filter for pod over every node: *result (owned) is
 * ExtenderFilterResult. */
static int run_filter(struct cli_cluster *c, json_t *pod, struct sched_now now, json_t **result,
                      struct vg_err *err)
{
    json_t *names = json_array();
    size_t i;
    json_t *n;
    json_array_foreach(c->nodes, i, n)
    {
        const char *name = cli_meta(n, "name");
        if (name)
            json_array_append_new(names, json_string(name));
    }
    VG_AUTO_JSON json_t *args = json_pack("{s:O, s:o}", "Pod", pod, "NodeNames", names);
    VG_AUTO_FREE char *body = json_dumps(args, JSON_COMPACT);
    VG_AUTO_FREE char *out = NULL;
    int rc = sched_filter(c->state, body, strlen(body), now, &out, err);
    if (rc < 0)
        return rc;
    *result = json_loads(out, 0, NULL);
    return *result ? 0 : vg_err_set(err, -EBADMSG, "the filter's answer is not JSON");
}

static void explain_bound(const struct cli_cluster *c, json_t *pod, const struct annot_decision *d,
                          const struct sched_container_request *req, int nreq, FILE *f,
                          json_t *jout)
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
            json_t *dg = cli_dump_gpu(c, d->node, s->uuid);
            char mem[32], total[32];
            cli_format_bytes(s->memory_mib << 20, mem, sizeof mem);
            cli_format_bytes(cli_json_u64(dg, "memTotalMiB") << 20, total, sizeof total);
            fprintf(f, "  container %s: GPU %d (%s): %s of its %s of memory, ",
                    d->containers[k].name, cli_gpu_index(c, d->node, s->uuid), s->uuid, mem, total);
            if (s->mig_profile[0] != '\0')
                fprintf(f, "in its own MIG instance %s at memory slice %u\n", s->mig_profile,
                        s->mig_start);
            else if (s->cores == 100)
                fprintf(f, "the whole card to itself\n");
            else if (s->cores)
                fprintf(f, "%u%% of its compute\n", s->cores);
            else
                fprintf(f, "no compute limit\n");
            bool high = false;
            for (int r = 0; r < nreq; r++)
                high = high ||
                       (req[r].priority == 0 && strcmp(req[r].name, d->containers[k].name) == 0);
            uint64_t others = cli_json_u64(dg, "highPriorityTenants");
            others = others > 0 && high ? others - 1 : others;
            if (dg != NULL && high)
                fprintf(f,
                        "    high priority: %s (vgpu-scheduler puts a high-priority pod beside "
                        "another only when no offered GPU can take it otherwise)\n",
                        others == 0 ? "no other high-priority container on this GPU"
                                    : "it shares this GPU with another high-priority container");
            if (dg != NULL) {
                char used[32];
                cli_format_bytes(cli_json_u64(dg, "memUsedMiB") << 20, used, sizeof used);
                fprintf(f,
                        "    the GPU holds %llu tenant%s now: %s of %s and %llu%% of its compute "
                        "allocated\n",
                        (unsigned long long)cli_json_u64(dg, "tenants"),
                        cli_json_u64(dg, "tenants") == 1 ? "" : "s", used, total,
                        (unsigned long long)cli_json_u64(dg, "coresUsed"));
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
    json_object_set_new(jout, "decision", cli_decision_json(d));
}

static void explain_pending(struct cli_cluster *c, json_t *pod, struct sched_now now, FILE *f,
                            json_t *jout)
{
    json_object_set_new(jout, "status", json_string("pending"));
    VG_AUTO_JSON json_t *result = NULL;
    struct vg_err err = {0};
    if (run_filter(c, pod, now, &result, &err) < 0) {
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
            const char *name = cli_meta(n, "name");
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
            if (cli_annotation(n, ANNOT_KEY_GPUS) != NULL)
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

/* GETs the pod: -ENOENT said in words, and an answer that is not a pod refused. */
static int get_pod(const struct cli_source *src, const char *ns, const char *name, json_t **pod,
                   struct vg_err *err)
{
    char path[1024];
    (void)vg_snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", ns, name);
    VG_AUTO_JSON json_t *body = NULL;
    int rc = src->get(src->ctx, path, &body, err);
    if (rc == -ENOENT)
        return vg_err_set(err, -ENOENT, "pod \"%s\" not found in namespace \"%s\"", name, ns);
    if (rc < 0)
        return rc;
    if (!json_is_object(body))
        return vg_err_set(err, -EBADMSG, "%s: the answer is not an object", path);
    *pod = vg_steal_ptr(&body);
    return 0;
}

/* The explanation, in words on f and as JSON in jout. */
static void explain(struct cli_cluster *c, json_t *pod, json_t *events, const char *ns,
                    const char *name, struct sched_now now, FILE *f, json_t *jout)
{
    fprintf(f, "Pod %s/%s", ns, name);
    struct sched_container_request req[ANNOT_MAX_CONTAINERS];
    struct vg_err rerr = {0};
    int n = sched_pod_requests(&c->options, pod, req, ANNOT_MAX_CONTAINERS, &rerr);
    struct annot_decision d;
    const char *node = sched_json_str(pod, "spec", "nodeName", NULL);
    if (n > 0) {
        fprintf(f, " asks for:\n");
        request_words(req, n, f);
        for (int k = 0; k < n; k++)
            if (req[k].priority_given)
                fprintf(f, "  container %s: task priority %d (%s; nvidia.com/priority)%s\n",
                        req[k].name, req[k].priority, req[k].priority == 0 ? "high" : "low",
                        req[k].priority == 0
                            ? ": placed on a GPU that holds no other high-priority container "
                              "when any offered GPU can take it"
                            : "");
        json_object_set_new(jout, "request", cli_request_json(req, n));
    } else if (n == 0) {
        fprintf(f, " asks for no GPUs.\n");
    } else {
        char clean[1024];
        cli_sanitize(clean, sizeof clean, rerr.msg);
        fprintf(f, " asks for GPUs in a way no node can serve: %s\n", clean);
    }
    if (cli_pod_decision(pod, &d)) {
        explain_bound(c, pod, &d, req, n, f, jout);
    } else if (node != NULL) {
        fprintf(f,
                "It runs on node %s, placed without vgpu (it carries no vgpu.io/decision for "
                "that node): vgpu-scheduler did not bind it%s.\n",
                node, n > 0 ? ", so vgpu's device plugin gives it no GPUs" : "");
        json_object_set_new(jout, "status", json_string("bound-without-decision"));
        json_object_set_new(jout, "node", json_string(node));
    } else if (cli_pod_finished(pod)) {
        fprintf(f, "It has finished and holds nothing.\n");
        json_object_set_new(jout, "status", json_string("finished"));
    } else if (n == 0) {
        fprintf(f, "vgpu does not place it: kube-scheduler's other filters decide.\n");
        json_object_set_new(jout, "status", json_string("pending"));
    } else if (n > 0) {
        explain_pending(c, pod, now, f, jout);
    } else {
        json_object_set_new(jout, "status", json_string("pending"));
        json_object_set_new(jout, "error", json_string(rerr.msg));
    }
    if (node == NULL && !cli_pod_finished(pod)) {
        json_t *e = last_failed_scheduling(events, name, cli_meta(pod, "uid"));
        if (e != NULL)
            event_words(e, f, jout);
    }
}

int cli_explain(const struct cli_source *src, const struct cli_options *opt, FILE *out, FILE *diag,
                struct vg_err *err)
{
    (void)diag;
    char ns[CLI_NAME_MAX];
    (void)vg_strlcpy(ns, cli_namespace(src, opt), sizeof ns);
    const char *name = opt->pod;
    if (name == NULL)
        return vg_err_set(err, -EINVAL, "missing the pod's name");
    if (!annot_dns_label(ns) || !annot_dns_subdomain(name))
        return vg_err_set(err, -EINVAL, "\"%s/%s\" is not a namespace and a pod name", ns, name);
    VG_AUTO_JSON json_t *pod = NULL;
    int rc = get_pod(src, ns, name, &pod, err);
    if (rc < 0)
        return rc;
    VG_AUTO(cli_cluster_free) struct cli_cluster c = {0};
    if ((rc = cli_cluster_load(src, &c, err)) < 0)
        return rc;
    char path[1024];
    (void)vg_snprintf(path, sizeof path,
                      "/api/v1/namespaces/%s/events?fieldSelector=involvedObject.name%%3D%s", ns,
                      name);
    VG_AUTO_JSON json_t *events = NULL;
    struct vg_err eerr = {0};
    if (cli_list(src, path, &events, &eerr) < 0)
        events = NULL; /* explained without them */
    VG_AUTO(cli_page_free) struct cli_page text = {0};
    if ((rc = cli_page_open(&text, err)) < 0)
        return rc;
    VG_AUTO_JSON json_t *jout = json_pack("{s:s, s:s}", "namespace", ns, "name", name);
    struct sched_now now = {.mono_ms = opt->now_mono_ms, .unix_s = opt->now_unix};
    explain(&c, pod, events, ns, name, now, text.f, jout);
    if (opt->output == CLI_OUTPUT_JSON)
        return cli_write_json(jout, out, err);
    return cli_page_write(&text, out, err);
}
