/* vgpu-scheduler's --config file (sched_options_load_file): every key read with its
 * meaning, and every bad file refused with a message that names the file and the key. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/str.h"
#include "scheduler/sched.h"

static char path[128];

static void write_file(const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    (void)vg_snprintf(path, sizeof path, "/tmp/vgpu-sched-config-%d.json", (int)getpid());
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    return 0;
}

static void test_every_key_is_read(void **state)
{
    (void)state;
    write_file("{\"policy\": \"fgd\", \"gpuPolicy\": \"binpack\", \"assumeTTLSeconds\": 7,"
               " \"heartbeatTimeoutSeconds\": 90, \"defaultMemory\": 2048,"
               " \"defaultCores\": 25, \"defaultGPUNum\": 2, \"schedulerName\": \"gpu-sched\","
               " \"maxAssumptionsPerNamespace\": 12, \"webhookDRA\": true,"
               " \"overwriteEnv\": false, \"webhookTrustedUsers\": \"a,b:c\"}");
    struct sched_options o;
    sched_options_default(&o);
    assert_int_equal(o.max_assumed_per_namespace, SCHED_MAX_ASSUMED_PER_NAMESPACE);
    assert_false(o.require_pending);
    assert_false(o.webhook_dra);
    assert_true(o.overwrite_env);
    assert_string_equal(o.webhook_trusted_users, SCHED_TRUSTED_USERS_DEFAULT);
    char *name = NULL;
    struct vg_err err = {0};
    assert_int_equal(sched_options_load_file(path, &o, &name, &err), 0);
    assert_int_equal(o.policy, PLACE_POLICY_FGD);
    assert_int_equal(o.gpu_order, PLACE_GPU_BINPACK);
    assert_int_equal(o.assume_ttl_ms, 7000);
    assert_int_equal(o.heartbeat_timeout_s, 90);
    assert_int_equal(o.defaults.default_memory, 2048);
    assert_int_equal(o.defaults.default_cores, 25);
    assert_int_equal(o.defaults.default_gpu_num, 2);
    assert_string_equal(o.scheduler_name, "gpu-sched");
    assert_int_equal(o.max_assumed_per_namespace, 12);
    assert_true(o.webhook_dra);
    assert_false(o.overwrite_env);
    assert_string_equal(o.webhook_trusted_users, "a,b:c");
    assert_ptr_equal(o.scheduler_name, name);
    free(name);

    /* An empty object changes nothing. */
    write_file("{}");
    struct sched_options d, e;
    sched_options_default(&d);
    sched_options_default(&e);
    name = NULL;
    assert_int_equal(sched_options_load_file(path, &e, &name, &err), 0);
    assert_null(name);
    assert_memory_equal(&d, &e, sizeof d);
}

static void expect_refused(const char *text, const char *msg)
{
    struct sched_options o;
    sched_options_default(&o);
    char *name = NULL;
    struct vg_err err = {0};
    write_file(text);
    assert_int_equal(sched_options_load_file(path, &o, &name, &err), -EINVAL);
    free(name);
    if (strstr(err.msg, path) == NULL || strstr(err.msg, msg) == NULL)
        fail_msg("for %s: '%s' does not name the file and say '%s'", text, err.msg, msg);
}

static void test_bad_files_are_refused(void **state)
{
    (void)state;
    expect_refused("{\"policy\": ", ":1: ");                                   /* not JSON */
    expect_refused("{\"policy\": \"fgd\", \"policy\": \"fgd\"}", "duplicate"); /* twice */
    expect_refused("[{\"policy\": \"fgd\"}]", "not a JSON object");
    expect_refused("\"policy\"", "'[' or '{' expected");
    expect_refused("{\"policy\": \"fastest\"}", "policy: unsupported 'fastest'");
    expect_refused("{\"policy\": 3}", "bad value for \"policy\"");
    expect_refused("{\"gpuPolicy\": \"numa\"}", "gpuPolicy: not binpack or spread");
    expect_refused("{\"assumeTTLSeconds\": 0}", "bad value for \"assumeTTLSeconds\"");
    expect_refused("{\"assumeTTLSeconds\": 3601}", "bad value for \"assumeTTLSeconds\"");
    expect_refused("{\"assumeTTLSeconds\": \"30\"}", "bad value for \"assumeTTLSeconds\"");
    expect_refused("{\"heartbeatTimeoutSeconds\": -1}",
                   "bad value for \"heartbeatTimeoutSeconds\"");
    expect_refused("{\"defaultMemory\": -5}", "bad value for \"defaultMemory\"");
    expect_refused("{\"defaultCores\": 101}", "bad value for \"defaultCores\"");
    expect_refused("{\"defaultGPUNum\": 1000}", "bad value for \"defaultGPUNum\"");
    expect_refused("{\"schedulerName\": null}", "bad value for \"schedulerName\"");
    expect_refused("{\"maxAssumptionsPerNamespace\": -1}",
                   "bad value for \"maxAssumptionsPerNamespace\"");
    expect_refused("{\"maxAssumptionsPerNamespace\": 1000001}",
                   "bad value for \"maxAssumptionsPerNamespace\"");
    expect_refused("{\"maxAssumptionsPerNamespace\": \"8\"}",
                   "bad value for \"maxAssumptionsPerNamespace\"");
    expect_refused("{\"webhookDRA\": \"true\"}", "bad value for \"webhookDRA\"");
    expect_refused("{\"webhookDRA\": 1}", "bad value for \"webhookDRA\"");
    expect_refused("{\"overwriteEnv\": \"no\"}", "bad value for \"overwriteEnv\"");
    expect_refused("{\"webhookTrustedUsers\": [\"a\"]}", "bad value for \"webhookTrustedUsers\"");
    expect_refused("{\"webhookTrustedUsers\": \"a, b\"}", "webhookTrustedUsers: trusted users");
    expect_refused("{\"assumeTtlSeconds\": 30}",
                   "unknown key or bad value for \"assumeTtlSeconds\"");
    unlink(path);
    struct sched_options o;
    sched_options_default(&o);
    char *name = NULL;
    struct vg_err err = {0};
    assert_int_equal(sched_options_load_file(path, &o, &name, &err), -EINVAL);
    assert_non_null(strstr(err.msg, path));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_key_is_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_files_are_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
