/* What the device plugin's unit tests share: two H100s, a config loaded from YAML text,
 * and golden Allocate responses (tests/data/deviceplugin/, VGPU_UPDATE_GOLDEN=1 rewrites
 * them). Include after <cmocka.h>. */
#ifndef VGPU_TESTS_DP_TEST_H
#define VGPU_TESTS_DP_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/str.h"
#include "deviceplugin/deviceplugin.h"

#define UUID_A "GPU-11111111-2222-3333-4444-555555555555"
#define UUID_B "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"

/* GPU 0 (UUID_A, NUMA 0) and GPU 1 (UUID_B, NUMA 1), H100s of 81,559 MiB, healthy. */
static inline void two_gpus(struct dp_gpu g[2])
{
    memset(g, 0, 2 * sizeof(*g));
    for (unsigned i = 0; i < 2; i++) {
        vg_strlcpy(g[i].uuid, i ? UUID_B : UUID_A, sizeof(g[i].uuid));
        vg_strlcpy(g[i].model, "NVIDIA H100 80GB HBM3", sizeof(g[i].model));
        g[i].index = i;
        g[i].minor = i;
        g[i].memory_mib = 81559;
        g[i].numa = (int)i;
        g[i].healthy = true;
    }
}

static inline void load(struct dpconfig *cfg, const char *yaml)
{
    struct vg_err err = {0};
    dpconfig_defaults(cfg);
    int rc = dpconfig_load_buffer("test.yaml", yaml, strlen(yaml), cfg, &err);
    if (rc != 0)
        fail_msg("config: %s", err.msg);
}

static inline void golden(const char *name, const struct dp_response *resp)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    dp_response_dump(resp, mem);
    fclose(mem);
    char path[512];
    snprintf(path, sizeof(path), "%s/%s.golden", DP_GOLDEN_DIR, name);
    if (getenv("VGPU_UPDATE_GOLDEN")) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fwrite(text, 1, len, f);
        fclose(f);
    }
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("missing golden file %s", path);
    char want[16384];
    size_t n = fread(want, 1, sizeof(want) - 1, f);
    fclose(f);
    want[n] = '\0';
    if (strcmp(want, text) != 0)
        fail_msg("%s differs:\n--- want\n%s--- got\n%s", path, want, text);
    free(text);
}

#endif
