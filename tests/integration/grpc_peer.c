/* The C side of the gRPC interop tests (tests/integration/grpc_interop.py drives it).
 *
 *   grpc_peer serve SOCKET
 *       A device-plugin server: GetDevicePluginOptions, ListAndWatch (a device list now
 *       and an update every 100 ms), GetPreferredAllocation, Allocate, PreStartContainer,
 *       plus /test.Test/Echo (unary, returns the request) and /test.Test/Silent (a
 *       stream that never sends). Prints "ready", one "closed path=P status=S streams=N"
 *       per finished stream, and on SIGTERM shuts down gracefully ("shutdown done").
 *   grpc_peer register SOCKET AUTHORITY ENDPOINT
 *       Calls /v1beta1.Registration/Register as a plugin does; AUTHORITY "-" sends none.
 *   grpc_peer watch SOCKET AUTHORITY
 *       Calls ListAndWatch; prints "devices=ID:HEALTH,..." per message.
 *   grpc_peer call SOCKET AUTHORITY PATH TIMEOUT_MS SIZE
 *       A unary call with SIZE bytes of 'x'; prints "response_len=N".
 *   grpc_peer allocate SOCKET AUTHORITY
 *       kubelet's side of Allocate, for the benchmarks: one connection kept open, one call
 *       per line of stdin (the line is the device ID), each printed as "ns=N status=NAME
 *       len=N message=TEXT" with N the time from the call's start to its answer.
 * Clients end with "status=NAME message=TEXT" and exit 0 when the call completed at all. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "grpc/grpc.h"
#include "grpc/kubelet/api.h"

#define WATCH_MAX 8

/* --- server --- */

struct plugin {
    struct event_base *base;
    struct vgrpc_server *server;
    struct vgrpc_stream *watchers[WATCH_MAX];
    struct event *tick;
    unsigned generation;
};

static uint8_t *pack(const ProtobufCMessage *msg, size_t *len)
{
    *len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = xmalloc(*len ? *len : 1);
    protobuf_c_message_pack(msg, buf);
    return buf;
}

static enum vgrpc_status_code on_options(void *arg, const uint8_t *req, size_t len,
                                         struct vgrpc_reply *reply)
{
    (void)arg;
    V1beta1__Empty *empty = v1beta1__empty__unpack(NULL, len, req);
    if (empty == NULL) {
        vg_strlcpy(reply->message, "cannot parse Empty", sizeof reply->message);
        return VGRPC_STATUS_INVALID_ARGUMENT;
    }
    v1beta1__empty__free_unpacked(empty, NULL);
    V1beta1__DevicePluginOptions opt = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    opt.get_preferred_allocation_available = 1;
    reply->data = pack(&opt.base, &reply->len);
    return VGRPC_STATUS_OK;
}

static enum vgrpc_status_code on_allocate(void *arg, const uint8_t *req, size_t len,
                                          struct vgrpc_reply *reply)
{
    (void)arg;
    V1beta1__AllocateRequest *ar = v1beta1__allocate_request__unpack(NULL, len, req);
    if (ar == NULL) {
        vg_strlcpy(reply->message, "cannot parse AllocateRequest", sizeof reply->message);
        return VGRPC_STATUS_INVALID_ARGUMENT;
    }
    if (ar->n_container_requests != 1) {
        vg_snprintf(reply->message, sizeof reply->message, "want one container request, got %zu",
                    ar->n_container_requests);
        v1beta1__allocate_request__free_unpacked(ar, NULL);
        return VGRPC_STATUS_INVALID_ARGUMENT;
    }
    V1beta1__ContainerAllocateRequest *cr = ar->container_requests[0];
    char ids[512] = "";
    for (size_t i = 0; i < cr->n_devices_ids; i++) {
        size_t used = strlen(ids);
        if (vg_snprintf(ids + used, sizeof ids - used, "%s%s", i ? "," : "", cr->devices_ids[i]) <
            0) {
            v1beta1__allocate_request__free_unpacked(ar, NULL);
            vg_strlcpy(reply->message, "too many devices", sizeof reply->message);
            return VGRPC_STATUS_INVALID_ARGUMENT;
        }
    }
    v1beta1__allocate_request__free_unpacked(ar, NULL);
    char key[] = "NVIDIA_VISIBLE_DEVICES";
    V1beta1__ContainerAllocateResponse__EnvsEntry env =
        V1BETA1__CONTAINER_ALLOCATE_RESPONSE__ENVS_ENTRY__INIT;
    env.key = key;
    env.value = ids;
    V1beta1__ContainerAllocateResponse__EnvsEntry *envs[] = {&env};
    V1beta1__ContainerAllocateResponse car = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
    car.n_envs = 1;
    car.envs = envs;
    V1beta1__ContainerAllocateResponse *cars[] = {&car};
    V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
    resp.n_container_responses = 1;
    resp.container_responses = cars;
    reply->data = pack(&resp.base, &reply->len);
    return VGRPC_STATUS_OK;
}

static enum vgrpc_status_code on_preferred(void *arg, const uint8_t *req, size_t len,
                                           struct vgrpc_reply *reply)
{
    (void)arg;
    V1beta1__PreferredAllocationRequest *pr =
        v1beta1__preferred_allocation_request__unpack(NULL, len, req);
    if (pr == NULL || pr->n_container_requests != 1) {
        if (pr)
            v1beta1__preferred_allocation_request__free_unpacked(pr, NULL);
        vg_strlcpy(reply->message, "want one container request", sizeof reply->message);
        return VGRPC_STATUS_INVALID_ARGUMENT;
    }
    V1beta1__ContainerPreferredAllocationRequest *c = pr->container_requests[0];
    size_t n = c->allocation_size < 0 ? 0 : (size_t)c->allocation_size;
    if (n > c->n_available_deviceids)
        n = c->n_available_deviceids;
    V1beta1__ContainerPreferredAllocationResponse cr =
        V1BETA1__CONTAINER_PREFERRED_ALLOCATION_RESPONSE__INIT;
    cr.n_deviceids = n;
    cr.deviceids = c->available_deviceids;
    V1beta1__ContainerPreferredAllocationResponse *crs[] = {&cr};
    V1beta1__PreferredAllocationResponse resp = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
    resp.n_container_responses = 1;
    resp.container_responses = crs;
    reply->data = pack(&resp.base, &reply->len);
    v1beta1__preferred_allocation_request__free_unpacked(pr, NULL);
    return VGRPC_STATUS_OK;
}

static enum vgrpc_status_code on_prestart(void *arg, const uint8_t *req, size_t len,
                                          struct vgrpc_reply *reply)
{
    (void)arg;
    (void)req;
    (void)len;
    reply->len = 0;
    return VGRPC_STATUS_OK;
}

static enum vgrpc_status_code on_echo(void *arg, const uint8_t *req, size_t len,
                                      struct vgrpc_reply *reply)
{
    (void)arg;
    reply->data = xmalloc(len ? len : 1);
    if (len)
        memcpy(reply->data, req, len);
    reply->len = len;
    return VGRPC_STATUS_OK;
}

static void send_devices(struct plugin *p, struct vgrpc_stream *st)
{
    char id0[] = "gpu-0", id1[] = "gpu-1", healthy[] = VGRPC_KUBELET_HEALTHY,
         unhealthy[] = VGRPC_KUBELET_UNHEALTHY;
    V1beta1__Device d0 = V1BETA1__DEVICE__INIT, d1 = V1BETA1__DEVICE__INIT;
    d0.id = id0;
    d0.health = healthy;
    d1.id = id1;
    d1.health = p->generation % 2 ? unhealthy : healthy;
    V1beta1__Device *devs[] = {&d0, &d1};
    V1beta1__ListAndWatchResponse resp = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
    resp.n_devices = 2;
    resp.devices = devs;
    size_t len;
    uint8_t *buf = pack(&resp.base, &len);
    struct vg_err err = {0};
    if (vgrpc_stream_send(st, buf, len, &err) < 0)
        printf("send failed: %s\n", err.msg);
    free(buf);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct plugin *p = arg;
    p->generation++;
    for (int i = 0; i < WATCH_MAX; i++)
        if (p->watchers[i] && strcmp(vgrpc_stream_path(p->watchers[i]), "/test.Test/Silent"))
            send_devices(p, p->watchers[i]);
}

static void on_stream_closed(void *arg, struct vgrpc_stream *st, enum vgrpc_status_code status)
{
    struct plugin *p = arg;
    for (int i = 0; i < WATCH_MAX; i++)
        if (p->watchers[i] == st)
            p->watchers[i] = NULL;
    printf("closed path=%s status=%s streams=%u\n", vgrpc_stream_path(st),
           vgrpc_status_name((int)status), vgrpc_server_streams(p->server));
    fflush(stdout);
}

static enum vgrpc_status_code on_watch(void *arg, struct vgrpc_stream *st, const uint8_t *req,
                                       size_t len, char message[VGRPC_STATUS_MESSAGE_MAX])
{
    struct plugin *p = arg;
    (void)req;
    (void)len;
    for (int i = 0; i < WATCH_MAX; i++) {
        if (p->watchers[i] == NULL) {
            p->watchers[i] = st;
            vgrpc_stream_on_close(st, on_stream_closed, p);
            if (strcmp(vgrpc_stream_path(st), "/test.Test/Silent") != 0)
                send_devices(p, st);
            printf("opened path=%s\n", vgrpc_stream_path(st));
            fflush(stdout);
            return VGRPC_STATUS_OK;
        }
    }
    vg_strlcpy(message, "too many watchers", VGRPC_STATUS_MESSAGE_MAX);
    return VGRPC_STATUS_RESOURCE_EXHAUSTED;
}

static void on_shutdown_done(void *arg)
{
    struct plugin *p = arg;
    printf("shutdown done\n");
    fflush(stdout);
    event_base_loopbreak(p->base);
}

static void on_sigterm(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct plugin *p = arg;
    vgrpc_server_shutdown(p->server, on_shutdown_done, p);
}

static int serve(const char *socket_path)
{
    struct plugin p = {0};
    struct vg_err err = {0};
    p.base = event_base_new();
    struct vgrpc_server_options opt = {.shutdown_grace_ms = 2000};
    p.server = vgrpc_server_new(p.base, &opt, &err);
    if (p.server == NULL ||
        vgrpc_server_add_unary(p.server, VGRPC_KUBELET_GET_OPTIONS, on_options, &p, &err) < 0 ||
        vgrpc_server_add_unary(p.server, VGRPC_KUBELET_ALLOCATE, on_allocate, &p, &err) < 0 ||
        vgrpc_server_add_unary(p.server, VGRPC_KUBELET_PREFERRED_ALLOC, on_preferred, &p, &err) <
            0 ||
        vgrpc_server_add_unary(p.server, VGRPC_KUBELET_PRESTART, on_prestart, &p, &err) < 0 ||
        vgrpc_server_add_unary(p.server, "/test.Test/Echo", on_echo, &p, &err) < 0 ||
        vgrpc_server_add_stream(p.server, VGRPC_KUBELET_LIST_AND_WATCH, on_watch, &p, &err) < 0 ||
        vgrpc_server_add_stream(p.server, "/test.Test/Silent", on_watch, &p, &err) < 0 ||
        vgrpc_server_listen(p.server, socket_path, &err) < 0) {
        fprintf(stderr, "grpc_peer: %s\n", err.msg);
        return 1;
    }
    struct event *term = evsignal_new(p.base, SIGTERM, on_sigterm, &p);
    event_add(term, NULL);
    p.tick = event_new(p.base, -1, EV_PERSIST, on_tick, &p);
    struct timeval tv = {0, 100000};
    event_add(p.tick, &tv);
    printf("ready\n");
    fflush(stdout);
    event_base_dispatch(p.base);
    vgrpc_server_free(p.server);
    event_free(p.tick);
    event_free(term);
    event_base_free(p.base);
    return 0;
}

/* --- clients --- */

struct client_run {
    struct event_base *base;
    unsigned messages;
    struct timespec start; /* allocate: when the call began */
};

static int64_t ns_since(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)(now.tv_sec - t->tv_sec) * 1000000000 + (now.tv_nsec - t->tv_nsec);
}

static void on_allocated(void *arg, enum vgrpc_status_code status, const char *message,
                         const uint8_t *response, size_t len)
{
    struct client_run *r = arg;
    int64_t ns = ns_since(&r->start);
    (void)response;
    printf("ns=%lld status=%s len=%zu message=%s\n", (long long)ns, vgrpc_status_name((int)status),
           len, message ? message : "");
    fflush(stdout);
    event_base_loopbreak(r->base);
}

/* One Allocate per line of stdin over one connection, as kubelet keeps one per plugin. */
static int allocate_loop(struct client_run *r, struct vgrpc_client *cl)
{
    char line[512];
    while (fgets(line, sizeof line, stdin) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        char *ids[] = {line};
        V1beta1__ContainerAllocateRequest c = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
        c.n_devices_ids = 1;
        c.devices_ids = ids;
        V1beta1__ContainerAllocateRequest *cs[] = {&c};
        V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
        req.n_container_requests = 1;
        req.container_requests = cs;
        size_t len;
        uint8_t *buf = pack(&req.base, &len);
        struct vg_err err = {0};
        clock_gettime(CLOCK_MONOTONIC, &r->start);
        int rc =
            vgrpc_client_unary(cl, VGRPC_KUBELET_ALLOCATE, buf, len, 10000, on_allocated, r, &err);
        free(buf);
        if (rc < 0) {
            printf("start failed: %s\n", err.msg);
            fflush(stdout);
            continue;
        }
        event_base_dispatch(r->base);
    }
    return 0;
}

static void on_done(void *arg, enum vgrpc_status_code status, const char *message,
                    const uint8_t *response, size_t len)
{
    struct client_run *r = arg;
    (void)response;
    if (status == VGRPC_STATUS_OK)
        printf("response_len=%zu\n", len);
    printf("status=%s message=%s\n", vgrpc_status_name((int)status), message);
    fflush(stdout);
    event_base_loopbreak(r->base);
}

static bool on_devices(void *arg, const uint8_t *msg, size_t len)
{
    struct client_run *r = arg;
    V1beta1__ListAndWatchResponse *resp = v1beta1__list_and_watch_response__unpack(NULL, len, msg);
    if (resp == NULL) {
        printf("bad ListAndWatchResponse\n");
        return false;
    }
    printf("devices=");
    for (size_t i = 0; i < resp->n_devices; i++)
        printf("%s%s:%s", i ? "," : "", resp->devices[i]->id, resp->devices[i]->health);
    printf("\n");
    fflush(stdout);
    v1beta1__list_and_watch_response__free_unpacked(resp, NULL);
    r->messages++;
    return true;
}

static int run_client(int argc, char **argv)
{
    const char *mode = argv[1];
    struct vg_err err = {0};
    struct client_run r = {.base = event_base_new()};
    struct vgrpc_client_options opt = {.authority = strcmp(argv[3], "-") ? argv[3] : NULL};
    struct vgrpc_client *cl = vgrpc_client_new(r.base, argv[2], &opt, &err);
    if (cl == NULL) {
        fprintf(stderr, "grpc_peer: %s\n", err.msg);
        return 1;
    }
    int rc = 0;
    uint8_t *buf = NULL;
    if (strcmp(mode, "allocate") == 0 && argc == 4) {
        rc = allocate_loop(&r, cl);
        vgrpc_client_free(cl);
        event_base_free(r.base);
        return rc;
    }
    if (strcmp(mode, "register") == 0 && argc == 5) {
        char version[] = VGRPC_KUBELET_API_VERSION, resource[] = "vgpu.io/gpu";
        V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
        o.get_preferred_allocation_available = 1;
        V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
        req.version = version;
        req.endpoint = argv[4];
        req.resource_name = resource;
        req.options = &o;
        size_t len;
        buf = pack(&req.base, &len);
        rc = vgrpc_client_unary(cl, VGRPC_KUBELET_REGISTER, buf, len, 5000, on_done, &r, &err);
    } else if (strcmp(mode, "watch") == 0 && argc == 4) {
        V1beta1__Empty e = V1BETA1__EMPTY__INIT;
        size_t len;
        buf = pack(&e.base, &len);
        rc = vgrpc_client_stream(cl, VGRPC_KUBELET_LIST_AND_WATCH, buf, len, 0, on_devices, on_done,
                                 &r, &err);
    } else if (strcmp(mode, "call") == 0 && argc == 7) {
        uint64_t timeout_ms, size;
        if (vg_parse_u64(argv[5], 0, 600000, &timeout_ms, &err) < 0 ||
            vg_parse_u64(argv[6], 0, 64 << 20, &size, &err) < 0) {
            fprintf(stderr, "grpc_peer: %s\n", err.msg);
            vgrpc_client_free(cl);
            return 2;
        }
        buf = xmalloc(size + 1);
        memset(buf, 'x', size);
        rc = vgrpc_client_unary(cl, argv[4], buf, size, timeout_ms, on_done, &r, &err);
    } else {
        fprintf(stderr, "grpc_peer: bad arguments for %s\n", mode);
        vgrpc_client_free(cl);
        return 2;
    }
    free(buf);
    if (rc < 0) {
        printf("start failed: %s\n", err.msg);
        vgrpc_client_free(cl);
        event_base_free(r.base);
        return 0;
    }
    event_base_dispatch(r.base);
    vgrpc_client_free(cl);
    event_base_free(r.base);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "serve") == 0)
        return serve(argv[2]);
    if (argc >= 4)
        return run_client(argc, argv);
    fprintf(stderr,
            "usage: grpc_peer serve SOCKET | register|watch|call|allocate SOCKET AUTHORITY ...\n");
    return 2;
}
