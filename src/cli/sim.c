/* vgpu sim (verbs.h): capacity planning on this cluster. Exports its GPU nodes and pods
 * into vgpu-sim's CSV files (docs/placement.md, "Your own cluster and pods") and runs
 * vgpu-sim's placement policies on them. Both files are built in memory and each replaces
 * the old one whole (vg_write_file_atomic), so a failed export leaves no half file. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/auto.h"
#include "base/fs.h"
#include "base/mem.h"
#include "base/str.h"
#include "cli/cli.h"
#include "cli/cluster.h"

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

/* nodes.csv: the GPU nodes with a usable inventory; *max_gpu_mib is their largest GPU. */
static unsigned nodes_csv(const struct cli_cluster *c, FILE *f, uint64_t *max_gpu_mib)
{
    fprintf(f, "sn,cpu_milli,memory_mib,gpu,model\n");
    unsigned count = 0;
    size_t i;
    json_t *n;
    json_array_foreach(c->nodes, i, n)
    {
        const char *name;
        struct annot_inventory inv;
        struct vg_err ierr = {0};
        if (cli_node_inventory(n, &name, &inv, &ierr) <= 0 || inv.gpu_count == 0)
            continue;
        json_t *alloc = json_object_get(json_object_get(n, "status"), "allocatable");
        char model[128], sn[300];
        csv_cell(model, sizeof model, inv.gpus[0].model);
        csv_cell(sn, sizeof sn, name);
        for (unsigned g = 0; g < inv.gpu_count; g++)
            *max_gpu_mib =
                inv.gpus[g].memory_mib > *max_gpu_mib ? inv.gpus[g].memory_mib : *max_gpu_mib;
        fprintf(f, "%s,%llu,%llu,%u,%s\n", sn, (unsigned long long)quantity_of(alloc, "cpu", false),
                (unsigned long long)quantity_of(alloc, "memory", true), inv.gpu_count, model);
        count++;
    }
    return count;
}

/* One pods.csv line for pod's nreq requests (and its CPU and memory requests). */
static void pod_line(json_t *pod, const char *pns, const char *name,
                     const struct sched_container_request *req, int nreq, uint64_t max_gpu_mib,
                     FILE *f)
{
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
            int w = vg_snprintf(spec + used, sizeof spec - used, "%s%s", used ? "|" : "", model);
            used = w > 0 ? used + (size_t)w : used;
        }
    }
    if (gpus > 16)
        gpus = 16;
    char pname[600], a[300], b[300];
    csv_cell(a, sizeof a, pns);
    csv_cell(b, sizeof b, name);
    (void)vg_snprintf(pname, sizeof pname, "%s/%s", a, b);
    fprintf(f, "%s,%llu,%llu,%u,%u,%s\n", pname, (unsigned long long)cpu, (unsigned long long)mem,
            gpus, gpus ? milli : 0, spec);
}

/* pods.csv: the unfinished pods, of every namespace unless -n is given. */
static unsigned pods_csv(const struct cli_cluster *c, const struct cli_options *opt, const char *ns,
                         uint64_t max_gpu_mib, FILE *f)
{
    fprintf(f, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n");
    unsigned count = 0;
    size_t i;
    json_t *pod;
    json_array_foreach(c->pods, i, pod)
    {
        const char *pns = cli_meta(pod, "namespace"), *name = cli_meta(pod, "name");
        if (!name || cli_pod_finished(pod))
            continue;
        if (!pns)
            pns = "default";
        if (!opt->all_namespaces && opt->namespace && strcmp(pns, ns) != 0)
            continue;
        struct sched_container_request req[ANNOT_MAX_CONTAINERS];
        struct vg_err rerr = {0};
        int nreq = sched_pod_requests(&c->options, pod, req, ANNOT_MAX_CONTAINERS, &rerr);
        if (nreq < 0)
            continue; /* nobody can serve it, in the cluster or the simulation */
        pod_line(pod, pns, name, req, nreq, max_gpu_mib, f);
        count++;
    }
    return count;
}

/* vgpu-sim beside this program, else the one on PATH. */
static void find_sim(char *sim, size_t size)
{
    (void)vg_strlcpy(sim, "vgpu-sim", size);
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        return;
    self[len] = '\0';
    char *slash = strrchr(self, '/');
    if (slash == NULL)
        return;
    *slash = '\0';
    char cand[4096];
    if (vg_snprintf(cand, sizeof cand, "%s/vgpu-sim", self) >= 0 && access(cand, X_OK) == 0)
        (void)vg_strlcpy(sim, cand, size);
}

static void add_arg(struct cli_sim_run *run, const char *arg)
{
    run->argv[run->argc++] = xstrdup(arg);
    run->argv[run->argc] = NULL;
}

int cli_sim_export(const struct cli_source *src, const struct cli_options *opt, FILE *diag,
                   struct cli_sim_run *run, struct vg_err *err)
{
    memset(run, 0, sizeof *run);
    char ns[CLI_NAME_MAX];
    (void)vg_strlcpy(ns, cli_namespace(src, opt), sizeof ns);
    VG_AUTO(cli_cluster_free) struct cli_cluster c = {0};
    int rc = cli_cluster_load(src, &c, err);
    if (rc < 0)
        return rc;
    const char *dir = opt->out_dir ? opt->out_dir : "vgpu-sim-export";
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return vg_err_errno(err, errno, "cannot create %s", dir);
    char nodes_path[4096], pods_path[4096];
    if (vg_snprintf(nodes_path, sizeof nodes_path, "%s/nodes.csv", dir) < 0 ||
        vg_snprintf(pods_path, sizeof pods_path, "%s/pods.csv", dir) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "--out %s: path too long", dir);
    VG_AUTO(cli_page_free) struct cli_page nodes = {0};
    VG_AUTO(cli_page_free) struct cli_page pods = {0};
    if ((rc = cli_page_open(&nodes, err)) < 0 || (rc = cli_page_open(&pods, err)) < 0)
        return rc;
    uint64_t max_gpu_mib = 0;
    unsigned nnodes = nodes_csv(&c, nodes.f, &max_gpu_mib);
    unsigned npods = pods_csv(&c, opt, ns, max_gpu_mib, pods.f);
    if ((rc = cli_page_close(&nodes, err)) < 0 || (rc = cli_page_close(&pods, err)) < 0)
        return rc;
    if ((rc = vg_write_file_atomic(nodes_path, nodes.text, nodes.len, 0644, 0, err)) < 0 ||
        (rc = vg_write_file_atomic(pods_path, pods.text, pods.len, 0644, 0, err)) < 0)
        return rc;
    fprintf(diag, "exported %u GPU nodes to %s and %u pods to %s\n", nnodes, nodes_path, npods,
            pods_path);
    if (opt->export_only)
        return 0;
    if (nnodes == 0)
        return vg_err_set(err, -ENODATA,
                          "the cluster has no GPU node with a vgpu.io/gpus inventory to simulate");
    char sim[4096];
    if (opt->sim_program != NULL)
        (void)vg_strlcpy(sim, opt->sim_program, sizeof sim);
    else
        find_sim(sim, sizeof sim);
    add_arg(run, sim);
    add_arg(run, "--nodes");
    add_arg(run, nodes_path);
    add_arg(run, "--pods");
    add_arg(run, pods_path);
    add_arg(run, "--policy");
    add_arg(run, opt->policy ? opt->policy : "default,fgd,binpack,spread");
    add_arg(run, "--seeds");
    add_arg(run, opt->seeds ? opt->seeds : "42-44");
    if (opt->report) {
        add_arg(run, "--report");
        add_arg(run, opt->report);
    }
    if (opt->jobs) {
        add_arg(run, "--jobs");
        add_arg(run, opt->jobs);
    }
    return 0;
}

int cli_sim_exec(struct cli_sim_run *run, struct vg_err *err)
{
    if (run->argc == 0)
        return vg_err_set(err, -EINVAL, "no vgpu-sim command to run");
    fflush(NULL);
    execvp(run->argv[0], run->argv);
    return vg_err_errno(err, errno, "cannot run %s", run->argv[0]);
}

void cli_sim_run_free(struct cli_sim_run *run)
{
    for (size_t i = 0; i < run->argc; i++)
        free(run->argv[i]);
    memset(run, 0, sizeof *run);
}
