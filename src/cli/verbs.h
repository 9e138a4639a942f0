/* The `vgpu` command's verbs (docs/cli.md): top, nodes, gpus, pods, explain and sim, one
 * file each; the cluster verbs over the cluster as a source of API answers shows it: the API server
 * (api.h) in the command, fixture JSON in the tests. The program around them
 * (src/cmd/vgpu/main.c) only parses flags, opens the source and prints the error.
 *
 * A verb reads everything it needs, builds its whole output in memory and writes it to
 * `out` only once it has succeeded, so a failure prints nothing half. Notes a person
 * reads beside the output (a node's invalid inventory, "No GPU pods found", what sim
 * exported) go to `diag`, stderr in the command.
 *
 * Errors: 0, or a negative errno with a message in err that names what is wrong (the
 * path the API answered badly, the pod not found, the flag's value); the command prints it
 * as "error: <message>" and exits 1. Not thread-safe: one verb at a time per source. */
#ifndef VGPU_CLI_VERBS_H
#define VGPU_CLI_VERBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "base/err.h"

/* -o: a table, a wider table, or one JSON document. */
enum cli_output { CLI_OUTPUT_TABLE = 0, CLI_OUTPUT_WIDE, CLI_OUTPUT_JSON };

/* "wide" or "json"; anything else is refused naming --output and the value. */
int cli_output_parse(const char *text, enum cli_output *out, struct vg_err *err);

/* Where the verbs read the cluster. get: one GET of an API path ("/api/v1/nodes"); 0 and
 * *out (owned by the caller) for an answer, -ENOENT when the object does not exist,
 * another negative errno with a message naming the server otherwise. */
struct cli_source {
    int (*get)(void *ctx, const char *path, json_t **out, struct vg_err *err);
    /* One JSON merge patch of an object (NULL in sources that only read): 0, -ENOENT for
     * an object that does not exist, -EEXIST when a metadata.resourceVersion in the patch
     * no longer matches (409: nothing written), another negative errno otherwise. */
    int (*patch)(void *ctx, const char *path, json_t *body, struct vg_err *err);
    void *ctx;
    const char *namespace; /* the kubeconfig context's namespace, or NULL */
};

/* What the verbs are asked, from the command's flags. */
struct cli_options {
    enum cli_output output;
    const char *namespace; /* -n, or NULL: the source's, else "default" */
    bool all_namespaces;   /* -A */
    const char *pod;       /* explain's POD */
    /* The clock, given so that a test replays exactly: heartbeat ages, and the time
     * vgpu-scheduler's filter judges staleness by. */
    int64_t now_unix;
    uint64_t now_mono_ms;
    /* sim */
    const char *out_dir;     /* default "vgpu-sim-export" */
    const char *policy;      /* default "default,fgd,binpack,spread" */
    const char *seeds;       /* default "42-44" */
    const char *report;      /* NULL: none */
    const char *jobs;        /* NULL: vgpu-sim's */
    const char *sim_program; /* NULL: vgpu-sim beside this program, else on PATH */
    bool export_only;
    /* resize */
    const char *container; /* -c, or NULL: the pod's one container with GPUs */
    const char *gpumem;    /* --gpumem QUANTITY (nvidia.com/gpumem's reading), or NULL */
    const char *gpucores;  /* --gpucores PERCENT, or NULL */
    uint64_t wait_ms;      /* how long to wait for vgpu-scheduler's answer */
    /* top */
    bool once;
    uint64_t interval_ms, iterations; /* iterations 0: until q (live), else 1 */
    const char *region_dir;           /* NULL: /usr/local/vgpu/containers */
    const char *nvml_library;         /* NULL: libnvidia-ml.so.1 */
};

/* The namespace the verbs work in: -n, else the source's, else "default". */
const char *cli_namespace(const struct cli_source *src, const struct cli_options *opt);

/* `vgpu nodes`: allocation per node. `vgpu gpus`: per GPU. */
int cli_nodes(const struct cli_source *src, const struct cli_options *opt, FILE *out, FILE *diag,
              struct vg_err *err);
int cli_gpus(const struct cli_source *src, const struct cli_options *opt, FILE *out, FILE *diag,
             struct vg_err *err);

/* `vgpu pods`: pods that ask for GPUs or hold a decision, and what vgpu gave them. */
int cli_pods(const struct cli_source *src, const struct cli_options *opt, FILE *out, FILE *diag,
             struct vg_err *err);

/* `vgpu explain POD`: why opt->pod runs where it runs, or why it is pending. -ENOENT for a
 * pod that does not exist, -EINVAL for a name that is not a Kubernetes name. */
int cli_explain(const struct cli_source *src, const struct cli_options *opt, FILE *out, FILE *diag,
                struct vg_err *err);

/* `vgpu resize POD`: asks vgpu-scheduler for new limits of a running container (the
 * vgpu.io/resize annotation, docs/protocol.md "Live resize") and waits for its answer: 0
 * once they are recorded (what changed, and a note when a lower memory limit frees
 * nothing, on out); -EPERM with the scheduler's reason when refused (nothing changed);
 * -EINVAL for a bad flag or a pod that cannot be resized, -ENOENT for a pod that does not
 * exist, -EBUSY when another request or change raced this one, -ETIMEDOUT without an
 * answer in opt->wait_ms (the request stays; its id is named). */
int cli_resize(const struct cli_source *src, const struct cli_options *opt, FILE *out, FILE *diag,
               struct vg_err *err);
/* `vgpu top`: this node's GPUs and the vgpu containers on them, read from NVML and the
 * device plugin's container directories, never from the API server. Live on a terminal
 * (until q), else opt->iterations snapshots on stdout. A container whose files cannot be
 * read is named on stderr; then, or when NVML cannot be read, -EIO with err. */
int cli_top(const struct cli_options *opt, struct vg_err *err);

/* `vgpu sim`, in two steps so the export is tested without running vgpu-sim:
 * cli_sim_export writes DIR/nodes.csv and DIR/pods.csv, says so on diag, and fills *run
 * with vgpu-sim's command line (argc 0 with --export-only); cli_sim_exec runs it in
 * place of this process, and returns only when it cannot (with err). */
#define CLI_SIM_ARGS_MAX 16
struct cli_sim_run {
    size_t argc;
    char *argv[CLI_SIM_ARGS_MAX]; /* owned; argv[argc] is NULL */
};
int cli_sim_export(const struct cli_source *src, const struct cli_options *opt, FILE *diag,
                   struct cli_sim_run *run, struct vg_err *err);
int cli_sim_exec(struct cli_sim_run *run, struct vg_err *err);
void cli_sim_run_free(struct cli_sim_run *run);

#endif
