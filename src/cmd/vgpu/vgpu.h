/* The `vgpu` command (docs/cli.md): shared state of its verbs. */
#ifndef VGPU_CMD_VGPU_H
#define VGPU_CMD_VGPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/err.h"

enum vgpu_output { OUT_TABLE = 0, OUT_WIDE, OUT_JSON };

struct vgpu_cmd {
    const char *prog; /* "vgpu", or "kubectl vgpu" when run as the plugin */
    const char *verb;
    const char *args[4]; /* positional arguments after the verb */
    size_t nargs;
    /* kubectl's flags */
    const char *kubeconfig, *context, *server, *namespace;
    bool all_namespaces;
    enum vgpu_output output;
    uint64_t request_timeout_s;
    /* top */
    bool once;
    uint64_t interval_ms, iterations;
    const char *region_dir, *nvml_library;
    /* sim */
    const char *out_dir, *policy, *seeds, *report, *jobs;
    bool export_only;
};

/* One blocking GET against the API server: 0 and *out (owned) on 2xx; -ENOENT on 404;
 * another negative errno with a message naming the server otherwise. */
struct vgpu_api;
int vgpu_api_open(const struct vgpu_cmd *cmd, struct vgpu_api **out, struct vg_err *err);
int vgpu_api_get(struct vgpu_api *api, const char *path, json_t **out, struct vg_err *err);
/* The namespace: -n, else the kubeconfig context's, else "default". */
const char *vgpu_api_namespace(const struct vgpu_api *api, const struct vgpu_cmd *cmd);
void vgpu_api_close(struct vgpu_api *api);

/* The verbs: each returns the exit status (0, or 1 with the error printed). */
int vgpu_nodes(const struct vgpu_cmd *cmd, bool per_gpu);
int vgpu_pods(const struct vgpu_cmd *cmd);
int vgpu_explain(const struct vgpu_cmd *cmd);
int vgpu_sim(const struct vgpu_cmd *cmd, const char *argv0);
int vgpu_top(const struct vgpu_cmd *cmd);

/* "error: ..." on stderr; returns 1. */
int vgpu_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
