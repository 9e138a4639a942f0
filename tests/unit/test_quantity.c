/* Pod resource values are Kubernetes quantities: what a user writes in
 * resources.limits (and what the API server hands vgpu-scheduler, canonicalized) is read
 * by the rule of docs/protocol.md, "Kubernetes quantities". These tests go through the
 * scheduler's pod decoding, so they hold for every path that reads a pod's requests. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "scheduler/pod.h"
#include "scheduler/sched.h"

/* A one-container pod whose limits are the given key/value pairs (NULL-terminated). */
static json_t *pod_with(const char *key, ...)
{
    json_t *limits = json_object();
    va_list ap;
    va_start(ap, key);
    for (const char *k = key; k != NULL; k = va_arg(ap, const char *))
        json_object_set_new(limits, k, json_string(va_arg(ap, const char *)));
    va_end(ap);
    return json_pack("{s:{s:s, s:s}, s:{s:[{s:s, s:{s:o}}]}}", "metadata", "name", "p", "namespace",
                     "default", "spec", "containers", "name", "main", "resources", "limits",
                     limits);
}

static int requests(json_t *pod, struct sched_container_request *out, struct vg_err *err)
{
    struct sched_options o;
    sched_options_default(&o);
    int n = sched_pod_requests(&o, pod, out, 1, err);
    json_decref(pod);
    return n;
}

static void test_gpumem_kubernetes_quantities(void **state)
{
    (void)state;
    const struct {
        const char *gpumem;
        uint64_t mib;
    } cases[] = {
        {"4Gi", 4096},  {"4096Mi", 4096}, {"4G", 3815},
        {"4096", 4096}, {"3k", 3000}, /* the API server's form of a plain 3000 */
        {"1e3", 1000},  {"0.5Gi", 512},   {"1.5Gi", 1536},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct sched_container_request r;
        struct vg_err err = {0};
        int n = requests(
            pod_with("nvidia.com/gpu", "1", "nvidia.com/gpumem", cases[i].gpumem, NULL), &r, &err);
        if (n != 1)
            fail_msg("gpumem '%s' refused: %s", cases[i].gpumem, err.msg);
        if (r.request.gpu_mem_mib != cases[i].mib)
            fail_msg("gpumem '%s' read as %llu MiB, want %llu", cases[i].gpumem,
                     (unsigned long long)r.request.gpu_mem_mib, (unsigned long long)cases[i].mib);
    }
}

static void test_gpumem_refusals_name_the_field(void **state)
{
    (void)state;
    const struct {
        const char *gpumem;
        const char *says;
    } cases[] = {
        {"4GiB", "4Gi"},    /* not a Kubernetes suffix; the hint is one Kubernetes takes */
        {"4096m", "milli"}, /* 4.096 to Kubernetes */
        {"-1Gi", "negative"}, {"4Gi!", "unknown suffix"},
        {"8Ei", "2^63-1"},    {"2Pi", "out of range"}, /* 2^31 MiB */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct sched_container_request r;
        struct vg_err err = {0};
        int n = requests(
            pod_with("nvidia.com/gpu", "1", "nvidia.com/gpumem", cases[i].gpumem, NULL), &r, &err);
        if (n >= 0)
            fail_msg("gpumem '%s' accepted", cases[i].gpumem);
        if (strstr(err.msg, "nvidia.com/gpumem") == NULL || strstr(err.msg, "main") == NULL)
            fail_msg("gpumem '%s': '%s' names neither field nor container", cases[i].gpumem,
                     err.msg);
        if (strstr(err.msg, cases[i].says) == NULL && strstr(err.msg, "above the most") == NULL)
            fail_msg("gpumem '%s': '%s' does not say '%s'", cases[i].gpumem, err.msg,
                     cases[i].says);
    }
}

static void test_counts_are_quantities_too(void **state)
{
    (void)state;
    struct sched_container_request r;
    struct vg_err err = {0};
    assert_int_equal(requests(pod_with("nvidia.com/gpu", "2", "nvidia.com/gpucores", "3e1",
                                       "nvidia.com/gpumem-percentage", "50", NULL),
                              &r, &err),
                     1);
    assert_int_equal(r.request.gpu_count, 2);
    assert_int_equal(r.request.gpu_milli, 300);
    assert_int_equal(r.request.gpu_mem_pct, 50);
    assert_true(requests(pod_with("nvidia.com/gpu", "0.5", NULL), &r, &err) < 0);
    assert_non_null(strstr(err.msg, "whole number"));
    assert_true(requests(pod_with("nvidia.com/gpu", "-1", NULL), &r, &err) < 0);
    assert_non_null(strstr(err.msg, "negative"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpumem_kubernetes_quantities),
        cmocka_unit_test(test_gpumem_refusals_name_the_field),
        cmocka_unit_test(test_counts_are_quantities_too),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
