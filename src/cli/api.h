/* The API server as the verbs' source (verbs.h): blocking GETs over src/kube's client,
 * with kubectl's rules for finding credentials: --kubeconfig, else the first file of
 * $KUBECONFIG, else ~/.kube/config, else the pod's service account (in-cluster);
 * --server overrides the server. Owns its event loop; one request at a time. */
#ifndef VGPU_CLI_API_H
#define VGPU_CLI_API_H

#include <stdint.h>

#include "base/err.h"
#include "cli/verbs.h"

struct cli_api_options {
    const char *kubeconfig, *context, *server; /* NULL: kubectl's defaults */
    uint64_t request_timeout_s;                /* 1 .. 3600 */
};

struct cli_api;

/* 0 and *out (free with cli_api_free), or a negative errno with a message that says which
 * credentials were looked for, or what is wrong with --server. */
int cli_api_open(const struct cli_api_options *options, struct cli_api **out, struct vg_err *err);
/* The source over api (valid while api is): GETs, and the context's namespace. */
struct cli_source cli_api_source(struct cli_api *api);
void cli_api_free(struct cli_api *api);

#endif
