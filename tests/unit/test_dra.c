/* DRA plugin library: quantities, the claim decoder, the checkpoint round trip and
 * reader, and a claim prepared and unprepared on a temporary node. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/str.h"
#include "dra/dra.h"
#define DP_GOLDEN_DIR "" /* dp_test.h: no golden files here */
#include "dp_test.h"

#define UID   "11111111-1111-4111-8111-111111111111"
#define UID2  "22222222-2222-4222-8222-222222222222"
#define UID3  "33333333-3333-4333-8333-333333333333"
#define SHARE "33333333-3333-4333-8333-333333333333"

static void test_bytes_mib(void **state)
{
    (void)state;
    struct vg_err err = {0};
    uint64_t mib;
    assert_int_equal(dra_parse_bytes_mib("10Gi", &mib, &err), 0);
    assert_int_equal(mib, 10240);
    assert_int_equal(dra_parse_bytes_mib("10737418240", &mib, &err), 0);
    assert_int_equal(mib, 10240);
    assert_int_equal(dra_parse_bytes_mib("1", &mib, &err), 0);
    assert_int_equal(mib, 1); /* rounded up */
    assert_int_equal(dra_parse_bytes_mib("4G", &mib, &err), 0);
    assert_int_equal(mib, 3815);
    assert_int_equal(dra_parse_bytes_mib("0", &mib, &err), 0);
    assert_int_equal(mib, 0);
    const char *bad[] = {"",      "10GiB", "-1",   "1.5Gi",
                         "10 Gi", "Gi",    "20Ei", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_true(dra_parse_bytes_mib(bad[i], &mib, &err) < 0);
}

static const char *claim_json(const char *results)
{
    static char buf[8192];
    vg_snprintf(buf, sizeof buf,
                "{\"metadata\":{\"namespace\":\"default\",\"name\":\"c1\",\"uid\":\"" UID "\"},"
                "\"status\":{\"allocation\":{\"devices\":{\"results\":[%s]}}}}",
                results);
    return buf;
}

static void test_claim_decode(void **state)
{
    (void)state;
    struct dra_claim c;
    struct vg_err err = {0};
    const char *text = claim_json(
        "{\"request\":\"gpu\",\"driver\":\"gpu.vgpu.io\",\"pool\":\"node-1\",\"device\":\"gpu-0\","
        "\"shareID\":\"" SHARE "\",\"consumedCapacity\":{\"memory\":\"10Gi\",\"cores\":\"30\"}},"
        "{\"request\":\"x\",\"driver\":\"gpu.nvidia.com\",\"pool\":\"p\",\"device\":\"gpu-0\"},"
        "{\"request\":\"b/"
        "small\",\"driver\":\"gpu.vgpu.io\",\"pool\":\"node-1\",\"device\":\"gpu-1\"}");
    assert_int_equal(dra_claim_decode_text(text, strlen(text), "gpu.vgpu.io", &c, &err), 0);
    assert_string_equal(c.uid, UID);
    assert_int_equal(c.count, 2);
    assert_string_equal(c.results[0].share_id, SHARE);
    assert_true(c.results[0].has_memory && c.results[0].has_cores);
    assert_int_equal(c.results[0].memory_mib, 10240);
    assert_int_equal(c.results[0].cores, 30);
    assert_string_equal(c.results[1].request, "b/small");
    assert_false(c.results[1].has_memory);

    text = "{\"metadata\":{\"namespace\":\"default\",\"name\":\"c1\",\"uid\":\"" UID "\"}}";
    assert_int_equal(dra_claim_decode_text(text, strlen(text), "gpu.vgpu.io", &c, &err), -ENODATA);
    assert_non_null(strstr(err.msg, "not allocated"));
    const char *bad[] = {
        "{\"request\":\"..\",\"driver\":\"gpu.vgpu.io\",\"pool\":\"n\",\"device\":\"gpu-0\"}",
        "{\"request\":\"gpu\",\"driver\":\"gpu.vgpu.io\",\"pool\":\"n\",\"device\":\"../x\"}",
        "{\"request\":\"gpu\",\"driver\":\"gpu.vgpu.io\",\"pool\":\"N\",\"device\":\"gpu-0\"}",
        "{\"request\":\"gpu\",\"driver\":\"gpu.vgpu.io\",\"pool\":\"n\",\"device\":\"gpu-0\","
        "\"consumedCapacity\":{\"cores\":\"101\"}}",
        "{\"request\":\"gpu\",\"pool\":\"n\",\"device\":\"gpu-0\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        text = claim_json(bad[i]);
        assert_true(dra_claim_decode_text(text, strlen(text), "gpu.vgpu.io", &c, &err) < 0);
        assert_non_null(strstr(err.msg, "results[0]"));
    }
}

/* Claim configuration: another driver's opaque parameters are skipped, ours refused
 * (vgpu takes none), a malformed list refused naming the field. */
static void test_claim_config(void **state)
{
    (void)state;
    static const struct {
        const char *config;
        int rc;
        const char *msg;
    } cases[] = {
        {"[{\"source\":\"FromClass\",\"opaque\":{\"driver\":\"gpu.nvidia.com\","
         "\"parameters\":{}}}]",
         0, NULL},
        {"[{\"source\":\"FromClaim\",\"requests\":[\"gpu\"]}]", 0, NULL},
        {"[{\"source\":\"FromClaim\",\"opaque\":{\"driver\":\"gpu.vgpu.io\","
         "\"parameters\":{\"computeMode\":\"hard\"}}}]",
         -EINVAL, "config[0]: opaque parameters for gpu.vgpu.io are not supported"},
        {"[{\"opaque\":{\"parameters\":{}}}]", -EINVAL, "config[0].opaque.driver missing"},
        {"[7]", -EINVAL, "config[0] is not an object"},
        {"{}", -EINVAL, "config is not a list"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[2048];
        vg_snprintf(text, sizeof text,
                    "{\"metadata\":{\"namespace\":\"default\",\"name\":\"c1\",\"uid\":\"" UID
                    "\"},\"status\":{\"allocation\":{\"devices\":{\"results\":[{\"request\":"
                    "\"gpu\",\"driver\":\"gpu.vgpu.io\",\"pool\":\"node-1\",\"device\":"
                    "\"gpu-0\"}],\"config\":%s}}}}",
                    cases[i].config);
        struct dra_claim c;
        struct vg_err err = {0};
        assert_int_equal(dra_claim_decode_text(text, strlen(text), "gpu.vgpu.io", &c, &err),
                         cases[i].rc);
        if (cases[i].msg)
            assert_non_null(strstr(err.msg, cases[i].msg));
    }
}

static void test_checkpoint_roundtrip(void **state)
{
    (void)state;
    struct dra_checkpoint cp = {0};
    vg_strlcpy(cp.boot_id, "boot", sizeof cp.boot_id);
    struct dra_prepared p;
    memset(&p, 0, sizeof p);
    vg_strlcpy(p.uid, UID, sizeof p.uid);
    vg_strlcpy(p.ns, "default", sizeof p.ns);
    vg_strlcpy(p.name, "c1", sizeof p.name);
    p.group_count = 1;
    vg_strlcpy(p.groups[0].name, "gpu", sizeof p.groups[0].name);
    vg_strlcpy(p.groups[0].container.name, "gpu", sizeof p.groups[0].container.name);
    p.groups[0].container.gpu_count = 1;
    vg_strlcpy(p.groups[0].container.gpus[0].uuid, UUID_A, ANNOT_UUID_MAX);
    p.groups[0].container.gpus[0].memory_mib = 10240;
    p.groups[0].container.gpus[0].cores = 30;
    p.device_count = 1;
    vg_strlcpy(p.devices[0].request, "gpu", sizeof p.devices[0].request);
    vg_strlcpy(p.devices[0].pool, "node-1", sizeof p.devices[0].pool);
    vg_strlcpy(p.devices[0].device, "gpu-0", sizeof p.devices[0].device);
    vg_strlcpy(p.devices[0].cdi_id, "vgpu.io/gpu=" UID "_gpu", sizeof p.devices[0].cdi_id);
    dra_checkpoint_put(&cp, &p);
    char *text = dra_checkpoint_encode(&cp);
    assert_non_null(text);
    struct dra_checkpoint back;
    struct vg_err err = {0};
    assert_int_equal(dra_checkpoint_decode(text, strlen(text), &back, &err), 0);
    assert_string_equal(back.boot_id, "boot");
    assert_int_equal(back.count, 1);
    assert_int_equal(back.claims[0]->groups[0].container.gpus[0].memory_mib, 10240);
    assert_string_equal(back.claims[0]->devices[0].cdi_id, "vgpu.io/gpu=" UID "_gpu");
    dra_checkpoint_remove(&back, UID);
    assert_int_equal(back.count, 0);
    dra_checkpoint_release(&back);
    free(text);
    /* Each claim's text is kept between saves; a claim put again is encoded anew, a
     * removed one is gone from the next text. */
    p.groups[0].container.gpus[0].memory_mib = 2048;
    dra_checkpoint_put(&cp, &p);
    text = dra_checkpoint_encode(&cp);
    assert_non_null(strstr(text, "\"memoryMiB\":2048"));
    assert_null(strstr(text, "10240"));
    free(text);
    struct dra_prepared q = p;
    vg_strlcpy(q.uid, UID2, sizeof q.uid);
    dra_checkpoint_put(&cp, &q);
    free(dra_checkpoint_encode(&cp));
    dra_checkpoint_remove(&cp, UID);
    text = dra_checkpoint_encode(&cp);
    assert_int_equal(dra_checkpoint_decode(text, strlen(text), &back, &err), 0);
    assert_int_equal(back.count, 1);
    assert_string_equal(back.claims[0]->uid, UID2);
    dra_checkpoint_release(&back);
    dra_checkpoint_release(&cp);
    free(text);
    const char *bad = "{\"version\":1,\"bootID\":\"b\",\"claims\":[{\"uid\":\"../x\"}]}";
    assert_int_equal(dra_checkpoint_decode(bad, strlen(bad), &back, &err), -EINVAL);
    assert_null(back.claims);
}

/* A checkpoint on disk: 40 claims (past the first growth of its arrays) come back in
 * order; no file is an empty checkpoint; a symbolic link and a file past the ceiling are
 * refused with the path named. */
static void test_checkpoint_file(void **state)
{
    (void)state;
    char tmp[] = "/tmp/vgpu-dra-cp-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char path[128], link[128];
    snprintf(path, sizeof path, "%s/checkpoint.json", tmp);
    snprintf(link, sizeof link, "%s/link.json", tmp);
    struct dra_checkpoint cp = {0}, back;
    struct vg_err err = {0};
    assert_int_equal(dra_checkpoint_load(path, &back, &err), 0);
    assert_int_equal(back.count, 0);
    vg_strlcpy(cp.boot_id, "boot", sizeof cp.boot_id);
    enum { N = 40 };
    for (int i = 0; i < N; i++) {
        struct dra_prepared p;
        memset(&p, 0, sizeof p);
        snprintf(p.uid, sizeof p.uid, "11111111-1111-4111-8111-%012d", i);
        vg_strlcpy(p.ns, "default", sizeof p.ns);
        snprintf(p.name, sizeof p.name, "c%d", i);
        dra_checkpoint_put(&cp, &p);
    }
    assert_int_equal(cp.count, N);
    assert_true(cp.cap >= N);
    assert_int_equal(dra_checkpoint_save(path, &cp, &err), 0);
    assert_int_equal(dra_checkpoint_load(path, &back, &err), 0);
    assert_int_equal(back.count, N);
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "c%d", i);
        assert_string_equal(back.claims[i]->name, name);
        assert_non_null(dra_checkpoint_find(&back, cp.claims[i]->uid));
    }
    dra_checkpoint_release(&back);
    dra_checkpoint_release(&cp);

    assert_int_equal(symlink(path, link), 0);
    assert_true(dra_checkpoint_load(link, &back, &err) < 0); /* O_NOFOLLOW kept */
    assert_non_null(strstr(err.msg, link));
    assert_int_equal(truncate(path, (off_t)DRA_CHECKPOINT_MAX_BYTES + 1), 0);
    assert_int_equal(dra_checkpoint_load(path, &back, &err), -EFBIG);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "larger than"));
    assert_null(back.claims);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    assert_int_equal(system(cmd), 0);
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void test_prepare_unprepare(void **state)
{
    (void)state;
    char tmp[] = "/tmp/vgpu-dra-unit-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char region[256], board[256], cdi[256], yaml[1024];
    vg_snprintf(region, sizeof region, "%s/claims", tmp);
    vg_snprintf(board, sizeof board, "%s/board", tmp);
    vg_snprintf(cdi, sizeof cdi, "%s/cdi", tmp);
    vg_snprintf(yaml, sizeof yaml, "version: v1\nvgpu:\n  regionDir: %s\n  computeBoardDir: %s\n",
                region, board);
    struct dpconfig cfg;
    load(&cfg, yaml);
    struct dp_gpu g[2];
    two_gpus(g);
    struct dra_node node = {
        .cfg = &cfg, .gpus = g, .gpu_count = 2, .node_name = "node-1", .cdi_dir = cdi};
    assert_int_equal(mkdir(cdi, 0755), 0);
    const char *text = claim_json(
        "{\"request\":\"gpu\",\"driver\":\"gpu.vgpu.io\",\"pool\":\"node-1\",\"device\":\"gpu-1\","
        "\"consumedCapacity\":{\"memory\":\"10Gi\",\"cores\":\"30\"}}");
    struct dra_claim c;
    struct dra_prepared p;
    struct vg_err err = {0};
    assert_int_equal(dra_claim_decode_text(text, strlen(text), "gpu.vgpu.io", &c, &err), 0);
    assert_int_equal(dra_prepare(&node, &c, &p, &err), 0);
    assert_int_equal(p.group_count, 1);
    assert_string_equal(p.groups[0].container.gpus[0].uuid, UUID_B);
    assert_string_equal(p.devices[0].cdi_id, "vgpu.io/gpu=" UID "_gpu");
    assert_int_equal(count_entries(region), 1);
    assert_int_equal(count_entries(cdi), 1);
    char slotdir[512];
    vg_snprintf(slotdir, sizeof slotdir, "%s/%s", board, UUID_B);
    assert_int_equal(count_entries(slotdir), 1);
    /* Prepared again (a crash before the checkpoint): replaced, not doubled. */
    assert_int_equal(dra_prepare(&node, &c, &p, &err), 0);
    assert_int_equal(count_entries(region), 1);
    assert_int_equal(count_entries(slotdir), 1);
    assert_int_equal(dra_unprepare(&node, UID, &p, &err), 0);
    assert_int_equal(count_entries(region), 0);
    assert_int_equal(count_entries(cdi), 0);
    assert_int_equal(count_entries(slotdir), 0);

    /* Files a killed plugin left for a claim it never checkpointed (a staged directory,
     * a claim directory, a CDI spec and its .tmp, a slot) go; a checkpointed claim's
     * files and other files of the CDI directory stay. */
    assert_int_equal(dra_prepare(&node, &c, &p, &err), 0);
    struct dra_checkpoint cp = {0};
    dra_checkpoint_put(&cp, &p);
    char path[700];
    const char *made[] = {"claims/" UID2 "_gpu", "claims/.new." UID2 "_gpu"};
    for (size_t i = 0; i < 2; i++) {
        vg_snprintf(path, sizeof path, "%s/%s", tmp, made[i]);
        assert_int_equal(mkdir(path, 0755), 0);
    }
    const char *files[] = {"cdi/vgpu.io-gpu_" UID2 ".json", "cdi/vgpu.io-gpu_" UID2 ".json.tmp",
                           "cdi/nvidia.com-gpu.json", "board/" UUID_B "/" UID2 "_gpu.30.slot"};
    for (size_t i = 0; i < 4; i++) {
        vg_snprintf(path, sizeof path, "%s/%s", tmp, files[i]);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fclose(f);
    }
    /* One that cannot be removed (a directory holding a file of someone else's) is
     * reported and does not keep the others. */
    vg_snprintf(path, sizeof path, "%s/claims/%s_stuck", tmp, UID3);
    assert_int_equal(mkdir(path, 0755), 0);
    vg_snprintf(path, sizeof path, "%s/claims/%s_stuck/other", tmp, UID3);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    unsigned removed = 0;
    assert_int_equal(dra_sweep_orphans(&node, &cp, &removed, &err), -ENOTEMPTY);
    assert_non_null(strstr(err.msg, "_stuck"));
    assert_int_equal(removed, 4);
    assert_int_equal(unlink(path), 0);
    vg_snprintf(path, sizeof path, "%s/claims/%s_stuck", tmp, UID3);
    assert_int_equal(rmdir(path), 0);
    assert_int_equal(count_entries(region), 1); /* the checkpointed claim's */
    assert_int_equal(count_entries(cdi), 2);    /* its spec and nvidia.com-gpu.json */
    assert_int_equal(count_entries(slotdir), 1);
    assert_int_equal(dra_unprepare(&node, UID, &p, &err), 0);
    dra_checkpoint_release(&cp);
    vg_snprintf(path, sizeof path, "%s/cdi/nvidia.com-gpu.json", tmp);
    assert_int_equal(unlink(path), 0);

    /* A device of another node: an error, nothing made. */
    text = claim_json("{\"request\":\"gpu\",\"driver\":\"gpu.vgpu.io\",\"pool\":\"node-2\","
                      "\"device\":\"gpu-1\"}");
    assert_int_equal(dra_claim_decode_text(text, strlen(text), "gpu.vgpu.io", &c, &err), 0);
    assert_int_equal(dra_prepare(&node, &c, &p, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "node-2"));
    assert_int_equal(count_entries(region), 0);
    assert_int_equal(count_entries(cdi), 0);
    dpconfig_free(&cfg);
    char cmd[512];
    vg_snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    assert_int_equal(system(cmd), 0);
}

/* Devices are found by the names the slices publish: gpu-<minor> (not the NVML index),
 * and a MIG device gpu-<minor>-mig-<gi>-<ci>, prepared whole: the MIG device's memory in
 * the record, no claim directory, its UUID visible and its capability devices in the CDI
 * spec. */
static void test_prepare_names_and_mig(void **state)
{
    (void)state;
    char tmp[] = "/tmp/vgpu-dra-unit-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char region[256], board[256], cdi[256], yaml[1024];
    vg_snprintf(region, sizeof region, "%s/claims", tmp);
    vg_snprintf(board, sizeof board, "%s/board", tmp);
    vg_snprintf(cdi, sizeof cdi, "%s/cdi", tmp);
    vg_snprintf(yaml, sizeof yaml, "version: v1\nvgpu:\n  regionDir: %s\n  computeBoardDir: %s\n",
                region, board);
    struct dpconfig cfg;
    load(&cfg, yaml);
    struct dp_gpu g[2];
    two_gpus(g);
    g[1].minor = 5; /* NVML index 1, /dev/nvidia5 */
    g[0].mig_enabled = true;
    g[0].mig_count = 1;
    vg_strlcpy(g[0].migs[0].uuid, "MIG-11111111-2222-3333-4444-555555555555", ANNOT_UUID_MAX);
    g[0].migs[0].gi = 1;
    g[0].migs[0].ci = 0;
    g[0].migs[0].gi_cap = 12;
    g[0].migs[0].ci_cap = 13;
    g[0].migs[0].memory_mib = 9984;
    struct dra_node node = {
        .cfg = &cfg, .gpus = g, .gpu_count = 2, .node_name = "node-1", .cdi_dir = cdi};
    struct dra_claim c;
    struct dra_prepared p;
    struct vg_err err = {0};
    const char *names[] = {"gpu-1", "gpu-0"}; /* an index, not a minor; a MIG-enabled GPU */
    for (size_t i = 0; i < 2; i++) {
        char r[256];
        vg_snprintf(r, sizeof r,
                    "{\"request\":\"gpu\",\"driver\":\"gpu.vgpu.io\",\"pool\":\"node-1\","
                    "\"device\":\"%s\"}",
                    names[i]);
        const char *text = claim_json(r);
        assert_int_equal(dra_claim_decode_text(text, strlen(text), "gpu.vgpu.io", &c, &err), 0);
        assert_int_equal(dra_prepare(&node, &c, &p, &err), -ENOENT);
        assert_non_null(strstr(err.msg, "this node has no device"));
    }
    const char *text = claim_json(
        "{\"request\":\"gpu\",\"driver\":\"gpu.vgpu.io\",\"pool\":\"node-1\",\"device\":\"gpu-5\"},"
        "{\"request\":\"mig\",\"driver\":\"gpu.vgpu.io\",\"pool\":\"node-1\","
        "\"device\":\"gpu-0-mig-1-0\"}");
    assert_int_equal(dra_claim_decode_text(text, strlen(text), "gpu.vgpu.io", &c, &err), 0);
    assert_int_equal(dra_prepare(&node, &c, &p, &err), 0);
    assert_int_equal(p.group_count, 2);
    assert_string_equal(p.groups[0].container.gpus[0].uuid, UUID_B);
    assert_string_equal(p.groups[1].container.gpus[0].uuid, g[0].migs[0].uuid);
    assert_int_equal(p.groups[1].container.gpus[0].memory_mib, 9984);
    assert_string_equal(p.devices[1].cdi_id, "vgpu.io/gpu=" UID "_mig");
    assert_int_equal(count_entries(region), 1); /* the GPU request's only */
    char path[512];
    vg_snprintf(path, sizeof path, "%s/vgpu.io-gpu_%s.json", cdi, UID);
    json_error_t jerr;
    json_t *spec = json_load_file(path, 0, &jerr);
    assert_non_null(spec);
    json_t *dev = json_array_get(json_object_get(spec, "devices"), 1);
    assert_string_equal(json_string_value(json_object_get(dev, "name")), UID "_mig");
    char *edits = json_dumps(json_object_get(dev, "containerEdits"), JSON_COMPACT);
    assert_non_null(
        strstr(edits, "NVIDIA_VISIBLE_DEVICES=MIG-11111111-2222-3333-4444-555555555555"));
    assert_non_null(strstr(edits, "/dev/nvidia-caps/nvidia-cap12"));
    assert_non_null(strstr(edits, "/dev/nvidia-caps/nvidia-cap13"));
    assert_non_null(strstr(edits, "\"/dev/nvidia0\""));
    assert_null(strstr(edits, "libvgpu"));
    free(edits);
    dev = json_array_get(json_object_get(spec, "devices"), 0);
    edits = json_dumps(json_object_get(dev, "containerEdits"), JSON_COMPACT);
    assert_non_null(strstr(edits, "\"/dev/nvidia5\""));
    free(edits);
    json_decref(spec);
    assert_int_equal(dra_unprepare(&node, UID, &p, &err), 0);
    assert_int_equal(count_entries(region), 0);
    assert_int_equal(count_entries(cdi), 0);

    /* A MIG device and a whole GPU in one request: refused, nothing made. */
    text = claim_json(
        "{\"request\":\"gpu\",\"driver\":\"gpu.vgpu.io\",\"pool\":\"node-1\",\"device\":\"gpu-5\"},"
        "{\"request\":\"gpu\",\"driver\":\"gpu.vgpu.io\",\"pool\":\"node-1\","
        "\"device\":\"gpu-0-mig-1-0\"}");
    assert_int_equal(dra_claim_decode_text(text, strlen(text), "gpu.vgpu.io", &c, &err), 0);
    assert_int_equal(dra_prepare(&node, &c, &p, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "MIG devices and whole GPUs in one request"));
    assert_int_equal(count_entries(region), 0);
    assert_int_equal(count_entries(cdi), 0);
    dpconfig_free(&cfg);
    char cmd[512];
    vg_snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_mib),
        cmocka_unit_test(test_claim_decode),
        cmocka_unit_test(test_claim_config),
        cmocka_unit_test(test_checkpoint_roundtrip),
        cmocka_unit_test(test_checkpoint_file),
        cmocka_unit_test(test_prepare_unprepare),
        cmocka_unit_test(test_prepare_names_and_mig),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
