/* src/cli: the vgpu command's parsers and tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>

#include "cli/cli.h"

static void test_quantity(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        uint64_t milli;
    } ok[] = {{"64", 64000},
              {"500m", 500},
              {"32000m", 32000},
              {"1.5", 1500},
              {"0.1m", 1},
              {"1Ki", 1024000},
              {"256Gi", (256ULL << 30) * 1000},
              {"263953408Ki", 263953408ULL * 1024 * 1000},
              {"1e3", 1000000},
              {"2k", 2000000},
              {"1M", 1000000000},
              {"+4", 4000},
              {"0", 0},
              {".5", 500}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        struct vg_err err = {0};
        uint64_t v = 0;
        assert_int_equal(cli_quantity_milli(ok[i].s, &v, &err), 0);
        assert_true(v == ok[i].milli);
    }
    static const char *const bad[] = {"",    "-1", "4 Gi", "256GiB", "1e",
                                      "abc", ".",  "1..2", "4g",     "99999999999999999999Ei"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct vg_err err = {0};
        uint64_t v = 0;
        assert_true(cli_quantity_milli(bad[i], &v, &err) < 0);
        assert_true(err.msg[0] != '\0');
    }
}

static void test_sched_message(void **state)
{
    (void)state;
    const char *msg = "0/3 nodes are available: 2 vgpu: no GPU with enough free memory, compute "
                      "and slots, 1 node(s) had untolerated taint {node.kubernetes.io/x: }. "
                      "preemption: 0/3 nodes are available: 3 Preemption is not helpful.";
    struct cli_sched_message m;
    struct vg_err err = {0};
    assert_int_equal(cli_sched_message_parse(msg, strlen(msg), &m, &err), 0);
    assert_true(m.available == 0 && m.total == 3);
    assert_int_equal(m.count, 2);
    assert_true(m.reasons[0].nodes == 2);
    assert_string_equal(m.reasons[0].text,
                        "vgpu: no GPU with enough free memory, compute and slots");
    assert_string_equal(m.reasons[1].text,
                        "node(s) had untolerated taint {node.kubernetes.io/x: }");
    assert_string_equal(m.tail,
                        "preemption: 0/3 nodes are available: 3 Preemption is not helpful.");
    const char *plain = "pod has unbound immediate PersistentVolumeClaims";
    assert_true(cli_sched_message_parse(plain, strlen(plain), &m, &err) < 0);
}

static void test_container_dir(void **state)
{
    (void)state;
    char uid[CLI_NAME_MAX], c[CLI_NAME_MAX];
    struct vg_err err = {0};
    assert_int_equal(
        cli_container_dir_parse("0f1e2d3c-0000-4000-8000-000000000001_main", uid, c, &err), 0);
    assert_string_equal(uid, "0f1e2d3c-0000-4000-8000-000000000001");
    assert_string_equal(c, "main");
    assert_true(cli_container_dir_parse(".stage-1", uid, c, &err) < 0);
    assert_true(cli_container_dir_parse("uid_Main", uid, c, &err) < 0);
    assert_true(cli_container_dir_parse("uid_", uid, c, &err) < 0);
}

static void test_limits_owner(void **state)
{
    (void)state;
    char ns[CLI_NAME_MAX], pod[CLI_NAME_MAX], c[CLI_NAME_MAX];
    struct vg_err err = {0};
    const char *ok = "# written by vgpu-device-plugin for pod default/train-0, container main\n"
                     "vgpu-limits 1\n";
    assert_int_equal(cli_limits_owner_parse(ok, strlen(ok), ns, pod, c, &err), 0);
    assert_string_equal(ns, "default");
    assert_string_equal(pod, "train-0");
    assert_string_equal(c, "main");
    const char *none = "vgpu-limits 1\n";
    assert_int_equal(cli_limits_owner_parse(none, strlen(none), ns, pod, c, &err), -ENOENT);
    const char *evil = "# written by vgpu-device-plugin for pod default/x, container \033[2J\n";
    assert_int_equal(cli_limits_owner_parse(evil, strlen(evil), ns, pod, c, &err), -EINVAL);
}

static void test_format(void **state)
{
    (void)state;
    char b[32];
    cli_format_bytes(0, b, sizeof b);
    assert_string_equal(b, "0");
    cli_format_bytes(4ULL << 30, b, sizeof b);
    assert_string_equal(b, "4Gi");
    cli_format_bytes(512ULL << 20, b, sizeof b);
    assert_string_equal(b, "512Mi");
    cli_format_bytes(81559ULL << 20, b, sizeof b);
    assert_string_equal(b, "79.6Gi");
    cli_format_age(45, b, sizeof b);
    assert_string_equal(b, "45s");
    cli_format_age(7200, b, sizeof b);
    assert_string_equal(b, "2h");
    cli_format_age(-1, b, sizeof b);
    assert_string_equal(b, "<unknown>");
}

static void test_table(void **state)
{
    (void)state;
    struct cli_table t;
    cli_table_init(&t, 3);
    cli_table_add_tabbed(&t, "NAME\tGPUS\tNOTE");
    cli_table_add_tabbed(&t, "node-long-name\t2\tok");
    const char *evil[3] = {"a\033[2Jb", "1", NULL};
    cli_table_add(&t, evil);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cli_table_print(&t, f, 0);
    fclose(f);
    assert_string_equal(text, "NAME             GPUS   NOTE\n"
                              "node-long-name   2      ok\n"
                              "a?[2Jb           1\n");
    free(text);
    cli_table_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantity),      cmocka_unit_test(test_sched_message),
        cmocka_unit_test(test_container_dir), cmocka_unit_test(test_limits_owner),
        cmocka_unit_test(test_format),        cmocka_unit_test(test_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
