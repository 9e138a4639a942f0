/* Unit tests for src/kube's parsers and helpers: the watch line splitter, watch event
 * decoding, base64, kubeconfig loading (good files and every malformed form), in-cluster
 * credentials, reconnect backoff and the Warning Event's shape. The network paths are tested
 * against the test API server in tests/integration/kube_client.c. */
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

#include "base/str.h"
#include "kube/kube.h"

/* ---- line splitter ------------------------------------------------------------ */

struct collected {
    char lines[16][64];
    int count;
    int stop_after; /* return 1 from the callback after this many lines, 0 = never */
};

static int collect_line(void *arg, const char *line, size_t len)
{
    struct collected *c = arg;
    assert_true(c->count < 16);
    assert_true(len < 64);
    memcpy(c->lines[c->count], line, len);
    c->lines[c->count][len] = '\0';
    c->count++;
    return c->stop_after && c->count >= c->stop_after ? 1 : 0;
}

static void test_lines_split_across_reads(void **state)
{
    (void)state;
    /* Every way of cutting the stream into two reads gives the same lines. */
    const char *stream = "{\"a\":1}\n{\"b\":2}\r\n\n{\"c\":3}\n";
    size_t total = strlen(stream);
    for (size_t cut = 0; cut <= total; cut++) {
        struct kube_lines lines;
        struct collected c = {0};
        kube_lines_init(&lines, 64);
        assert_int_equal(kube_lines_feed(&lines, stream, cut, collect_line, &c, NULL), 0);
        assert_int_equal(kube_lines_feed(&lines, stream + cut, total - cut, collect_line, &c, NULL),
                         0);
        assert_int_equal(c.count, 3);
        assert_string_equal(c.lines[0], "{\"a\":1}");
        assert_string_equal(c.lines[1], "{\"b\":2}");
        assert_string_equal(c.lines[2], "{\"c\":3}");
        kube_lines_release(&lines);
    }
    /* Byte by byte. */
    struct kube_lines lines;
    struct collected c = {0};
    kube_lines_init(&lines, 64);
    for (size_t i = 0; i < total; i++)
        assert_int_equal(kube_lines_feed(&lines, stream + i, 1, collect_line, &c, NULL), 0);
    assert_int_equal(c.count, 3);
    assert_string_equal(c.lines[2], "{\"c\":3}");
    kube_lines_release(&lines);
}

static void test_lines_keep_partial_tail(void **state)
{
    (void)state;
    struct kube_lines lines;
    struct collected c = {0};
    kube_lines_init(&lines, 64);
    assert_int_equal(kube_lines_feed(&lines, "abc\ndef", 7, collect_line, &c, NULL), 0);
    assert_int_equal(c.count, 1);
    assert_int_equal(lines.tail.len, 3); /* "def" waits for its newline */
    assert_int_equal(kube_lines_feed(&lines, "gh\n", 3, collect_line, &c, NULL), 0);
    assert_int_equal(c.count, 2);
    assert_string_equal(c.lines[1], "defgh");
    kube_lines_release(&lines);
}

static void test_lines_ceiling(void **state)
{
    (void)state;
    struct kube_lines lines;
    struct collected c = {0};
    struct vg_err err = {0};
    /* Exactly max_line bytes is fine, whether whole or split. */
    kube_lines_init(&lines, 8);
    assert_int_equal(kube_lines_feed(&lines, "12345678\n", 9, collect_line, &c, &err), 0);
    assert_int_equal(kube_lines_feed(&lines, "1234", 4, collect_line, &c, &err), 0);
    assert_int_equal(kube_lines_feed(&lines, "5678\n", 5, collect_line, &c, &err), 0);
    assert_int_equal(c.count, 2);
    /* One more byte, split across reads, is an error, and stays one. */
    assert_int_equal(kube_lines_feed(&lines, "12345", 5, collect_line, &c, &err), 0);
    assert_int_equal(kube_lines_feed(&lines, "6789", 4, collect_line, &c, &err), -EMSGSIZE);
    assert_non_null(strstr(err.msg, "longer than 8 bytes"));
    assert_true(lines.overflow);
    assert_int_equal(kube_lines_feed(&lines, "\nok\n", 4, collect_line, &c, &err), -EMSGSIZE);
    assert_int_equal(c.count, 2);
    kube_lines_release(&lines);
    /* A whole oversized line in one read, no newline yet. */
    kube_lines_init(&lines, 8);
    assert_int_equal(kube_lines_feed(&lines, "123456789", 9, collect_line, &c, &err), -EMSGSIZE);
    assert_true(lines.tail.cap <= 9);
    kube_lines_release(&lines);
}

static void test_lines_callback_stops(void **state)
{
    (void)state;
    struct kube_lines lines;
    struct collected c = {.stop_after = 1};
    kube_lines_init(&lines, 64);
    assert_int_equal(kube_lines_feed(&lines, "a\nb\nc\n", 6, collect_line, &c, NULL), 1);
    assert_int_equal(c.count, 1);
    kube_lines_release(&lines);
}

/* ---- event decoding ------------------------------------------------------------- */

static void test_event_decode_types(void **state)
{
    (void)state;
    struct kube_event ev;
    struct vg_err err = {0};
    const char *added = "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"metadata\":"
                        "{\"name\":\"p\",\"resourceVersion\":\"42\"}}}";
    assert_int_equal(kube_event_decode(added, strlen(added), &ev, &err), 0);
    assert_int_equal(ev.type, KUBE_EVENT_ADDED);
    assert_string_equal(ev.resource_version, "42");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(ev.object, "metadata"), "name")), "p");
    kube_event_release(&ev);

    const char *bookmark = "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"metadata\":"
                           "{\"resourceVersion\":\"99\"}}}";
    assert_int_equal(kube_event_decode(bookmark, strlen(bookmark), &ev, &err), 0);
    assert_int_equal(ev.type, KUBE_EVENT_BOOKMARK);
    assert_string_equal(ev.resource_version, "99");
    kube_event_release(&ev);

    const char *gone = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\","
                       "\"status\":\"Failure\",\"message\":\"too old resource version: 1 (5)\","
                       "\"reason\":\"Expired\",\"code\":410}}";
    assert_int_equal(kube_event_decode(gone, strlen(gone), &ev, &err), 0);
    assert_int_equal(ev.type, KUBE_EVENT_ERROR);
    assert_int_equal(ev.error_code, 410);
    assert_null(ev.resource_version);
    kube_event_release(&ev);

    const char *names[] = {"MODIFIED", "DELETED"};
    for (int i = 0; i < 2; i++) {
        char line[200];
        vg_snprintf(line, sizeof line,
                    "{\"type\":\"%s\",\"object\":{\"metadata\":{\"resourceVersion\":\"7\"}}}",
                    names[i]);
        assert_int_equal(kube_event_decode(line, strlen(line), &ev, &err), 0);
        assert_string_equal(kube_event_type_name(ev.type), names[i]);
        kube_event_release(&ev);
    }
}

static void test_event_decode_rejects(void **state)
{
    (void)state;
    static const struct {
        const char *line;
        const char *msg;
    } bad[] = {
        {"{\"type\":\"ADDED\",\"object\":{\"metadata\":", "not JSON"},
        {"[1,2]", "no \"type\""},
        {"{\"object\":{}}", "no \"type\""},
        {"{\"type\":7,\"object\":{}}", "no \"type\""},
        {"{\"type\":\"ADDED\"}", "no \"object\""},
        {"{\"type\":\"ADDED\",\"object\":\"x\"}", "no \"object\""},
        {"{\"type\":\"RENAMED\",\"object\":{}}", "unknown type"},
        {"{\"type\":\"ADDED\",\"object\":{\"metadata\":{}}}", "resourceVersion"},
        {"{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"resourceVersion\":\"\"}}}",
         "resourceVersion"},
        {"{\"type\":\"ADDED\",\"type\":\"DELETED\",\"object\":{}}", "not JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct kube_event ev;
        struct vg_err err = {0};
        assert_int_equal(kube_event_decode(bad[i].line, strlen(bad[i].line), &ev, &err), -EBADMSG);
        if (strstr(err.msg, bad[i].msg) == NULL)
            fail_msg("line %zu: '%s' lacks '%s'", i, err.msg, bad[i].msg);
        assert_null(ev.object);
    }
}

/* ---- base64 --------------------------------------------------------------------- */

static void test_base64(void **state)
{
    (void)state;
    char *out = NULL;
    size_t len = 0;
    struct vg_err err = {0};
    assert_int_equal(kube_base64_decode("aGVsbG8=", 8, &out, &len, &err), 0);
    assert_int_equal(len, 5);
    assert_string_equal(out, "hello");
    free(out);
    assert_int_equal(kube_base64_decode("aGVs\nbG8h", 9, &out, &len, &err), 0);
    assert_string_equal(out, "hello!");
    free(out);
    assert_int_equal(kube_base64_decode("aA==", 4, &out, &len, &err), 0);
    assert_int_equal(len, 1);
    free(out);
    assert_int_equal(kube_base64_decode("aGVsbG8", 7, &out, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "multiple of 4"));
    assert_int_equal(kube_base64_decode("aG*sbG8=", 8, &out, &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "0x2a"));
    assert_int_equal(kube_base64_decode("a===", 4, &out, &len, &err), -EINVAL);
    assert_int_equal(kube_base64_decode("aA==aA==", 8, &out, &len, &err), -EINVAL);
    assert_int_equal(kube_base64_decode("", 0, &out, &len, &err), -EINVAL);
}

/* ---- kubeconfig ----------------------------------------------------------------- */

static char tmpdir[256];

static void write_file(const char *name, const char *text)
{
    char path[512];
    vg_snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup_tmpdir(void **state)
{
    (void)state;
    vg_snprintf(tmpdir, sizeof tmpdir, "/tmp/vgpu-test-kube-XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    write_file("ca.crt", "-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n");
    write_file("client.crt", "cert");
    write_file("client.key", "key");
    write_file("token", "file-token\n");
    return 0;
}

static int teardown_tmpdir(void **state)
{
    (void)state;
    const char *names[] = {"ca.crt", "client.crt", "client.key", "token", "config", "namespace"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[512];
        vg_snprintf(path, sizeof path, "%s/%s", tmpdir, names[i]);
        unlink(path);
    }
    rmdir(tmpdir);
    return 0;
}

static const char good_config[] = "apiVersion: v1\n"
                                  "kind: Config\n"
                                  "current-context: dev\n"
                                  "clusters:\n"
                                  "- name: local\n"
                                  "  cluster:\n"
                                  "    server: https://10.0.0.1:6443/\n"
                                  "    certificate-authority: ca.crt\n"
                                  "- name: other\n"
                                  "  cluster:\n"
                                  "    server: http://127.0.0.1:8080\n"
                                  "    insecure-skip-tls-verify: true\n"
                                  "contexts:\n"
                                  "- name: dev\n"
                                  "  context:\n"
                                  "    cluster: local\n"
                                  "    user: admin\n"
                                  "    namespace: gpu\n"
                                  "- name: plain\n"
                                  "  context:\n"
                                  "    cluster: other\n"
                                  "    user: robot\n"
                                  "users:\n"
                                  "- name: admin\n"
                                  "  user:\n"
                                  "    client-certificate-data: Y2VydC1ieXRlcw==\n"
                                  "    client-key-data: a2V5LWJ5dGVz\n"
                                  "- name: robot\n"
                                  "  user:\n"
                                  "    token: abc.def\n";

static void test_kubeconfig_good(void **state)
{
    (void)state;
    write_file("config", good_config);
    char path[512];
    vg_snprintf(path, sizeof path, "%s/config", tmpdir);
    struct kube_config *config = NULL;
    struct vg_err err = {0};
    assert_int_equal(kube_config_load_file(path, NULL, &config, &err), 0);
    assert_string_equal(config->server, "https://10.0.0.1:6443"); /* trailing '/' dropped */
    char ca[512];
    vg_snprintf(ca, sizeof ca, "%s/ca.crt", tmpdir);
    assert_string_equal(config->ca_file, ca); /* relative to the kubeconfig */
    assert_int_equal(config->client_cert_data_len, 10);
    assert_memory_equal(config->client_cert_data, "cert-bytes", 10);
    assert_memory_equal(config->client_key_data, "key-bytes", 9);
    assert_null(config->token);
    assert_string_equal(config->namespace, "gpu");
    assert_false(config->insecure_skip_tls_verify);
    kube_config_free(config);

    assert_int_equal(kube_config_load_file(path, "plain", &config, &err), 0);
    assert_string_equal(config->server, "http://127.0.0.1:8080");
    assert_string_equal(config->token, "abc.def");
    assert_true(config->insecure_skip_tls_verify);
    assert_null(config->ca_file);
    assert_null(config->namespace);
    kube_config_free(config);
    kube_config_free(NULL);
}

static void test_kubeconfig_files_and_token_file(void **state)
{
    (void)state;
    const char *text = "current-context: c\n"
                       "clusters: [{name: k, cluster: {server: 'https://[fd00::1]:6443'}}]\n"
                       "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                       "users: [{name: u, user: {client-certificate: client.crt,"
                       " client-key: client.key, tokenFile: token}}]\n";
    struct kube_config *config = NULL;
    struct vg_err err = {0};
    assert_int_equal(kube_config_load_text(text, strlen(text), "mem", tmpdir, NULL, &config, &err),
                     0);
    assert_string_equal(config->server, "https://[fd00::1]:6443");
    assert_non_null(strstr(config->client_cert_file, "/client.crt"));
    assert_non_null(strstr(config->client_key_file, "/client.key"));
    assert_non_null(strstr(config->token_file, "/token"));
    kube_config_free(config);
}

static void test_kubeconfig_malformed(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *msg; /* must appear in the error */
    } bad[] = {
        {"current-context: [unclosed\n", "not valid YAML"},
        /* Text that trips libfyaml 0.7.12 (a hang, a double free) is refused before it. */
        {"%\x01\xdb\xfe\xf6\xec", "not UTF-8 text"},
        {"?  [a]\t:[a]error:\t: b\n", "explicit keys"},
        {"- a\n- b\n", "not a mapping"},
        {"clusters: []\n", "current-context: missing"},
        {"current-context: ''\n", "current-context: missing or empty"},
        {"current-context: x\n", "contexts: missing"},
        {"current-context: x\ncontexts: {}\n", "contexts: expected a list"},
        {"current-context: x\ncontexts: [{name: y, context: {cluster: k}}]\n",
         "contexts: no entry named 'x'"},
        {"current-context: x\ncontexts: [{name: x}]\n", "contexts[x].context: missing"},
        {"current-context: x\ncontexts: [7]\n", "contexts[0]: expected a mapping"},
        {"current-context: x\ncontexts: [{name: x, context: {user: u}}]\n",
         "contexts[x].context.cluster: missing"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: [k]}}]\n",
         "contexts[x].context.cluster: expected a string"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k}}]\n", "clusters: missing"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k}}]\n"
         "clusters: [{name: k, cluster: {}}]\n",
         "clusters[k].cluster.server: missing"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k}}]\n"
         "clusters: [{name: k, cluster: {server: 'ftp://h'}}]\n",
         "not an http:// or https:// URL"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k}}]\n"
         "clusters: [{name: k, cluster: {server: 'https://'}}]\n",
         "has no host"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k}}]\n"
         "clusters: [{name: k, cluster: {server: 'https://h', certificate-authority: nope.crt}}]\n",
         "certificate-authority: cannot read"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k}}]\n"
         "clusters: [{name: k, cluster: {server: 'https://h', certificate-authority-data: "
         "'%%'}}]\n",
         "certificate-authority-data: invalid base64"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k}}]\n"
         "clusters: [{name: k, cluster: {server: 'https://h', certificate-authority: ca.crt, "
         "certificate-authority-data: YQ==}}]\n",
         "both certificate-authority and certificate-authority-data"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k}}]\n"
         "clusters: [{name: k, cluster: {server: 'https://h', insecure-skip-tls-verify: maybe}}]\n",
         "insecure-skip-tls-verify: expected true or false"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k, user: u}}]\n"
         "clusters: [{name: k, cluster: {server: 'https://h'}}]\n",
         "users: missing"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k, user: u}}]\n"
         "clusters: [{name: k, cluster: {server: 'https://h'}}]\n"
         "users: [{name: u, user: {exec: {command: aws}}}]\n",
         "users[u].user.exec: not supported"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k, user: u}}]\n"
         "clusters: [{name: k, cluster: {server: 'https://h'}}]\n"
         "users: [{name: u, user: {client-certificate: client.crt}}]\n",
         "client-certificate without client-key"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k, user: u}}]\n"
         "clusters: [{name: k, cluster: {server: 'https://h'}}]\n"
         "users: [{name: u, user: {client-key-data: YQ==}}]\n",
         "client-key without client-certificate"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k, user: u}}]\n"
         "clusters: [{name: k, cluster: {server: 'https://h'}}]\n"
         "users: [{name: u, user: {token: ''}}]\n",
         "users[u].user.token: empty"},
        {"current-context: x\ncontexts: [{name: x, context: {cluster: k, user: u}}]\n"
         "clusters: [{name: k, cluster: {server: 'https://h'}}]\n"
         "users: [{name: u, user: {tokenFile: missing-token}}]\n",
         "users[u].user.tokenFile: cannot read"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct kube_config *config = NULL;
        struct vg_err err = {0};
        int rc = kube_config_load_text(bad[i].text, strlen(bad[i].text), "/etc/kc", tmpdir, NULL,
                                       &config, &err);
        if (rc >= 0)
            fail_msg("case %zu loaded: %s", i, bad[i].text);
        assert_int_equal(rc, err.code);
        assert_null(config);
        if (strstr(err.msg, bad[i].msg) == NULL || strncmp(err.msg, "kubeconfig /etc/kc: ", 20))
            fail_msg("case %zu: '%s' lacks '%s'", i, err.msg, bad[i].msg);
    }
    /* A missing file and a NUL byte. */
    struct kube_config *config = NULL;
    struct vg_err err = {0};
    assert_int_equal(kube_config_load_file("/nonexistent/kubeconfig", NULL, &config, &err),
                     -ENOENT);
    assert_non_null(strstr(err.msg, "/nonexistent/kubeconfig"));
    assert_int_equal(kube_config_load_text("a: b\0c", 6, "nul", NULL, NULL, &config, &err),
                     -EINVAL);
    assert_non_null(strstr(err.msg, "NUL"));
    /* Past the size ceiling. */
    size_t big = KUBE_KUBECONFIG_MAX_BYTES + 1;
    char *text = malloc(big);
    assert_non_null(text);
    memset(text, '#', big);
    assert_int_equal(kube_config_load_text(text, big, "big", NULL, NULL, &config, &err), -EFBIG);
    free(text);
}

static void test_in_cluster(void **state)
{
    (void)state;
    struct kube_config *config = NULL;
    struct vg_err err = {0};
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
    assert_int_equal(kube_config_in_cluster(tmpdir, &config, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "KUBERNETES_SERVICE_HOST"));

    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443x", 1);
    assert_int_equal(kube_config_in_cluster(tmpdir, &config, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "KUBERNETES_SERVICE_PORT"));

    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    write_file("namespace", "kube-system\n");
    assert_int_equal(kube_config_in_cluster(tmpdir, &config, &err), 0);
    assert_string_equal(config->server, "https://10.96.0.1:443");
    assert_string_equal(config->token, "file-token");
    assert_non_null(strstr(config->ca_file, "/ca.crt"));
    assert_string_equal(config->namespace, "kube-system");
    kube_config_free(config);

    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    assert_int_equal(kube_config_in_cluster(tmpdir, &config, &err), 0);
    assert_string_equal(config->server, "https://[fd00::1]:443");
    kube_config_free(config);

    assert_int_equal(kube_config_in_cluster("/nonexistent", &config, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "/nonexistent/token"));
    write_file("token", "\n");
    assert_int_equal(kube_config_in_cluster(tmpdir, &config, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "is empty"));
    write_file("token", "file-token\n");
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
}

/* ---- backoff -------------------------------------------------------------------- */

static void test_backoff(void **state)
{
    (void)state;
    struct kube_backoff a, b;
    kube_backoff_init(&a, 100, 1000, 42);
    kube_backoff_init(&b, 100, 1000, 42);
    uint64_t ceiling = 100;
    for (int i = 0; i < 20; i++) {
        uint64_t d = kube_backoff_next(&a);
        assert_int_equal(d, kube_backoff_next(&b)); /* same seed, same delays */
        assert_true(d >= (ceiling + 1) / 2);
        assert_true(d <= ceiling);
        ceiling = ceiling * 2 > 1000 ? 1000 : ceiling * 2;
    }
    assert_int_equal(a.current_ms, 1000); /* capped */
    kube_backoff_reset(&a);
    uint64_t d = kube_backoff_next(&a);
    assert_true(d >= 50 && d <= 100);
    /* Jitter: different seeds spread out. */
    int distinct = 0;
    uint64_t first = 0;
    for (uint64_t seed = 1; seed <= 16; seed++) {
        kube_backoff_init(&b, 1000, 1000, seed);
        uint64_t v = kube_backoff_next(&b);
        if (seed == 1)
            first = v;
        else if (v != first)
            distinct++;
    }
    assert_true(distinct >= 10);
}

/* ---- Warning Events ------------------------------------------------------------ */

/* The Event a daemon posts is the one kubectl describe shows on the pod: on the pod, by
 * uid, on the container when named, and named after the pod, the component and seq. */
static void test_warning_event(void **state)
{
    (void)state;
    struct kube_warning w = {.ns = "team-a",
                             .pod = "train-0",
                             .uid = "0f6c1a2b-1111-2222-3333-444455556666",
                             .container = "main",
                             .reason = "GPUComputeOverShare",
                             .message = "used 80% of a 30% share",
                             .component = "vgpu-monitor",
                             .node = "node-1"};
    json_t *ev = kube_warning_event(&w, (time_t)1700000000, 0x2a);
    assert_non_null(ev);
    assert_string_equal(json_string_value(json_object_get(ev, "kind")), "Event");
    assert_string_equal(json_string_value(json_object_get(ev, "type")), "Warning");
    assert_string_equal(json_string_value(json_object_get(ev, "reason")), "GPUComputeOverShare");
    const json_t *meta = json_object_get(ev, "metadata");
    assert_string_equal(json_string_value(json_object_get(meta, "name")),
                        "train-0.vgpu-monitor.6553f100.2a");
    assert_string_equal(json_string_value(json_object_get(meta, "namespace")), "team-a");
    const json_t *inv = json_object_get(ev, "involvedObject");
    assert_string_equal(json_string_value(json_object_get(inv, "kind")), "Pod");
    assert_string_equal(json_string_value(json_object_get(inv, "uid")), w.uid);
    assert_string_equal(json_string_value(json_object_get(inv, "fieldPath")),
                        "spec.containers{main}");
    assert_string_equal(json_string_value(json_object_get(ev, "firstTimestamp")),
                        "2023-11-14T22:13:20Z");
    assert_string_equal(json_string_value(json_object_get(json_object_get(ev, "source"), "host")),
                        "node-1");
    assert_string_equal(json_string_value(json_object_get(ev, "reportingComponent")),
                        "vgpu-monitor");
    json_decref(ev);

    /* No container: no fieldPath; no node: an empty host; a long pod name is cut. */
    char long_pod[254];
    memset(long_pod, 'p', sizeof long_pod - 1);
    long_pod[sizeof long_pod - 1] = '\0';
    w.container = NULL;
    w.node = NULL;
    w.pod = long_pod;
    w.component = "vgpu-device-plugin";
    ev = kube_warning_event(&w, (time_t)1700000000, 1);
    assert_non_null(ev);
    assert_null(json_object_get(json_object_get(ev, "involvedObject"), "fieldPath"));
    assert_string_equal(json_string_value(json_object_get(json_object_get(ev, "source"), "host")),
                        "");
    const char *name = json_string_value(json_object_get(json_object_get(ev, "metadata"), "name"));
    assert_int_equal(strlen(name), 200 + strlen(".vgpu-device-plugin.6553f100.1"));
    json_decref(ev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines_split_across_reads),
        cmocka_unit_test(test_lines_keep_partial_tail),
        cmocka_unit_test(test_lines_ceiling),
        cmocka_unit_test(test_lines_callback_stops),
        cmocka_unit_test(test_event_decode_types),
        cmocka_unit_test(test_event_decode_rejects),
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_kubeconfig_good),
        cmocka_unit_test(test_kubeconfig_files_and_token_file),
        cmocka_unit_test(test_kubeconfig_malformed),
        cmocka_unit_test(test_in_cluster),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_warning_event),
    };
    return cmocka_run_group_tests(tests, setup_tmpdir, teardown_tmpdir);
}
