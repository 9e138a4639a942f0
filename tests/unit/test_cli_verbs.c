/* src/cli's verbs (cli/verbs.h) called directly, against the API answers of
 * tests/data/cli (a node and a pod list as the API server returns them, and the pod
 * big's FailedScheduling event), through a fake source: every table below is what the
 * `vgpu` command printed for the same cluster before its verbs moved out of src/cmd, and
 * the refusals say what is wrong and print nothing. The clock is fixed 12 s after the
 * inventories' heartbeat. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "cli/verbs.h"

#define HEARTBEAT 1764000000 /* the fixture inventories' heartbeat */

/* ---- the fake API ---------------------------------------------------------------- */

struct fake {
    json_t *nodes, *pods, *events; /* list answers */
    /* One path answered otherwise: with text (not parsed as a list), or an error. */
    const char *bad_path, *bad_text;
    int bad_code;
    size_t gets;
};

static json_t *load(const char *name)
{
    char path[1024];
    (void)snprintf(path, sizeof path, "%s/%s", CLI_DATA_DIR, name);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (doc == NULL)
        fail_msg("%s: %s", path, je.text);
    return doc;
}

static json_t *find_pod(json_t *list, const char *ns, const char *name)
{
    size_t i;
    json_t *pod;
    json_array_foreach(json_object_get(list, "items"), i, pod)
    {
        json_t *m = json_object_get(pod, "metadata");
        if (strcmp(json_string_value(json_object_get(m, "namespace")), ns) == 0 &&
            strcmp(json_string_value(json_object_get(m, "name")), name) == 0)
            return pod;
    }
    return NULL;
}

/* As the API server answers: the lists, one pod by path, 404 for anything else. */
static int fake_get(void *ctx, const char *path, json_t **out, struct vg_err *err)
{
    struct fake *f = ctx;
    f->gets++;
    if (f->bad_path != NULL && strcmp(path, f->bad_path) == 0) {
        if (f->bad_code != 0)
            return vg_err_set(err, f->bad_code, "the API server at http://fake: injected");
        *out = json_loads(f->bad_text, JSON_DECODE_ANY, NULL);
        assert_non_null(*out);
        return 0;
    }
    char ns[256], rest[512];
    json_t *answer = NULL;
    if (strcmp(path, "/api/v1/nodes") == 0)
        answer = f->nodes;
    else if (strcmp(path, "/api/v1/pods") == 0)
        answer = f->pods;
    else if (sscanf(path, "/api/v1/namespaces/%255[^/]/%511s", ns, rest) == 2) {
        if (strncmp(rest, "events?", 7) == 0)
            answer = f->events;
        else if (strncmp(rest, "pods/", 5) == 0)
            answer = find_pod(f->pods, ns, rest + 5);
    }
    if (answer == NULL)
        return vg_err_set(err, -ENOENT, "%s: not found", path);
    *out = json_incref(answer);
    return 0;
}

static int setup(void **state)
{
    struct fake *f = calloc(1, sizeof *f);
    f->nodes = load("nodes.json");
    f->pods = load("pods.json");
    f->events = load("events.json");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fake *f = *state;
    json_decref(f->nodes);
    json_decref(f->pods);
    json_decref(f->events);
    free(f);
    return 0;
}

/* ---- running a verb -------------------------------------------------------------- */

typedef int (*verb_fn)(const struct cli_source *, const struct cli_options *, FILE *, FILE *,
                       struct vg_err *);

struct result {
    int rc;
    struct vg_err err;
    char *out, *diag; /* what the verb wrote on each */
};

static struct cli_options options(void)
{
    return (struct cli_options){.now_unix = HEARTBEAT + 12, .now_mono_ms = 5000000};
}

static struct result run(verb_fn verb, struct fake *f, const struct cli_options *o)
{
    struct cli_source src = {.get = fake_get, .ctx = f, .namespace = "team"};
    struct result r = {0};
    size_t out_len = 0, diag_len = 0;
    FILE *out = open_memstream(&r.out, &out_len);
    FILE *diag = open_memstream(&r.diag, &diag_len);
    r.rc = verb(&src, o, out, diag, &r.err);
    fclose(out);
    fclose(diag);
    return r;
}

static void result_free(struct result *r)
{
    free(r->out);
    free(r->diag);
}

/* A refusal: rc, a message holding want, and nothing printed. */
static void assert_refused(struct result *r, int rc, const char *want)
{
    assert_int_equal(r->rc, rc);
    if (strstr(r->err.msg, want) == NULL)
        fail_msg("message '%s' does not say '%s'", r->err.msg, want);
    assert_string_equal(r->out, "");
    assert_string_equal(r->diag, "");
}

/* ---- nodes and gpus -------------------------------------------------------------- */

static void test_nodes(void **state)
{
    struct cli_options o = options();
    struct result r = run(cli_nodes, *state, &o);
    assert_int_equal(r.rc, 0);
    assert_string_equal(
        r.out, "NODE       GPUS   HEALTHY   FREE   MEMORY       COMPUTE    PODS   HEARTBEAT\n"
               "node-a     2      2         1      6Gi/31.3Gi   50%/200%   2      12s\n"
               "node-b     1      1         1      0/7.8Gi      0%/100%    0      12s\n"
               "node-bad   -      -         -      -            -          -      invalid "
               "inventory\n");
    /* the bad inventory's reason, beside the table */
    assert_non_null(strstr(r.diag, "warning: node node-bad: "));
    result_free(&r);

    o.output = CLI_OUTPUT_WIDE;
    r = run(cli_nodes, *state, &o);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.out,
                        "NODE       GPUS   HEALTHY   FREE   MEMORY       COMPUTE    PODS   "
                        "HEARTBEAT           MODE   MODEL                   STRANDED\n"
                        "node-a     2      2         1      6Gi/31.3Gi   50%/200%   2      12s    "
                        "             vgpu   NVIDIA H100 80GB HBM3   9.6Gi+50%\n"
                        "node-b     1      1         1      0/7.8Gi      0%/100%    0      12s    "
                        "             vgpu   NVIDIA H100 80GB HBM3   0+0%\n"
                        "node-bad   -      -         -      -            -          -      "
                        "invalid inventory\n");
    result_free(&r);
}

static void test_nodes_json(void **state)
{
    struct cli_options o = options();
    o.output = CLI_OUTPUT_JSON;
    struct result r = run(cli_nodes, *state, &o);
    assert_int_equal(r.rc, 0);
    json_t *doc = json_loads(r.out, 0, NULL);
    assert_non_null(doc);
    json_t *nodes = json_object_get(doc, "nodes");
    assert_int_equal(json_array_size(nodes), 3); /* cpu-only is not a vgpu node */
    json_t *a = json_array_get(nodes, 0);
    assert_string_equal(json_string_value(json_object_get(a, "name")), "node-a");
    assert_int_equal(json_integer_value(json_object_get(a, "heartbeatAgeSeconds")), 12);
    assert_int_equal(json_integer_value(json_object_get(a, "strandedMemoryMiB")), 16000 - 6144);
    json_t *g0 = json_array_get(json_object_get(a, "gpus"), 0);
    assert_int_equal(json_integer_value(json_object_get(g0, "memoryAllocatedMiB")), 6144);
    assert_int_equal(json_integer_value(json_object_get(g0, "coresAllocated")), 50);
    assert_int_equal(json_integer_value(json_object_get(g0, "tenants")), 2);
    assert_int_equal(json_integer_value(json_object_get(g0, "pods")), 2);
    json_t *bad = json_array_get(nodes, 2);
    assert_string_equal(json_string_value(json_object_get(bad, "name")), "node-bad");
    assert_non_null(json_string_value(json_object_get(bad, "error")));
    json_decref(doc);
    result_free(&r);
}

static void test_gpus(void **state)
{
    struct cli_options o = options();
    o.output = CLI_OUTPUT_WIDE;
    struct result r = run(cli_gpus, *state, &o);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.out,
                        "NODE     GPU   MODEL                   MEMORY       COMPUTE    TENANTS   "
                        "HEALTH    PODS   UUID\n"
                        "node-a   0     NVIDIA H100 80GB HBM3   6Gi/15.6Gi   50%/100%   2/4       "
                        "Healthy   2      GPU-node-a-0\n"
                        "node-a   1     NVIDIA H100 80GB HBM3   0/15.6Gi     0%/100%    0/4       "
                        "Healthy   0      GPU-node-a-1\n"
                        "node-b   0     NVIDIA H100 80GB HBM3   0/7.8Gi      0%/100%    0/4       "
                        "Healthy   0      GPU-node-b-0\n");
    result_free(&r);
}

/* A node named by whoever may create nodes reaches the terminal with '?' for control
 * bytes; no vgpu node at all is said on diag, not as an empty table. */
static void test_nodes_hostile_and_empty(void **state)
{
    struct fake *f = *state;
    struct cli_options o = options();
    json_t *evil = json_deep_copy(f->nodes);
    json_t *b = json_array_get(json_object_get(evil, "items"), 2);
    json_object_set_new(json_object_get(b, "metadata"), "name", json_string("b\033[2J\007"));
    json_t *saved = f->nodes;
    f->nodes = evil;
    struct result r = run(cli_nodes, f, &o);
    assert_int_equal(r.rc, 0);
    assert_null(strchr(r.out, '\033'));
    assert_null(strchr(r.out, '\007'));
    assert_non_null(strstr(r.out, "\nb?[2J?   "));
    result_free(&r);

    f->bad_path = "/api/v1/nodes";
    f->bad_text = "{\"kind\": \"NodeList\", \"items\": []}";
    r = run(cli_nodes, f, &o);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.out, "");
    assert_string_equal(r.diag, "No GPU nodes found (no node carries a vgpu.io/gpus inventory).\n");
    result_free(&r);
    f->bad_path = NULL;
    f->nodes = saved;
    json_decref(evil);
}

/* ---- pods ------------------------------------------------------------------------ */

static void test_pods(void **state)
{
    struct cli_options o = options();
    struct result r = run(cli_pods, *state, &o); /* the source's namespace: team */
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.out, "NAME      STATUS    NODE        GPUS   MEMORY   COMPUTE\n"
                               "big       Pending   <pending>   1      19.5Gi   0%\n"
                               "small     Pending   <pending>   1      1000Mi   10%\n"
                               "train-0   Running   node-a      1      4Gi      30%\n"
                               "train-1   Running   node-a      1      2Gi      20%\n");
    assert_string_equal(r.diag, "");
    result_free(&r);

    o.all_namespaces = true;
    o.output = CLI_OUTPUT_WIDE;
    r = run(cli_pods, *state, &o);
    assert_int_equal(r.rc, 0);
    assert_string_equal(
        r.out,
        "NAMESPACE   NAME        STATUS    NODE        GPUS   MEMORY   COMPUTE   ALLOCATION\n"
        "other       elsewhere   Pending   <pending>   1      100%     100%\n"
        "team        big         Pending   <pending>   1      19.5Gi   0%\n"
        "team        small       Pending   <pending>   1      1000Mi   10%\n"
        "team        train-0     Running   node-a      1      4Gi      30%       main=0:4Gi/30%\n"
        "team        train-1     Running   node-a      1      2Gi      20%       main=0:2Gi/20%\n");
    result_free(&r);

    o = options();
    o.namespace = "nobody";
    r = run(cli_pods, *state, &o);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.out, "");
    assert_string_equal(r.diag, "No GPU pods found in nobody namespace.\n");
    result_free(&r);
}

static void test_pods_json(void **state)
{
    struct cli_options o = options();
    o.output = CLI_OUTPUT_JSON;
    o.namespace = "team";
    struct result r = run(cli_pods, *state, &o);
    assert_int_equal(r.rc, 0);
    json_t *doc = json_loads(r.out, 0, NULL);
    assert_non_null(doc);
    json_t *pods = json_object_get(doc, "pods");
    assert_int_equal(json_array_size(pods), 4); /* web asks for no GPUs */
    json_t *big = json_array_get(pods, 0), *train = json_array_get(pods, 2);
    assert_true(json_is_null(json_object_get(big, "decision")));
    assert_int_equal(json_integer_value(json_object_get(
                         json_array_get(json_object_get(big, "request"), 0), "memoryMiB")),
                     20000);
    json_t *d = json_object_get(train, "decision");
    assert_string_equal(json_string_value(json_object_get(d, "node")), "node-a");
    assert_int_equal(json_integer_value(json_object_get(d, "time")), HEARTBEAT - 3600);
    json_decref(doc);
    result_free(&r);
}

/* ---- explain --------------------------------------------------------------------- */

static void test_explain_bound(void **state)
{
    struct cli_options o = options();
    o.pod = "train-0";
    struct result r = run(cli_explain, *state, &o);
    assert_int_equal(r.rc, 0);
    assert_string_equal(
        r.out,
        "Pod team/train-0 asks for:\n"
        "  container main: 1 GPU, each with 4Gi of memory and 30% of its compute\n"
        "It runs on node node-a (Running).\n"
        "vgpu-scheduler placed it there at 2025-11-24 15:00:00 UTC:\n"
        "  container main: GPU 0 (GPU-node-a-0): 4Gi of its 15.6Gi of memory, 30% of its "
        "compute\n"
        "    the GPU holds 2 tenants now: 6Gi of 15.6Gi and 50% of its compute allocated\n"
        "Why there: the node policy binpack: of the nodes that fit, the one already most "
        "allocated, so that whole nodes stay free for large pods; inside the node, the least "
        "used GPU that fits (spread).\n");
    result_free(&r);
}

static void test_explain_pending(void **state)
{
    struct cli_options o = options();
    o.pod = "big";
    struct result r = run(cli_explain, *state, &o);
    assert_int_equal(r.rc, 0);
    assert_string_equal(
        r.out,
        "Pod team/big asks for:\n"
        "  container main: 1 GPU, each with 19.5Gi of memory and no compute limit\n"
        "No node can take it now. Each node, as vgpu-scheduler's filter sees the cluster now:\n"
        "cpu-only   node has no valid vgpu.io/gpus inventory\n"
        "node-a     no GPU with enough free memory, compute and slots   GPU 1 has the most free "
        "memory: 15.6Gi, with 100% of its compute and 4 of 4 tenant slots free\n"
        "node-b     no GPU with enough free memory, compute and slots   GPU 0 has the most free "
        "memory: 7.8Gi, with 100% of its compute and 4 of 4 tenant slots free\n"
        "node-bad   node has no valid vgpu.io/gpus inventory            no GPUs\n"
        "\n"
        "kube-scheduler's last FailedScheduling event (4 times, last at 2026-11-26T02:00:00Z):\n"
        "  0 of 3 nodes were available:\n"
        "    2 nodes: vgpu: no GPU with enough free memory, compute and slots\n"
        "    1 node: vgpu: node has no valid vgpu.io/gpus inventory\n"
        "  then: preemption: 0/3 nodes are available: 3 Preemption is not helpful for "
        "scheduling.\n");
    result_free(&r);
}

/* A pending pod that fits: the policy's node first (binpack: the fuller one), the other
 * that fits next, the node without a valid inventory last. */
static void test_explain_pending_that_fits(void **state)
{
    struct cli_options o = options();
    o.pod = "small";
    o.output = CLI_OUTPUT_JSON;
    struct result r = run(cli_explain, *state, &o);
    assert_int_equal(r.rc, 0);
    json_t *doc = json_loads(r.out, 0, NULL);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "status")), "pending");
    static const struct {
        const char *name;
        bool fits, chosen;
    } want[] = {{"node-a", true, true},
                {"cpu-only", false, false},
                {"node-b", true, false},
                {"node-bad", false, false}};
    json_t *nodes = json_object_get(doc, "nodes");
    assert_int_equal(json_array_size(nodes), 4);
    for (size_t i = 0; i < 4; i++) {
        json_t *n = json_array_get(nodes, i);
        assert_string_equal(json_string_value(json_object_get(n, "name")), want[i].name);
        assert_int_equal(json_is_true(json_object_get(n, "fits")), want[i].fits);
        assert_int_equal(json_is_true(json_object_get(n, "chosen")), want[i].chosen);
    }
    json_decref(doc);
    result_free(&r);
}

/* Heartbeat ages come from the clock the verb is given, not the machine's. */
static void test_nodes_use_the_given_clock(void **state)
{
    struct cli_options o = options();
    o.now_unix = HEARTBEAT + 3 * 3600 + 59;
    struct result r = run(cli_gpus, *state, &o);
    assert_int_equal(r.rc, 0);
    result_free(&r);
    r = run(cli_nodes, *state, &o);
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "\nnode-a     2      2         1      6Gi/31.3Gi   50%/200%   2  "
                                  "    3h\n"));
    result_free(&r);
    o.output = CLI_OUTPUT_JSON;
    r = run(cli_nodes, *state, &o);
    json_t *doc = json_loads(r.out, 0, NULL);
    assert_non_null(doc);
    json_t *a = json_array_get(json_object_get(doc, "nodes"), 0);
    assert_int_equal(json_integer_value(json_object_get(a, "heartbeatAgeSeconds")), 3 * 3600 + 59);
    json_decref(doc);
    result_free(&r);
}

static void test_explain_no_gpus(void **state)
{
    struct cli_options o = options();
    o.pod = "web";
    struct result r = run(cli_explain, *state, &o);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.out, "Pod team/web asks for no GPUs.\n"
                               "vgpu does not place it: kube-scheduler's other filters decide.\n");
    result_free(&r);
}

static void test_explain_refusals(void **state)
{
    struct fake *f = *state;
    struct cli_options o = options();
    o.pod = "no-such-pod";
    struct result r = run(cli_explain, f, &o);
    assert_refused(&r, -ENOENT, "pod \"no-such-pod\" not found in namespace \"team\"");
    result_free(&r);

    /* not names: refused before anything is asked of the API */
    size_t gets = f->gets;
    o.pod = "../../etc";
    r = run(cli_explain, f, &o);
    assert_refused(&r, -EINVAL, "\"team/../../etc\" is not a namespace and a pod name");
    result_free(&r);
    o.pod = "ok";
    o.namespace = "Team_A";
    r = run(cli_explain, f, &o);
    assert_refused(&r, -EINVAL, "\"Team_A/ok\" is not a namespace and a pod name");
    result_free(&r);
    assert_int_equal(f->gets, gets);

    /* an answer for the pod that is not an object */
    o = options();
    o.pod = "big";
    f->bad_path = "/api/v1/namespaces/team/pods/big";
    f->bad_text = "[1, 2]";
    r = run(cli_explain, f, &o);
    assert_refused(&r, -EBADMSG, "/api/v1/namespaces/team/pods/big: the answer is not an object");
    result_free(&r);
    f->bad_path = NULL;
}

/* ---- what the API answers badly, for every verb ----------------------------------- */

static void test_malformed_answers(void **state)
{
    struct fake *f = *state;
    static const struct {
        const char *path, *text;
        int code;
        const char *want;
    } cases[] = {
        {"/api/v1/nodes", "{\"kind\": \"NodeList\"}", -EBADMSG,
         "/api/v1/nodes: the answer has no items list"},
        {"/api/v1/pods", "{\"items\": {\"a\": 1}}", -EBADMSG,
         "/api/v1/pods: the answer has no items list"},
        {"/api/v1/pods", "{\"items\": [{}, 7]}", -EBADMSG,
         "/api/v1/pods: item 1 of the answer is not an object"},
        {"/api/v1/nodes", "\"NodeList\"", -EBADMSG, "/api/v1/nodes: the answer has no items list"},
        {"/api/v1/nodes", NULL, -ECONNREFUSED, "the API server at http://fake: injected"},
    };
    const verb_fn verbs[] = {cli_nodes, cli_gpus, cli_pods, cli_explain};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t v = 0; v < sizeof verbs / sizeof verbs[0]; v++) {
            f->bad_path = cases[i].path;
            f->bad_text = cases[i].text;
            f->bad_code = cases[i].code == -EBADMSG ? 0 : cases[i].code;
            struct cli_options o = options();
            o.pod = "train-0";
            o.output = v % 2 ? CLI_OUTPUT_JSON : CLI_OUTPUT_TABLE;
            struct result r = run(verbs[v], f, &o);
            assert_refused(&r, cases[i].code, cases[i].want);
            result_free(&r);
        }
    f->bad_path = NULL;
    f->bad_code = 0;
}

/* The output cannot be written: an error, not a silent success. */
static void test_unwritable_output(void **state)
{
    struct cli_options o = options();
    struct cli_source src = {.get = fake_get, .ctx = *state, .namespace = "team"};
    FILE *out = fopen("/dev/null", "r");
    assert_non_null(out);
    struct vg_err err = {0};
    assert_int_equal(cli_pods(&src, &o, out, stderr, &err), -EBADF);
    assert_non_null(strstr(err.msg, "cannot write the output"));
    fclose(out);
}

static void test_output_parse(void **state)
{
    (void)state;
    enum cli_output out = CLI_OUTPUT_TABLE;
    struct vg_err err = {0};
    assert_int_equal(cli_output_parse("wide", &out, &err), 0);
    assert_int_equal(out, CLI_OUTPUT_WIDE);
    assert_int_equal(cli_output_parse("json", &out, &err), 0);
    assert_int_equal(out, CLI_OUTPUT_JSON);
    static const char *const bad[] = {"yaml", "", "JSON", "wide ", "name"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        out = CLI_OUTPUT_WIDE;
        assert_int_equal(cli_output_parse(bad[i], &out, &err), -EINVAL);
        char want[64];
        (void)snprintf(want, sizeof want, "--output '%s': expected wide or json", bad[i]);
        assert_string_equal(err.msg, want);
        assert_int_equal(out, CLI_OUTPUT_WIDE); /* untouched */
    }
}

static void test_namespace(void **state)
{
    (void)state;
    struct cli_options o = {0};
    struct cli_source src = {.namespace = "ctx"};
    assert_string_equal(cli_namespace(&src, &o), "ctx");
    src.namespace = "";
    assert_string_equal(cli_namespace(&src, &o), "default");
    assert_string_equal(cli_namespace(NULL, &o), "default");
    o.namespace = "given";
    assert_string_equal(cli_namespace(&src, &o), "given");
}

/* ---- sim ------------------------------------------------------------------------- */

static char *slurp(const char *dir, const char *name)
{
    char path[1024];
    (void)snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    char *text = calloc(1, 1 << 16);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

static struct result run_sim(struct fake *f, const struct cli_options *o, struct cli_sim_run *sr)
{
    struct cli_source src = {.get = fake_get, .ctx = f, .namespace = "team"};
    struct result r = {0};
    size_t diag_len = 0;
    FILE *diag = open_memstream(&r.diag, &diag_len);
    r.rc = cli_sim_export(&src, o, diag, sr, &r.err);
    fclose(diag);
    r.out = calloc(1, 1);
    return r;
}

static void test_sim(void **state)
{
    char dir[] = "/tmp/test_cli_verbs.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char out_dir[1100];
    (void)snprintf(out_dir, sizeof out_dir, "%s/export", dir);
    struct cli_options o = options();
    o.out_dir = out_dir;
    o.export_only = true;
    struct cli_sim_run sr;
    struct result r = run_sim(*state, &o, &sr);
    assert_int_equal(r.rc, 0);
    assert_int_equal(sr.argc, 0);
    char want[4096];
    (void)snprintf(want, sizeof want,
                   "exported 2 GPU nodes to %s/nodes.csv and 6 pods to %s/pods.csv\n", out_dir,
                   out_dir);
    assert_string_equal(r.diag, want);
    result_free(&r);
    char *nodes = slurp(out_dir, "nodes.csv"), *pods = slurp(out_dir, "pods.csv");
    assert_string_equal(nodes, "sn,cpu_milli,memory_mib,gpu,model\n"
                               "node-a,64000,262144,2,NVIDIA H100 80GB HBM3\n"
                               "node-b,32000,131072,1,NVIDIA H100 80GB HBM3\n");
    assert_string_equal(pods, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                              "other/elsewhere,0,0,1,1000,\n"
                              "team/big,0,0,1,1000,\n"
                              "team/small,0,0,1,100,\n"
                              "team/train-0,0,0,1,300,\n"
                              "team/train-1,0,0,1,200,\n"
                              "team/web,500,1024,0,0,\n");
    free(nodes);
    free(pods);

    /* -n keeps one namespace; the command line for vgpu-sim carries the flags */
    o.namespace = "other";
    o.export_only = false;
    o.sim_program = "/opt/vgpu-sim";
    o.seeds = "7";
    o.report = "r.html";
    r = run_sim(*state, &o, &sr);
    assert_int_equal(r.rc, 0);
    pods = slurp(out_dir, "pods.csv");
    assert_string_equal(pods, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                              "other/elsewhere,0,0,1,1000,\n");
    free(pods);
    assert_int_equal(sr.argc, 11);
    assert_string_equal(sr.argv[0], "/opt/vgpu-sim");
    assert_string_equal(sr.argv[6], "default,fgd,binpack,spread");
    assert_string_equal(sr.argv[8], "7");
    assert_string_equal(sr.argv[10], "r.html");
    assert_null(sr.argv[11]);
    cli_sim_run_free(&sr);
    result_free(&r);

    /* nothing to simulate: said, and no command */
    struct fake *f = *state;
    f->bad_path = "/api/v1/nodes";
    f->bad_text = "{\"items\": []}";
    r = run_sim(f, &o, &sr);
    assert_int_equal(r.rc, -ENODATA);
    assert_non_null(strstr(r.err.msg, "no GPU node with a vgpu.io/gpus inventory"));
    assert_int_equal(sr.argc, 0);
    result_free(&r);
    f->bad_path = NULL;

    /* an --out that cannot be made, named */
    char file[1100], under[1200];
    (void)snprintf(file, sizeof file, "%s/file", dir);
    fclose(fopen(file, "w"));
    (void)snprintf(under, sizeof under, "%s/x", file);
    o.out_dir = under;
    r = run_sim(f, &o, &sr);
    assert_int_equal(r.rc, -ENOTDIR);
    assert_non_null(strstr(r.err.msg, under));
    assert_string_equal(r.diag, "");
    result_free(&r);

    char cmd[1200];
    (void)snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    vg_log_max_level = -1; /* the scheduler's notes on node-bad, as the command has them */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nodes),
        cmocka_unit_test(test_nodes_json),
        cmocka_unit_test(test_gpus),
        cmocka_unit_test(test_nodes_hostile_and_empty),
        cmocka_unit_test(test_pods),
        cmocka_unit_test(test_pods_json),
        cmocka_unit_test(test_explain_bound),
        cmocka_unit_test(test_explain_pending),
        cmocka_unit_test(test_explain_pending_that_fits),
        cmocka_unit_test(test_nodes_use_the_given_clock),
        cmocka_unit_test(test_explain_no_gpus),
        cmocka_unit_test(test_explain_refusals),
        cmocka_unit_test(test_malformed_answers),
        cmocka_unit_test(test_unwritable_output),
        cmocka_unit_test(test_output_parse),
        cmocka_unit_test(test_namespace),
        cmocka_unit_test(test_sim),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
