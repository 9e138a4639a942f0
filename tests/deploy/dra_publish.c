/* dra_publish: the DRA driver's ResourceSlice publication (src/dra/slices.c) run once
 * under a given identity, for the deploy tests' RBAC check of vgpu-dra-plugin's role.
 *
 *   dra_publish --kubeconfig FILE --node-name NAME [--max-devices N] [--timeout-ms MS]
 *
 * Finds the GPUs through NVML (fakegpu in tests), reads the Node for its uid (the
 * slices' ownerReference), builds the node's slices (at most N devices each) and
 * publishes them, exactly the calls the driver makes. Exit 0 once the API server holds
 * the slices; 1 with the error (a refused request names the verb and resource) when the
 * Node cannot be read or no sync completes in time; 2 for bad arguments. */
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/parse.h"
#include "base/str.h"
#include "deviceplugin/deviceplugin.h"
#include "dpconfig/dpconfig.h"
#include "dra/slices.h"
#include "kube/kube.h"

struct run {
    struct event_base *base;
    char node_uid[128];
    char error[512];
    bool node_read, synced;
};

static void on_node(void *arg, long status, json_t *body, const struct vg_err *err)
{
    struct run *r = arg;
    const char *uid = json_string_value(json_object_get(json_object_get(body, "metadata"), "uid"));
    if (status != 200 || uid == NULL)
        vg_snprintf(r->error, sizeof r->error, "reading the Node: %s",
                    err && err->msg[0] ? err->msg : "no uid");
    else {
        (void)vg_strlcpy(r->node_uid, uid, sizeof r->node_uid);
        r->node_read = true;
    }
    event_base_loopbreak(r->base);
}

static void on_synced(void *arg)
{
    struct run *r = arg;
    r->synced = true;
    event_base_loopbreak(r->base);
}

static int usage(const char *msg)
{
    fprintf(stderr,
            "dra_publish: %s\nusage: dra_publish --kubeconfig FILE --node-name NAME "
            "[--max-devices N] [--timeout-ms MS]\n",
            msg);
    return 2;
}

int main(int argc, char **argv)
{
    const char *kubeconfig = NULL, *node = NULL;
    uint64_t max_devices = 0, timeout_ms = 10000;
    struct vg_err err = {0};
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            return usage("every flag needs a value");
        const char *v = argv[++i];
        if (strcmp(argv[i - 1], "--kubeconfig") == 0)
            kubeconfig = v;
        else if (strcmp(argv[i - 1], "--node-name") == 0)
            node = v;
        else if (strcmp(argv[i - 1], "--max-devices") == 0) {
            if (vg_parse_u64(v, 1, DRA_SLICE_MAX_DEVICES, &max_devices, &err) < 0)
                return usage(err.msg);
        } else if (strcmp(argv[i - 1], "--timeout-ms") == 0) {
            if (vg_parse_u64(v, 1, 600000, &timeout_ms, &err) < 0)
                return usage(err.msg);
        } else
            return usage("unknown flag");
    }
    if (kubeconfig == NULL || node == NULL)
        return usage("--kubeconfig and --node-name are required");

    struct dpconfig cfg;
    dpconfig_defaults(&cfg);
    char library[1024];
    dp_nvml_library(&cfg, library, sizeof library);
    struct dp_nvml *nvml = NULL;
    static struct dp_gpu gpus[DP_MAX_GPUS];
    unsigned gpu_count = 0;
    if (dp_nvml_open(library, &nvml, &err) < 0) {
        fprintf(stderr, "dra_publish: %s\n", err.msg);
        return 1;
    }
    struct dp_gpu_source source = dp_nvml_source(nvml);
    if (source.discover(source.arg, gpus, &gpu_count, &err) < 0) {
        fprintf(stderr, "dra_publish: %s\n", err.msg);
        return 1;
    }

    struct run r = {.base = event_base_new()};
    struct kube_config *kcfg = NULL;
    struct kube_client *kube = NULL;
    if (kube_config_load_file(kubeconfig, NULL, &kcfg, &err) < 0 ||
        kube_client_new(r.base, kcfg, NULL, &kube, &err) < 0) {
        fprintf(stderr, "dra_publish: %s\n", err.msg);
        return 1;
    }
    char path[512];
    vg_snprintf(path, sizeof path, "/api/v1/nodes/%s", node);
    int status = 1;
    struct dra_publisher *pub = NULL;
    json_t *slices = NULL;
    if (kube_get(kube, path, on_node, &r, &err) < 0) {
        fprintf(stderr, "dra_publish: %s\n", err.msg);
        goto out;
    }
    event_base_dispatch(r.base);
    if (!r.node_read) {
        fprintf(stderr, "dra_publish: %s\n", r.error);
        goto out;
    }
    struct dra_slice_options opt = {
        .node_name = node, .node_uid = r.node_uid, .max_devices = (unsigned)max_devices};
    if (dra_slices_build(&opt, gpus, gpu_count, &slices, &err) < 0 ||
        dra_publisher_new(r.base, kube, NULL, node, on_synced, &r, &pub, &err) < 0 ||
        dra_publisher_set(pub, slices, &err) < 0) {
        fprintf(stderr, "dra_publish: %s\n", err.msg);
        goto out;
    }
    struct timeval tv = {(time_t)(timeout_ms / 1000), (suseconds_t)(timeout_ms % 1000) * 1000};
    event_base_loopexit(r.base, &tv);
    event_base_dispatch(r.base);
    struct dra_publisher_stats st;
    dra_publisher_get_stats(pub, &st);
    if (r.synced) {
        printf("published generation=%lld writes=%llu\n", (long long)dra_publisher_generation(pub),
               (unsigned long long)st.writes);
        status = 0;
    } else
        fprintf(stderr, "dra_publish: no sync in %llu ms (%llu failed requests, %llu writes)\n",
                (unsigned long long)timeout_ms, (unsigned long long)st.failures,
                (unsigned long long)st.writes);
out:
    json_decref(slices);
    dra_publisher_free(pub);
    kube_client_free(kube);
    kube_config_free(kcfg);
    dp_nvml_free(nvml);
    dpconfig_free(&cfg);
    event_base_free(r.base);
    return status;
}
