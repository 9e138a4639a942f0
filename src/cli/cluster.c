/* The cluster model the verbs share (cluster.h). */
#include "cli/cluster.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/auto.h"
#include "base/auto_json.h"
#include "base/parse.h"
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

/* Whether container c asks for Volcano's vGPUs: the count or the memory resource in its
 * limits (Volcano's ExtractResourceRequest, default names; docs/volcano.md). */
static bool volcano_gpu_container(json_t *c)
{
    json_t *limits = json_object_get(json_object_get(c, "resources"), "limits");
    return json_object_get(limits, "volcano.sh/vgpu-number") != NULL ||
           json_object_get(limits, "volcano.sh/vgpu-memory") != NULL;
}

bool cli_volcano_pod(json_t *pod)
{
    json_t *containers = json_object_get(json_object_get(pod, "spec"), "containers");
    size_t i;
    json_t *c;
    json_array_foreach(containers, i, c)
    {
        if (volcano_gpu_container(c))
            return true;
    }
    return false;
}

/* One device of a Volcano segment, "UUID,TYPE,MEM,CORES" (docs/volcano.md): false on
 * anything else (a field missing, a number that does not parse, cores past 100). */
static bool volcano_device(const char *text, size_t len, struct annot_share *out)
{
    char buf[ANNOT_UUID_MAX + 64];
    if (len == 0 || len >= sizeof buf)
        return false;
    memcpy(buf, text, len);
    buf[len] = '\0';
    char *field[4];
    size_t n = 0;
    for (char *p = buf; n < 4; n++) {
        field[n] = p;
        char *comma = strchr(p, ',');
        if (comma == NULL) {
            n++;
            break;
        }
        *comma = '\0';
        p = comma + 1;
    }
    uint64_t mib, cores;
    struct vg_err err = {0};
    if (n != 4 || strchr(field[3], ',') != NULL || field[0][0] == '\0' ||
        vg_strlcpy(out->uuid, field[0], sizeof out->uuid) < 0 ||
        vg_parse_u64(field[2], 0, UINT32_MAX, &mib, &err) < 0 ||
        vg_parse_u64(field[3], 0, 100, &cores, &err) < 0)
        return false;
    out->memory_mib = mib;
    out->cores = (unsigned)cores;
    return true;
}

/* Segments joined by ';', each device ending in ':' (cluster.h). */
bool cli_volcano_decision(json_t *pod, struct annot_decision *d)
{
    const char *node = sched_json_str(pod, "spec", "nodeName", NULL);
    if (node == NULL)
        return false;
    const char *text = cli_annotation(pod, "volcano.sh/vgpu-ids-new");
    if (text == NULL || strlen(text) > ANNOT_MAX_BYTES)
        return false;
    memset(d, 0, sizeof *d);
    if (vg_strlcpy(d->node, node, sizeof d->node) < 0)
        return false;
    json_t *containers = json_object_get(json_object_get(pod, "spec"), "containers");
    size_t i = 0, count = json_array_size(containers);
    const char *seg = text;
    while (true) {
        while (i < count && !volcano_gpu_container(json_array_get(containers, i)))
            i++;
        if (i == count || d->container_count == ANNOT_MAX_CONTAINERS)
            return false; /* more segments than GPU containers */
        struct annot_container *ac = &d->containers[d->container_count++];
        const char *name = sched_json_str(json_array_get(containers, i++), "name", NULL, NULL);
        if (vg_strlcpy(ac->name, name ? name : "?", sizeof ac->name) < 0)
            return false;
        const char *end = strchr(seg, ';');
        size_t seg_len = end ? (size_t)(end - seg) : strlen(seg);
        for (size_t at = 0; at < seg_len;) {
            const char *colon = memchr(seg + at, ':', seg_len - at);
            if (colon == NULL || ac->gpu_count == ANNOT_MAX_GPUS ||
                !volcano_device(seg + at, (size_t)(colon - (seg + at)), &ac->gpus[ac->gpu_count]))
                return false; /* every device ends in ':' */
            ac->gpu_count++;
            at = (size_t)(colon - seg) + 1;
        }
        if (end == NULL)
            return d->container_count > 0;
        seg = end + 1;
    }
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
        for (unsigned g = 0; g < d->containers[i].gpu_count; g++) {
            const struct annot_share *sh = &d->containers[i].gpus[g];
            json_t *o = json_pack("{s:s, s:I, s:i}", "uuid", sh->uuid, "memoryMiB",
                                  (json_int_t)sh->memory_mib, "cores", (int)sh->cores);
            if (o != NULL && sh->mig_profile[0] != '\0')
                json_object_set_new(o, "mig",
                                    json_pack("{s:s, s:i}", "profile", sh->mig_profile, "start",
                                              (int)sh->mig_start));
            json_array_append_new(gs, o);
        }
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
