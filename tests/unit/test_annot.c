/* Unit tests for src/annot: the node inventory and pod decision annotations. Every
 * malformed form is refused with a message naming the field; good ones round-trip. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "annot/annot.h"
#include "base/str.h"

static const char *inventory_json =
    "{\"version\":1,\"heartbeat\":1763780000,\"mode\":\"vgpu\",\"gpus\":["
    "{\"uuid\":\"GPU-a\",\"index\":0,\"model\":\"NVIDIA H100 80GB HBM3\",\"memoryMiB\":81559,"
    "\"cores\":100,\"slots\":10,\"numa\":0,\"healthy\":true},"
    "{\"uuid\":\"GPU-b\",\"index\":1,\"model\":\"NVIDIA H100 80GB HBM3\",\"memoryMiB\":81559,"
    "\"cores\":100,\"slots\":10,\"healthy\":false,\"future\":{\"x\":1}}]}";

static void test_inventory_decode(void **state)
{
    (void)state;
    struct annot_inventory inv;
    struct vg_err err = {0};
    int rc = annot_inventory_decode(inventory_json, strlen(inventory_json), &inv, &err);
    if (rc != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(inv.gpu_count, 2);
    assert_true(inv.heartbeat == 1763780000);
    assert_int_equal(inv.mode, ANNOT_MODE_VGPU);
    assert_string_equal(inv.gpus[0].model, "NVIDIA H100 80GB HBM3");
    assert_true(inv.gpus[1].memory_mib == 81559);
    assert_int_equal(inv.gpus[1].slots, 10);
    assert_int_equal(inv.gpus[0].numa, 0);
    assert_int_equal(inv.gpus[1].numa, -1); /* absent: unknown */
    assert_true(inv.gpus[0].healthy);
    assert_false(inv.gpus[1].healthy);
}

static void test_inventory_round_trip(void **state)
{
    (void)state;
    struct annot_inventory a, b;
    struct vg_err err;
    assert_int_equal(annot_inventory_decode(inventory_json, strlen(inventory_json), &a, &err), 0);
    a.mode = ANNOT_MODE_MIG;
    char *text = annot_inventory_encode(&a, &err);
    assert_non_null(text);
    assert_int_equal(annot_inventory_decode(text, strlen(text), &b, &err), 0);
    assert_memory_equal(&a, &b, sizeof a);
    /* Encoding is deterministic: sorted keys, compact. */
    char *again = annot_inventory_encode(&b, &err);
    assert_string_equal(text, again);
    assert_non_null(strstr(text, "\"mode\":\"mig\""));
    free(text);
    free(again);
}

/* Replaces the first occurrence of from with to in the inventory base and expects a
 * refusal whose message contains needle. */
static void expect_refused_from(const char *base, const char *from, const char *to,
                                const char *needle)
{
    char buf[4096];
    const char *at = strstr(base, from);
    assert_non_null(at);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - base), base, to, at + strlen(from));
    struct annot_inventory inv;
    struct vg_err err = {0};
    int rc = annot_inventory_decode(buf, strlen(buf), &inv, &err);
    if (rc == 0)
        fail_msg("accepted: %s", buf);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("message '%s' lacks '%s' for %s", err.msg, needle, buf);
}

/* The same, in the good inventory. */
static void expect_inventory_refused(const char *from, const char *to, const char *needle)
{
    expect_refused_from(inventory_json, from, to, needle);
}

static void test_inventory_malformed(void **state)
{
    (void)state;
    expect_inventory_refused("\"version\":1", "\"version\":2", "version 2");
    expect_inventory_refused("\"version\":1", "\"version\":\"1\"", "version");
    expect_inventory_refused("\"heartbeat\":1763780000", "\"heartbeat\":-5", "heartbeat");
    expect_inventory_refused("\"mode\":\"vgpu\"", "\"mode\":\"turbo\"", "turbo");
    expect_inventory_refused("\"memoryMiB\":81559", "\"memoryMiB\":0", "gpus[0].memoryMiB");
    expect_inventory_refused("\"memoryMiB\":81559", "\"memoryMiB\":1.5", "not an integer");
    expect_inventory_refused("\"cores\":100", "\"cores\":101", "gpus[0].cores");
    expect_inventory_refused("\"slots\":10", "\"slots\":0", "slots");
    expect_inventory_refused("\"numa\":0", "\"numa\":\"zero\"", "numa");
    expect_inventory_refused("\"healthy\":true", "\"healthy\":1", "healthy");
    expect_inventory_refused("\"uuid\":\"GPU-b\"", "\"uuid\":\"GPU-a\"", "listed twice");
    expect_inventory_refused("\"uuid\":\"GPU-a\"", "\"uuid\":\"\"", "uuid");
    expect_inventory_refused("\"uuid\":\"GPU-a\"", "\"uuid\":\"GPU-a\",\"uuid\":\"GPU-z\"",
                             "not JSON");
    expect_inventory_refused("\"gpus\":[", "\"gpus\":{\"a\":[", "not JSON");
    expect_inventory_refused("{\"version\"", "[{\"version\"", "not JSON");
    const char *bad[] = {"", "null", "[]", "{}", "{\"version\":1}", "\"x\"", "{\"version\":1,"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct annot_inventory inv;
        struct vg_err err = {0};
        assert_true(annot_inventory_decode(bad[i], strlen(bad[i]), &inv, &err) < 0);
        assert_true(err.msg[0] != '\0');
    }
}

/* The optional "held" list: absent in an older inventory, kept and round-tripped when
 * written, every malformed entry refused naming the field, and the encoder never writes
 * what the decoder would refuse (it would cost the node its inventory). */
static const char *held_json =
    "{\"version\":1,\"heartbeat\":1763780000,\"mode\":\"vgpu\",\"gpus\":["
    "{\"uuid\":\"GPU-a\",\"index\":0,\"model\":\"A\",\"memoryMiB\":100,\"cores\":100,"
    "\"slots\":4,\"healthy\":true},{\"uuid\":\"GPU-b\",\"index\":1,\"model\":\"A\","
    "\"memoryMiB\":100,\"cores\":100,\"slots\":4,\"healthy\":true}],\"held\":["
    "{\"pod\":\"0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9\",\"container\":\"infer\",\"gpu\":1,"
    "\"seconds\":2147483647},{\"pod\":\"0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9\","
    "\"container\":\"infer\",\"gpu\":0,\"seconds\":0,\"future\":true}]}";

static void expect_held_refused(const char *from, const char *to, const char *needle)
{
    expect_refused_from(held_json, from, to, needle);
}

static void test_inventory_held(void **state)
{
    (void)state;
    static struct annot_inventory a, b;
    struct vg_err err = {0};
    assert_int_equal(annot_inventory_decode(inventory_json, strlen(inventory_json), &a, &err), 0);
    assert_int_equal(a.held_count, 0);
    char *text = annot_inventory_encode(&a, &err);
    assert_non_null(text);
    assert_null(strstr(text, "held")); /* nothing to show: the field stays out */
    free(text);
    int rc = annot_inventory_decode(held_json, strlen(held_json), &a, &err);
    if (rc != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(a.held_count, 2);
    assert_string_equal(a.held[0].pod, "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9");
    assert_string_equal(a.held[0].container, "infer");
    assert_int_equal(a.held[0].gpu, 1);
    assert_int_equal(a.held[0].seconds, 2147483647u);
    assert_int_equal(a.held[1].gpu, 0);
    assert_int_equal(a.held[1].seconds, 0);
    text = annot_inventory_encode(&a, &err);
    assert_non_null(text);
    assert_int_equal(annot_inventory_decode(text, strlen(text), &b, &err), 0);
    assert_memory_equal(&a, &b, sizeof a);
    free(text);

    expect_held_refused("\"seconds\":2147483647", "\"seconds\":2147483648", "held[0].seconds");
    expect_held_refused("\"seconds\":0", "\"seconds\":-1", "held[1].seconds");
    expect_held_refused("\"seconds\":0", "\"seconds\":\"0\"", "held[1].seconds");
    expect_held_refused("\"gpu\":1", "\"gpu\":2", "held[0].gpu");
    expect_held_refused("\"container\":\"infer\"", "\"container\":\"../etc\"", "container");
    expect_held_refused("\"container\":\"infer\"", "\"container\":\"Infer\"", "container");
    expect_held_refused("\"pod\":\"0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9\"", "\"pod\":\"a/b\"",
                        "held[0].pod");
    expect_held_refused("\"gpu\":0", "\"gpu\":1", "listed twice");
    expect_held_refused("\"held\":[", "\"held\":{\"x\":[", "not JSON");
    expect_held_refused("\"held\":[{", "\"held\":[7,{", "held[0]: not an object");
    expect_held_refused("\"held\":[", "\"held\":7,\"x\":[", "held: not an array");

    /* More than ANNOT_HELD_MAX entries. */
    char big[16384];
    size_t n = (size_t)snprintf(big, sizeof big,
                                "{\"version\":1,\"heartbeat\":1,\"mode\":\"vgpu\",\"gpus\":[{"
                                "\"uuid\":\"GPU-a\",\"index\":0,\"model\":\"A\",\"memoryMiB\":1,"
                                "\"cores\":100,\"slots\":4,\"healthy\":true}],\"held\":[");
    for (int i = 0; i <= ANNOT_HELD_MAX; i++)
        n += (size_t)snprintf(big + n, sizeof big - n,
                              "%s{\"pod\":\"p%d\",\"container\":\"c\",\"gpu\":0,\"seconds\":1}",
                              i > 0 ? "," : "", i);
    n += (size_t)snprintf(big + n, sizeof big - n, "]}");
    assert_true(n < sizeof big);
    assert_int_equal(annot_inventory_decode(big, n, &b, &err), -E2BIG);
    assert_non_null(strstr(err.msg, "held"));

    /* The encoder's own checks. */
    b = a;
    b.held[1].gpu = 2;
    assert_null(annot_inventory_encode(&b, &err));
    b = a;
    b.held[1].gpu = 1;
    assert_null(annot_inventory_encode(&b, &err));
    assert_non_null(strstr(err.msg, "twice"));
    b = a;
    (void)snprintf(b.held[0].container, sizeof b.held[0].container, "a_b");
    assert_null(annot_inventory_encode(&b, &err));
    b = a;
    b.held_count = ANNOT_HELD_MAX + 1;
    assert_null(annot_inventory_encode(&b, &err));
}

/* The largest inventory the plugin can write still fits an annotation: 16 GPUs with the
 * longest names and full dynamic-MIG fields, and 64 held entries with the longest uid and
 * container names. Were it to pass ANNOT_MAX_BYTES the encoder would refuse it and the
 * node would publish no inventory at all. */
static void test_inventory_largest_fits(void **state)
{
    (void)state;
    static struct annot_inventory inv, back;
    memset(&inv, 0, sizeof inv);
    inv.heartbeat = INT64_MAX;
    inv.gpu_count = ANNOT_MAX_GPUS;
    for (unsigned g = 0; g < ANNOT_MAX_GPUS; g++) {
        struct annot_gpu *o = &inv.gpus[g];
        snprintf(o->uuid, sizeof o->uuid, "GPU-%059u", g);
        memset(o->model, 'M', sizeof o->model - 1);
        o->index = 1023;
        o->memory_mib = UINT64_C(1) << 40;
        o->cores = 100;
        o->slots = 1024;
        o->numa = 255;
        o->healthy = true;
        o->mig.slices = ANNOT_MIG_SLICES_MAX;
        o->mig.profile_count = ANNOT_MIG_PROFILES_MAX;
        for (unsigned k = 0; k < ANNOT_MIG_PROFILES_MAX; k++) {
            struct annot_mig_profile *p = &o->mig.profiles[k];
            snprintf(p->name, sizeof p->name, "%ug.%05ugb+me", k % 8 + 1, 10000 + k);
            p->id = 1023;
            p->sms = 1024;
            p->memory_mib = 1u << 24;
            p->size = 1;
            p->placements = 0xff;
        }
        o->mig.instance_count = ANNOT_MIG_INSTANCES_MAX;
        for (unsigned k = 0; k < ANNOT_MIG_INSTANCES_MAX; k++) {
            struct annot_mig_instance *in = &o->mig.instances[k];
            vg_strlcpy(in->profile, o->mig.profiles[0].name, sizeof in->profile);
            in->start = (uint8_t)k;
            in->size = 1;
            memset(in->pod, 'a', sizeof in->pod - 1);
        }
    }
    inv.held_count = ANNOT_HELD_MAX;
    for (unsigned i = 0; i < ANNOT_HELD_MAX; i++) {
        struct annot_held *h = &inv.held[i];
        memset(h->pod, 'p', ANNOT_LABEL_MAX);
        memset(h->container, 'c', ANNOT_LABEL_MAX);
        snprintf(h->pod + ANNOT_LABEL_MAX - 3, 4, "%03u", i);
        h->gpu = ANNOT_MAX_GPUS - 1;
        h->seconds = (uint32_t)ANNOT_HELD_SECONDS_MAX;
    }
    struct vg_err err = {0};
    char *text = annot_inventory_encode(&inv, &err);
    if (text == NULL)
        fail_msg("%s", err.msg);
    assert_true(strlen(text) <= ANNOT_MAX_BYTES);
    if (annot_inventory_decode(text, strlen(text), &back, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(back.held_count, ANNOT_HELD_MAX);
    print_message("largest inventory: %zu bytes of %d\n", strlen(text), ANNOT_MAX_BYTES);
    free(text);
}

static void test_inventory_bounds(void **state)
{
    (void)state;
    /* 17 GPUs: one more than a node may have. */
    char buf[8192];
    int n =
        snprintf(buf, sizeof buf, "{\"version\":1,\"heartbeat\":1,\"mode\":\"vgpu\",\"gpus\":[");
    for (int i = 0; i < ANNOT_MAX_GPUS + 1; i++)
        n += snprintf(buf + n, sizeof buf - (size_t)n,
                      "%s{\"uuid\":\"GPU-%d\",\"index\":%d,\"model\":\"m\",\"memoryMiB\":1,"
                      "\"cores\":100,\"slots\":1,\"healthy\":true}",
                      i ? "," : "", i, i);
    snprintf(buf + n, sizeof buf - (size_t)n, "]}");
    struct annot_inventory inv;
    struct vg_err err;
    assert_int_equal(annot_inventory_decode(buf, strlen(buf), &inv, &err), -E2BIG);
    assert_non_null(strstr(err.msg, "at most 16"));
    /* Oversized text is refused before it is parsed. */
    size_t big = ANNOT_MAX_BYTES + 1;
    char *huge = calloc(1, big + 1);
    memset(huge, ' ', big);
    assert_int_equal(annot_inventory_decode(huge, big, &inv, &err), -E2BIG);
    free(huge);
}

static const char *decision_json =
    "{\"version\":1,\"node\":\"node-a\",\"time\":1763780001,\"containers\":["
    "{\"name\":\"init\",\"gpus\":[]},"
    "{\"name\":\"main\",\"gpus\":[{\"uuid\":\"GPU-a\",\"memoryMiB\":3000,\"cores\":30},"
    "{\"uuid\":\"GPU-b\",\"memoryMiB\":3000,\"cores\":0}]}]}";

static void test_decision_round_trip(void **state)
{
    (void)state;
    struct annot_decision *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    struct vg_err err = {0};
    int rc = annot_decision_decode(decision_json, strlen(decision_json), a, &err);
    if (rc != 0)
        fail_msg("%s", err.msg);
    assert_string_equal(a->node, "node-a");
    assert_int_equal(a->container_count, 2);
    assert_string_equal(a->containers[1].name, "main");
    assert_int_equal(a->containers[0].gpu_count, 0);
    assert_int_equal(a->containers[1].gpu_count, 2);
    assert_int_equal(a->containers[1].gpus[0].cores, 30);
    char *text = annot_decision_encode(a, &err);
    assert_non_null(text);
    assert_int_equal(annot_decision_decode(text, strlen(text), b, &err), 0);
    assert_memory_equal(a, b, sizeof *a);
    free(text);
    free(a);
    free(b);
}

static void expect_decision_refused(const char *from, const char *to, const char *needle)
{
    char buf[4096];
    const char *at = strstr(decision_json, from);
    assert_non_null(at);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - decision_json), decision_json, to,
             at + strlen(from));
    struct annot_decision *d = calloc(1, sizeof *d);
    struct vg_err err = {0};
    int rc = annot_decision_decode(buf, strlen(buf), d, &err);
    free(d);
    if (rc == 0)
        fail_msg("accepted: %s", buf);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void test_decision_malformed(void **state)
{
    (void)state;
    expect_decision_refused("\"name\":\"init\"", "\"name\":\"main\"", "listed twice");
    expect_decision_refused("\"name\":\"init\"", "\"nom\":\"init\"", "containers[0].name");
    expect_decision_refused("\"cores\":30", "\"cores\":300", "containers[1].gpus[0].cores");
    expect_decision_refused("\"memoryMiB\":3000", "\"memoryMiB\":-1", "memoryMiB");
    expect_decision_refused("\"node\":\"node-a\"", "\"node\":7", "node");
    expect_decision_refused("\"time\":1763780001", "\"time\":null", "time");
    expect_decision_refused("\"containers\":[", "\"containers\":7,\"x\":[", "not an array");
    expect_decision_refused("{\"name\":\"init\",\"gpus\":[]}", "\"init\"", "not an object");
    /* Names that would reach a path, the environment or a log line are refused here. */
    expect_decision_refused("\"name\":\"init\"", "\"name\":\"a\\nb\"", "not a container name");
    expect_decision_refused("\"name\":\"init\"", "\"name\":\"../x\"", "not a container name");
    expect_decision_refused("\"name\":\"init\"", "\"name\":\"a/b\"", "not a container name");
    expect_decision_refused("\"name\":\"init\"", "\"name\":\"Init\"", "not a container name");
    expect_decision_refused("\"node\":\"node-a\"", "\"node\":\"node a\"", "node: not a DNS");
    expect_decision_refused("\"node\":\"node-a\"", "\"node\":\"../n\"", "node: not a DNS");
}

/* RFC 1123 as Kubernetes applies it: what passes, what each near miss is. */
static void test_names(void **state)
{
    (void)state;
    static const char *const labels[] = {"a", "main", "cuda-0", "0", "9x", NULL};
    static const char *const not_labels[] = {
        "",     "-a",
        "a-",   "A",
        "a_b",  "a.b",
        "a/b",  "..",
        ".",    "a\nb",
        "a b",  "\xc3\xa9",
        "a\tb", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", /* 64 */
        NULL};
    for (int i = 0; labels[i]; i++)
        if (!annot_dns_label(labels[i]) || !annot_dns_subdomain(labels[i]))
            fail_msg("'%s' is a label", labels[i]);
    for (int i = 0; not_labels[i]; i++)
        if (annot_dns_label(not_labels[i]))
            fail_msg("'%s' is not a label", not_labels[i]);
    assert_false(annot_dns_label(NULL));
    assert_true(annot_dns_label(
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")); /* 63 */
    assert_true(annot_dns_subdomain("node-1.example.com"));
    assert_true(annot_dns_subdomain("a.b"));
    static const char *const not_subdomains[] = {"",    ".",   "a.",  ".a",   "a..b", "../x",
                                                 "a/b", "a_b", "A.b", "a.-b", "a\n",  NULL};
    for (int i = 0; not_subdomains[i]; i++)
        if (annot_dns_subdomain(not_subdomains[i]))
            fail_msg("'%s' is not a subdomain", not_subdomains[i]);
    char big[300];
    memset(big, 'a', sizeof big);
    for (int i = 63; i < 254; i += 64)
        big[i] = '.';
    big[253] = '\0'; /* 253 bytes: the longest */
    assert_true(annot_dns_subdomain(big));
    big[253] = 'a';
    big[254] = '\0';
    assert_false(annot_dns_subdomain(big));
    assert_true(annot_pod_uid("0b9d2c7e-5f7a-4a63-9c2b-8e2f5d1c3a4b"));
    assert_true(annot_pod_uid("uid-pods-7"));
    assert_false(annot_pod_uid("u_1"));
    assert_false(annot_pod_uid("../.."));
    assert_false(annot_pod_uid("a/b"));
    assert_false(annot_pod_uid(""));
    assert_true(annot_key_reserved("vgpu.io/decision"));
    assert_true(annot_key_reserved("vgpu.io/anything"));
    assert_false(annot_key_reserved("vgpu.io/policy"));
    assert_false(annot_key_reserved("hami.io/node-scheduler-policy"));
    assert_false(annot_key_reserved("vgpu.iox/decision"));
    assert_false(annot_key_reserved(NULL));
}

/* metav1.Time as Kubernetes writes it, to the second, and every near miss refused. */
static void test_kube_time(void **state)
{
    (void)state;
    assert_true(annot_kube_time("1970-01-01T00:00:00Z") == 0);
    assert_true(annot_kube_time("2026-11-25T20:01:00Z") == 1795636860);
    assert_true(annot_kube_time("2000-02-29T23:59:59Z") == 951868799); /* a 400th year */
    assert_true(annot_kube_time("2024-03-01T00:00:00Z") == 1709251200);
    assert_true(annot_kube_time("9999-12-31T23:59:59Z") == 253402300799);
    static const char *const bad[] = {
        "2026-11-25T20:01:00z",
        "2026-11-25t20:01:00Z",
        "2026-11-25T20:01:00+00:00",
        "2026-11-25T20:01:00.5Z",
        "2026-11-25 20:01:00Z",
        "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-02-29T00:00:00Z",
        "1900-02-29T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "2026-11-25T24:00:00Z",
        "2026-11-25T20:60:00Z",
        "2026-11-25T20:01:60Z",
        "1969-12-31T23:59:59Z",
        "+026-11-25T20:01:00Z",
        "2026-1-25T20:01:00Z",
        "",
        "2026-11-25T20:01:00Z\n",
        "2026-11-25T20:01:00ZZ",
        "2026-11-2 T20:01:00Z",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (annot_kube_time(bad[i]) != -1)
            fail_msg("accepted '%s'", bad[i]);
    assert_true(annot_kube_time(NULL) == -1);
}

/* A GPU in dynamic MIG mode: its profiles and instances decode and round-trip. */
#define MIG_GPU_HEAD                                                                               \
    "{\"version\":1,\"heartbeat\":5,\"mode\":\"vgpu\",\"gpus\":[{\"uuid\":\"GPU-a\",\"index\":0,"  \
    "\"model\":\"NVIDIA H100 80GB HBM3\",\"memoryMiB\":81559,\"cores\":100,\"slots\":1,"           \
    "\"healthy\":true,\"mig\":"
static const char *mig_ok =
    MIG_GPU_HEAD "{\"slices\":8,\"profiles\":["
                 "{\"name\":\"1g.10gb\",\"id\":19,\"memoryMiB\":9984,\"sms\":16,\"size\":1,"
                 "\"placements\":[0,1,2,3,4,5,6]},"
                 "{\"name\":\"3g.40gb\",\"id\":9,\"memoryMiB\":40448,\"sms\":60,\"size\":4,"
                 "\"placements\":[0,4]}],"
                 "\"instances\":[{\"profile\":\"1g.10gb\",\"start\":0,\"size\":1,"
                 "\"pod\":\"0b7c3c1e-7d2a-4d0e-9f51-2c7d1d3f4a10\"},"
                 "{\"profile\":\"2g.20gb\",\"start\":2,\"size\":2,\"pod\":\"\"}]}}]}";

static void test_inventory_mig(void **state)
{
    (void)state;
    static struct annot_inventory inv, back;
    struct vg_err err = {0};
    if (annot_inventory_decode(mig_ok, strlen(mig_ok), &inv, &err) != 0)
        fail_msg("%s", err.msg);
    const struct annot_mig *m = &inv.gpus[0].mig;
    assert_int_equal(m->slices, 8);
    assert_int_equal(m->profile_count, 2);
    assert_string_equal(m->profiles[1].name, "3g.40gb");
    assert_int_equal(m->profiles[1].id, 9);
    assert_int_equal(m->profiles[1].placements, 0x11);
    assert_int_equal(m->profiles[0].placements, 0x7f);
    assert_int_equal(m->instance_count, 2);
    assert_string_equal(m->instances[1].profile, "2g.20gb"); /* made by hand: not allowed */
    assert_string_equal(m->instances[0].pod, "0b7c3c1e-7d2a-4d0e-9f51-2c7d1d3f4a10");
    assert_int_equal(annot_mig_profile_find(m, "3g.40gb"), 1);
    assert_int_equal(annot_mig_profile_find(m, "7g.80gb"), -1);
    char *text = annot_inventory_encode(&inv, &err);
    assert_non_null(text);
    assert_int_equal(annot_inventory_decode(text, strlen(text), &back, &err), 0);
    assert_memory_equal(&inv, &back, sizeof inv);
    free(text);
    /* A GPU without the field has none. */
    assert_int_equal(annot_inventory_decode(inventory_json, strlen(inventory_json), &inv, &err), 0);
    assert_int_equal(inv.gpus[0].mig.slices, 0);
}

static void test_inventory_mig_malformed(void **state)
{
    (void)state;
    static struct annot_inventory inv;
    const struct {
        const char *mig, *field;
    } bad[] = {
        {"[]", "gpus[0].mig: not an object"},
        {"{\"slices\":9,\"profiles\":[],\"instances\":[]}", "gpus[0].mig.slices"},
        {"{\"slices\":8,\"instances\":[]}", "gpus[0].mig.profiles: missing"},
        {"{\"slices\":8,\"profiles\":[]}", "gpus[0].mig.instances: missing"},
        {"{\"slices\":8,\"profiles\":[{\"name\":\"1G.10GB\",\"id\":19,\"memoryMiB\":1,\"sms\":1,"
         "\"size\":1,\"placements\":[0]}],\"instances\":[]}",
         "gpus[0].mig.profiles[0].name"},
        {"{\"slices\":8,\"profiles\":[{\"name\":\"3g.40gb\",\"id\":9,\"memoryMiB\":1,\"sms\":1,"
         "\"size\":4,\"placements\":[0,5]}],\"instances\":[]}",
         "gpus[0].mig.profiles[0].placements[1]"},
        {"{\"slices\":8,\"profiles\":[{\"name\":\"3g.40gb\",\"id\":9,\"memoryMiB\":1,\"sms\":1,"
         "\"size\":9,\"placements\":[0]}],\"instances\":[]}",
         "gpus[0].mig.profiles[0].size"},
        {"{\"slices\":8,\"profiles\":[{\"name\":\"1g.10gb\",\"id\":19,\"memoryMiB\":1,\"sms\":1,"
         "\"size\":1,\"placements\":[0,0]}],\"instances\":[]}",
         "listed twice"},
        {"{\"slices\":8,\"profiles\":[{\"name\":\"1g.10gb\",\"id\":19,\"memoryMiB\":1,\"sms\":1,"
         "\"size\":1,\"placements\":[0]},{\"name\":\"1g.10gb\",\"id\":19,\"memoryMiB\":1,"
         "\"sms\":1,\"size\":1,\"placements\":[1]}],\"instances\":[]}",
         "gpus[0].mig.profiles[1].name"},
        {"{\"slices\":8,\"profiles\":[],\"instances\":[{\"profile\":\"3g.40gb\",\"start\":6,"
         "\"size\":4}]}",
         "gpus[0].mig.instances[0].start"},
        {"{\"slices\":8,\"profiles\":[],\"instances\":[{\"profile\":\"3g.40gb\",\"start\":4,"
         "\"size\":4},{\"profile\":\"1g.10gb\",\"start\":5,\"size\":1}]}",
         "gpus[0].mig.instances[1]: slices 5..5 overlap"},
        {"{\"slices\":8,\"profiles\":[],\"instances\":[{\"profile\":\"1g.10gb\",\"start\":0,"
         "\"size\":1,\"pod\":\"../x\"}]}",
         "gpus[0].mig.instances[0].pod"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[2048];
        snprintf(text, sizeof text, MIG_GPU_HEAD "%s}]}", bad[i].mig);
        struct vg_err err = {0};
        if (annot_inventory_decode(text, strlen(text), &inv, &err) == 0)
            fail_msg("accepted %s", bad[i].mig);
        if (strstr(err.msg, bad[i].field) == NULL)
            fail_msg("'%s' does not name %s", err.msg, bad[i].field);
    }
}

static void test_decision_mig(void **state)
{
    (void)state;
    static struct annot_decision d, back;
    const char *ok = "{\"version\":1,\"node\":\"n\",\"time\":1,\"containers\":[{\"name\":\"main\","
                     "\"gpus\":[{\"uuid\":\"GPU-a\",\"memoryMiB\":40448,\"cores\":0,"
                     "\"mig\":{\"profile\":\"3g.40gb\",\"start\":4}}]}]}";
    struct vg_err err = {0};
    if (annot_decision_decode(ok, strlen(ok), &d, &err) != 0)
        fail_msg("%s", err.msg);
    assert_string_equal(d.containers[0].gpus[0].mig_profile, "3g.40gb");
    assert_int_equal(d.containers[0].gpus[0].mig_start, 4);
    char *text = annot_decision_encode(&d, &err);
    assert_non_null(strstr(text, "\"mig\":{\"profile\":\"3g.40gb\",\"start\":4}"));
    assert_int_equal(annot_decision_decode(text, strlen(text), &back, &err), 0);
    assert_memory_equal(&d, &back, sizeof d);
    free(text);
    const char *bad[] = {"{\"profile\":\"3g.40gb\",\"start\":8}",
                         "{\"profile\":\"3g/40gb\","
                         "\"start\":0}",
                         "{\"start\":0}", "\"3g.40gb\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char t[512];
        snprintf(t, sizeof t,
                 "{\"version\":1,\"node\":\"n\",\"time\":1,\"containers\":[{\"name\":\"main\","
                 "\"gpus\":[{\"uuid\":\"GPU-a\",\"memoryMiB\":1,\"cores\":0,\"mig\":%s}]}]}",
                 bad[i]);
        if (annot_decision_decode(t, strlen(t), &d, &err) == 0)
            fail_msg("accepted %s", bad[i]);
        assert_non_null(strstr(err.msg, "containers[0].gpus[0].mig"));
    }
}

static void test_mig_refused(void **state)
{
    (void)state;
    static struct annot_mig_refused r, back;
    const char *ok = "{\"version\":1,\"refused\":[{\"uuid\":\"GPU-a\",\"profile\":\"3g.40gb\","
                     "\"start\":4,\"time\":1763780000,\"reason\":\"Insufficient Resources\"}]}";
    struct vg_err err = {0};
    if (annot_mig_refused_decode(ok, strlen(ok), &r, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(r.count, 1);
    assert_string_equal(r.refused[0].profile, "3g.40gb");
    assert_int_equal(r.refused[0].start, 4);
    assert_true(r.refused[0].time == 1763780000);
    char *text = annot_mig_refused_encode(&r, &err);
    assert_int_equal(annot_mig_refused_decode(text, strlen(text), &back, &err), 0);
    assert_memory_equal(&r, &back, sizeof r);
    free(text);
    const char *bad[] = {
        "{\"version\":1}",
        "{\"version\":1,\"refused\":[{\"uuid\":\"GPU-a\",\"profile\":\"3g.40gb\",\"start\":9,"
        "\"time\":1}]}",
        "{\"version\":1,\"refused\":[{\"uuid\":\"GPU-a\",\"profile\":\"\",\"start\":0,"
        "\"time\":1}]}",
        "{\"version\":1,\"refused\":[{\"uuid\":\"GPU-a\",\"profile\":\"1g.10gb\",\"start\":0}]}",
        "{\"version\":1,\"refused\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = '\0';
        if (annot_mig_refused_decode(bad[i], strlen(bad[i]), &r, &err) == 0)
            fail_msg("accepted %s", bad[i]);
        assert_true(err.msg[0] != '\0');
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inventory_decode),
        cmocka_unit_test(test_inventory_round_trip),
        cmocka_unit_test(test_inventory_malformed),
        cmocka_unit_test(test_inventory_bounds),
        cmocka_unit_test(test_inventory_held),
        cmocka_unit_test(test_inventory_largest_fits),
        cmocka_unit_test(test_decision_round_trip),
        cmocka_unit_test(test_decision_malformed),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_kube_time),
        cmocka_unit_test(test_inventory_mig),
        cmocka_unit_test(test_inventory_mig_malformed),
        cmocka_unit_test(test_decision_mig),
        cmocka_unit_test(test_mig_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
