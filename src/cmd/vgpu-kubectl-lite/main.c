/* vgpu-kubectl-lite: a debugging CLI over src/kube, with the same credentials the daemons
 * use. It exercises the library end to end against a real or test API server:
 *
 *   vgpu-kubectl-lite [--kubeconfig FILE [--context NAME] | --server URL] COMMAND
 *     get PATH                          print the JSON response
 *     watch PATH [SECONDS]              list + watch; print one line per change
 *     bind NAMESPACE POD NODE           POST pods/binding
 *     annotate PATH KEY=VALUE [RV]      merge-patch one annotation (RV: precondition)
 *
 * Without --kubeconfig or --server it uses in-cluster credentials. */
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/flags.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/parse.h"
#include "kube/kube.h"

static int exit_code;
static struct event_base *base;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void print_reply(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)arg;
    if (body != NULL) {
        json_dumpf(body, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
    }
    if (err->code != 0) {
        fprintf(stderr, "vgpu-kubectl-lite: %s\n", err->msg);
        exit_code = 1;
    } else {
        fprintf(stderr, "HTTP %ld\n", status);
    }
    event_base_loopbreak(base);
}

static double watch_start;

static const char *name_of(json_t *object)
{
    const char *name =
        json_string_value(json_object_get(json_object_get(object, "metadata"), "name"));
    return name ? name : "?";
}

static void on_resync(void *arg, json_t *items, const char *rv)
{
    (void)arg;
    printf("RESYNC items=%zu resourceVersion=%s seconds=%.3f\n", json_array_size(items), rv,
           now_s() - watch_start);
    fflush(stdout);
}

static void on_event(void *arg, enum kube_event_type type, json_t *object)
{
    (void)arg;
    const char *rv =
        json_string_value(json_object_get(json_object_get(object, "metadata"), "resourceVersion"));
    printf("%s %s %s\n", kube_event_type_name(type), name_of(object), rv ? rv : "?");
    fflush(stdout);
}

static void on_error(void *arg, const struct vg_err *err)
{
    (void)arg;
    fprintf(stderr, "vgpu-kubectl-lite: watch: %s (retrying)\n", err->msg);
}

static void stop_cb(evutil_socket_t fd, short kind, void *arg)
{
    (void)fd;
    (void)kind;
    (void)arg;
    event_base_loopbreak(base);
}

static struct {
    const char *kubeconfig, *context, *server;
    bool help;
} cli;

static const struct vg_flag flags[] = {
    {.name = "kubeconfig",
     .value = "FILE",
     .type = VG_FLAG_STRING,
     .target = &cli.kubeconfig,
     .doc = "API credentials",
     .def = "in-cluster"},
    {.name = "context",
     .value = "NAME",
     .type = VG_FLAG_STRING,
     .target = &cli.context,
     .doc = "the kubeconfig context to use"},
    {.name = "server",
     .value = "URL",
     .type = VG_FLAG_STRING,
     .target = &cli.server,
     .doc = "the API server's http:// or https:// URL, without credentials"},
    {.name = "help", .type = VG_FLAG_HELP, .target = &cli.help, .doc = "print this text"},
};

static int usage(FILE *f)
{
    vg_flags_help(f,
                  "usage: vgpu-kubectl-lite [--kubeconfig FILE [--context NAME] | --server URL]\n"
                  "         get PATH | watch PATH [SECONDS] | bind NAMESPACE POD NODE |\n"
                  "         annotate PATH KEY=VALUE [RESOURCE_VERSION]",
                  flags, VG_FLAGS_COUNT(flags));
    return 2;
}

/* The API client from --server, --kubeconfig or in-cluster credentials. */
static int connect_api(struct kube_config **config, struct kube_client **client, struct vg_err *err)
{
    int rc;
    if (cli.server != NULL) {
        if (strncmp(cli.server, "http://", 7) != 0 && strncmp(cli.server, "https://", 8) != 0)
            return vg_err_set(err, -EINVAL, "--server must be an http:// or https:// URL");
        *config = xcalloc(1, sizeof **config);
        (*config)->server = xstrdup(cli.server);
        rc = 0;
    } else if (cli.kubeconfig != NULL) {
        rc = kube_config_load_file(cli.kubeconfig, cli.context, config, err);
    } else {
        rc = kube_config_in_cluster(NULL, config, err);
    }
    if (rc < 0)
        return rc;
    base = event_base_new();
    if (base == NULL)
        return vg_err_set(err, -ENOMEM, "cannot create the event loop");
    return kube_client_new(base, *config, NULL, client, err);
}

/* Starts the command's request or watch: 0, 1 for bad usage, or a negative code. */
static int start(struct kube_client *client, const char *command, const char **args, size_t nargs,
                 struct kube_watch **watch, struct event **stop, struct vg_err *err)
{
    int rc;
    if (strcmp(command, "get") == 0 && nargs == 1) {
        rc = kube_get(client, args[0], print_reply, NULL, err);
    } else if (strcmp(command, "bind") == 0 && nargs == 3) {
        rc = kube_bind_pod(client, args[0], args[1], args[2], print_reply, NULL, err);
    } else if (strcmp(command, "annotate") == 0 && (nargs == 2 || nargs == 3)) {
        const char *eq = strchr(args[1], '=');
        if (eq == NULL)
            return 1;
        json_t *annotations = json_object();
        json_object_setn_new(annotations, args[1], (size_t)(eq - args[1]), json_string(eq + 1));
        rc = kube_patch_annotations(client, args[0], annotations, nargs == 3 ? args[2] : NULL,
                                    print_reply, NULL, err);
        json_decref(annotations);
    } else if (strcmp(command, "watch") == 0 && (nargs == 1 || nargs == 2)) {
        struct kube_watch_options options = {.path = args[0], .seed = (uint64_t)time(NULL)};
        struct kube_watch_callbacks callbacks = {on_resync, on_event, on_error};
        watch_start = now_s();
        rc = kube_watch_new(client, &options, &callbacks, NULL, watch, err);
        uint64_t seconds;
        if (rc == 0 && nargs == 2 && (rc = vg_parse_u64(args[1], 1, 86400, &seconds, err)) == 0) {
            *stop = evtimer_new(base, stop_cb, NULL);
            struct timeval tv = {(time_t)seconds, 0};
            evtimer_add(*stop, &tv);
        }
    } else {
        return 1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    const char *pos[5];
    size_t npos = 0;
    struct vg_err err = {0};
    int rc = vg_flags_parse(flags, VG_FLAGS_COUNT(flags), argc, argv, pos, 5, &npos, &err);
    if (rc == 1) {
        usage(stdout);
        return 0;
    }
    if (rc < 0)
        fprintf(stderr, "vgpu-kubectl-lite: %s\n", err.msg);
    if (rc < 0 || npos == 0)
        return usage(stderr);
    struct kube_config *config = NULL;
    struct kube_client *client = NULL;
    struct kube_watch *watch = NULL;
    struct event *stop = NULL;
    if (connect_api(&config, &client, &err) < 0) {
        fprintf(stderr, "vgpu-kubectl-lite: %s\n", err.msg);
        return 1;
    }
    rc = start(client, pos[0], pos + 1, npos - 1, &watch, &stop, &err);
    if (rc == 1)
        return usage(stderr);
    if (rc < 0) {
        fprintf(stderr, "vgpu-kubectl-lite: %s\n", err.msg);
        return 1;
    }
    event_base_dispatch(base);
    kube_watch_free(watch);
    if (stop != NULL)
        event_free(stop);
    kube_client_free(client);
    kube_config_free(config);
    event_base_free(base);
    return exit_code;
}
