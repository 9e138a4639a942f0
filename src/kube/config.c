/* Credentials: kubeconfig files and in-cluster service-account files.
 *
 * Only the kubeconfig subset vgpu's daemons need is read: current-context (or a named
 * context), the context's cluster and user, and for those the server, the CA, the
 * client certificate and key (file or base64 data), a bearer token or token file and
 * insecure-skip-tls-verify. Anything else in the file is ignored, except user auth
 * methods vgpu cannot honour (exec plugins, auth providers, passwords): those fail with a
 * clear message instead of silently connecting anonymously. Every error names the file
 * and the key, e.g. "kubeconfig /x/config: users[admin].user.client-key-data: invalid
 * base64". The YAML is parsed by libfyaml into a DOM that is walked directly. */
#include "kube/kube.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <libfyaml.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "yaml/yaml.h"

#define DEFAULT_SECRETS_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

void kube_config_free(struct kube_config *config)
{
    if (config == NULL)
        return;
    free(config->server);
    free(config->token);
    free(config->token_file);
    free(config->ca_file);
    free(config->ca_data);
    free(config->client_cert_file);
    free(config->client_cert_data);
    free(config->client_key_file);
    if (config->client_key_data != NULL)
        explicit_bzero(config->client_key_data, config->client_key_data_len);
    free(config->client_key_data);
    free(config->namespace);
    free(config->source);
    free(config);
}

VG_DEFINE_AUTO(config_freep, struct kube_config, kube_config_free)

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int kube_base64_decode(const char *text, size_t len, char **out, size_t *out_len,
                       struct vg_err *err)
{
    VG_AUTO_FREE char *buf = xmalloc(len / 4 * 3 + 4);
    size_t n = 0, quad = 0, pad = 0;
    uint32_t acc = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\n' || c == '\r')
            continue;
        if (c == '=') {
            pad++;
            if (quad < 2 || pad > 2)
                return vg_err_set(err, -EINVAL, "invalid base64: misplaced '=' at offset %zu", i);
            acc <<= 6;
            quad++;
        } else {
            int v = b64_value(c);
            if (v < 0)
                return vg_err_set(err, -EINVAL, "invalid base64: byte 0x%02x at offset %zu", c, i);
            if (pad > 0)
                return vg_err_set(err, -EINVAL, "invalid base64: data after '=' at offset %zu", i);
            acc = acc << 6 | (uint32_t)v;
            quad++;
        }
        if (quad == 4) {
            buf[n++] = (char)(acc >> 16);
            if (pad < 2)
                buf[n++] = (char)(acc >> 8 & 0xff);
            if (pad < 1)
                buf[n++] = (char)(acc & 0xff);
            quad = 0;
            acc = 0;
        }
    }
    if (quad != 0)
        return vg_err_set(err, -EINVAL, "invalid base64: length is not a multiple of 4");
    if (n == 0)
        return vg_err_set(err, -EINVAL, "invalid base64: empty");
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    buf = NULL;
    return 0;
}

/* ---- YAML helpers --------------------------------------------------------------- */

struct loader {
    const char *source;
    const char *base_dir;
    struct vg_err *err;
};

/* Sets err to "kubeconfig SOURCE: <message>" and returns code. */
static int load_fail(struct loader *ld, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int load_fail(struct loader *ld, int code, const char *fmt, ...)
{
    char msg[VG_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        msg[0] = '\0';
    return vg_err_set(ld->err, code, "kubeconfig %s: %s", ld->source, msg);
}

#define LOAD_FAIL load_fail

/* Scalar child `key` of mapping `map` as a new string; *out NULL when absent. */
static int get_string(struct loader *ld, struct fy_node *map, const char *where, const char *key,
                      char **out)
{
    *out = NULL;
    struct fy_node *n = fy_node_mapping_lookup_by_string(map, key, FY_NT);
    if (n == NULL)
        return 0;
    if (fy_node_get_type(n) != FYNT_SCALAR)
        return LOAD_FAIL(ld, -EINVAL, "%s.%s: expected a string", where, key);
    size_t len = 0;
    const char *s = fy_node_get_scalar(n, &len);
    if (s == NULL || memchr(s, '\0', len) != NULL)
        return LOAD_FAIL(ld, -EINVAL, "%s.%s: expected a string", where, key);
    char *copy = xmalloc(len + 1);
    memcpy(copy, s, len);
    copy[len] = '\0';
    *out = copy;
    return 0;
}

static int get_bool(struct loader *ld, struct fy_node *map, const char *where, const char *key,
                    bool *out)
{
    VG_AUTO_FREE char *s = NULL;
    int rc = get_string(ld, map, where, key, &s);
    if (rc < 0)
        return rc;
    if (s == NULL)
        return 0;
    if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0) {
        *out = true;
        return 0;
    }
    if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0 || strcmp(s, "FALSE") == 0) {
        *out = false;
        return 0;
    }
    return LOAD_FAIL(ld, -EINVAL, "%s.%s: expected true or false, not '%s'", where, key, s);
}

/* Finds the entry of list `list_key` whose name is `name` and returns its `body_key` map. */
static int find_named(struct loader *ld, struct fy_node *root, const char *list_key,
                      const char *body_key, const char *name, struct fy_node **out)
{
    struct fy_node *list = fy_node_mapping_lookup_by_string(root, list_key, FY_NT);
    if (list == NULL)
        return LOAD_FAIL(ld, -ENOENT, "%s: missing (looking for '%s')", list_key, name);
    if (fy_node_get_type(list) != FYNT_SEQUENCE)
        return LOAD_FAIL(ld, -EINVAL, "%s: expected a list", list_key);
    void *iter = NULL;
    struct fy_node *item;
    size_t index = 0;
    while ((item = fy_node_sequence_iterate(list, &iter)) != NULL) {
        if (fy_node_get_type(item) != FYNT_MAPPING)
            return LOAD_FAIL(ld, -EINVAL, "%s[%zu]: expected a mapping", list_key, index);
        char where[64];
        vg_snprintf(where, sizeof where, "%s[%zu]", list_key, index);
        VG_AUTO_FREE char *item_name = NULL;
        int rc = get_string(ld, item, where, "name", &item_name);
        if (rc < 0)
            return rc;
        if (item_name != NULL && strcmp(item_name, name) == 0) {
            struct fy_node *body = fy_node_mapping_lookup_by_string(item, body_key, FY_NT);
            if (body == NULL)
                return LOAD_FAIL(ld, -EINVAL, "%s[%s].%s: missing", list_key, name, body_key);
            if (fy_node_get_type(body) != FYNT_MAPPING)
                return LOAD_FAIL(ld, -EINVAL, "%s[%s].%s: expected a mapping", list_key, name,
                                 body_key);
            *out = body;
            return 0;
        }
        index++;
    }
    return LOAD_FAIL(ld, -ENOENT, "%s: no entry named '%s'", list_key, name);
}

/* A file name from the kubeconfig, made absolute against its folder and checked readable. */
static int resolve_file(struct loader *ld, const char *where, const char *key, char **path)
{
    if (*path == NULL)
        return 0;
    if ((*path)[0] == '\0')
        return LOAD_FAIL(ld, -EINVAL, "%s.%s: empty file name", where, key);
    if ((*path)[0] != '/' && ld->base_dir != NULL) {
        size_t n = strlen(ld->base_dir) + strlen(*path) + 2;
        char *full = xmalloc(n);
        vg_snprintf(full, n, "%s/%s", ld->base_dir, *path);
        free(*path);
        *path = full;
    }
    if (access(*path, R_OK) != 0) {
        int e = errno;
        return LOAD_FAIL(ld, -e, "%s.%s: cannot read '%s': %s", where, key, *path, VG_STRERROR(e));
    }
    return 0;
}

/* `key` (a file) or `key-data` (base64) from map; both present is an error. */
static int get_file_or_data(struct loader *ld, struct fy_node *map, const char *where,
                            const char *key, char **file, char **data, size_t *data_len)
{
    char data_key[64];
    vg_snprintf(data_key, sizeof data_key, "%s-data", key);
    int rc = get_string(ld, map, where, key, file);
    if (rc < 0)
        return rc;
    VG_AUTO_FREE char *b64 = NULL;
    rc = get_string(ld, map, where, data_key, &b64);
    if (rc < 0)
        return rc;
    if (b64 != NULL) {
        if (*file != NULL)
            return LOAD_FAIL(ld, -EINVAL, "%s: both %s and %s are set", where, key, data_key);
        rc = kube_base64_decode(b64, strlen(b64), data, data_len, ld->err);
        if (rc < 0) {
            vg_err_wrap(ld->err, "kubeconfig %s: %s.%s", ld->source, where, data_key);
            return rc;
        }
        return 0;
    }
    return resolve_file(ld, where, key, file);
}

static int check_server(struct loader *ld, const char *where, const char *server)
{
    if (strncmp(server, "https://", 8) != 0 && strncmp(server, "http://", 7) != 0)
        return LOAD_FAIL(ld, -EINVAL, "%s.server: '%s' is not an http:// or https:// URL", where,
                         server);
    const char *host = strstr(server, "://") + 3;
    if (*host == '\0' || *host == '/')
        return LOAD_FAIL(ld, -EINVAL, "%s.server: '%s' has no host", where, server);
    for (const char *p = server; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == '?' || *p == '#')
            return LOAD_FAIL(ld, -EINVAL, "%s.server: '%s' contains a space, '?' or '#'", where,
                             server);
    return 0;
}

static int load_document(struct loader *ld, struct fy_node *root, const char *context_override,
                         struct kube_config *config)
{
    if (root == NULL || fy_node_get_type(root) != FYNT_MAPPING)
        return LOAD_FAIL(ld, -EINVAL, "the document is not a mapping");

    VG_AUTO_FREE char *context_name = NULL;
    if (context_override != NULL) {
        context_name = xstrdup(context_override);
    } else {
        int rc = get_string(ld, root, "", "current-context", &context_name);
        if (rc < 0)
            return rc;
        if (context_name == NULL || context_name[0] == '\0')
            return LOAD_FAIL(ld, -ENOENT, "current-context: missing or empty");
    }

    struct fy_node *context = NULL, *cluster = NULL, *user = NULL;
    int rc = find_named(ld, root, "contexts", "context", context_name, &context);
    if (rc < 0)
        return rc;
    char where[320];
    vg_snprintf(where, sizeof where, "contexts[%s].context", context_name);
    VG_AUTO_FREE char *cluster_name = NULL, *user_name = NULL;
    if ((rc = get_string(ld, context, where, "cluster", &cluster_name)) < 0 ||
        (rc = get_string(ld, context, where, "user", &user_name)) < 0 ||
        (rc = get_string(ld, context, where, "namespace", &config->namespace)) < 0)
        return rc;
    if (cluster_name == NULL)
        return LOAD_FAIL(ld, -EINVAL, "%s.cluster: missing", where);

    rc = find_named(ld, root, "clusters", "cluster", cluster_name, &cluster);
    if (rc < 0)
        return rc;
    vg_snprintf(where, sizeof where, "clusters[%s].cluster", cluster_name);
    if ((rc = get_string(ld, cluster, where, "server", &config->server)) < 0)
        return rc;
    if (config->server == NULL)
        return LOAD_FAIL(ld, -EINVAL, "%s.server: missing", where);
    if ((rc = check_server(ld, where, config->server)) < 0)
        return rc;
    size_t slen = strlen(config->server);
    while (slen > 0 && config->server[slen - 1] == '/')
        config->server[--slen] = '\0';
    if ((rc = get_file_or_data(ld, cluster, where, "certificate-authority", &config->ca_file,
                               &config->ca_data, &config->ca_data_len)) < 0 ||
        (rc = get_bool(ld, cluster, where, "insecure-skip-tls-verify",
                       &config->insecure_skip_tls_verify)) < 0)
        return rc;

    if (user_name == NULL) /* a context without a user: anonymous access */
        return 0;
    rc = find_named(ld, root, "users", "user", user_name, &user);
    if (rc < 0)
        return rc;
    vg_snprintf(where, sizeof where, "users[%s].user", user_name);
    static const char *const unsupported[] = {"exec", "auth-provider", "username", "password"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (fy_node_mapping_lookup_by_string(user, unsupported[i], FY_NT) != NULL)
            return LOAD_FAIL(ld, -ENOTSUP,
                             "%s.%s: not supported by vgpu (use a token or a client certificate)",
                             where, unsupported[i]);
    if ((rc = get_string(ld, user, where, "token", &config->token)) < 0 ||
        (rc = get_string(ld, user, where, "tokenFile", &config->token_file)) < 0 ||
        (rc = resolve_file(ld, where, "tokenFile", &config->token_file)) < 0 ||
        (rc = get_file_or_data(ld, user, where, "client-certificate", &config->client_cert_file,
                               &config->client_cert_data, &config->client_cert_data_len)) < 0 ||
        (rc = get_file_or_data(ld, user, where, "client-key", &config->client_key_file,
                               &config->client_key_data, &config->client_key_data_len)) < 0)
        return rc;
    bool has_cert = config->client_cert_file || config->client_cert_data;
    bool has_key = config->client_key_file || config->client_key_data;
    if (has_cert != has_key)
        return LOAD_FAIL(ld, -EINVAL, "%s: %s without %s", where,
                         has_cert ? "client-certificate" : "client-key",
                         has_cert ? "client-key" : "client-certificate");
    if (config->token != NULL && config->token[0] == '\0')
        return LOAD_FAIL(ld, -EINVAL, "%s.token: empty", where);
    return 0;
}

int kube_config_load_text(const char *text, size_t len, const char *source, const char *base_dir,
                          const char *context, struct kube_config **out, struct vg_err *err)
{
    struct loader ld = {.source = source ? source : "(text)", .base_dir = base_dir, .err = err};
    if (len > KUBE_KUBECONFIG_MAX_BYTES)
        return LOAD_FAIL(&ld, -EFBIG, "larger than %u bytes", KUBE_KUBECONFIG_MAX_BYTES);
    if (memchr(text, '\0', len) != NULL)
        return LOAD_FAIL(&ld, -EINVAL, "contains a NUL byte");

    VG_AUTO_YAML_DOC struct fy_document *doc = NULL;
    struct vg_err yerr = {0};
    int yrc = vgpu_yaml_load(text, len, false, &doc, &yerr);
    if (yrc != 0) {
        if (yerr.msg[0] == '\0' || strstr(yerr.msg, "fy_parse_load_document") != NULL)
            return LOAD_FAIL(&ld, yrc, "not valid YAML (or empty)");
        return LOAD_FAIL(&ld, yrc, "not valid YAML: line %s", yerr.msg);
    }
    VG_AUTO(config_freep) struct kube_config *config = xcalloc(1, sizeof *config);
    config->source = xstrdup(ld.source);
    int rc = load_document(&ld, fy_document_root(doc), context, config);
    if (rc < 0)
        return rc;
    *out = vg_steal_ptr(&config);
    return 0;
}

int kube_config_load_file(const char *path, const char *context, struct kube_config **out,
                          struct vg_err *err)
{
    VG_AUTO_FREE char *text = NULL;
    size_t len = 0;
    int rc = vg_read_file(path, KUBE_KUBECONFIG_MAX_BYTES, &text, &len, err);
    if (rc < 0)
        return vg_err_wrap(err, "kubeconfig");
    VG_AUTO_FREE char *dir = xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        dir[0] = '\0';
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    return kube_config_load_text(text, len, path, dir[0] ? dir : NULL, context, out, err);
}

/* Strips trailing whitespace (token files often end in '\n'). */
static void trim_right(char *s, size_t *len)
{
    while (*len > 0 && (s[*len - 1] == '\n' || s[*len - 1] == '\r' || s[*len - 1] == ' ' ||
                        s[*len - 1] == '\t'))
        s[--*len] = '\0';
}

int kube_config_in_cluster(const char *secrets_dir, struct kube_config **out, struct vg_err *err)
{
    if (secrets_dir == NULL)
        secrets_dir = DEFAULT_SECRETS_DIR;
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port_text = getenv("KUBERNETES_SERVICE_PORT");
    if (host == NULL || host[0] == '\0' || port_text == NULL || port_text[0] == '\0')
        return vg_err_set(err, -ENOENT,
                          "in-cluster credentials: KUBERNETES_SERVICE_HOST and "
                          "KUBERNETES_SERVICE_PORT must be set (or pass --kubeconfig)");
    if (strlen(host) > 255 || strpbrk(host, "/?#@ \t\r\n") != NULL)
        return vg_err_set(err, -EINVAL, "in-cluster credentials: bad KUBERNETES_SERVICE_HOST '%s'",
                          host);
    uint64_t port;
    int rc = vg_parse_u64(port_text, 1, 65535, &port, err);
    if (rc < 0) {
        vg_err_wrap(err, "in-cluster credentials: KUBERNETES_SERVICE_PORT");
        return rc;
    }

    VG_AUTO(config_freep) struct kube_config *config = xcalloc(1, sizeof *config);
    size_t n = strlen(host) + 32;
    config->server = xmalloc(n);
    bool ipv6 = strchr(host, ':') != NULL;
    vg_snprintf(config->server, n, ipv6 ? "https://[%s]:%u" : "https://%s:%u", host,
                (unsigned)port);
    n = strlen(secrets_dir) + 16;
    config->source = xstrdup(secrets_dir);
    config->token_file = xmalloc(n);
    vg_snprintf(config->token_file, n, "%s/token", secrets_dir);
    config->ca_file = xmalloc(n);
    vg_snprintf(config->ca_file, n, "%s/ca.crt", secrets_dir);

    size_t len = 0;
    rc = vg_read_file(config->token_file, KUBE_TOKEN_MAX_BYTES, &config->token, &len, err);
    if (rc < 0)
        return vg_err_wrap(err, "in-cluster credentials");
    trim_right(config->token, &len);
    if (len == 0) {
        vg_err_set(err, -EINVAL, "%s is empty", config->token_file);
        return vg_err_wrap(err, "in-cluster credentials");
    }
    if (access(config->ca_file, R_OK) != 0) {
        vg_err_errno(err, errno, "%s: cannot read", config->ca_file);
        return vg_err_wrap(err, "in-cluster credentials");
    }
    char ns_path[4096];
    if (vg_snprintf(ns_path, sizeof ns_path, "%s/namespace", secrets_dir) > 0 &&
        access(ns_path, F_OK) == 0) {
        rc = vg_read_file(ns_path, 256, &config->namespace, &len, err);
        if (rc < 0)
            return vg_err_wrap(err, "in-cluster credentials");
        trim_right(config->namespace, &len);
    }
    *out = vg_steal_ptr(&config);
    return 0;
}
