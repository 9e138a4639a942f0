/* The API server as the verbs' source (api.h). */
#include "cli/api.h"

#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/mem.h"
#include "base/str.h"
#include "kube/kube.h"

struct cli_api {
    struct event_base *base;
    struct kube_config *config;
    struct kube_client *client;
};

struct reply {
    struct event_base *base;
    json_t *body;
    struct vg_err err;
    bool done;
};

static void on_reply(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)status;
    struct reply *r = arg;
    r->err = *err;
    if (err->code == 0 && body != NULL)
        r->body = json_incref(body);
    r->done = true;
    event_base_loopbreak(r->base);
}

int cli_api_open(const struct cli_api_options *options, struct cli_api **out, struct vg_err *err)
{
    struct kube_config *config = NULL;
    int rc = 0;
    const char *file = options->kubeconfig;
    char home_file[4096];
    char env_file[4096];
    if (file == NULL && getenv("KUBECONFIG") != NULL && getenv("KUBECONFIG")[0]) {
        /* kubectl merges a list; vgpu takes its first file. */
        const char *list = getenv("KUBECONFIG");
        size_t n = strcspn(list, ":");
        if (n < sizeof env_file) {
            memcpy(env_file, list, n);
            env_file[n] = '\0';
            file = env_file;
        }
    }
    if (file == NULL && getenv("HOME") != NULL &&
        vg_snprintf(home_file, sizeof home_file, "%s/.kube/config", getenv("HOME")) >= 0 &&
        access(home_file, R_OK) == 0)
        file = home_file;
    if (file != NULL) {
        rc = kube_config_load_file(file, options->context, &config, err);
    } else if (options->server == NULL) {
        rc = kube_config_in_cluster(NULL, &config, err);
        if (rc < 0) {
            char why[VG_ERR_MSG_MAX]; /* err->msg is rewritten below */
            memcpy(why, err->msg, sizeof why);
            return vg_err_set(err, rc,
                              "no credentials: give --kubeconfig or set KUBECONFIG (no "
                              "~/.kube/config, and not in a pod: %s)",
                              why);
        }
    } else {
        config = xcalloc(1, sizeof *config);
    }
    if (rc < 0)
        return rc;
    if (options->server != NULL) {
        if (strncmp(options->server, "http://", 7) != 0 &&
            strncmp(options->server, "https://", 8) != 0) {
            kube_config_free(config);
            return vg_err_set(err, -EINVAL, "--server '%s': expected an http:// or https:// URL",
                              options->server);
        }
        free(config->server);
        config->server = xstrdup(options->server);
        size_t n = strlen(config->server);
        while (n > 0 && config->server[n - 1] == '/')
            config->server[--n] = '\0';
    }
    struct cli_api *api = xcalloc(1, sizeof *api);
    api->config = config;
    api->base = event_base_new();
    struct kube_client_options client_options = {
        .request_timeout_ms = (long)options->request_timeout_s * 1000,
        .connect_timeout_ms =
            (long)(options->request_timeout_s < 10 ? options->request_timeout_s : 10) * 1000,
    };
    if (api->base == NULL ||
        kube_client_new(api->base, config, &client_options, &api->client, err) < 0) {
        if (api->base == NULL)
            vg_err_set(err, -ENOMEM, "cannot create an event loop");
        cli_api_free(api);
        return err->code;
    }
    *out = api;
    return 0;
}

/* One GET: 0 and *out (owned) on 2xx; -ENOENT on 404; another negative errno with a message
 * naming the server otherwise. */
static int api_get(void *ctx, const char *path, json_t **out, struct vg_err *err)
{
    struct cli_api *api = ctx;
    struct reply r = {.base = api->base};
    if (kube_get(api->client, path, on_reply, &r, err) < 0)
        return err->code;
    while (!r.done)
        if (event_base_dispatch(api->base) < 0)
            return vg_err_set(err, -EIO, "event loop failed");
    if (r.err.code == -ENOENT) {
        *err = r.err;
        return -ENOENT;
    }
    if (r.err.code != 0) {
        vg_err_set(err, r.err.code, "the API server at %s: %s", api->config->server, r.err.msg);
        return err->code;
    }
    if (r.body == NULL)
        return vg_err_set(err, -EBADMSG, "the API server at %s sent no body for %s",
                          api->config->server, path);
    *out = r.body;
    return 0;
}

/* One merge patch: the errors api_get gives, and -EEXIST for 409 (a precondition). */
static int api_patch(void *ctx, const char *path, json_t *body, struct vg_err *err)
{
    struct cli_api *api = ctx;
    struct reply r = {.base = api->base};
    if (kube_patch(api->client, path, "application/merge-patch+json", body, on_reply, &r, err) < 0)
        return err->code;
    while (!r.done)
        if (event_base_dispatch(api->base) < 0)
            return vg_err_set(err, -EIO, "event loop failed");
    json_decref(r.body);
    if (r.err.code == -ENOENT || r.err.code == -EEXIST) {
        *err = r.err;
        return r.err.code;
    }
    if (r.err.code != 0)
        return vg_err_set(err, r.err.code, "the API server at %s: %s", api->config->server,
                          r.err.msg);
    return 0;
}

struct cli_source cli_api_source(struct cli_api *api)
{
    return (struct cli_source){
        .get = api_get, .patch = api_patch, .ctx = api, .namespace = api->config->namespace};
}

void cli_api_free(struct cli_api *api)
{
    if (api == NULL)
        return;
    kube_client_free(api->client);
    kube_config_free(api->config);
    if (api->base != NULL)
        event_base_free(api->base);
    free(api);
}
