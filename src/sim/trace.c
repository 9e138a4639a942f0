/* CSV loading for vgpu-sim: the openb schema (docs/placement.md).
 *
 * The parser is strict and bounded: a header row names the columns (any order, extra
 * columns ignored), every line is at most SIM_LINE_MAX bytes, fields hold no quotes,
 * numbers go through vg_parse_u64, and each error says file:line and what was wrong. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "sim/sim.h"

#define MAX_FIELDS 32

struct csv {
    const char *text, *filename;
    size_t len, pos;
    unsigned line;
    char buf[SIM_LINE_MAX + 1];
    char *fields[MAX_FIELDS];
    unsigned field_count;
};

/* Reads the next non-empty line into fields. 1 = a line, 0 = end, <0 = error. */
static int csv_next(struct csv *c, struct vg_err *err)
{
    for (;;) {
        if (c->pos >= c->len)
            return 0;
        const char *start = c->text + c->pos;
        const char *nl = memchr(start, '\n', c->len - c->pos);
        size_t n = nl != NULL ? (size_t)(nl - start) : c->len - c->pos;
        c->pos += n + (nl != NULL);
        c->line++;
        if (n > 0 && start[n - 1] == '\r')
            n--;
        if (n > SIM_LINE_MAX)
            return vg_err_set(err, -E2BIG, "%s:%u: line longer than %d bytes", c->filename, c->line,
                              SIM_LINE_MAX);
        if (n == 0)
            continue;
        memcpy(c->buf, start, n);
        c->buf[n] = '\0';
        if (memchr(c->buf, '\0', n) != NULL)
            return vg_err_set(err, -EINVAL, "%s:%u: NUL byte in line", c->filename, c->line);
        if (strchr(c->buf, '"') != NULL)
            return vg_err_set(err, -EINVAL, "%s:%u: quoted fields are not supported", c->filename,
                              c->line);
        c->field_count = 0;
        char *p = c->buf;
        for (;;) {
            if (c->field_count == MAX_FIELDS)
                return vg_err_set(err, -E2BIG, "%s:%u: more than %d fields", c->filename, c->line,
                                  MAX_FIELDS);
            c->fields[c->field_count++] = p;
            char *comma = strchr(p, ',');
            if (comma == NULL)
                break;
            *comma = '\0';
            p = comma + 1;
        }
        return 1;
    }
}

/* Column index of name in the header, or -1. */
static int column(const struct csv *c, const char *name)
{
    for (unsigned i = 0; i < c->field_count; i++)
        if (strcmp(c->fields[i], name) == 0)
            return (int)i;
    return -1;
}

static int header(struct csv *c, const char *const *names, int *cols, size_t n, size_t required,
                  struct vg_err *err)
{
    int rc = csv_next(c, err);
    if (rc < 0)
        return rc;
    if (rc == 0)
        return vg_err_set(err, -EINVAL, "%s: empty file, expected a header row", c->filename);
    for (size_t i = 0; i < n; i++) {
        cols[i] = column(c, names[i]);
        if (cols[i] < 0 && i < required)
            return vg_err_set(err, -EINVAL, "%s:%u: header has no '%s' column", c->filename,
                              c->line, names[i]);
    }
    return 0;
}

static const char *field(const struct csv *c, int col)
{
    return col >= 0 && (unsigned)col < c->field_count ? c->fields[col] : NULL;
}

static int number(const struct csv *c, int col, const char *what, uint64_t max, uint64_t *out,
                  struct vg_err *err)
{
    const char *s = field(c, col);
    if (s == NULL)
        return vg_err_set(err, -EINVAL, "%s:%u: missing field '%s'", c->filename, c->line, what);
    if (vg_parse_u64(s, 0, max, out, err) < 0)
        return vg_err_wrap(err, "%s:%u: %s", c->filename, c->line, what);
    return 0;
}

int sim_parse_nodes(const char *text, size_t len, const char *filename, struct place_cluster *cl,
                    struct vg_err *err)
{
    static const char *const names[] = {"sn", "cpu_milli", "memory_mib", "gpu", "model"};
    int cols[5];
    VG_AUTO_FREE struct csv *c = xcalloc(1, sizeof *c);
    *c = (struct csv){.text = text, .len = len, .filename = filename};
    int rc = header(c, names, cols, 5, 4, err);
    if (rc < 0)
        return rc;
    while ((rc = csv_next(c, err)) > 0) {
        uint64_t cpu, mem, gpus;
        const char *name = field(c, cols[0]);
        const char *model = field(c, cols[4]);
        if (name == NULL || name[0] == '\0')
            return vg_err_set(err, -EINVAL, "%s:%u: empty node name", filename, c->line);
        if ((rc = number(c, cols[1], "cpu_milli", UINT32_MAX * 1000ULL, &cpu, err)) < 0 ||
            (rc = number(c, cols[2], "memory_mib", 1ULL << 40, &mem, err)) < 0 ||
            (rc = number(c, cols[3], "gpu", PLACE_MAX_GPUS, &gpus, err)) < 0)
            return rc;
        if (gpus > 0 && (model == NULL || model[0] == '\0'))
            return vg_err_set(err, -EINVAL, "%s:%u: node %s has GPUs but no model", filename,
                              c->line, name);
        rc = place_cluster_add_node(cl, name, cpu, mem, (uint16_t)gpus, model, 0, err);
        if (rc < 0)
            return vg_err_wrap(err, "%s:%u", filename, c->line);
    }
    return rc < 0 ? rc : 0;
}

/* gpu_spec: model names separated by '|'; names the cluster lacks match no node. */
static int parse_spec(const struct place_cluster *cl, const char *spec, uint64_t *mask)
{
    *mask = 0;
    char buf[SIM_LINE_MAX + 1];
    if (vg_strlcpy(buf, spec, sizeof buf) < 0)
        return -E2BIG;
    for (char *p = buf; p != NULL;) {
        char *bar = strchr(p, '|');
        if (bar != NULL)
            *bar = '\0';
        for (size_t m = 0; m < cl->model_count; m++)
            if (strcmp(cl->models[m], p) == 0)
                *mask |= 1ULL << m;
        p = bar != NULL ? bar + 1 : NULL;
    }
    return 0;
}

int sim_parse_pods(const char *text, size_t len, const char *filename,
                   const struct place_cluster *cl, struct sim_pod **pods_out, size_t *count_out,
                   struct vg_err *err)
{
    static const char *const names[] = {"name",    "cpu_milli", "memory_mib",
                                        "num_gpu", "gpu_milli", "gpu_spec"};
    int cols[6];
    VG_AUTO_FREE struct csv *c = xcalloc(1, sizeof *c);
    *c = (struct csv){.text = text, .len = len, .filename = filename};
    VG_AUTO_FREE struct sim_pod *pods = NULL;
    size_t count = 0, cap = 0;
    /* Every row takes at least two bytes (a name and its newline): the text bounds the count. */
    size_t max_pods = len / 2 + 1;
    int rc = header(c, names, cols, 6, 5, err);
    if (rc < 0)
        return rc;
    while ((rc = csv_next(c, err)) > 0) {
        struct sim_pod p = {0};
        uint64_t gpus, milli;
        const char *name = field(c, cols[0]);
        if (name == NULL || name[0] == '\0')
            return vg_err_set(err, -EINVAL, "%s:%u: empty pod name", filename, c->line);
        if (vg_strlcpy(p.name, name, sizeof p.name) < 0)
            return vg_err_set(err, -ENAMETOOLONG, "%s:%u: pod name longer than %d bytes", filename,
                              c->line, PLACE_NAME_MAX - 1);
        if ((rc = number(c, cols[1], "cpu_milli", UINT32_MAX * 1000ULL, &p.cpu_milli, err)) < 0 ||
            (rc = number(c, cols[2], "memory_mib", 1ULL << 40, &p.mem_mib, err)) < 0 ||
            (rc = number(c, cols[3], "num_gpu", PLACE_MAX_GPUS, &gpus, err)) < 0 ||
            (rc = number(c, cols[4], "gpu_milli", PLACE_GPU_MILLI, &milli, err)) < 0)
            return rc;
        if ((gpus == 0) != (milli == 0))
            return vg_err_set(
                err, -EINVAL, "%s:%u: num_gpu %llu with gpu_milli %llu (both or neither must be 0)",
                filename, c->line, (unsigned long long)gpus, (unsigned long long)milli);
        p.gpu_count = (uint32_t)gpus;
        p.gpu_milli = (uint32_t)milli;
        const char *spec = field(c, cols[5]);
        p.model_mask = UINT64_MAX;
        if (spec != NULL && spec[0] != '\0') {
            p.has_spec = true;
            if (parse_spec(cl, spec, &p.model_mask) < 0)
                return vg_err_set(err, -E2BIG, "%s:%u: gpu_spec too long", filename, c->line);
        }
        struct place_request r = {.gpu_count = p.gpu_count, .gpu_milli = p.gpu_milli};
        if ((rc = place_request_resolve(cl, &r, err)) < 0)
            return vg_err_wrap(err, "%s:%u", filename, c->line);
        p.pod_class = r.pod_class;
        rc = vg_array_grow(&pods, &cap, count + 1, sizeof *pods, max_pods, filename, err);
        if (rc < 0)
            return rc;
        pods[count++] = p;
    }
    if (rc < 0)
        return rc;
    *pods_out = vg_steal_ptr(&pods);
    *count_out = count;
    return 0;
}

static int pod_by_name(const void *a, const void *b)
{
    return strcmp(((const struct sim_pod *)a)->name, ((const struct sim_pod *)b)->name);
}

static int node_by_name(const void *a, const void *b)
{
    return strcmp(((const struct place_node *)a)->name, ((const struct place_node *)b)->name);
}

VG_DEFINE_AUTO(trace_cleanup, struct sim_trace, sim_trace_free)

int sim_trace_load(struct sim_trace *out, const char *nodes_path, const char *pods_path,
                   struct vg_err *err)
{
    memset(out, 0, sizeof *out);
    /* Released on every early return; handed over at the end by forgetting t. */
    VG_AUTO(trace_cleanup) struct sim_trace *t = out;
    place_mix_init(&t->typical);
    t->cluster = place_cluster_new();
    if (t->cluster == NULL)
        return vg_err_set(err, -ENOMEM, "out of memory");
    VG_AUTO_FREE char *nodes_text = NULL, *pods_text = NULL;
    size_t len = 0;
    int rc = vg_read_file(nodes_path, SIM_FILE_MAX, &nodes_text, &len, err);
    if (rc < 0)
        return rc;
    rc = sim_parse_nodes(nodes_text, len, nodes_path, t->cluster, err);
    if (rc < 0)
        return rc;
    if (t->cluster->node_count == 0)
        return vg_err_set(err, -EINVAL, "%s: no nodes", nodes_path);
    rc = vg_read_file(pods_path, SIM_FILE_MAX, &pods_text, &len, err);
    if (rc < 0)
        return rc;
    rc = sim_parse_pods(pods_text, len, pods_path, t->cluster, &t->pods, &t->pod_count, err);
    if (rc < 0)
        return rc;
    if (t->pod_count == 0)
        return vg_err_set(err, -EINVAL, "%s: no pods", pods_path);
    qsort(t->cluster->nodes, t->cluster->node_count, sizeof *t->cluster->nodes, node_by_name);
    for (size_t i = 0; i < t->cluster->node_count; i++)
        t->cluster->nodes[i].rank = (uint32_t)i;
    qsort(t->pods, t->pod_count, sizeof *t->pods, pod_by_name);
    if (sim_build_typical(t->pods, t->pod_count, &t->typical) < 0)
        return vg_err_set(err, -ENOMEM, "out of memory");
    place_cluster_set_metric_mix(t->cluster, &t->typical);
    /* Workload name: the file's base name without "openb_pod_list_" and ".csv". */
    const char *base = strrchr(pods_path, '/');
    base = base != NULL ? base + 1 : pods_path;
    if (strncmp(base, "openb_pod_list_", 15) == 0)
        base += 15;
    (void)vg_strlcpy(t->workload, base, sizeof t->workload);
    char *dot = strrchr(t->workload, '.');
    if (dot != NULL && strcmp(dot, ".csv") == 0)
        *dot = '\0';
    t = NULL; /* the caller owns *out now and frees it with sim_trace_free */
    return 0;
}

void sim_trace_free(struct sim_trace *t)
{
    place_cluster_free(t->cluster);
    free(t->pods);
    place_mix_clear(&t->typical);
    memset(t, 0, sizeof *t);
}

int sim_build_typical(const struct sim_pod *pods, size_t count, struct place_mix *mix)
{
    place_mix_clear(mix);
    for (size_t i = 0; i < count; i++) {
        struct place_mix_type x = {.cpu_milli = pods[i].cpu_milli,
                                   .gpu_count = pods[i].gpu_count,
                                   .gpu_milli = pods[i].gpu_milli,
                                   .model_mask = pods[i].model_mask,
                                   .weight = 1};
        if (place_mix_add(mix, &x) < 0)
            return -ENOMEM;
    }
    place_mix_keep_typical(mix, 95);
    return 0;
}
