/* Fuzz target for the kubeconfig loader: any text either loads into a config with a
 * usable server URL or fails with a message naming the source. No crash or leak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kube.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kube_config *config = NULL;
    struct vg_err err;
    /* base_dir "/nonexistent" keeps relative file names from reaching real files. */
    int rc = kube_config_load_text((const char *)data, size, "fuzz", "/nonexistent", NULL, &config,
                                   &err);
    vg_fuzz_report(rc == 0);
    if (rc == 0) {
        if (config == NULL || config->server == NULL ||
            (strncmp(config->server, "http://", 7) != 0 &&
             strncmp(config->server, "https://", 8) != 0))
            abort();
        if ((config->client_cert_file || config->client_cert_data) !=
            (config->client_key_file || config->client_key_data))
            abort();
        kube_config_free(config);
    } else if (rc != err.code || config != NULL || strncmp(err.msg, "kubeconfig fuzz", 15) != 0) {
        abort();
    }
    return 0;
}
