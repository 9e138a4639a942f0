/* Unit tests for src/sim: the CSV parsers and their error messages, the typical task
 * set, the replay's determinism, and the JSON writer. The tests that need the openb
 * trace read it from $VGPU_OPENB_DIR, else ../shared/data/openb next to the repository,
 * and skip when it is absent (fail under CI: tests/lib/vg_skip.h). */
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

#include "../lib/vg_skip.h"
#include "base/str.h"
#include "sim/sim.h"

static const char nodes_csv[] = "sn,cpu_milli,memory_mib,gpu,model\n"
                                "n-b,32000,131072,2,T4\r\n"
                                "n-a,96000,393216,8,G2\n"
                                "\n"
                                "n-c,8000,32768,1,V100M16\n";

static const char pods_csv[] = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
                               "p-3,4000,8192,1,500,,LS\n"
                               "p-1,8000,16384,1,1000,T4|V100M16,BE\n"
                               "p-2,16000,65536,2,1000,,LS\n"
                               "p-4,2000,4096,0,0,,BE\n"
                               "p-5,4000,8192,1,500,,LS\n";

static void test_parse_nodes_and_pods(void **state)
{
    (void)state;
    struct vg_err err = {0};
    struct place_cluster *c = place_cluster_new();
    assert_int_equal(sim_parse_nodes(nodes_csv, strlen(nodes_csv), "n.csv", c, &err), 0);
    assert_int_equal(c->node_count, 3);
    assert_int_equal(c->gpu_count, 11);
    assert_string_equal(c->nodes[0].name, "n-b");
    assert_int_equal(c->nodes[1].cpu_total, 96000);
    assert_int_equal(c->model_count, 3);
    struct sim_pod *pods = NULL;
    size_t count = 0;
    assert_int_equal(sim_parse_pods(pods_csv, strlen(pods_csv), "p.csv", c, &pods, &count, &err),
                     0);
    assert_int_equal(count, 5);
    assert_true(pods[1].has_spec);
    assert_int_equal(pods[1].model_mask, (1u << 0) | (1u << 2)); /* T4 and V100M16 */
    assert_int_equal(pods[0].model_mask, UINT64_MAX);
    assert_int_equal(pods[2].gpu_count, 2);
    assert_int_equal(pods[3].gpu_count, 0);
    free(pods);
    place_cluster_free(c);
}

/* Parses text as a pod list and expects failure with msg in the message. */
static void expect_pod_error(const char *text, const char *msg)
{
    struct vg_err err = {0};
    struct place_cluster *c = place_cluster_new();
    struct sim_pod *pods = NULL;
    size_t count = 0;
    assert_true(sim_parse_pods(text, strlen(text), "bad.csv", c, &pods, &count, &err) < 0);
    if (strstr(err.msg, msg) == NULL)
        fail_msg("message '%s' lacks '%s'", err.msg, msg);
    assert_null(pods);
    place_cluster_free(c);
}

static void test_parse_errors_name_file_and_line(void **state)
{
    (void)state;
    const char *hdr = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";
    char buf[SIM_LINE_MAX * 2];
    expect_pod_error("", "bad.csv: empty file");
    expect_pod_error("name,cpu_milli,memory_mib,num_gpu\n", "bad.csv:1: header has no 'gpu_milli'");
    assert_true(vg_snprintf(buf, sizeof buf, "%sp,1x,1,0,0\n", hdr) > 0);
    expect_pod_error(buf, "bad.csv:2: cpu_milli");
    assert_true(vg_snprintf(buf, sizeof buf, "%sp,1,1,1,1001\n", hdr) > 0);
    expect_pod_error(buf, "bad.csv:2: gpu_milli");
    assert_true(vg_snprintf(buf, sizeof buf, "%sp,1,1,0,0\np,1,1,17,1000\n", hdr) > 0);
    expect_pod_error(buf, "bad.csv:3: num_gpu");
    assert_true(vg_snprintf(buf, sizeof buf, "%sp,1,1,1,0\n", hdr) > 0);
    expect_pod_error(buf, "both or neither");
    assert_true(vg_snprintf(buf, sizeof buf, "%sp,1,1\n", hdr) > 0);
    expect_pod_error(buf, "bad.csv:2: missing field 'num_gpu'");
    assert_true(vg_snprintf(buf, sizeof buf, "%s\"p\",1,1,0,0\n", hdr) > 0);
    expect_pod_error(buf, "quoted");
    assert_true(vg_snprintf(buf, sizeof buf, "%s,1,1,0,0\n", hdr) > 0);
    expect_pod_error(buf, "empty pod name");
    /* A line one byte over the limit. */
    size_t len = strlen(hdr);
    memcpy(buf, hdr, len);
    memset(buf + len, 'x', SIM_LINE_MAX + 1);
    buf[len + SIM_LINE_MAX + 1] = '\0';
    expect_pod_error(buf, "bad.csv:2: line longer than 4096 bytes");

    struct vg_err err = {0};
    struct place_cluster *c = place_cluster_new();
    const char *no_model = "sn,cpu_milli,memory_mib,gpu,model\nn,1,1,2,\n";
    assert_true(sim_parse_nodes(no_model, strlen(no_model), "n.csv", c, &err) < 0);
    assert_non_null(strstr(err.msg, "n.csv:2: node n has GPUs but no model"));
    const char *too_many = "sn,cpu_milli,memory_mib,gpu,model\nn,1,1,17,X\n";
    assert_true(sim_parse_nodes(too_many, strlen(too_many), "n.csv", c, &err) < 0);
    assert_non_null(strstr(err.msg, "n.csv:2: gpu"));
    place_cluster_free(c);
}

static void test_typical_set(void **state)
{
    (void)state;
    struct sim_pod pods[20];
    memset(pods, 0, sizeof pods);
    for (int i = 0; i < 20; i++) {
        pods[i].model_mask = UINT64_MAX;
        pods[i].cpu_milli = 1000;
        pods[i].gpu_count = 1;
        pods[i].gpu_milli = i < 12 ? 500 : i < 19 ? 1000 : 250; /* 12 / 7 / 1 */
    }
    struct place_mix m;
    place_mix_init(&m);
    assert_int_equal(sim_build_typical(pods, 20, &m), 0);
    /* 12 + 7 = 19 of 20 pods = 95 %: the 250 type is left out. */
    assert_int_equal(m.count, 2);
    assert_int_equal(m.types[0].gpu_milli, 500);
    assert_int_equal(m.total_weight, 19);
    place_mix_clear(&m);
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    fputs(text, f);
    return fclose(f);
}

/* A small generated trace in a temporary directory. */
static void small_trace(struct sim_trace *t)
{
    char nodes[SIM_LINE_MAX * 4] = "sn,cpu_milli,memory_mib,gpu,model\n";
    size_t off = strlen(nodes);
    for (int i = 0; i < 40; i++) {
        int n = vg_snprintf(nodes + off, sizeof nodes - off, "node-%02d,%d,262144,%d,%s\n", i,
                            i % 2 ? 32000 : 96000, i % 2 ? 2 : 8, i % 2 ? "T4" : "G2");
        assert_true(n > 0);
        off += (size_t)n;
    }
    static char pods[1 << 16];
    assert_true(vg_strlcpy(pods, "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n", sizeof pods) > 0);
    off = strlen(pods);
    static const int milli[] = {1000, 500, 250, 810, 1000, 470};
    for (int i = 0; i < 300; i++) {
        int count = i % 37 == 0 ? 4 : i % 11 == 0 ? 0 : 1;
        int share = count == 1 ? milli[i % 6] : count == 0 ? 0 : 1000;
        int n = vg_snprintf(pods + off, sizeof pods - off, "pod-%03d,%d,8192,%d,%d\n", i,
                            2000 + 1000 * (i % 5), count, share);
        assert_true(n > 0);
        off += (size_t)n;
    }
    assert_int_equal(write_file("test_sim_nodes.csv", nodes), 0);
    assert_int_equal(write_file("test_sim_pods.csv", pods), 0);
    struct vg_err err = {0};
    assert_int_equal(sim_trace_load(t, "test_sim_nodes.csv", "test_sim_pods.csv", &err), 0);
    unlink("test_sim_nodes.csv");
    unlink("test_sim_pods.csv");
}

static char *json_of(const struct sim_trace *t, const struct sim_run_result *runs, size_t n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(sim_write_json(f, t, runs, n, -1), 0);
    fclose(f);
    return buf;
}

static void test_replay_is_deterministic(void **state)
{
    (void)state;
    struct sim_trace t;
    small_trace(&t);
    assert_string_equal(t.workload, "test_sim_pods");
    struct sim_options opt = {.fgd_mix = SIM_MIX_ORACLE, .default_mix = SIM_MIX_LEARNED};
    enum place_policy policies[] = {PLACE_POLICY_RANDOM, PLACE_POLICY_FGD, PLACE_POLICY_DEFAULT};
    uint64_t seeds[] = {42, 43, 44};
    struct sim_run_result a[9], b[9];
    struct vg_err err = {0};
    assert_int_equal(sim_run_many(&t, policies, 3, seeds, 3, 2, &opt, a, &err), 0);
    assert_int_equal(sim_run_many(&t, policies, 3, seeds, 3, 1, &opt, b, &err), 0);
    for (int i = 0; i < 9; i++) {
        char *ja = json_of(&t, &a[i], 1), *jb = json_of(&t, &b[i], 1);
        assert_string_equal(ja, jb); /* threads do not change results */
        free(ja);
        free(jb);
        /* Tuned to about 130 %: the curve is full up to x = 130, with allocation never
         * above arrival and never above 100 %. */
        assert_true(a[i].alloc_pct[130] > 50 && a[i].alloc_pct[130] <= 100.0);
        for (int x = 0; x <= 100; x += 10)
            assert_true(a[i].alloc_pct[x] <= x + 1.0);
        assert_true(a[i].pods > t.pod_count);
    }
    /* Different seeds give different arrival orders. */
    assert_true(a[0].failed_pods != a[1].failed_pods ||
                a[0].unallocated_pct_100 != a[1].unallocated_pct_100 ||
                a[0].alloc_pct[95] != a[1].alloc_pct[95]);
    sim_trace_free(&t);
}

static void test_json_writer(void **state)
{
    (void)state;
    struct sim_trace t;
    small_trace(&t);
    assert_true(vg_strlcpy(t.workload, "we\"ird\\name\n", sizeof t.workload) > 0);
    struct sim_run_result runs[2];
    memset(runs, 0, sizeof runs);
    runs[0].policy = runs[1].policy = PLACE_POLICY_BESTFIT;
    runs[0].seed = 1;
    runs[1].seed = 2;
    runs[0].unallocated_pct_100 = 4.0;
    runs[1].unallocated_pct_100 = 6.0;
    runs[0].alloc_pct_130 = runs[1].alloc_pct_130 = 90.0;
    char *j = json_of(&t, runs, 2);
    assert_non_null(strstr(j, "\"policy\":\"bestfit\""));
    assert_non_null(strstr(j, "\"workload\":\"we\\\"ird\\\\name\\u000a\""));
    assert_non_null(strstr(j, "\"seeds\":[1,2]"));
    assert_non_null(strstr(j,
                           "\"unallocated_gpu_pct_at_arrival_100\":{\"mean\":5.0000,\"sd\":1.4142,"
                           "\"min\":4.0000,\"max\":6.0000}"));
    assert_non_null(strstr(j, "\"allocation_pct_at_arrival_130\":{\"mean\":90.0000,\"sd\":0.0000"));
    assert_null(strstr(j, "seconds"));
    free(j);
    sim_trace_free(&t);
}

/* Shapes of the rejected-pods breakdown, and a run where the failures are known: one
 * node with 2 GPUs and pods that cannot all fit. */
static void test_failed_by_shape(void **state)
{
    (void)state;
    struct sim_pod p = {.gpu_count = 0};
    assert_int_equal(sim_pod_shape(&p), SIM_SHAPE_CPU);
    p.gpu_count = 1;
    p.gpu_milli = 999;
    assert_int_equal(sim_pod_shape(&p), SIM_SHAPE_SHARE);
    p.gpu_milli = 1000;
    assert_int_equal(sim_pod_shape(&p), SIM_SHAPE_GPU1);
    p.gpu_count = 2;
    assert_int_equal(sim_pod_shape(&p), SIM_SHAPE_GPU2);
    p.gpu_count = 3;
    assert_int_equal(sim_pod_shape(&p), SIM_SHAPE_GPU4);
    p.gpu_count = 8;
    assert_int_equal(sim_pod_shape(&p), SIM_SHAPE_GPU8);
    assert_string_equal(sim_shape_name(SIM_SHAPE_SHARE), "share");
    assert_string_equal(sim_shape_name(SIM_SHAPE_COUNT), "unknown");

    /* One node, 2 GPUs, 64 cores; two whole-GPU pods of 60 cores each. 2000 milli of
     * requests against a 2600 target: a clone would pass it, so none is added. The first
     * pod fits, the second lacks CPU and fails at arrival 2000 milli = 100 %. */
    assert_int_equal(write_file("test_sim_n2.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
                                                   "n0,64000,262144,2,T4\n"),
                     0);
    assert_int_equal(write_file("test_sim_p2.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                                   "a,60000,1024,1,1000\n"
                                                   "b,60000,1024,1,1000\n"),
                     0);
    struct sim_trace t;
    struct vg_err err = {0};
    assert_int_equal(sim_trace_load(&t, "test_sim_n2.csv", "test_sim_p2.csv", &err), 0);
    unlink("test_sim_n2.csv");
    unlink("test_sim_p2.csv");
    struct sim_options opt = {.fgd_mix = SIM_MIX_ORACLE, .default_mix = SIM_MIX_LEARNED};
    struct sim_run_result r;
    assert_int_equal(sim_run(&t, PLACE_POLICY_DEFAULT, 42, &opt, &r, &err), 0);
    assert_int_equal(r.pods, 2);
    assert_int_equal(r.failed_pods, 1);
    assert_int_equal(r.failed_100[SIM_SHAPE_GPU1], 1);
    assert_int_equal(r.failed_100_milli[SIM_SHAPE_GPU1], 1000);
    uint64_t counted = 0, milli = 0;
    for (int k = 0; k < SIM_SHAPE_COUNT; k++) {
        counted += r.failed_100[k];
        milli += r.failed_100_milli[k];
    }
    assert_int_equal(counted, 1);
    assert_int_equal(milli, 1000);
    /* The JSON carries the breakdown as mean pods and GPUs per shape. */
    char *j = json_of(&t, &r, 1);
    assert_non_null(strstr(j, "\"failed_at_arrival_100_by_shape\":{\"cpu\":{\"pods\":0.0,"
                              "\"gpus\":0.00},\"share\":"));
    free(j);
    sim_trace_free(&t);
}

/* A trace whose pods ask for no GPU cannot fill the cluster's GPUs: the run is refused
 * with a message, instead of adding CPU-only pods without end. */
static void test_cpu_only_trace_is_refused(void **state)
{
    (void)state;
    assert_int_equal(write_file("test_sim_n3.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
                                                   "n0,64000,262144,2,T4\n"),
                     0);
    assert_int_equal(write_file("test_sim_p3.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                                   "a,1000,1024,0,0\n"
                                                   "b,2000,1024,0,0\n"),
                     0);
    struct sim_trace t;
    struct vg_err err = {0};
    assert_int_equal(sim_trace_load(&t, "test_sim_n3.csv", "test_sim_p3.csv", &err), 0);
    unlink("test_sim_n3.csv");
    unlink("test_sim_p3.csv");
    struct sim_options opt = {.fgd_mix = SIM_MIX_ORACLE, .default_mix = SIM_MIX_LEARNED};
    struct sim_run_result r;
    assert_int_equal(sim_run(&t, PLACE_POLICY_DEFAULT, 42, &opt, &r, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "no pod in the trace requests a GPU"));
    sim_trace_free(&t);
}

/* A missing or oversized trace file is named in the error. */
static void test_trace_file_errors(void **state)
{
    (void)state;
    struct sim_trace t;
    struct vg_err err = {0};
    assert_int_equal(sim_trace_load(&t, "test_sim_missing.csv", "x.csv", &err), -ENOENT);
    assert_string_equal(err.msg, "test_sim_missing.csv: cannot open: No such file or directory");
    assert_null(t.cluster);
    assert_int_equal(sim_trace_load(&t, ".", "x.csv", &err), -EISDIR);
    assert_string_equal(err.msg, ".: is a directory");
}

static const char *openb_dir(void)
{
    const char *dir = getenv("VGPU_OPENB_DIR");
    return dir != NULL && dir[0] != '\0' ? dir : VGPU_OPENB_DEFAULT_DIR;
}

static void test_openb_trace_counts(void **state)
{
    (void)state;
    char nodes[4096], pods[4096];
    assert_true(vg_snprintf(nodes, sizeof nodes, "%s/openb_node_list_gpu_node.csv", openb_dir()) >
                0);
    assert_true(vg_snprintf(pods, sizeof pods, "%s/openb_pod_list_default.csv", openb_dir()) > 0);
    if (access(nodes, R_OK) != 0 || access(pods, R_OK) != 0)
        vg_test_skip("the openb trace in %s (set VGPU_OPENB_DIR)", openb_dir());
    struct sim_trace t;
    struct vg_err err = {0};
    assert_int_equal(sim_trace_load(&t, nodes, pods, &err), 0);
    /* docs/openb.md: "Files and schemas" and the typical set. */
    assert_int_equal(t.cluster->node_count, 1213);
    assert_int_equal(t.cluster->gpu_count, 6212);
    assert_int_equal(t.pod_count, 8152);
    assert_int_equal(t.typical.count, 35);
    assert_string_equal(t.workload, "default");
    /* One run of BestFit lands in the paper's neighbourhood (7.14 %, seeds 6.96-7.36). */
    struct sim_options opt = {0};
    struct sim_run_result r;
    assert_int_equal(sim_run(&t, PLACE_POLICY_BESTFIT, 42, &opt, &r, &err), 0);
    assert_true(r.unallocated_pct_100 > 6.0 && r.unallocated_pct_100 < 8.5);
    sim_trace_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_nodes_and_pods),
        cmocka_unit_test(test_parse_errors_name_file_and_line),
        cmocka_unit_test(test_typical_set),
        cmocka_unit_test(test_replay_is_deterministic),
        cmocka_unit_test(test_json_writer),
        cmocka_unit_test(test_failed_by_shape),
        cmocka_unit_test(test_cpu_only_trace_is_refused),
        cmocka_unit_test(test_trace_file_errors),
        cmocka_unit_test(test_openb_trace_counts),
    };
    return VG_TEST_RUN(tests);
}
