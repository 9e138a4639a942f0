/* The `vgpu` command (docs/cli.md): its flags, shared by main.c and top.c. */
#ifndef VGPU_CMD_VGPU_H
#define VGPU_CMD_VGPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "cli/verbs.h"

enum vgpu_output {
    OUT_TABLE = CLI_OUTPUT_TABLE,
    OUT_WIDE = CLI_OUTPUT_WIDE,
    OUT_JSON = CLI_OUTPUT_JSON
};

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
    /* resize */
    const char *container, *gpumem, *gpucores;
};

/* The cluster verbs (nodes, gpus, pods, explain, sim) live in src/cli (cli/verbs.h). */
int vgpu_top(const struct vgpu_cmd *cmd);

/* "error: ..." on stderr; returns 1. */
int vgpu_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
