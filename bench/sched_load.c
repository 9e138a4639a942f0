/* sched_load: plays kube-scheduler against vgpu-scheduler for the throughput benchmark
 * (bench/scheduler.sh). It lists the pods and nodes from the API (bench/kube_stub.c),
 * then:
 *   1. latency: LAT pods one at a time over one keep-alive connection: POST /filter with
 *      every node offered by name (nodeCacheCapable), then /prioritize and /bind; the
 *      filter and bind round trips are timed;
 *   2. throughput: the other pods through CLIENTS concurrent keep-alive connections, each
 *      doing filter -> prioritize -> bind per pod, as kube-scheduler's binding cycles do;
 *   3. checks: the scheduler's /debug/state says its invariants hold, and, independently,
 *      the decision annotations in the API, summed per GPU, fit the node inventories, and
 *      every pod bound names the node its decision names.
 * Prints markdown table rows; exit 1 on any failed request or broken invariant.
 * usage: sched_load SCHED_PORT API_PORT [CLIENTS] [LAT] */
#define _GNU_SOURCE /* strcasestr */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <limits.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "annot/annot.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/proc.h"
#include "base/str.h"

struct conn {
    unsigned port;
    int fd;
    char *buf;
    size_t len, cap;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int conn_open(struct conn *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0)
        return -errno;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)c->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) < 0) {
        int e = -errno;
        close(c->fd);
        c->fd = -1;
        return e;
    }
    return 0;
}

/* "HTTP/1.1 200 OK" -> 200, or 0. */
static int parse_status(const char *line)
{
    const char *sp = strchr(line, ' ');
    char num[4];
    uint64_t v;
    struct vg_err err;
    if (sp == NULL || strlen(sp) < 4)
        return 0;
    memcpy(num, sp + 1, 3);
    num[3] = '\0';
    return vg_parse_u64(num, 100, 599, &v, &err) < 0 ? 0 : (int)v;
}

/* Writes the iovecs (modified as they are consumed). */
static int writev_all(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t w = writev(fd, iov, n > IOV_MAX ? IOV_MAX : n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -EIO;
        size_t done = (size_t)w;
        while (n > 0 && done >= iov->iov_len) {
            done -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + done;
            iov->iov_len -= done;
        }
    }
    return 0;
}

/* One request on the keep-alive connection, its body the concatenation of the nparts
 * parts (sent as they lie, with one writev: the 100 KB NodeNames list is not copied per
 * request); *resp (NUL-terminated) points into c->buf until the next call. Returns the
 * HTTP status or a negative errno. */
static int callv(struct conn *c, const char *method, const char *path, const struct iovec *parts,
                 int nparts, const char **resp, size_t *rlen)
{
    enum { MAX_PARTS = 8 };
    size_t blen = 0;
    if (nparts > MAX_PARTS)
        return -EINVAL;
    for (int k = 0; k < nparts; k++)
        blen += parts[k].iov_len;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (c->fd < 0 && conn_open(c) < 0)
            return -ECONNREFUSED;
        char head[512];
        int hn = vg_snprintf(head, sizeof head,
                             "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                             "\r\nContent-Length: %zu\r\n\r\n",
                             method, path, blen);
        if (hn < 0)
            return -EINVAL;
        struct iovec iov[MAX_PARTS + 1];
        iov[0] = (struct iovec){head, (size_t)hn};
        for (int k = 0; k < nparts; k++)
            iov[k + 1] = parts[k];
        if (writev_all(c->fd, iov, nparts + 1) < 0) {
            close(c->fd);
            c->fd = -1;
            continue;
        }
        c->len = 0;
        size_t need = 0, head_len = 0;
        bool closing = false;
        int status = 0;
        for (;;) {
            if (c->cap - c->len < 65536) {
                c->cap = c->cap ? c->cap * 2 : 1 << 20;
                c->buf = xrealloc(c->buf, c->cap);
            }
            ssize_t r = read(c->fd, c->buf + c->len, c->cap - c->len - 1);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            c->len += (size_t)r;
            c->buf[c->len] = '\0';
            if (head_len == 0) {
                char *end = strstr(c->buf, "\r\n\r\n");
                if (end == NULL)
                    continue;
                head_len = (size_t)(end - c->buf) + 4;
                status = parse_status(c->buf);
                const char *cl = strcasestr(c->buf, "\r\nContent-Length:");
                uint64_t clen = 0;
                struct vg_err err;
                char num[32] = "";
                if (cl != NULL) {
                    cl += 17;
                    while (*cl == ' ')
                        cl++;
                    size_t k = 0;
                    while (k + 1 < sizeof num && cl[k] >= '0' && cl[k] <= '9') {
                        num[k] = cl[k];
                        k++;
                    }
                    num[k] = '\0';
                }
                if (cl == NULL || vg_parse_u64(num, 0, 1u << 30, &clen, &err) < 0)
                    return -EBADMSG;
                closing = strcasestr(c->buf, "\r\nConnection: close") != NULL;
                need = head_len + clen;
            }
            if (head_len > 0 && c->len >= need)
                break;
        }
        if (head_len == 0 || c->len < need) {
            close(c->fd);
            c->fd = -1;
            if (c->len == 0)
                continue; /* the server closed an idle keep-alive connection: retry once */
            return -EIO;
        }
        if (closing) {
            close(c->fd);
            c->fd = -1;
        }
        c->buf[need] = '\0';
        *resp = c->buf + head_len;
        *rlen = need - head_len;
        return status;
    }
    return -EIO;
}

static int call(struct conn *c, const char *method, const char *path, const char *body, size_t blen,
                const char **resp, size_t *rlen)
{
    struct iovec part = {(void *)(uintptr_t)body, blen};
    return callv(c, method, path, &part, blen > 0 ? 1 : 0, resp, rlen);
}

/* ---- the run ------------------------------------------------------------------------- */

struct run {
    unsigned sched_port;
    char **pods; /* Pod JSON, as listed */
    char **pod_names;
    char **pod_uids; /* metadata.uid, sent as ExtenderBindingArgs.PodUID */
    size_t npods;
    char *names; /* ["node-00000",...] */
    size_t names_len;
    atomic_size_t next;
    size_t end;
    atomic_size_t done, failed;
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define IOV_LIT(s) ((struct iovec){(void *)(uintptr_t)(s), sizeof(s) - 1})
#define IOV_STR(s) ((struct iovec){(void *)(uintptr_t)(s), strlen(s)})

/* filter -> prioritize -> bind for one pod; the filter and bind times go to *tf, *tb.
 * The bodies are the bytes kube-scheduler sends; the filter's is written from its parts
 * (the pod as listed, the node list serialised once) rather than assembled per call. */
static int schedule_pod(struct run *r, struct conn *c, size_t i, double *tf, double *tb)
{
    size_t cap = strlen(r->pods[i]) + 1024;
    char *body = xmalloc(cap);
    const struct iovec filter_body[] = {IOV_LIT("{\"Pod\":"),
                                        IOV_STR(r->pods[i]),
                                        IOV_LIT(",\"Nodes\":null,\"NodeNames\":"),
                                        {r->names, r->names_len},
                                        IOV_LIT("}")};
    const char *resp;
    size_t rlen;
    double t0 = now_s();
    int st = callv(c, "POST", "/filter", filter_body, 5, &resp, &rlen);
    int n;
    if (tf != NULL)
        *tf = now_s() - t0;
    json_t *res = st == 200 ? json_loadb(resp, rlen, 0, NULL) : NULL;
    const char *node = json_string_value(json_array_get(json_object_get(res, "NodeNames"), 0));
    int rc = -1;
    if (node == NULL || json_array_size(json_object_get(res, "NodeNames")) != 1) {
        fprintf(stderr, "sched_load: filter %s: status %d: %.300s\n", r->pod_names[i], st,
                st > 0 ? resp : "");
        goto out;
    }
    char node_name[256];
    (void)vg_strlcpy(node_name, node, sizeof node_name);
    n = vg_snprintf(body, cap, "{\"Pod\":%s,\"Nodes\":null,\"NodeNames\":[\"%s\"]}", r->pods[i],
                    node_name);
    st = call(c, "POST", "/prioritize", body, (size_t)n, &resp, &rlen);
    if (st != 200 || strstr(resp, "\"Score\":10") == NULL) {
        fprintf(stderr, "sched_load: prioritize %s: status %d: %.300s\n", r->pod_names[i], st,
                st > 0 ? resp : "");
        goto out;
    }
    n = vg_snprintf(body, cap,
                    "{\"PodName\":\"%s\",\"PodNamespace\":\"default\",\"PodUID\":\"%s\","
                    "\"Node\":\"%s\"}",
                    r->pod_names[i], r->pod_uids[i], node_name);
    t0 = now_s();
    st = call(c, "POST", "/bind", body, (size_t)n, &resp, &rlen);
    if (tb != NULL)
        *tb = now_s() - t0;
    if (st != 200 || strstr(resp, "\"Error\":\"\"") == NULL) {
        fprintf(stderr, "sched_load: bind %s: status %d: %.300s\n", r->pod_names[i], st,
                st > 0 ? resp : "");
        goto out;
    }
    rc = 0;
out:
    json_decref(res);
    free(body);
    return rc;
}

static void *worker(void *arg)
{
    struct run *r = arg;
    struct conn c = {.port = r->sched_port, .fd = -1};
    for (;;) {
        size_t i = atomic_fetch_add(&r->next, 1);
        if (i >= r->end)
            break;
        if (schedule_pod(r, &c, i, NULL, NULL) == 0)
            atomic_fetch_add(&r->done, 1);
        else
            atomic_fetch_add(&r->failed, 1);
    }
    if (c.fd >= 0)
        close(c.fd);
    free(c.buf);
    return NULL;
}

static json_t *get_json(unsigned port, const char *path)
{
    struct conn c = {.port = port, .fd = -1};
    const char *resp;
    size_t rlen;
    json_t *j = NULL;
    if (call(&c, "GET", path, NULL, 0, &resp, &rlen) == 200)
        j = json_loadb(resp, rlen, 0, NULL);
    if (c.fd >= 0)
        close(c.fd);
    free(c.buf);
    return j;
}

struct gpu_use {
    uint64_t mem, cap_mem;
    unsigned cores, cap_cores, tenants, slots;
};

/* Sums the decisions in the API per GPU against the inventories; 0 when all fit. */
static int check_api(unsigned api_port, size_t *bound_out)
{
    json_t *nodes = get_json(api_port, "/api/v1/nodes");
    json_t *pods = get_json(api_port, "/api/v1/pods");
    if (nodes == NULL || pods == NULL)
        return -1;
    json_t *gpus = json_object(); /* uuid -> index into use[] */
    size_t ngpu = 0, cap = 1024;
    struct gpu_use *use = xcalloc(cap, sizeof *use);
    size_t i;
    json_t *item;
    struct vg_err err = {0};
    int bad = 0;
    json_array_foreach(json_object_get(nodes, "items"), i, item)
    {
        const char *text = json_string_value(json_object_get(
            json_object_get(json_object_get(item, "metadata"), "annotations"), ANNOT_KEY_GPUS));
        struct annot_inventory inv;
        if (text == NULL || annot_inventory_decode(text, strlen(text), &inv, &err) < 0)
            continue;
        for (unsigned g = 0; g < inv.gpu_count; g++) {
            if (ngpu == cap) {
                cap *= 2;
                use = xrealloc(use, cap * sizeof *use);
            }
            use[ngpu] = (struct gpu_use){0, inv.gpus[g].memory_mib, 0, inv.gpus[g].cores,
                                         0, inv.gpus[g].slots};
            json_object_set_new(gpus, inv.gpus[g].uuid, json_integer((json_int_t)ngpu++));
        }
    }
    size_t bound = 0;
    struct annot_decision *d = xcalloc(1, sizeof *d);
    json_array_foreach(json_object_get(pods, "items"), i, item)
    {
        const char *text = json_string_value(json_object_get(
            json_object_get(json_object_get(item, "metadata"), "annotations"), ANNOT_KEY_DECISION));
        const char *node_name =
            json_string_value(json_object_get(json_object_get(item, "spec"), "nodeName"));
        if (text == NULL)
            continue;
        if (annot_decision_decode(text, strlen(text), d, &err) < 0) {
            fprintf(stderr, "sched_load: garbled decision: %s\n", err.msg);
            bad = 1;
            continue;
        }
        if (node_name != NULL) {
            bound++;
            if (strcmp(node_name, d->node) != 0) {
                fprintf(stderr, "sched_load: pod bound to %s, decision says %s\n", node_name,
                        d->node);
                bad = 1;
            }
        }
        for (unsigned k = 0; k < d->container_count; k++)
            for (unsigned g = 0; g < d->containers[k].gpu_count; g++) {
                json_t *idx = json_object_get(gpus, d->containers[k].gpus[g].uuid);
                if (idx == NULL) {
                    fprintf(stderr, "sched_load: decision names unknown GPU %s\n",
                            d->containers[k].gpus[g].uuid);
                    bad = 1;
                    continue;
                }
                struct gpu_use *u = &use[json_integer_value(idx)];
                u->mem += d->containers[k].gpus[g].memory_mib;
                u->cores += d->containers[k].gpus[g].cores;
                u->tenants++;
            }
    }
    for (size_t g = 0; g < ngpu; g++)
        if (use[g].mem > use[g].cap_mem || use[g].cores > use[g].cap_cores ||
            use[g].tenants > use[g].slots) {
            fprintf(stderr, "sched_load: GPU %zu over capacity: %llu MiB, %u %%, %u tenants\n", g,
                    (unsigned long long)use[g].mem, use[g].cores, use[g].tenants);
            bad = 1;
        }
    free(d);
    free(use);
    json_decref(gpus);
    json_decref(nodes);
    json_decref(pods);
    *bound_out = bound;
    return bad ? -1 : 0;
}

/* utime + stime of process pid, in seconds (/proc/PID/stat fields 14 and 15); -1 when
 * unreadable. */
static double proc_cpu_s(uint64_t pid)
{
    struct vg_proc_stat st;
    if (pid > INT32_MAX || vg_proc_stat_read(NULL, (pid_t)pid, &st, NULL) < 0)
        return -1;
    long hz = sysconf(_SC_CLK_TCK);
    return hz > 0 ? (double)(st.utime + st.stime) / (double)hz : -1;
}

int main(int argc, char **argv)
{
    uint64_t sched_port, api_port, clients = 16, lat = 500, sched_pid = 0;
    struct vg_err err = {0};
    if (argc < 3 || vg_parse_u64(argv[1], 1, 65535, &sched_port, &err) < 0 ||
        vg_parse_u64(argv[2], 1, 65535, &api_port, &err) < 0 ||
        (argc > 3 && vg_parse_u64(argv[3], 1, 256, &clients, &err) < 0) ||
        (argc > 4 && vg_parse_u64(argv[4], 0, 100000, &lat, &err) < 0) ||
        (argc > 5 && vg_parse_u64(argv[5], 1, UINT32_MAX, &sched_pid, &err) < 0)) {
        fprintf(stderr, "usage: sched_load SCHED_PORT API_PORT [CLIENTS] [LAT] [SCHED_PID] %s\n",
                err.msg);
        return 2;
    }
    json_t *nodes = get_json((unsigned)api_port, "/api/v1/nodes");
    json_t *pods = get_json((unsigned)api_port, "/api/v1/pods");
    if (nodes == NULL || pods == NULL) {
        fprintf(stderr, "sched_load: cannot list nodes and pods\n");
        return 1;
    }
    json_t *names = json_array();
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(nodes, "items"), i, item)
        json_array_append(names, json_object_get(json_object_get(item, "metadata"), "name"));
    struct run r = {.sched_port = (unsigned)sched_port};
    r.names = json_dumps(names, JSON_COMPACT);
    r.names_len = strlen(r.names);
    r.npods = json_array_size(json_object_get(pods, "items"));
    r.pods = xcalloc(r.npods + 1, sizeof *r.pods);
    r.pod_names = xcalloc(r.npods + 1, sizeof *r.pod_names);
    r.pod_uids = xcalloc(r.npods + 1, sizeof *r.pod_uids);
    json_array_foreach(json_object_get(pods, "items"), i, item)
    {
        r.pods[i] = json_dumps(item, JSON_COMPACT);
        r.pod_names[i] =
            xstrdup(json_string_value(json_object_get(json_object_get(item, "metadata"), "name")));
        const char *uid =
            json_string_value(json_object_get(json_object_get(item, "metadata"), "uid"));
        r.pod_uids[i] = xstrdup(uid != NULL ? uid : "");
    }
    if (lat > r.npods / 2)
        lat = r.npods / 2;

    /* 1. latency, one connection */
    double *tf = xcalloc(lat + 1, sizeof *tf), *tb = xcalloc(lat + 1, sizeof *tb);
    struct conn c = {.port = r.sched_port, .fd = -1};
    int failed = 0;
    for (size_t k = 0; k < lat; k++)
        if (schedule_pod(&r, &c, k, &tf[k], &tb[k]) < 0)
            failed++;
    if (c.fd >= 0)
        close(c.fd);
    free(c.buf);
    qsort(tf, lat, sizeof *tf, cmp_double);
    qsort(tb, lat, sizeof *tb, cmp_double);

    /* 2. throughput, CLIENTS connections */
    atomic_init(&r.next, lat);
    atomic_init(&r.done, 0);
    atomic_init(&r.failed, 0);
    r.end = r.npods;
    pthread_t *th = xcalloc(clients, sizeof *th);
    double cpu0 = sched_pid != 0 ? proc_cpu_s(sched_pid) : -1;
    double t0 = now_s();
    for (size_t k = 0; k < clients; k++)
        pthread_create(&th[k], NULL, worker, &r);
    for (size_t k = 0; k < clients; k++)
        pthread_join(th[k], NULL);
    double elapsed = now_s() - t0;
    double cpu1 = sched_pid != 0 ? proc_cpu_s(sched_pid) : -1;
    size_t done = atomic_load(&r.done);
    failed += (int)atomic_load(&r.failed);

    /* 3. invariants */
    json_t *state = get_json((unsigned)sched_port, "/debug/state");
    const char *inv = json_string_value(json_object_get(state, "invariants"));
    size_t bound = 0;
    int api_ok = check_api((unsigned)api_port, &bound);
    if (lat > 0) {
        printf("| /filter p50 / p99 (C client, %zu names, %llu sequential) | %.2f / %.2f ms | "
               "p99 <= 2 ms |\n",
               json_array_size(names), (unsigned long long)lat, tf[lat / 2] * 1e3,
               tf[lat * 99 / 100] * 1e3);
        printf("| /bind p50 / p99 (one pods/binding on the API) | %.2f / %.2f ms | |\n",
               tb[lat / 2] * 1e3, tb[lat * 99 / 100] * 1e3);
    }
    printf("| filter+prioritize+bind decisions/s (%llu clients, %zu pods, C API stub) | %.0f | "
           ">= 2,000 |\n",
           (unsigned long long)clients, done, (double)done / elapsed);
    if (cpu0 >= 0 && cpu1 >= cpu0 && done > 0)
        printf("| scheduler CPU per decision (throughput phase) | %.3f ms (%.2f s for %zu) | "
               "<= 0.5 ms for 2,000/s on one core |\n",
               (cpu1 - cpu0) * 1e3 / (double)done, cpu1 - cpu0, done);
    printf("| pods bound in the API / failed requests | %zu / %d | all / 0 |\n", bound, failed);
    printf("| invariants: scheduler / API decisions summed per GPU | %s / %s | ok / ok |\n",
           inv != NULL ? inv : "(none)", api_ok == 0 ? "ok" : "OVER");
    int rc = failed == 0 && inv != NULL && strcmp(inv, "ok") == 0 && api_ok == 0 && bound == r.npods
                 ? 0
                 : 1;
    json_decref(state);
    for (size_t k = 0; k < r.npods; k++) {
        free(r.pods[k]);
        free(r.pod_names[k]);
        free(r.pod_uids[k]);
    }
    free(r.pods);
    free(r.pod_names);
    free(r.pod_uids);
    free(r.names);
    free(th);
    free(tf);
    free(tb);
    json_decref(names);
    json_decref(nodes);
    json_decref(pods);
    return rc;
}
