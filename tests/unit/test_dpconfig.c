/* Unit tests for src/dpconfig: the device plugin's configuration file.
 *
 * Golden fixtures (tests/data/dpconfig/, the ConfigMaps of NVIDIA's docs in the shapes
 * users copy) decode to the committed .expected dumps; every malformed form is refused
 * with file, line and key; the command line beats the environment, which beats the
 * file. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "dpconfig/dpconfig.h"

static const char *data_dir(void)
{
    const char *d = getenv("DPCONFIG_DATA");
    return d != NULL ? d : "tests/data/dpconfig";
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    char *buf = malloc(1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static char *dump(const struct dpconfig *cfg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    dpconfig_dump(cfg, f);
    fclose(f);
    return text;
}

/* ---- golden fixtures ---- */

static const char *const fixtures[][2] = {
    {"ts-operator.yaml", "ts-operator.expected"},
    {"ts-rename.yaml", "ts-rename.expected"},
    {"ts-mig-mixed.yaml", "ts-mig-mixed.expected"},
    {"mps.yaml", "mps.expected"},
    {"flags-full.yaml", "flags-full.expected"},
    {"config.json", "config.expected"},
    {"short-names.yaml", "short-names.expected"},
    {"vgpu.yaml", "vgpu.expected"},
    {"empty.yaml", "empty.expected"},
    {"resources-patterns.yaml", "resources-patterns.expected"},
};

static void test_golden(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) {
        char path[512], expected_path[512];
        snprintf(path, sizeof path, "%s/%s", data_dir(), fixtures[i][0]);
        snprintf(expected_path, sizeof expected_path, "%s/%s", data_dir(), fixtures[i][1]);
        struct dpconfig cfg;
        struct vg_err err = {0};
        dpconfig_defaults(&cfg);
        if (dpconfig_load_file(path, &cfg, &err) != 0)
            fail_msg("%s: %s", fixtures[i][0], err.msg);
        char *got = dump(&cfg);
        char *want = read_all(expected_path);
        if (want == NULL)
            fail_msg("missing %s", expected_path);
        if (strcmp(got, want) != 0)
            fail_msg("%s decodes differently from %s:\n%s", fixtures[i][0], fixtures[i][1], got);
        free(got);
        free(want);
        dpconfig_free(&cfg);
    }
}

static void test_fixture_facts(void **state)
{
    /* The facts a user relies on, spelled out beside the golden dumps. */
    (void)state;
    char path[512];
    struct dpconfig cfg;
    struct vg_err err = {0};
    dpconfig_defaults(&cfg);

    snprintf(path, sizeof path, "%s/ts-operator.yaml", data_dir());
    assert_int_equal(dpconfig_load_file(path, &cfg, &err), 0);
    assert_int_equal(cfg.sharing_strategy, DPCONFIG_SHARING_TIME_SLICING);
    assert_int_equal(cfg.sharing.time_slicing.resources.count, 1);
    assert_string_equal(cfg.sharing.time_slicing.resources.items[0].name, "nvidia.com/gpu");
    assert_true(cfg.sharing.time_slicing.resources.items[0].replicas == 4);
    assert_int_equal(cfg.sharing.time_slicing.resources.items[0].line, 9);

    snprintf(path, sizeof path, "%s/ts-rename.yaml", data_dir());
    assert_int_equal(dpconfig_load_file(path, &cfg, &err), 0);
    assert_string_equal(cfg.sharing.time_slicing.resources.items[0].rename,
                        "nvidia.com/gpu.shared");
    assert_true(cfg.sharing.time_slicing.fail_requests_greater_than_one);

    snprintf(path, sizeof path, "%s/mps.yaml", data_dir());
    assert_int_equal(dpconfig_load_file(path, &cfg, &err), 0);
    assert_int_equal(cfg.sharing_strategy, DPCONFIG_SHARING_MPS);
    assert_true(cfg.sharing.mps.fail_requests_greater_than_one); /* MPS default */
    assert_string_equal(cfg.flags.mps_root, "/run/nvidia/mps");

    snprintf(path, sizeof path, "%s/ts-mig-mixed.yaml", data_dir());
    assert_int_equal(dpconfig_load_file(path, &cfg, &err), 0);
    assert_int_equal(cfg.flags.mig_strategy, DPCONFIG_MIG_MIXED);
    assert_int_equal(cfg.sharing.time_slicing.resources.count, 5);
    assert_string_equal(cfg.sharing.time_slicing.resources.items[4].name, "nvidia.com/mig-7g.40gb");

    snprintf(path, sizeof path, "%s/config.json", data_dir());
    assert_int_equal(dpconfig_load_file(path, &cfg, &err), 0);
    assert_int_equal(cfg.flags.plugin.device_list_strategy,
                     DPCONFIG_LIST_VOLUME_MOUNTS | DPCONFIG_LIST_CDI_ANNOTATIONS);
    assert_int_equal(cfg.flags.plugin.device_id_strategy, DPCONFIG_DEVICE_ID_INDEX);
    assert_int_equal(cfg.sharing.time_slicing.resources.items[0].devices.kind,
                     DPCONFIG_DEVICES_COUNT);

    snprintf(path, sizeof path, "%s/vgpu.yaml", data_dir());
    assert_int_equal(dpconfig_load_file(path, &cfg, &err), 0);
    assert_true(cfg.vgpu.device_split_count == 4);
    assert_true(cfg.vgpu.device_memory_scaling > 1.49 && cfg.vgpu.device_memory_scaling < 1.51);
    assert_true(cfg.vgpu.default_cores == 25);
    assert_true(cfg.vgpu.default_memory_mib == 0);
    assert_string_equal(cfg.vgpu.region_dir, "/opt/vgpu/containers");
    assert_int_equal(cfg.sharing_strategy, DPCONFIG_SHARING_NONE);
    dpconfig_free(&cfg);
}

static void test_defaults(void **state)
{
    (void)state;
    struct dpconfig cfg, loaded;
    struct vg_err err = {0};
    dpconfig_defaults(&cfg);
    assert_string_equal(cfg.version, "v1");
    assert_int_equal(cfg.flags.mig_strategy, DPCONFIG_MIG_NONE);
    assert_true(cfg.flags.fail_on_init_error);
    assert_int_equal(cfg.flags.plugin.device_list_strategy, DPCONFIG_LIST_ENVVAR);
    assert_string_equal(cfg.flags.nvidia_driver_root, "/");
    assert_null(cfg.flags.nvidia_dev_root);
    assert_true(cfg.flags.gfd.sleep_interval_ns == 60ull * 1000000000ull);
    assert_true(cfg.vgpu.device_split_count == 10);
    assert_true(cfg.vgpu.device_memory_scaling == 1.0);
    assert_true(cfg.health.critical_xids.all);
    assert_int_equal(cfg.health.ignored_xids.count, 6);
    assert_string_equal(cfg.cli.kubelet_dir, "/var/lib/kubelet/device-plugins");
    assert_null(cfg.cli.kubeconfig);
    assert_int_equal(cfg.sharing_strategy, DPCONFIG_SHARING_NONE);

    /* An empty file, a comment-only file and `version:` alone are all the defaults. */
    static const char *const empties[] = {"", "# nothing\n\n", "version:\n", "---\n", "~\n"};
    char *want = dump(&cfg);
    for (size_t i = 0; i < sizeof empties / sizeof empties[0]; i++) {
        dpconfig_defaults(&loaded);
        if (dpconfig_load_buffer("e.yaml", empties[i], strlen(empties[i]), &loaded, &err) != 0)
            fail_msg("'%s': %s", empties[i], err.msg);
        char *got = dump(&loaded);
        assert_string_equal(got, want);
        free(got);
        dpconfig_free(&loaded);
    }
    free(want);
    dpconfig_free(&cfg);
    dpconfig_free(NULL);
}

/* ---- malformed input: refused with file:line: key '...' ---- */

struct bad_case {
    const char *text;
    const char *message; /* expected start of the message after "bad.yaml" */
};

static const struct bad_case bad_cases[] = {
    {"version: v1\nflags:\n  migStrategy: maybe\n",
     ":3: key 'flags.migStrategy': 'maybe' is not one of none, single, mixed"},
    {"version: v2\n", ":1: key 'version': 'v2' is not one of v1"},
    {"flags:\n  migstrategy: none\n",
     ":2: key 'flags.migstrategy': unknown key (did you mean 'migStrategy'?)"},
    {"flags:\n  bogus: 1\n", ":2: key 'flags.bogus': unknown key"},
    {"nodeName: x\n", ":1: key 'nodeName': unknown key"}, /* command line only */
    {"flags.migStrategy: none\n", ":1: key 'flags.migStrategy': unknown key"},
    {"flags:\n  failOnInitError: \"true\"\n",
     ":2: key 'flags.failOnInitError': expected a boolean (true or false), got a quoted "
     "string 'true'"},
    {"flags:\n  failOnInitError: 1\n",
     ":2: key 'flags.failOnInitError': expected a boolean (true or false), got an integer"},
    {"sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 1\n",
     ":5: key 'sharing.timeSlicing.resources[0].replicas': '1' is not a whole number from 2 "
     "to 10000"},
    {"sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: \"4\"\n",
     ":5: key 'sharing.timeSlicing.resources[0].replicas': expected an integer, got a quoted "
     "string '4'"},
    {"sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 4.0\n",
     ":5: key 'sharing.timeSlicing.resources[0].replicas': expected an integer, got a number"},
    {"sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n",
     ":4: key 'sharing.timeSlicing.resources[0]': 'replicas' is required"},
    {"sharing:\n  mps:\n    resources:\n    - replicas: 2\n",
     ":4: key 'sharing.mps.resources[0]': 'name' is required"},
    {"sharing:\n  mps:\n    resources:\n    - replicas: 2\n      name: ~\n",
     ":4: key 'sharing.mps.resources[0]': 'name' is required"},
    {"sharing:\n  mps:\n    resources:\n    - name: gpu\n      replicas:\n",
     ":4: key 'sharing.mps.resources[0]': 'replicas' is required"},
    {"resources:\n  gpus:\n  - pattern: ~\n    name: gpu\n",
     ":3: key 'resources.gpus[0]': 'pattern' is required"},
    {"sharing:\n  timeSlicing:\n    resources:\n    - 4\n",
     ":4: key 'sharing.timeSlicing.resources[0]': expected a mapping, got a scalar"},
    {"sharing:\n  timeSlicing:\n    resources: gpu\n",
     ":3: key 'sharing.timeSlicing.resources': expected a list, got a string 'gpu'"},
    {"flags:\n  migStrategy: none\n  migStrategy: single\n",
     ":3: key 'flags.migStrategy': given twice (first on line 2)"},
    {"flags: {migStrategy: none\n", ":2:1: error: missing comma in flow mapping"},
    {"{\"version\": \"v1\",, }\n", ":1:"},
    {"flags: &a\n  migStrategy: none\nvgpu: *a\n",
     ":3: key 'vgpu': anchors and aliases are not supported"},
    {"flags:\n  migStrategy: mixed\nsharing:\n  mps:\n    resources:\n    - name: gpu\n"
     "      replicas: 2\n",
     ":4: key 'sharing.mps': MPS sharing cannot be combined with flags.migStrategy 'mixed'"},
    {"flags:\n  mpsRoot: \"\"\nsharing:\n  mps:\n    resources:\n    - name: gpu\n"
     "      replicas: 2\n",
     ":4: key 'flags.mpsRoot': must be set when sharing.mps is used"},
    {"sharing:\n  timeSlicing:\n    resources:\n    - name: Bad_Name\n      replicas: 2\n",
     ":4: key 'sharing.timeSlicing.resources[0].name': 'nvidia.com/Bad_Name' is not a valid "
     "resource name"},
    {"sharing:\n  timeSlicing:\n    resources:\n    - name: gpu.\n      replicas: 2\n",
     ":4: key 'sharing.timeSlicing.resources[0].name': 'nvidia.com/gpu.' is not a valid"},
    {"sharing:\n  timeSlicing:\n    resources:\n"
     "    - name: this-is-a-really-long-resource-name-that-goes-past-the-limit-x\n"
     "      replicas: 2\n",
     ":4: key 'sharing.timeSlicing.resources[0].name': fully-qualified resource name"},
    {"sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
     "    - name: gpu-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n"
     "      replicas: 2\n",
     ":5: key 'sharing.timeSlicing.resources[0].rename': fully-qualified resource name"},
    {"sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 2\n"
     "    - name: nvidia.com/gpu\n      replicas: 3\n",
     ":6: key 'sharing.timeSlicing.resources[1].name': 'nvidia.com/gpu' is listed twice"},
    {"sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 2\n"
     "      devices: [GPU-xyz]\n",
     ":6: key 'sharing.timeSlicing.resources[0].devices[0]': 'GPU-xyz' is not a GPU index"},
    {"sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 2\n"
     "      devices: some\n",
     ":6: key 'sharing.timeSlicing.resources[0].devices': devices set as 'some' but the only "
     "valid string is 'all'"},
    {"sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 2\n"
     "      devices: 0\n",
     ":6: key 'sharing.timeSlicing.resources[0].devices': devices set as '0' but a count"},
    {"sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 2\n"
     "      devices: []\n",
     ":6: key 'sharing.timeSlicing.resources[0].devices': an empty list of devices"},
    {"vgpu:\n  deviceSplitCount: 0\n",
     ":2: key 'vgpu.deviceSplitCount': '0' is not a whole number from 1 to 1024"},
    {"vgpu:\n  deviceSplitCount: -3\n",
     ":2: key 'vgpu.deviceSplitCount': '-3' is not a whole number from 1 to 1024"},
    {"vgpu:\n  deviceSplitCount: 99999999999999999999999\n",
     ":2: key 'vgpu.deviceSplitCount': '99999999999999999999999' is not a whole number"},
    {"vgpu:\n  defaultCores: 101\n",
     ":2: key 'vgpu.defaultCores': '101' is not a whole number from 0 to 100"},
    {"vgpu:\n  deviceMemoryScaling: lots\n",
     ":2: key 'vgpu.deviceMemoryScaling': expected a number, got a string 'lots'"},
    {"vgpu:\n  deviceMemoryScaling: 0\n",
     ":2: key 'vgpu.deviceMemoryScaling': '0' is not a number from 0.01 to 100"},
    {"vgpu:\n  deviceMemoryScaling: .inf\n",
     ":2: key 'vgpu.deviceMemoryScaling': '.inf' is not a number"},
    {"vgpu:\n  defaultMemory: 1.5\n", ":2: key 'vgpu.defaultMemory': expected MiB"},
    {"vgpu:\n  defaultMemory: 12 bananas\n",
     ":2: key 'vgpu.defaultMemory': '12 bananas' is not a whole number of MiB"},
    {"vgpu:\n  defaultMemory: 1000KiB\n",
     ":2: key 'vgpu.defaultMemory': '1000KiB' is not a whole number of MiB"},
    {"flags:\n  gfd:\n    sleepInterval: 10 minutes\n",
     ":3: key 'flags.gfd.sleepInterval': '10 minutes' is not a duration"},
    {"flags:\n  gfd:\n    sleepInterval: true\n",
     ":3: key 'flags.gfd.sleepInterval': expected a duration such as 60s, got a boolean"},
    {"flags:\n  plugin:\n    deviceListStrategy: [envvar, bogus]\n",
     ":3: key 'flags.plugin.deviceListStrategy[1]': 'bogus' is not one of envvar, "
     "volume-mounts, cdi-annotations, cdi-cri"},
    {"flags:\n  plugin:\n    deviceListStrategy: []\n",
     ":3: key 'flags.plugin.deviceListStrategy': needs at least one of envvar"},
    {"flags:\n  plugin:\n    deviceListStrategy: [[envvar]]\n",
     ":3: key 'flags.plugin.deviceListStrategy[0]': expected a single value, got a list"},
    {"imex:\n  channelIDs: [1]\n", ":1: key 'imex.channelIDs': must be [] or [0]"},
    {"imex:\n  channelIDs: 0\n",
     ":2: key 'imex.channelIDs': expected a list of integers, got an integer"},
    {"imex:\n  channelIDs: [a]\n",
     ":2: key 'imex.channelIDs[0]': expected an integer, got a string 'a'"},
    {"health:\n  ignoredXIDs: [48]\n  criticalXIDs: [48]\n",
     ":1: key 'health.criticalXIDs': XID 48 is in both"},
    {"health:\n  criticalXIDs: some\n",
     ":2: key 'health.criticalXIDs': expected 'all' or a list of XIDs, got 'some'"},
    /* Keys vgpu cannot act on: refused, naming the key and why. */
    {"vgpu:\n  defaultMemory: 4GiB\n",
     ": key 'vgpu.defaultMemory': the scheduler gives every container its memory (set "
     "defaultMemory in vgpu-scheduler's configuration)"},
    {"flags:\n  deviceDiscoveryStrategy: tegra\n",
     ": key 'flags.deviceDiscoveryStrategy': 'tegra' is not supported: vgpu finds GPUs through "
     "NVML only"},
    {"flags:\n  plugin:\n    nvidiaCTKPath: /opt/nvidia-ctk\n",
     ": key 'flags.plugin.nvidiaCTKPath': vgpu generates no CDI specification"},
    {"imex:\n  channelIDs: [0]\nflags:\n  plugin:\n    deviceListStrategy: [cdi-cri]\n",
     ":1: key 'imex.channelIDs': IMEX channels reach containers through NVIDIA_IMEX_CHANNELS"},
    {"flags:\n  plugin: [1]\n", ":2: key 'flags.plugin': expected a mapping, got a list"},
    {"flags: 5\n", ":1: key 'flags': expected a mapping, got an integer '5'"},
    {"flags:\n  nvidiaDriverRoot: [a]\n",
     ":2: key 'flags.nvidiaDriverRoot': expected a single value, got a list"},
    {"flags:\n  nvidiaDriverRoot: {a: b}\n",
     ":2: key 'flags.nvidiaDriverRoot': expected a single value, got a mapping"},
    {"- a\n- b\n", ":1: the top level must be a mapping of keys"},
    {"just a string\n", ":1: the top level must be a mapping of keys"},
    {"? [a]\n: b\n", ":1: explicit keys ('? key') are not supported"},
    {"[a]: b\n", ":1: key '(top level)': keys must be plain strings"},
    {"flags:\n  mpsRoot: \"a\\0b\"\n", ":2: key 'flags.mpsRoot': the value contains a NUL"},
    /* libfyaml 0.7.12 hangs on invalid UTF-8 in a directive; refused before it. */
    {"%\x01\xdb\xfe\xf6\xec", ":1: byte 0x01: not UTF-8 text without control characters"},
    {"version: v1\n%\xdb\xfe", ":2: byte 0xfe: not UTF-8"},
    {"a: \xc3\xa9\xc3", ":1: byte 0xc3: not UTF-8"},
    {"a: \xed\xa0\x80\n", ":1: byte 0xa0: not UTF-8"}, /* a surrogate */
    {"a: \xc0\xaf\n", ":1: byte 0xc0: not UTF-8"},     /* overlong */
    /* libfyaml 0.7.12 frees twice on this complex key; refused before it. */
    {"?  [a]\t:[a]error:\t: b\n", ":1: explicit keys ('? key') are not supported"},
    {"flags:\n  - ? x\n", ":2: explicit keys"},
    {"{? a : b}\n", ":1: explicit keys"},
    {"flags:\n  migStrategy: \x1bnone\n", ":2: byte 0x1b: not UTF-8"},
};

static void test_malformed(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        struct dpconfig cfg;
        struct vg_err err = {0};
        dpconfig_defaults(&cfg);
        char *before = dump(&cfg);
        int rc = dpconfig_load_buffer("bad.yaml", bad_cases[i].text, strlen(bad_cases[i].text),
                                      &cfg, &err);
        if (rc == 0)
            fail_msg("case %zu accepted:\n%s", i, bad_cases[i].text);
        assert_true(rc < 0);
        assert_int_equal(err.code, rc);
        char want[512];
        snprintf(want, sizeof want, "bad.yaml%s", bad_cases[i].message);
        if (strncmp(err.msg, want, strlen(want)) != 0)
            fail_msg("case %zu:\n got: %s\nwant: %s...", i, err.msg, want);
        /* A refused file leaves the configuration as it was. */
        char *after = dump(&cfg);
        assert_string_equal(before, after);
        free(before);
        free(after);
        dpconfig_free(&cfg);
    }
}

static void test_failed_load_keeps_previous(void **state)
{
    (void)state;
    struct dpconfig cfg;
    struct vg_err err = {0};
    dpconfig_defaults(&cfg);
    const char *good = "sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
                       "      replicas: 3\n";
    assert_int_equal(dpconfig_load_buffer("good.yaml", good, strlen(good), &cfg, &err), 0);
    char *before = dump(&cfg);
    /* Fails late: after the list was decoded, at validation. */
    const char *bad = "sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
                      "      replicas: 3\n    - name: gpu\n      replicas: 2\n";
    assert_true(dpconfig_load_buffer("bad.yaml", bad, strlen(bad), &cfg, &err) < 0);
    char *after = dump(&cfg);
    assert_string_equal(before, after);
    assert_true(cfg.sharing.time_slicing.resources.items[0].replicas == 3);
    free(before);
    free(after);
    dpconfig_free(&cfg);
}

static void test_bounds_and_files(void **state)
{
    (void)state;
    struct dpconfig cfg;
    struct vg_err err = {0};
    dpconfig_defaults(&cfg);

    /* Past the 1 MiB ceiling. */
    size_t big = DPCONFIG_MAX_BYTES + 1;
    char *text = malloc(big);
    memset(text, '#', big);
    assert_int_equal(dpconfig_load_buffer("big.yaml", text, big, &cfg, &err), -EFBIG);
    assert_non_null(strstr(err.msg, "big.yaml: larger than 1048576 bytes"));

    char dir[] = "/tmp/dpconfig-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/big.yaml", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, big, f), big);
    fclose(f);
    assert_int_equal(dpconfig_load_file(path, &cfg, &err), -EFBIG);
    unlink(path);
    free(text);

    /* NUL bytes, missing files, directories. */
    assert_int_equal(dpconfig_load_buffer("nul.yaml", "a: b\0c", 6, &cfg, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "nul.yaml:1: contains a NUL byte"));
    snprintf(path, sizeof path, "%s/missing.yaml", dir);
    assert_int_equal(dpconfig_load_file(path, &cfg, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "missing.yaml: cannot open"));
    assert_int_equal(dpconfig_load_file(dir, &cfg, &err), -EISDIR);
    rmdir(dir);
    dpconfig_free(&cfg);
}

static void test_yaml_typing(void **state)
{
    /* The scalar typing NVIDIA's loader applies (sigs.k8s.io/yaml over go-yaml v2). */
    (void)state;
    struct dpconfig cfg;
    struct vg_err err = {0};
    dpconfig_defaults(&cfg);
    const char *text = "version:\n"
                       "flags:\n"
                       "  failOnInitError: off\n"
                       "  gdsEnabled: Yes\n"
                       "  mofedEnabled: ~\n"
                       "  nvidiaDriverRoot: 123\n" /* a plain number is text for a string */
                       "  mpsRoot: /run/mps-\xc3\xa9t\xc3\xa9\xf0\x9f\x98\x80\r\n"
                       "  migStrategy: 'single'\n"
                       "  gfd:\n"
                       "    sleepInterval: 1m30s\n"
                       "vgpu:\n"
                       "  deviceMemoryScaling: 2\n"
                       "  deviceCoreScaling: 0.5\n"
                       "  defaultMemory: 0\n"
                       "sharing:\n"
                       "  timeSlicing:\n"
                       "    resources:\n"
                       "    - name: \"nvidia.com/gpu\"\n"
                       "      replicas: 2\n"
                       "      devices: \"all\"\n";
    if (dpconfig_load_buffer("t.yaml", text, strlen(text), &cfg, &err) != 0)
        fail_msg("%s", err.msg);
    assert_string_equal(cfg.version, "v1");
    assert_false(cfg.flags.fail_on_init_error);
    assert_true(cfg.flags.gds_enabled);
    assert_false(cfg.flags.mofed_enabled);
    assert_string_equal(cfg.flags.nvidia_driver_root, "123");
    assert_string_equal(cfg.flags.mps_root, "/run/mps-\xc3\xa9t\xc3\xa9\xf0\x9f\x98\x80");
    assert_int_equal(cfg.flags.mig_strategy, DPCONFIG_MIG_SINGLE);
    assert_true(cfg.flags.gfd.sleep_interval_ns == 90ull * 1000000000ull);
    assert_true(cfg.vgpu.device_memory_scaling == 2.0);
    assert_true(cfg.vgpu.device_core_scaling == 0.5);
    assert_true(cfg.vgpu.default_memory_mib == 0);
    assert_int_equal(cfg.sharing.time_slicing.resources.items[0].devices.kind,
                     DPCONFIG_DEVICES_ALL);

    /* Both sections replicated: MPS wins, as in NVIDIA's plugin. */
    const char *both = "sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
                       "      replicas: 2\n  mps:\n    resources:\n    - name: gpu\n"
                       "      replicas: 4\n";
    assert_int_equal(dpconfig_load_buffer("b.yaml", both, strlen(both), &cfg, &err), 0);
    assert_int_equal(cfg.sharing_strategy, DPCONFIG_SHARING_MPS);
    assert_string_equal(dpconfig_sharing_strategy_name(cfg.sharing_strategy), "mps");
    dpconfig_free(&cfg);
}

/* ---- environment and command line ---- */

struct fake_env {
    const char *pairs[16][2];
};

static const char *fake_getenv(const char *name, void *user)
{
    struct fake_env *env = user;
    for (size_t i = 0; i < 16 && env->pairs[i][0] != NULL; i++)
        if (strcmp(env->pairs[i][0], name) == 0)
            return env->pairs[i][1];
    return NULL;
}

/* Mutable copies of string literals, for the argv-style API (main's argv is mutable). */
struct args {
    char *v[8];
};

static struct args make_args(const char *const *src, int n)
{
    struct args a = {{NULL}};
    for (int i = 0; i < n && i < 7 && src[i] != NULL; i++)
        a.v[i] = strdup(src[i]);
    return a;
}

static void free_args(struct args *a)
{
    for (int i = 0; i < 8; i++)
        free(a->v[i]);
}

static char config_path[256];
static char config_dir[64];

static int setup_file(void **state)
{
    (void)state;
    snprintf(config_dir, sizeof config_dir, "/tmp/dpconfig-prec-XXXXXX");
    if (mkdtemp(config_dir) == NULL)
        return -1;
    snprintf(config_path, sizeof config_path, "%s/config.yaml", config_dir);
    FILE *f = fopen(config_path, "w");
    if (f == NULL)
        return -1;
    fputs("version: v1\nflags:\n  migStrategy: single\n  plugin:\n"
          "    deviceIDStrategy: index\nvgpu:\n  deviceSplitCount: 4\n  defaultCores: 30\n",
          f);
    fclose(f);
    return 0;
}

static int teardown_file(void **state)
{
    (void)state;
    unlink(config_path);
    rmdir(config_dir);
    return 0;
}

static void test_precedence(void **state)
{
    (void)state;
    struct dpconfig cfg;
    struct vg_err err = {0};
    dpconfig_defaults(&cfg);

    /* File alone. */
    struct fake_env env = {{{"CONFIG_FILE", config_path}}};
    char *none[] = {NULL};
    if (dpconfig_from_args(0, none, fake_getenv, &env, &cfg, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(cfg.flags.mig_strategy, DPCONFIG_MIG_SINGLE);
    assert_true(cfg.vgpu.device_split_count == 4);
    assert_true(cfg.vgpu.default_cores == 30);
    assert_int_equal(cfg.flags.plugin.device_id_strategy, DPCONFIG_DEVICE_ID_INDEX);

    /* Environment beats the file; the command line beats both. */
    struct fake_env env2 = {{{"CONFIG_FILE", config_path},
                             {"MIG_STRATEGY", "mixed"},
                             {"DEVICE_SPLIT_COUNT", "6"},
                             {"NODE_NAME", "node-a"},
                             {"DEVICE_LIST_STRATEGY", "envvar,cdi-cri"},
                             {"FAIL_ON_INIT_ERROR", "false"},
                             {"DEFAULT_CORES", ""}}}; /* empty: ignored */
    const char *const argv_src[] = {"--device-split-count=8", "--node-name",         "node-b",
                                    "--kubeconfig=/k/config", "--pass-device-specs", NULL};
    struct args argv = make_args(argv_src, (int)(sizeof argv_src / sizeof argv_src[0]));
    if (dpconfig_from_args(5, argv.v, fake_getenv, &env2, &cfg, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(cfg.flags.mig_strategy, DPCONFIG_MIG_MIXED); /* env over file */
    assert_true(cfg.vgpu.device_split_count == 8);                /* CLI over env over file */
    assert_true(cfg.vgpu.default_cores == 30);                    /* file, env empty */
    assert_int_equal(cfg.flags.plugin.device_id_strategy, 1);     /* file */
    assert_string_equal(cfg.cli.node_name, "node-b");             /* CLI over env */
    assert_string_equal(cfg.cli.kubeconfig, "/k/config");
    assert_string_equal(cfg.cli.config_file, config_path);
    assert_true(cfg.flags.plugin.pass_device_specs); /* bare boolean flag */
    assert_false(cfg.flags.fail_on_init_error);
    assert_int_equal(cfg.flags.plugin.device_list_strategy,
                     DPCONFIG_LIST_ENVVAR | DPCONFIG_LIST_CDI_CRI);

    /* --config on the command line beats $CONFIG_FILE. */
    struct fake_env env3 = {{{"CONFIG_FILE", "/nonexistent/config.yaml"}}};
    char cfg_arg[300];
    snprintf(cfg_arg, sizeof cfg_arg, "--config=%s", config_path);
    const char *const argv3_src[] = {cfg_arg, NULL};
    struct args argv3 = make_args(argv3_src, (int)(sizeof argv3_src / sizeof argv3_src[0]));
    if (dpconfig_from_args(1, argv3.v, fake_getenv, &env3, &cfg, &err) != 0)
        fail_msg("%s", err.msg);
    assert_true(cfg.vgpu.device_split_count == 4);

    /* No file anywhere: defaults plus overrides. */
    const char *const argv4_src[] = {"--mig-strategy", "single", "--fail-on-init-error=false",
                                     NULL};
    struct args argv4 = make_args(argv4_src, (int)(sizeof argv4_src / sizeof argv4_src[0]));
    assert_int_equal(dpconfig_from_args(3, argv4.v, NULL, NULL, &cfg, &err), 0);
    assert_int_equal(cfg.flags.mig_strategy, DPCONFIG_MIG_SINGLE);
    assert_false(cfg.flags.fail_on_init_error);
    assert_true(cfg.vgpu.device_split_count == 10);
    assert_null(cfg.cli.config_file);
    free_args(&argv);
    free_args(&argv3);
    free_args(&argv4);
    dpconfig_free(&cfg);
}

static void test_override_errors(void **state)
{
    (void)state;
    struct dpconfig cfg;
    struct vg_err err = {0};
    dpconfig_defaults(&cfg);
    static const struct {
        const char *argv[3];
        int argc;
        const char *message;
    } cases[] = {
        {{"--bogus=1"}, 1, "unknown option '--bogus' (see --help)"},
        {{"mixed"}, 1, "unexpected argument 'mixed' (see --help)"},
        {{"--mig-strategy"}, 1, "option '--mig-strategy' needs a value"},
        {{"--mig-strategy=maybe"},
         1,
         "option '--mig-strategy': key 'flags.migStrategy': 'maybe' is not one of none, single, "
         "mixed"},
        {{"--fail-on-init-error=perhaps"},
         1,
         "option '--fail-on-init-error': key 'flags.failOnInitError': 'perhaps' is not a "
         "boolean"},
        {{"--device-split-count", "0"},
         2,
         "option '--device-split-count': key 'vgpu.deviceSplitCount': '0' is not a whole number "
         "from 1 to 1024"},
        {{"--device-list-strategy=envvar,nope"},
         1,
         "option '--device-list-strategy': key 'flags.plugin.deviceListStrategy': 'nope' is not "
         "one of"},
        {{"--imex-channel-ids=1"}, 1, "configuration: key 'imex.channelIDs': must be [] or [0]"},
        {{"--config=/nonexistent/dpconfig.yaml"}, 1, "/nonexistent/dpconfig.yaml: cannot open"},
        /* Keys vgpu cannot act on are refused from the command line too. */
        {{"--default-memory=4GiB"}, 1, "configuration: key 'vgpu.defaultMemory': the scheduler"},
        {{"--device-discovery-strategy=tegra"},
         1,
         "configuration: key 'flags.deviceDiscoveryStrategy': 'tegra' is not supported"},
        {{"--nvidia-ctk-path", "/opt/bin/nvidia-ctk"},
         2,
         "configuration: key 'flags.plugin.nvidiaCTKPath': vgpu generates no CDI"},
        {{"--imex-channel-ids=0", "--device-list-strategy=cdi-annotations"},
         2,
         "configuration: key 'imex.channelIDs': IMEX channels reach containers"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct args a = make_args(cases[i].argv, cases[i].argc);
        int rc = dpconfig_from_args(cases[i].argc, a.v, NULL, NULL, &cfg, &err);
        free_args(&a);
        if (rc >= 0)
            fail_msg("case %zu accepted", i);
        if (strncmp(err.msg, cases[i].message, strlen(cases[i].message)) != 0)
            fail_msg("case %zu:\n got: %s\nwant: %s", i, err.msg, cases[i].message);
    }

    /* Environment errors name the variable. */
    struct fake_env env = {{{"MIG_STRATEGY", "bogus"}}};
    assert_true(dpconfig_from_args(0, NULL, fake_getenv, &env, &cfg, &err) < 0);
    assert_string_equal(err.msg, "environment MIG_STRATEGY: key 'flags.migStrategy': 'bogus' "
                                 "is not one of none, single, mixed");
    struct fake_env ctk = {{{"NVIDIA_CTK_PATH", "/usr/local/bin/nvidia-ctk"}}};
    assert_true(dpconfig_from_args(0, NULL, fake_getenv, &ctk, &cfg, &err) < 0);
    assert_non_null(strstr(err.msg, "key 'flags.plugin.nvidiaCTKPath': vgpu generates no CDI"));

    /* An override that breaks a rule across keys is caught, with the file's line. */
    const char *mps = "sharing:\n  mps:\n    resources:\n    - name: gpu\n      replicas: 2\n";
    assert_int_equal(dpconfig_load_buffer("m.yaml", mps, strlen(mps), &cfg, &err), 0);
    const char *const argv_src[] = {"--mig-strategy=mixed", NULL};
    struct args argv = make_args(argv_src, (int)(sizeof argv_src / sizeof argv_src[0]));
    assert_true(dpconfig_apply_overrides(&cfg, 1, argv.v, NULL, NULL, &err) < 0);
    assert_string_equal(err.msg, "m.yaml:2: key 'sharing.mps': MPS sharing cannot be combined "
                                 "with flags.migStrategy 'mixed'");

    /* --help stops everything else. */
    const char *const help_src[] = {"--bogus", "--help", NULL};
    struct args help = make_args(help_src, (int)(sizeof help_src / sizeof help_src[0]));
    assert_int_equal(dpconfig_from_args(2, help.v, NULL, NULL, &cfg, &err), 1);
    free_args(&argv);
    free_args(&help);
    dpconfig_free(&cfg);
}

/* List values in a file have a ceiling (DPCONFIG_MAX_LIST_ITEMS): one item more is
 * refused naming the key, a list at the ceiling loads. (The environment and flags are
 * bounded by their 4096-byte values already.) */
static void test_list_ceiling(void **state)
{
    (void)state;
    struct dpconfig cfg;
    struct vg_err err = {0};
    dpconfig_defaults(&cfg);
    for (int over = 0; over <= 1; over++) {
        size_t n = DPCONFIG_MAX_LIST_ITEMS + (size_t)over;
        size_t cap = 64 + n * 8;
        char *yaml = malloc(cap);
        size_t y = (size_t)snprintf(yaml, cap, "health:\n  ignoredXIDs: [");
        for (size_t i = 0; i < n; i++) {
            y += (size_t)snprintf(yaml + y, cap - y, "%s%zu", i ? "," : "", i);
        }
        snprintf(yaml + y, cap - y, "]\n");
        int rc = dpconfig_load_buffer("l.yaml", yaml, strlen(yaml), &cfg, &err);
        if (!over) {
            assert_int_equal(rc, 0);
            assert_int_equal(cfg.health.ignored_xids.count, n);
        } else {
            assert_int_equal(rc, -E2BIG);
            assert_string_equal(err.msg, "l.yaml:2: key 'health.ignoredXIDs': list: more than "
                                         "4096 items");
        }
        free(yaml);
    }
    dpconfig_free(&cfg);
}

/* Settings of other programs sharing the file load and are named at start. */
static void test_foreign_settings(void **state)
{
    (void)state;
    struct dpconfig cfg;
    struct vg_err err = {0};
    char keys[256];
    dpconfig_defaults(&cfg);
    assert_int_equal(dpconfig_foreign_settings(&cfg, keys, sizeof keys), 0);
    assert_string_equal(keys, "");
    /* The README's example: GFD settings at their defaults change nothing. */
    char path[512];
    snprintf(path, sizeof path, "%s/flags-full.yaml", data_dir());
    assert_int_equal(dpconfig_load_file(path, &cfg, &err), 0);
    assert_int_equal(dpconfig_foreign_settings(&cfg, keys, sizeof keys), 0);
    const char *text = "flags:\n  useNodeFeatureAPI: true\n  gfd:\n    oneshot: true\n"
                       "    sleepInterval: 10s\nresources:\n  gpus:\n  - pattern: '*'\n"
                       "    name: gpu\n";
    assert_int_equal(dpconfig_load_buffer("g.yaml", text, strlen(text), &cfg, &err), 0);
    assert_int_equal(dpconfig_foreign_settings(&cfg, keys, sizeof keys), 4);
    assert_string_equal(keys, "flags.useNodeFeatureAPI,flags.gfd.oneshot,"
                              "flags.gfd.sleepInterval,resources.gpus");
    /* A short buffer still counts them all. */
    assert_int_equal(dpconfig_foreign_settings(&cfg, keys, 8), 4);
    dpconfig_free(&cfg);
}

static void test_help_and_doc(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    dpconfig_print_help(f, "vgpu-device-plugin");
    fclose(f);
    /* The contract's flags and NVIDIA's, each with default and environment. */
    static const char *const must[] = {
        "usage: vgpu-device-plugin",
        "--node-name VALUE",
        "--kubelet-dir VALUE",
        "--kubeconfig VALUE",
        "--config VALUE",
        "default: /var/lib/kubelet/device-plugins",
        "--mig-strategy VALUE",
        "one of none, single, mixed; default: none; env MIG_STRATEGY; file flags.migStrategy",
        "--fail-on-init-error[=BOOL]",
        "--device-split-count VALUE",
        "1 to 1024; default: 10; env DEVICE_SPLIT_COUNT",
    };
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        if (strstr(text, must[i]) == NULL)
            fail_msg("--help lacks '%s':\n%s", must[i], text);
    free(text);

    f = open_memstream(&text, &len);
    dpconfig_print_doc(f);
    fclose(f);
    assert_non_null(strstr(text, "| `sharing.mps.failRequestsGreaterThanOne` | bool | `true` |"));
    assert_non_null(strstr(text, "| `sharing.timeSlicing.resources[].replicas` | integer | "
                                 "required | 2 to 10000 |"));
    assert_non_null(strstr(text, "| `--node-name` | string | unset | `NODE_NAME` |"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_list_ceiling),
        cmocka_unit_test(test_fixture_facts),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_failed_load_keeps_previous),
        cmocka_unit_test(test_bounds_and_files),
        cmocka_unit_test(test_yaml_typing),
        cmocka_unit_test_setup_teardown(test_precedence, setup_file, teardown_file),
        cmocka_unit_test(test_override_errors),
        cmocka_unit_test(test_help_and_doc),
        cmocka_unit_test(test_foreign_settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
