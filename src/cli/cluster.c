/* The cluster model the verbs share (cluster.h). */
#include "cli/cluster.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/auto.h"
#include "base/auto_json.h"
#include "base/str.h"
#include "cli/cli.h"

int cli_output_parse(const char *text, enum cli_output *out, struct vg_err *err)
{
    if (strcmp(text, "wide") == 0)
        *out = CLI_OUTPUT_WIDE;
    else if (strcmp(text, "json") == 0)
        *out = CLI_OUTPUT_JSON;
    else
        return vg_err_set(err, -EINVAL, "--output '%s': expected wide or json", text);
    return 0;
}

const char *cli_namespace(const struct cli_source *src, const struct cli_options *opt)
{
    if (opt->namespace != NULL)
        return opt->namespace;
    if (src != NULL && src->namespace != NULL && src->namespace[0])
        return src->namespace;
    return "default";
}

int cli_list(const struct cli_source *src, const char *path, json_t **items, struct vg_err *err)
{
    VG_AUTO_JSON json_t *body = NULL;
    int rc = src->get(src->ctx, path, &body, err);
    if (rc < 0)
        return rc;
    json_t *it = json_object_get(body, "items");
    if (!json_is_array(it))
        return vg_err_set(err, -EBADMSG, "%s: the answer has no items list", path);
    size_t i;
    json_t *item;
    json_array_foreach(it, i, item)
    {
        if (!json_is_object(item))
            return vg_err_set(err, -EBADMSG, "%s: item %zu of the answer is not an object", path,
                              i);
    }
    *items = json_incref(it);
    return 0;
}

int cli_cluster_load(const struct cli_source *src, struct cli_cluster *c, struct vg_err *err)
{
    memset(c, 0, sizeof *c);
    int rc = cli_list(src, "/api/v1/nodes", &c->nodes, err);
    if (rc == 0)
        rc = cli_list(src, "/api/v1/pods", &c->pods, err);
    if (rc < 0)
        return rc;
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

void cli_cluster_free(struct cli_cluster *c)
{
    json_decref(c->nodes);
    json_decref(c->pods);
    json_decref(c->dump);
    sched_state_free(c->state);
    memset(c, 0, sizeof *c);
}

const char *cli_meta(json_t *obj, const char *key)
{
    return sched_json_str(obj, "metadata", key, NULL);
}

const char *cli_annotation(json_t *obj, const char *key)
{
    return sched_json_str(obj, "metadata", "annotations", key);
}

bool cli_pod_finished(json_t *pod)
{
    const char *phase = sched_json_str(pod, "status", "phase", NULL);
    return phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
}

bool cli_pod_decision(json_t *pod, struct annot_decision *d)
{
    const char *node = sched_json_str(pod, "spec", "nodeName", NULL);
    const char *text = cli_annotation(pod, ANNOT_KEY_DECISION);
    struct vg_err err = {0};
    return node && text && annot_decision_decode(text, strlen(text), d, &err) == 0 &&
           strcmp(d->node, node) == 0;
}

json_t *cli_dump_gpu(const struct cli_cluster *c, const char *node, const char *uuid)
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

uint64_t cli_json_u64(json_t *obj, const char *key)
{
    json_int_t v = json_integer_value(json_object_get(obj, key));
    return v > 0 ? (uint64_t)v : 0;
}

int cli_node_inventory(json_t *node, const char **name, struct annot_inventory *inv,
                       struct vg_err *err)
{
    *name = cli_meta(node, "name");
    const char *text = cli_annotation(node, ANNOT_KEY_GPUS);
    if (*name == NULL || text == NULL)
        return 0;
    int rc = annot_inventory_decode(text, strlen(text), inv, err);
    return rc < 0 ? rc : 1;
}

int cli_gpu_index(const struct cli_cluster *c, const char *node, const char *uuid)
{
    size_t i;
    json_t *n;
    json_array_foreach(c->nodes, i, n)
    {
        const char *name;
        struct annot_inventory inv;
        struct vg_err err = {0};
        if (cli_node_inventory(n, &name, &inv, &err) <= 0 || strcmp(name, node) != 0)
            continue;
        for (unsigned g = 0; g < inv.gpu_count; g++)
            if (strcmp(inv.gpus[g].uuid, uuid) == 0)
                return (int)inv.gpus[g].index;
    }
    return -1;
}

json_t *cli_decision_json(const struct annot_decision *d)
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
    return json_pack("{s:s, s:I, s:I, s:o}", "node", d->node, "time", (json_int_t)d->time,
                     "generation", (json_int_t)d->generation, "containers", cs);
}

json_t *cli_request_json(const struct sched_container_request *r, int n)
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

void cli_request_memory(const struct place_request *r, char *buf, size_t size)
{
    if (r->gpu_mem_mib)
        cli_format_bytes(r->gpu_mem_mib << 20, buf, size);
    else if (r->gpu_mem_pct)
        (void)vg_snprintf(buf, size, "%u%%", r->gpu_mem_pct);
    else
        (void)vg_snprintf(buf, size, "all");
}

int cli_page_open(struct cli_page *p, struct vg_err *err)
{
    memset(p, 0, sizeof *p);
    p->f = open_memstream(&p->text, &p->len);
    if (p->f == NULL)
        return vg_err_errno(err, errno, "cannot buffer the output");
    return 0;
}

int cli_page_close(struct cli_page *p, struct vg_err *err)
{
    FILE *f = p->f;
    p->f = NULL;
    if (f != NULL && fclose(f) != 0)
        return vg_err_errno(err, errno, "cannot buffer the output");
    return 0;
}

int cli_page_write(struct cli_page *p, FILE *out, struct vg_err *err)
{
    int rc = cli_page_close(p, err);
    if (rc < 0)
        return rc;
    if ((p->len > 0 && fwrite(p->text, 1, p->len, out) != p->len) || fflush(out) != 0)
        return vg_err_errno(err, errno, "cannot write the output");
    return 0;
}

void cli_page_free(struct cli_page *p)
{
    if (p->f != NULL)
        fclose(p->f);
    free(p->text);
    memset(p, 0, sizeof *p);
}

int cli_write_table(const struct cli_table *t, FILE *out, struct vg_err *err)
{
    VG_AUTO(cli_page_free) struct cli_page page = {0};
    int rc = cli_page_open(&page, err);
    if (rc < 0)
        return rc;
    cli_table_print(t, page.f, 0);
    return cli_page_write(&page, out, err);
}

int cli_write_json(json_t *doc, FILE *out, struct vg_err *err)
{
    VG_AUTO(cli_page_free) struct cli_page page = {0};
    int rc = cli_page_open(&page, err);
    if (rc < 0)
        return rc;
    json_dumpf(doc, page.f, JSON_INDENT(2) | JSON_SORT_KEYS);
    fputc('\n', page.f);
    return cli_page_write(&page, out, err);
}
