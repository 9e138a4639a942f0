/* Unit tests for vgpu-monitor's metrics (docs/monitor.md, "Metrics"): the region
 * snapshot reader on real regions and on every kind of bad file, the HTTP request parser,
 * the exposition (values, absent values, escaping, grouping) and the containers scan
 * (departed containers, staging directories, watchdog notes). The endpoint itself is
 * tested on fakegpu by tests/integration/monitor_metrics_test.py. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "base/str.h"
#include "monitor/http.h"
#include "monitor/metrics.h"
#include "monitor/region_read.h"
#include "monitor/scan.h"
#include "region/region.h"

#define MiB  (UINT64_C(1) << 20)
#define UID  "0a1b2c3d-1111-2222-3333-444455556666"
#define GPU0 "GPU-4b520487-88a0-b1b7-ef08-5d7fb1333bc3"
#define GPU1 "GPU-11111111-2222-3333-4444-555555555555"

static char tmp[64];

static int setup(void **state)
{
    (void)state;
    (void)vg_snprintf(tmp, sizeof tmp, "/tmp/test-mon-metrics-XXXXXX");
    return mkdtemp(tmp) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    (void)vg_snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_in(char *buf, size_t size, const char *name)
{
    assert_true(vg_snprintf(buf, size, "%s/%s", tmp, name) > 0);
}

/* A real region (region_create), with a process holding 300 MiB on GPU0 and two refused
 * reservations. */
static void make_region(const char *path, struct region **keep)
{
    struct region_config c = {.device_count = 2};
    (void)vg_strlcpy(c.devices[0].uuid, GPU0, sizeof c.devices[0].uuid);
    (void)vg_strlcpy(c.devices[1].uuid, GPU1, sizeof c.devices[1].uuid);
    struct vg_err err = {0};
    assert_int_equal(region_create(path, &c, &err), 0);
    struct region *r = NULL;
    assert_int_equal(region_open(path, &r, &err), 0);
    region_set_limit(r, 0, 1024 * MiB, 30);
    assert_int_equal(region_attach(r, &err), 0);
    assert_int_equal(region_reserve(r, 0, 300 * MiB), 0);
    assert_int_equal(region_reserve(r, 0, 800 * MiB), -ENOMEM);
    assert_int_equal(region_reserve(r, 0, 900 * MiB), -ENOMEM);
    struct region_compute *rc = region_compute(r, 0);
    atomic_store(&rc->waited_ns, INT64_C(2500000000));
    atomic_store(&rc->busy_ns, INT64_C(1000000000));
    atomic_store(&rc->achieved_ppm, 290000);
    *keep = r;
}

static void patch(const char *path, off_t off, const void *bytes, size_t n)
{
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, bytes, n, off), (ssize_t)n);
    close(fd);
}

static void test_region_snapshot(void **state)
{
    (void)state;
    char path[128];
    path_in(path, sizeof path, "region");
    struct region *r = NULL;
    make_region(path, &r);
    struct mon_region_snapshot s;
    struct vg_err err = {0};
    assert_int_equal(mon_region_read_at(AT_FDCWD, path, &s, &err), 0);
    assert_int_equal(s.device_count, 2);
    assert_string_equal(s.devices[0].uuid, GPU0);
    assert_string_equal(s.devices[1].uuid, GPU1);
    assert_true(s.devices[0].used == 300 * MiB);
    assert_true(s.devices[1].used == 0);
    assert_true(s.refused == 2);
    assert_true(s.devices[0].waited_ns == INT64_C(2500000000));
    assert_true(s.devices[0].busy_ns == INT64_C(1000000000));
    assert_int_equal(s.devices[0].achieved_ppm, 290000);
    /* Values a tenant forged are bounded: a frozen counter (bit 63), negative times, a
     * share over 1. */
    uint64_t frozen = (UINT64_C(1) << 63) | (300 * MiB);
    int64_t neg = -7, huge = 5000000;
    patch(path, 64 + 80, &frozen, sizeof frozen);
    patch(path, 64 + 88 + (off_t)offsetof(struct region_compute, waited_ns), &neg, sizeof neg);
    patch(path, 64 + 88 + (off_t)offsetof(struct region_compute, achieved_ppm), &huge, sizeof huge);
    assert_int_equal(mon_region_read_at(AT_FDCWD, path, &s, &err), 0);
    assert_true(s.devices[0].used == 300 * MiB);
    assert_true(s.devices[0].waited_ns == 0);
    assert_int_equal(s.devices[0].achieved_ppm, 1000000);
    region_close(r);
}

static void test_region_bad_files(void **state)
{
    (void)state;
    char path[128], other[128];
    path_in(path, sizeof path, "region");
    struct region *r = NULL;
    make_region(path, &r);
    region_close(r);
    struct mon_region_snapshot s;
    struct vg_err err = {0};
    /* corrupted: magic, version, device count, an unterminated UUID */
    static const struct {
        off_t off;
        uint32_t value;
        const char *what;
    } bad[] = {{0, 0x12345678, "bad magic"},
               {8, 1, "version 1"},
               {12, 0, "0 devices"},
               {12, 17, "17 devices"},
               {24, 1023, "1023 process slots"},
               {16, 4096, "header says"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        path_in(other, sizeof other, "bad");
        char cmd[300];
        (void)vg_snprintf(cmd, sizeof cmd, "cp --remove-destination %s %s", path, other);
        assert_int_equal(system(cmd), 0);
        patch(other, bad[i].off, &bad[i].value, sizeof bad[i].value);
        int rc = mon_region_read_at(AT_FDCWD, other, &s, &err);
        if (rc != -EPROTO)
            fail_msg("%s: rc %d (%s)", bad[i].what, rc, err.msg);
        assert_non_null(strstr(err.msg, other));
        assert_int_equal(s.device_count, 0);
    }
    char g[64];
    memset(g, 'G', sizeof g);
    patch(other, 64, g, sizeof g);
    patch(other, 16, &(uint64_t){MON_REGION_FILE_SIZE}, 8);
    assert_int_equal(mon_region_read_at(AT_FDCWD, other, &s, &err), -EPROTO);
    assert_non_null(strstr(err.msg, "unterminated"));
    /* truncated, empty, grown */
    assert_int_equal(truncate(other, 1000), 0);
    assert_int_equal(mon_region_read_at(AT_FDCWD, other, &s, &err), -EMSGSIZE);
    assert_int_equal(truncate(other, 0), 0);
    assert_int_equal(mon_region_read_at(AT_FDCWD, other, &s, &err), -EMSGSIZE);
    assert_int_equal(truncate(other, MON_REGION_FILE_SIZE + 1), 0);
    assert_int_equal(mon_region_read_at(AT_FDCWD, other, &s, &err), -EMSGSIZE);
    /* gone, a symlink (not followed), a FIFO (not waited on), a directory */
    assert_int_equal(mon_region_read_at(AT_FDCWD, "/nonexistent/region", &s, &err), -ENOENT);
    unlink(other);
    assert_int_equal(symlink(path, other), 0);
    assert_int_equal(mon_region_read_at(AT_FDCWD, other, &s, &err), -ELOOP);
    unlink(other);
    assert_int_equal(mkfifo(other, 0600), 0);
    time_t t0 = time(NULL);
    assert_int_equal(mon_region_read_at(AT_FDCWD, other, &s, &err), -EINVAL);
    assert_true(time(NULL) - t0 < 2);
    unlink(other);
    assert_int_equal(mkdir(other, 0700), 0);
    assert_int_equal(mon_region_read_at(AT_FDCWD, other, &s, &err), -EINVAL);
    rmdir(other);
}

static void test_http_parse(void **state)
{
    (void)state;
    static const struct {
        const char *req;
        int rc;
        int route;
    } cases[] = {
        {"GET /metrics HTTP/1.1\r\nHost: x:9394\r\nAccept: text/plain;version=0.0.4\r\n\r\n", 0,
         MON_HTTP_METRICS},
        {"GET /metrics?x=1 HTTP/1.0\r\n\r\n", 0, MON_HTTP_METRICS},
        {"HEAD /healthz HTTP/1.1\n\n", 0, MON_HTTP_HEALTHZ},
        {"GET /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 0, MON_HTTP_METRICS},
        {"GET /metrics HTTP/1.1\r\nHost: x\r\n", -EAGAIN, 0},
        {"GET /metr", -EAGAIN, 0},
        {"", -EAGAIN, 0},
        {"POST /metrics HTTP/1.1\r\n\r\n", -405, 0},
        {"DELETE /healthz HTTP/1.1\r\n\r\n", -405, 0},
        /* another method is 405 with or without a body (docs/monitor.md) */
        {"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", -405, 0},
        {"PUT /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", -405, 0},
        {"GET / HTTP/1.1\r\n\r\n", -404, 0},
        {"GET /metricsx HTTP/1.1\r\n\r\n", -404, 0},
        {"GET /debug/state HTTP/1.1\r\n\r\n", -404, 0},
        {"GET metrics HTTP/1.1\r\n\r\n", -400, 0},
        {"GET /metrics\r\n\r\n", -400, 0},
        {"GET  /metrics HTTP/1.1\r\n\r\n", -400, 0},
        {"GET /metrics HTTP/2.0\r\n\r\n", -505, 0},
        {"GET /metrics HTTP/1.2\r\n\r\n", -505, 0},
        {"GET /metrics FTP/1.1\r\n\r\n", -400, 0},
        {"GET /metrics HTTP/1.1\r\nno colon\r\n\r\n", -400, 0},
        {"GET /metrics HTTP/1.1\r\n: empty name\r\n\r\n", -400, 0},
        {"GET /metrics HTTP/1.1\r\nX: a\x01z\r\n\r\n", -400, 0},
        {"GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", -400, 0},
        {"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", -400, 0},
        {"\x16\x03\x01\x02 TLS\n\n", -400, 0},
        {"\x16\x03\x01", -400, 0}, /* garbage is refused before the head ends */
        {"GET /metrics HTTP/1.1\r\nX: \x7f\r\n\r\n", -400, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct mon_http_request req;
        int rc = mon_http_parse(cases[i].req, strlen(cases[i].req), &req);
        if (rc != cases[i].rc)
            fail_msg("case %zu %.40s: rc %d, want %d", i, cases[i].req, rc, cases[i].rc);
        if (rc == 0)
            assert_int_equal(req.route, cases[i].route);
    }
    /* A NUL in the request line; a head that never ends. */
    struct mon_http_request req;
    assert_int_equal(mon_http_parse("GET /met\0rics HTTP/1.1\r\n\r\n", 27, &req), -400);
    assert_int_equal(mon_http_parse("GET /met\0", 9, &req), -400);
    char *big = malloc(MON_HTTP_HEAD_MAX + 10);
    assert_non_null(big);
    memset(big, 'a', MON_HTTP_HEAD_MAX + 10);
    memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
    assert_int_equal(mon_http_parse(big, MON_HTTP_HEAD_MAX - 1, &req), -EAGAIN);
    assert_int_equal(mon_http_parse(big, MON_HTTP_HEAD_MAX, &req), -431);
    assert_int_equal(mon_http_parse(big, MON_HTTP_HEAD_MAX + 10, &req), -431);
    free(big);
    /* --listen values */
    struct vg_err err = {0};
    assert_int_equal(mon_http_check_listen(":9394", &err), 0);
    assert_int_equal(mon_http_check_listen("127.0.0.1:0", &err), 0);
    assert_int_equal(mon_http_check_listen("[::1]:9394", &err), 0);
    assert_int_equal(mon_http_check_listen("9394", &err), -EINVAL);
    assert_int_equal(mon_http_check_listen("localhost:9394", &err), -EINVAL);
    assert_int_equal(mon_http_check_listen("::1:9394", &err), -EINVAL);
    assert_int_equal(mon_http_check_listen(":65536", &err), -EINVAL);
    assert_non_null(strstr(err.msg, "--listen"));
}

static bool has(const char *text, const char *needle)
{
    return strstr(text, needle) != NULL;
}

static void test_exposition(void **state)
{
    (void)state;
    struct mon_gpu_stats gpus[2] = {
        {.index = 0,
         .uuid = GPU0,
         .model = "Quote\"Back\\slash\nGPU",
         .healthy = true,
         .have_memory = true,
         .have_util = true,
         .memory_total = 80 * 1024 * MiB,
         .memory_used = 1000,
         .util_percent = 37,
         .memory_util_percent = 12,
         .allocated = 3 * 1024 * MiB,
         .containers = 2,
         .last_xid = 79,
         .xids = 3},
        {.index = 1, .uuid = GPU1, .model = "B", .healthy = false},
    };
    struct mon_ctr_stats rows[2] = {
        {.pod_uid = UID,
         .ns = "team-a",
         .pod = "train-0",
         .container = "main",
         .gpu = 0,
         .vdevice = 0,
         .first = true,
         .memory_limit = 1024 * MiB,
         .share_percent = 30,
         .region = true,
         .used = 300 * MiB,
         .busy_ns = 1500000000,
         .waited_ns = 2000000001,
         .held_ns = 250000000,
         .priority = 1,
         .achieved_ppm = 295000,
         .refused = 4,
         .closed = 1,
         .violations = 2,
         .kills = 1},
        {.pod_uid = UID,
         .ns = "team-a",
         .pod = "train-0",
         .container = "main\xff", /* a byte that is not UTF-8, from a directory name */
         .gpu = 1,
         .vdevice = 1,
         .first = false,
         .memory_limit = 2048 * MiB,
         .priority = -1},
    };
    struct mon_counters c = {.samples = 5};
    uint64_t errors[MON_ERR_KINDS] = {[MON_ERR_REGION_CORRUPT] = 7};
    struct mon_exposition x = {.hostname = "node-1",
                               .gpus = gpus,
                               .gpu_count = 2,
                               .ctrs = rows,
                               .ctr_count = 2,
                               .counters = &c,
                               .policy = "warn",
                               .errors = errors};
    struct vg_buf b;
    vg_buf_init(&b, "metrics", 1 << 20);
    struct vg_err err = {0};
    assert_int_equal(mon_metrics_format(&x, &b, &err), 0);
    const char *t = b.data;
    const char *g0 = "{Hostname=\"node-1\",gpu=\"0\",UUID=\"" GPU0 "\"}";
    char line[512];
#define HAS(fmt, ...)                                                                              \
    do {                                                                                           \
        (void)vg_snprintf(line, sizeof line, fmt, __VA_ARGS__);                                    \
        if (!has(t, line))                                                                         \
            fail_msg("missing: %s", line);                                                         \
    } while (0)
    HAS("vgpu_gpu_memory_total_bytes%s 85899345920\n", g0);
    HAS("vgpu_gpu_utilization_ratio%s 0.37\n", g0);
    HAS("vgpu_gpu_memory_allocated_bytes%s 3221225472\n", g0);
    HAS("vgpu_gpu_containers%s 2\n", g0);
    HAS("vgpu_gpu_last_xid%s 79\n", g0);
    HAS("vgpu_gpu_xid_errors_total%s 3\n", g0);
    HAS("vgpu_gpu_healthy%s 1\n", g0);
    HAS("%s", "vgpu_gpu_healthy{Hostname=\"node-1\",gpu=\"1\",UUID=\"" GPU1 "\"} 0\n");
    /* a label value with a quote, a backslash and a newline, escaped */
    HAS("%s", "model_name=\"Quote\\\"Back\\\\slash\\nGPU\"} 1\n");
    HAS("%s", "device_type=\"NVIDIA-Quote\\\"Back\\\\slash\\nGPU\"} 1000\n");
    HAS("%s",
        "hami_host_gpu_utilization_ratio{node=\"node-1\",device_index=\"0\",device_uuid=\"" GPU0
        "\",device_type=\"NVIDIA-Quote\\\"Back\\\\slash\\nGPU\"} 37\n");
    HAS("%s",
        "hami_host_gpu_memory_controller_utilization_ratio{device_index=\"0\",device_uuid=\"" GPU0
        "\",device_type=\"NVIDIA-Quote\\\"Back\\\\slash\\nGPU\"} 12\n");
    /* a GPU NVML does not answer has no memory series */
    assert_false(has(t, "vgpu_gpu_memory_used_bytes{Hostname=\"node-1\",gpu=\"1\""));
    const char *r0 = "{Hostname=\"node-1\",namespace=\"team-a\",pod=\"train-0\",container=\"main\","
                     "pod_uid=\"" UID "\",gpu=\"0\",UUID=\"" GPU0 "\"}";
    HAS("vgpu_container_memory_used_bytes%s 314572800\n", r0);
    HAS("vgpu_container_memory_limit_bytes%s 1073741824\n", r0);
    HAS("vgpu_container_compute_share_limit_ratio%s 0.3\n", r0);
    HAS("vgpu_container_compute_share_ratio%s 0.295\n", r0);
    HAS("vgpu_container_throttled_seconds_total%s 2.000000001\n", r0);
    HAS("vgpu_container_gpu_busy_seconds_total%s 1.5\n", r0);
    HAS("vgpu_container_priority%s 1\n", r0);
    HAS("vgpu_container_priority_held_seconds_total%s 0.25\n", r0);
    /* a container whose pod named no priority has no priority series: one sample only */
    const char *first_p = strstr(t, "\nvgpu_container_priority{");
    assert_non_null(first_p);
    assert_null(strstr(first_p + 1, "\nvgpu_container_priority{"));
    const char *hr0 =
        "{namespace=\"team-a\",pod=\"train-0\",container=\"main\",vdevice_index=\"0\","
        "device_uuid=\"" GPU0 "\"}";
    HAS("hami_vgpu_memory_used_bytes%s 314572800\n", hr0);
    HAS("hami_vgpu_memory_limit_bytes%s 1073741824\n", hr0);
    HAS("hami_container_device_utilization_ratio%s 29.5\n", hr0);
    const char *c0 = "{Hostname=\"node-1\",namespace=\"team-a\",pod=\"train-0\",container=\"main\","
                     "pod_uid=\"" UID "\"}";
    HAS("vgpu_container_allocations_refused_total%s 4\n", c0);
    HAS("vgpu_container_allocations_failed_closed_total%s 1\n", c0);
    HAS("vgpu_container_watchdog_violations_total%s 2\n", c0);
    HAS("vgpu_container_watchdog_kills_total%s 1\n", c0);
    HAS("%s", "vgpu_monitor_errors_total{kind=\"region_corrupt\"} 7\n");
    HAS("%s", "vgpu_monitor_errors_total{kind=\"http_overload\"} 0\n");
    HAS("%s", "vgpu_monitor_samples_total 5\n");
    /* the second row: its limit, no region values, and no second per-container sample;
     * the byte that is not UTF-8 in its name written as U+FFFD */
    HAS("%s", "hami_vgpu_memory_limit_bytes{namespace=\"team-a\",pod=\"train-0\",container=\"main"
              "\xEF\xBF\xBD\",vdevice_index=\"1\",device_uuid=\"" GPU1 "\"} 2147483648\n");
    assert_false(has(t, "hami_vgpu_memory_used_bytes{namespace=\"team-a\",pod=\"train-0\","
                        "container=\"main\xEF\xBF\xBD\",vdevice_index=\"1\""));
    assert_null(strchr(t, '\xff'));
    const char *first = strstr(t, "vgpu_container_allocations_refused_total{");
    assert_non_null(first);
    assert_null(strstr(first + 1, "vgpu_container_allocations_refused_total{"));
    /* Each family once: its HELP and TYPE, then all its samples together. */
    const char *fams[] = {"vgpu_gpu_healthy", "hami_vgpu_memory_limit_bytes",
                          "vgpu_container_memory_limit_bytes", "vgpu_monitor_errors_total"};
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        char help[128];
        (void)vg_snprintf(help, sizeof help, "# HELP %s ", fams[f]);
        const char *h = strstr(t, help);
        assert_non_null(h);
        assert_null(strstr(h + 1, help));
        char sample[128];
        (void)vg_snprintf(sample, sizeof sample, "\n%s{", fams[f]);
        const char *last = h;
        for (const char *p = strstr(h, sample); p; p = strstr(p + 1, sample)) {
            /* no other family's HELP between this family's samples */
            const char *other = strstr(last + 1, "# HELP ");
            assert_true(other == NULL || other > p);
            last = p;
        }
    }
    /* A buffer too small: an error, never a partial success. */
    struct vg_buf small;
    vg_buf_init(&small, "metrics", 100);
    assert_true(mon_metrics_format(&x, &small, &err) < 0);
    vg_buf_free(&small);
    vg_buf_free(&b);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void add_container(const char *name, const char *limits, bool region, struct region **r)
{
    char path[256];
    (void)vg_snprintf(path, sizeof path, "%s/%s", tmp, name);
    assert_int_equal(mkdir(path, 0755), 0);
    (void)vg_snprintf(path, sizeof path, "%s/%s/limits", tmp, name);
    write_file(path, limits);
    if (region) {
        (void)vg_snprintf(path, sizeof path, "%s/%s/region", tmp, name);
        make_region(path, r);
    }
}

static void test_scan(void **state)
{
    (void)state;
    struct region *r1 = NULL, *r2 = NULL;
    add_container(UID "_main",
                  "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=1024m\nVGPU_DEVICE_UUID_0=" GPU0
                  "\nCUDA_DEVICE_SM_LIMIT_0=30\n",
                  true, &r1);
    add_container(UID "_side",
                  "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=512m\nVGPU_DEVICE_UUID_0=" GPU1 "\n",
                  false, NULL);
    add_container("99999999-8888-7777-6666-555555555555_old",
                  "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT=2g\n", true, &r2);
    /* not containers: the device plugin's staging names, a stray file, a bad name */
    add_container(".new." UID "_main", "vgpu-limits 1\n", false, NULL);
    add_container(".ready." UID "_x", "vgpu-limits 1\n", false, NULL);
    add_container("not-a-container", "vgpu-limits 1\n", false, NULL);
    add_container(UID "_UPPER", "vgpu-limits 1\n", false, NULL);
    struct mon_scan *s = NULL;
    struct vg_err err = {0};
    assert_int_equal(mon_scan_new(tmp, NULL, NULL, &s, &err), 0);
    const char *uuids[] = {GPU0, GPU1};
    uint64_t errors[MON_ERR_KINDS] = {0};
    mon_scan_note(s, UID, "main", "over");
    mon_scan_note(s, UID, "main", "kill");
    mon_scan_note(s, UID, "main", "kill");
    mon_scan_note(s, UID, "", "kill"); /* a whole pod: no container to count it on */
    assert_int_equal(mon_scan_run(s, uuids, 2, errors, &err), 0);
    size_t n = 0;
    const struct mon_ctr_stats *rows = mon_scan_rows(s, &n);
    /* main (GPU0, by its UUID), old (no UUIDs: its region's devices, GPU0 and GPU1), side
     * (GPU1, no region) */
    assert_int_equal(n, 4);
    const struct mon_ctr_stats *main_row = NULL, *side_row = NULL;
    unsigned old_rows = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(rows[i].container, "main") == 0)
            main_row = &rows[i];
        else if (strcmp(rows[i].container, "side") == 0)
            side_row = &rows[i];
        else if (strcmp(rows[i].container, "old") == 0)
            old_rows++;
    }
    assert_int_equal(old_rows, 2);
    if (!main_row || !side_row)
        fail_msg("rows missing");
    assert_int_equal(main_row->gpu, 0);
    assert_true(main_row->region && main_row->used == 300 * MiB && main_row->refused == 2);
    assert_true(main_row->memory_limit == 1024 * MiB);
    assert_int_equal(main_row->share_percent, 30);
    assert_true(main_row->violations == 1 && main_row->kills == 2);
    assert_string_equal(main_row->pod_uid, UID);
    assert_string_equal(main_row->ns, "");
    assert_int_equal(side_row->gpu, 1);
    assert_false(side_row->region);
    assert_true(errors[MON_ERR_REGION_MISSING] == 1);
    /* A region kept open between scans and then cut short is seen at the next scan; one
     * that grew, within MON_SCAN_STAT_EVERY scans. */
    region_close(r1);
    r1 = NULL;
    char rpath[256];
    (void)vg_snprintf(rpath, sizeof rpath, "%s/" UID "_main/region", tmp);
    assert_int_equal(truncate(rpath, 1000), 0);
    assert_int_equal(mon_scan_run(s, uuids, 2, errors, &err), 0);
    assert_true(errors[MON_ERR_REGION_TRUNCATED] == 1);
    rows = mon_scan_rows(s, &n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].container, "main") == 0)
            assert_false(rows[i].region);
    assert_int_equal(truncate(rpath, MON_REGION_FILE_SIZE + 4096), 0);
    for (int i = 0; i < MON_SCAN_STAT_EVERY; i++)
        assert_int_equal(mon_scan_run(s, uuids, 2, errors, &err), 0);
    assert_true(errors[MON_ERR_REGION_TRUNCATED] >= 2);
    /* The container leaves: gone from the next scan, its notes with it. */
    char cmd[300];
    (void)vg_snprintf(cmd, sizeof cmd, "rm -rf %s/" UID "_main", tmp);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(mon_scan_run(s, uuids, 2, errors, &err), 0);
    rows = mon_scan_rows(s, &n);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++)
        assert_string_not_equal(rows[i].container, "main");
    /* A bad limits file is counted and shows nothing. */
    char path[256];
    (void)vg_snprintf(path, sizeof path, "%s/" UID "_side/limits", tmp);
    write_file(path, "vgpu-limits 7\n");
    for (int i = 0; i < MON_SCAN_LIMITS_EVERY; i++)
        assert_int_equal(mon_scan_run(s, uuids, 2, errors, &err), 0);
    assert_true(errors[MON_ERR_LIMITS] >= 1);
    rows = mon_scan_rows(s, &n);
    assert_int_equal(n, 2);
    /* No directory: an error, counted, no rows. */
    mon_scan_free(s);
    assert_int_equal(mon_scan_new("/nonexistent/dir", NULL, NULL, &s, &err), 0);
    assert_int_equal(mon_scan_run(s, uuids, 2, errors, &err), -ENOENT);
    assert_true(errors[MON_ERR_REGION_UNREADABLE] == 1);
    rows = mon_scan_rows(s, &n);
    assert_int_equal(n, 0);
    mon_scan_free(s);
    region_close(r1);
    region_close(r2);
}

/* ---- the server: a client that drips its request, and too many clients ---- */

struct server_test {
    uint64_t errors[MON_ERR_KINDS];
    int drip_fd;
    unsigned dripped;
};

static int serve_metrics(void *arg, struct vg_buf *out, struct vg_err *err)
{
    (void)arg;
    return vg_buf_append_str(out, "up 1\n", err);
}

static void count_kind(void *arg, const char *kind)
{
    struct server_test *t = arg;
    int k = mon_error_kind_from_name(kind);
    assert_true(k >= 0);
    t->errors[k]++;
}

static void drip(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct server_test *t = arg;
    static const char req[] = "GET /metrics HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa";
    if (t->dripped < sizeof req - 1 &&
        send(t->drip_fd, req + t->dripped, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1)
        t->dripped++;
}

static int client(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

static void run_for(struct event_base *base, long ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
}

static void test_server_bounds(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct server_test t = {0};
    struct mon_http_handler h = {.metrics = serve_metrics, .error = count_kind, .arg = &t};
    struct mon_http *srv = NULL;
    struct vg_err err = {0};
    assert_int_equal(mon_http_new(base, "127.0.0.1:0", 300, &h, &srv, &err), 0);
    unsigned port = mon_http_port(srv);
    assert_true(port > 0);
    /* A client that sends one byte every 20 ms never goes idle, yet is cut off at the
     * deadline (300 ms from accept), long before its request could end. */
    t.drip_fd = client(port);
    struct timeval every = {.tv_usec = 20000};
    struct event *timer = event_new(base, -1, EV_PERSIST, drip, &t);
    event_add(timer, &every);
    run_for(base, 900);
    event_free(timer);
    assert_true(t.errors[MON_ERR_HTTP_TIMEOUT] == 1);
    assert_true(t.dripped >= 8); /* active all along: an idle timeout alone would not fire */
    char buf[64];
    assert_int_equal(recv(t.drip_fd, buf, sizeof buf, MSG_DONTWAIT), 0); /* closed */
    close(t.drip_fd);
    /* MON_HTTP_CONNS_PER_PEER connections from one address at once; each one more evicts
     * the oldest that has not sent its request. */
    int fds[MON_HTTP_CONNS_PER_PEER + 3];
    for (int i = 0; i < MON_HTTP_CONNS_PER_PEER + 3; i++) {
        fds[i] = client(port);
        run_for(base, 5);
    }
    run_for(base, 100);
    assert_true(t.errors[MON_ERR_HTTP_OVERLOAD] == 3);
    for (int i = 0; i < MON_HTTP_CONNS_PER_PEER + 3; i++) {
        ssize_t got = recv(fds[i], buf, sizeof buf, MSG_DONTWAIT);
        if (i < 3)
            assert_int_equal(got, 0); /* the oldest three: closed */
        else
            assert_true(got < 0 && errno == EAGAIN); /* the others: still open */
    }
    for (int i = 0; i < MON_HTTP_CONNS_PER_PEER + 3; i++)
        close(fds[i]);
    run_for(base, 50);
    /* Room again: a request is answered. */
    int fd = client(port);
    static const char req[] = "GET /metrics HTTP/1.1\r\n\r\n";
    assert_int_equal(send(fd, req, sizeof req - 1, MSG_NOSIGNAL), (ssize_t)(sizeof req - 1));
    run_for(base, 100);
    ssize_t n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_non_null(strstr(buf, "HTTP/1.1 200 OK"));
    close(fd);
    mon_http_free(srv);
    event_base_free(base);
}

static void test_listen_flag(void **state)
{
    (void)state;
    struct mon_args a;
    struct vg_err err = {0};
    assert_int_equal(mon_args_parse(0, NULL, &a, &err), 0);
    assert_string_equal(a.listen, ":9394");
    char a1[] = "--listen", a2[] = "off", a3[] = "--listen=127.0.0.1:9400", a4[] = "example.com:80";
    char *off[] = {a1, a2};
    assert_int_equal(mon_args_parse(2, off, &a, &err), 0);
    assert_null(a.listen);
    char *lo[] = {a3};
    assert_int_equal(mon_args_parse(1, lo, &a, &err), 0);
    assert_string_equal(a.listen, "127.0.0.1:9400");
    char *bad[] = {a1, a4};
    assert_int_equal(mon_args_parse(2, bad, &a, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "--listen"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_region_snapshot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_region_bad_files, setup, teardown),
        cmocka_unit_test(test_http_parse),
        cmocka_unit_test(test_exposition),
        cmocka_unit_test_setup_teardown(test_scan, setup, teardown),
        cmocka_unit_test(test_listen_flag),
        cmocka_unit_test(test_server_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
