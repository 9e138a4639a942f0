/* Unit tests for src/monitor: the cgroup path parser (every layout kubelet makes, and
 * hostile or malformed paths and files), the limits file's GPU UUIDs, the slack, the
 * flags, and the judge over a fake /proc (warn policy: who is reported, once per
 * episode, per container or per pod). Kills of real processes are in
 * tests/security/monitor_test.sh. */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cmocka.h>

#include "monitor/metrics.h"
#include "monitor/monitor.h"

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

#define UID  "0a1b2c3d-1111-2222-3333-444455556666"
#define UID_ "0a1b2c3d_1111_2222_3333_444455556666"
#define UID2 "99999999-8888-7777-6666-555555555555"
#define CID  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define CID2 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define GPU0 "GPU-4b520487-88a0-b1b7-ef08-5d7fb1333bc3"
#define GPU1 "GPU-11111111-2222-3333-4444-555555555555"

struct path_case {
    const char *path, *root;
    int rc;
    const char *uid, *cid;
};

static void check_path(const struct path_case *c)
{
    struct mon_cgroup_id id;
    struct vg_err err = {0};
    int rc = mon_cgroup_parse_path(c->path, strlen(c->path), c->root, &id, &err);
    if (rc != c->rc)
        fail_msg("%s: rc %d (%s), want %d", c->path, rc, err.msg, c->rc);
    if (rc == 0) {
        assert_string_equal(id.pod_uid, c->uid);
        assert_string_equal(id.container_id, c->cid);
    } else {
        assert_true(err.msg[0] != '\0');
    }
}

static void test_cgroup_layouts(void **state)
{
    (void)state;
    static const struct path_case cases[] = {
        /* cgroupfs driver (v1 and v2 paths are the same) */
        {"/kubepods/burstable/pod" UID "/" CID, NULL, 0, UID, CID},
        {"/kubepods/besteffort/pod" UID "/" CID, NULL, 0, UID, CID},
        {"/kubepods/pod" UID "/" CID, NULL, 0, UID, CID}, /* Guaranteed */
        {"/kubepods/burstable/pod" UID "/crio-" CID, NULL, 0, UID, CID},
        {"/kubepods/burstable/pod" UID "/docker-" CID, NULL, 0, UID, CID},
        {"/kubepods/burstable/pod" UID, NULL, 0, UID, ""}, /* the pod's own cgroup */
        /* systemd driver */
        {"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
         ".slice/cri-containerd-" CID ".scope",
         NULL, 0, UID, CID},
        {"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID_ ".slice/crio-" CID
         ".scope",
         NULL, 0, UID, CID},
        {"/kubepods.slice/kubepods-pod" UID_ ".slice/docker-" CID ".scope", NULL, 0, UID, CID},
        {"/kubepods.slice/kubepods-pod" UID_ ".slice", NULL, 0, UID, ""},
        /* kubelet nested in a systemd unit of its own (kind) */
        {"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
         "kubelet-kubepods-besteffort-pod" UID_ ".slice/cri-containerd-" CID ".scope",
         NULL, 0, UID, CID},
        /* seen from another cgroup namespace, and under a prefix */
        {"/../../kubepods.slice/kubepods-pod" UID_ ".slice/cri-containerd-" CID ".scope", NULL, 0,
         UID, CID},
        {"/docker/abc/kubepods/burstable/pod" UID "/" CID, NULL, 0, UID, CID},
        /* cgroups a tenant nests below its own container change nothing */
        {"/kubepods/burstable/pod" UID "/" CID "/kubepods/burstable/pod" UID2 "/" CID2, NULL, 0,
         UID, CID},
        {"/kubepods.slice/kubepods-pod" UID_ ".slice/cri-containerd-" CID
         ".scope/kubepods.slice/kubepods-pod" UID_ ".slice/cri-containerd-" CID2 ".scope",
         NULL, 0, UID, CID},
        /* a root: the hierarchy must start right under it */
        {"/vgpu-test/x/kubepods/pod" UID "/" CID, "/vgpu-test/x", 0, UID, CID},
        {"/vgpu-test/x/kubepods/pod" UID "/" CID, "/vgpu-test/x/", 0, UID, CID},
        {"/kubepods/pod" UID "/" CID, "/", 0, UID, CID},
        {"/other/kubepods/pod" UID "/" CID, "/vgpu-test/x", -ENOENT, NULL, NULL},
        {"/vgpu-test/xy/kubepods/pod" UID "/" CID, "/vgpu-test/x", -ENOENT, NULL, NULL},
        {"/vgpu-test/x/a/kubepods/pod" UID "/" CID, "/vgpu-test/x", -ENOENT, NULL, NULL},
        {"/vgpu-test/x", "/vgpu-test/x", -ENOENT, NULL, NULL},
        /* not in a pod */
        {"/", NULL, -ENOENT, NULL, NULL},
        {"/user.slice/user-0.slice/session-1.scope", NULL, -ENOENT, NULL, NULL},
        {"/system.slice/containerd.service", NULL, -ENOENT, NULL, NULL},
        {"/kubepods", NULL, -ENOENT, NULL, NULL},
        {"/kubepods/burstable", NULL, -ENOENT, NULL, NULL},
        {"/kubepods.slice/kubepods-besteffort.slice", NULL, -ENOENT, NULL, NULL},
        {"/kubepods-burstable.slice", NULL, -ENOENT, NULL, NULL},
        {"/mykubepods/pod" UID "/" CID, NULL, -ENOENT, NULL, NULL},
        /* inside kubelet's hierarchy but malformed */
        {"/kubepods/burstable/pod0A1B2C3D-1111-2222-3333-444455556666/" CID, NULL, -EINVAL, NULL,
         NULL},
        {"/kubepods/burstable/pod" UID_ "/" CID, NULL, -EINVAL, NULL, NULL},
        {"/kubepods/burstable/pod" UID "x/" CID, NULL, -EINVAL, NULL, NULL},
        {"/kubepods/burstable/" UID "/" CID, NULL, -EINVAL, NULL, NULL},
        {"/kubepods/guaranteed/pod" UID "/" CID, NULL, -EINVAL, NULL, NULL},
        {"/kubepods/burstable/pod" UID "/" CID "a", NULL, -EINVAL, NULL, NULL},
        {"/kubepods/burstable/pod" UID
         "/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
         NULL, -EINVAL, NULL, NULL},
        {"/kubepods/burstable/pod" UID "/crio-conmon-" CID, NULL, -EINVAL, NULL, NULL},
        {"/kubepods/burstable/pod" UID "/runc-" CID, NULL, -EINVAL, NULL, NULL},
        {"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID ".slice", NULL,
         -EINVAL, NULL, NULL},
        {"/kubepods.slice/kubepods-burstable.slice/other-burstable-pod" UID_ ".slice", NULL,
         -EINVAL, NULL, NULL},
        {"/kubepods.slice/kubepods-burstable.slice/kubepods-guaranteed-pod" UID_ ".slice", NULL,
         -EINVAL, NULL, NULL},
        {"/kubepods.slice/kubepods-pod" UID_ ".scope", NULL, -EINVAL, NULL, NULL},
        {"/kubepods.slice/kubepods-pod" UID_ ".slice/cri-containerd-" CID ".slicex", NULL, -EINVAL,
         NULL, NULL},
        {"/kubepods//pod" UID "/" CID, NULL, -EINVAL, NULL, NULL},
        {"kubepods/pod" UID "/" CID, NULL, -EINVAL, NULL, NULL},
        {"", NULL, -EINVAL, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_path(&cases[i]);
}

static void test_cgroup_hostile_paths(void **state)
{
    (void)state;
    struct mon_cgroup_id id;
    struct vg_err err = {0};
    /* A NUL or a newline inside the path. */
    static const char nul[] = "/kubepods/pod" UID "\0/" CID;
    assert_int_equal(mon_cgroup_parse_path(nul, sizeof nul - 1, NULL, &id, &err), -EINVAL);
    static const char nl[] = "/kubepods/pod" UID "\n/" CID;
    assert_int_equal(mon_cgroup_parse_path(nl, sizeof nl - 1, NULL, &id, &err), -EINVAL);
    /* Too long, and too many components. */
    char *big = malloc(MON_PATH_MAX + 16);
    assert_non_null(big);
    memset(big, 'a', MON_PATH_MAX + 15);
    big[0] = '/';
    assert_int_equal(mon_cgroup_parse_path(big, MON_PATH_MAX + 15, NULL, &id, &err), -EINVAL);
    for (size_t i = 0; i + 1 < MON_PATH_MAX - 1; i += 2) {
        big[i] = '/';
        big[i + 1] = 'x';
    }
    int rc = mon_cgroup_parse_path(big, MON_PATH_MAX - 2, NULL, &id, &err);
    assert_true(rc == -ENOENT || rc == -EINVAL);
    free(big);
}

static int parse_file(const char *text, const char *root, struct mon_cgroup_id *id)
{
    struct vg_err err = {0};
    int rc = mon_cgroup_parse(text, strlen(text), root, id, &err);
    if (rc != 0)
        assert_true(err.msg[0] != '\0');
    return rc;
}

static void test_cgroup_files(void **state)
{
    (void)state;
    struct mon_cgroup_id id;
    /* cgroup v1: every controller, the same path */
    assert_int_equal(parse_file("12:pids:/kubepods/burstable/pod" UID "/" CID "\n"
                                "4:memory:/kubepods/burstable/pod" UID "/" CID "\n"
                                "2:cpu,cpuacct:/kubepods/burstable/pod" UID "/" CID "\n"
                                "1:name=systemd:/kubepods/burstable/pod" UID "/" CID "\n"
                                "0::/\n",
                                NULL, &id),
                     0);
    assert_string_equal(id.pod_uid, UID);
    assert_string_equal(id.container_id, CID);
    /* cgroup v2 only */
    assert_int_equal(parse_file("0::/kubepods.slice/kubepods-pod" UID_ ".slice/cri-containerd-" CID
                                ".scope\n",
                                NULL, &id),
                     0);
    assert_string_equal(id.container_id, CID);
    /* v2's line wins over v1's, memory over other controllers */
    assert_int_equal(parse_file("4:memory:/kubepods/pod" UID2 "/" CID2 "\n"
                                "0::/kubepods/pod" UID "/" CID "\n",
                                NULL, &id),
                     0);
    assert_string_equal(id.pod_uid, UID);
    assert_int_equal(parse_file("8:pids:/kubepods/pod" UID2 "/" CID2 "\n"
                                "4:memory:/kubepods/pod" UID "/" CID "\n"
                                "0::/\n",
                                NULL, &id),
                     0);
    assert_string_equal(id.pod_uid, UID);
    assert_int_equal(parse_file("8:pids:/kubepods/pod" UID2 "/" CID2 "\n"
                                "4:memory:/process_api/abc\n0::/\n",
                                NULL, &id),
                     0);
    assert_string_equal(id.pod_uid, UID2);
    /* a path holding ':' is still one path; a file without a final newline */
    assert_int_equal(parse_file("0::/kubepods/pod" UID "/" CID, NULL, &id), 0);
    assert_int_equal(parse_file("0::/a:b\n4:memory:/kubepods/pod" UID "/" CID, NULL, &id), 0);
    /* no pod at all */
    assert_int_equal(parse_file("4:memory:/\n0::/user.slice\n", NULL, &id), -ENOENT);
    assert_int_equal(parse_file("", NULL, &id), -ENOENT);
    /* the root applies to every line */
    assert_int_equal(parse_file("0::/t/kubepods/pod" UID "/" CID "\n", "/t", &id), 0);
    assert_int_equal(parse_file("0::/kubepods/pod" UID "/" CID "\n", "/t", &id), -ENOENT);
    /* malformed files */
    assert_int_equal(parse_file("garbage\n", NULL, &id), -EINVAL);
    assert_int_equal(parse_file("4:memory\n", NULL, &id), -EINVAL);
    assert_int_equal(parse_file(":memory:/kubepods/pod" UID "/" CID "\n", NULL, &id), -EINVAL);
    assert_int_equal(parse_file("x:memory:/kubepods/pod" UID "/" CID "\n", NULL, &id), -EINVAL);
    /* a malformed pod line is reported when no line names a pod */
    assert_int_equal(parse_file("0::/kubepods/podnope/" CID "\n", NULL, &id), -EINVAL);
    /* ... and does not hide a good line */
    assert_int_equal(parse_file("8:pids:/kubepods/podnope/x\n4:memory:/kubepods/pod" UID "/" CID
                                "\n",
                                NULL, &id),
                     0);
}

static int parse_limits(const char *text, struct mon_limits *l)
{
    struct vg_err err = {0};
    vgpu_config_init(&l->config);
    int rc = vgpu_config_parse_file(&l->config, text, strlen(text), &err);
    if (rc != 0)
        assert_true(err.msg[0] != '\0');
    return rc;
}

static void test_limits_uuid(void **state)
{
    (void)state;
    struct mon_limits l;
    assert_int_equal(parse_limits("vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=1024m\n"
                                  "VGPU_DEVICE_UUID_0=" GPU0 "\nCUDA_DEVICE_MEMORY_LIMIT_1=2g\n"
                                  "VGPU_DEVICE_UUID_1=" GPU1 "\n",
                                  &l),
                     0);
    assert_int_equal(mon_limits_for_gpu(&l, GPU0), GiB);
    assert_int_equal(mon_limits_for_gpu(&l, GPU1), 2 * GiB);
    /* a GPU the container was not given */
    assert_int_equal(mon_limits_for_gpu(&l, "GPU-00000000-0000-0000-0000-000000000000"), 0);
    /* a file without UUIDs (an older device plugin): the largest limit */
    assert_int_equal(parse_limits("vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=1g\n"
                                  "CUDA_DEVICE_MEMORY_LIMIT_1=3g\n",
                                  &l),
                     0);
    assert_int_equal(mon_limits_for_gpu(&l, GPU0), 3 * GiB);
    assert_int_equal(parse_limits("vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT=5g\n", &l), 0);
    assert_int_equal(mon_limits_for_gpu(&l, GPU0), 5 * GiB);
    /* no memory limit */
    assert_int_equal(parse_limits("vgpu-limits 1\nCUDA_DEVICE_SM_LIMIT=30\n", &l), 0);
    assert_int_equal(mon_limits_for_gpu(&l, GPU0), UINT64_MAX);
    assert_int_equal(parse_limits("vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=0\n"
                                  "VGPU_DEVICE_UUID_0=" GPU0 "\n",
                                  &l),
                     0);
    assert_int_equal(mon_limits_for_gpu(&l, GPU0), UINT64_MAX);
    /* MIG UUIDs */
    assert_int_equal(parse_limits("vgpu-limits 1\nVGPU_DEVICE_UUID_3=MIG-"
                                  "4b520487-88a0-b1b7-ef08-5d7fb1333bc3\n",
                                  &l),
                     0);
    /* bad UUIDs refuse the file */
    static const char *const bad[] = {
        "vgpu-limits 1\nVGPU_DEVICE_UUID=" GPU0 "\n",
        "vgpu-limits 1\nVGPU_DEVICE_UUID_0=GPU-4B520487\n",
        "vgpu-limits 1\nVGPU_DEVICE_UUID_0=4b520487-88a0\n",
        "vgpu-limits 1\nVGPU_DEVICE_UUID_0=GPU-\n",
        "vgpu-limits 1\nVGPU_DEVICE_UUID_0=\n",
        "vgpu-limits 1\nVGPU_DEVICE_UUID_0=GPU-4b520487 x\n",
        "vgpu-limits 1\nVGPU_DEVICE_UUID_0=GPU-"
        "0000000000000000000000000000000000000000000000000000000000000\n",
        "vgpu-limits 1\nVGPU_DEVICE_UUID_16=" GPU0 "\n",
        "vgpu-limits 1\nVGPU_DEVICE_UUID_0=" GPU0 "\nVGPU_DEVICE_UUID_0=" GPU0 "\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (parse_limits(bad[i], &l) == 0)
            fail_msg("accepted: %s", bad[i]);
    /* in the environment the key is checked but never used */
    struct vgpu_config c;
    struct vg_err err = {0};
    char var[] = "VGPU_DEVICE_UUID_0=" GPU0;
    char *env[] = {var, NULL};
    assert_int_equal(vgpu_config_load(&c, env, &err), 0);
    assert_string_equal(c.device_uuid[0], "");
}

static void test_slack(void **state)
{
    (void)state;
    assert_int_equal(mon_slack(0), 64 * MiB);
    assert_int_equal(mon_slack(GiB), 64 * MiB);
    assert_int_equal(mon_slack(10 * GiB), 10 * GiB / 50);
    assert_int_equal(mon_slack(80 * GiB), 80 * GiB / 50);
}

static int args(struct mon_args *a, struct vg_err *err, ...)
{
    char *argv[32];
    int argc = 0;
    va_list ap;
    va_start(ap, err);
    for (char *s; (s = va_arg(ap, char *)) != NULL && argc < 32;)
        argv[argc++] = s;
    va_end(ap);
    return mon_args_parse(argc, argv, a, err);
}

static void test_args(void **state)
{
    (void)state;
    struct mon_args a;
    struct vg_err err = {0};
    unsetenv("NODE_NAME");
    assert_int_equal(args(&a, &err, NULL), 0);
    assert_int_equal(a.policy, MON_POLICY_KILL); /* the default since round 2 (docs/security.md) */
    assert_true(a.check_registration);
    assert_int_equal(a.quarantine_after, 3);
    assert_int_equal(a.quarantine_window_s, 60);
    assert_int_equal(a.quarantine_s, 600);
    assert_int_equal(a.interval_ms, 100);
    assert_string_equal(a.region_dir, "/usr/local/vgpu/containers");
    assert_string_equal(a.proc_root, "/proc");
    assert_null(a.node_name);
    assert_int_equal(args(&a, &err, "--policy", "kill", "--interval-ms=50", "--proc-root", "/p",
                          "--cgroup-root", "/c", "--region-dir", "/d", "--node-name", "n1",
                          "--samples", "3", NULL),
                     0);
    assert_int_equal(a.policy, MON_POLICY_KILL);
    assert_int_equal(a.interval_ms, 50);
    assert_string_equal(a.proc_root, "/p");
    assert_string_equal(a.cgroup_root, "/c");
    assert_string_equal(a.region_dir, "/d");
    assert_string_equal(a.node_name, "n1");
    assert_int_equal(a.samples, 3);
    /* --containers-dir: the documented alias of --region-dir */
    assert_int_equal(args(&a, &err, "--containers-dir=/e", NULL), 0);
    assert_string_equal(a.region_dir, "/e");
    assert_int_equal(args(&a, &err, "--policy", "warn", "--registration-check", "off",
                          "--quarantine-after", "0", "--quarantine-window-s", "5", "--quarantine-s",
                          "30", NULL),
                     0);
    assert_int_equal(a.policy, MON_POLICY_WARN);
    assert_false(a.check_registration);
    assert_int_equal(a.quarantine_after, 0);
    assert_int_equal(a.quarantine_window_s, 5);
    assert_int_equal(a.quarantine_s, 30);
    static const char *const bad[][3] = {
        {"--registration-check", "yes", "--registration-check"},
        {"--quarantine-after", "65", "--quarantine-after"},
        {"--quarantine-window-s", "0", "--quarantine-window-s"},
        {"--quarantine-s", "0", "--quarantine-s"},
        {"--policy", "stop", "--policy"},
        {"--interval-ms", "5", "--interval-ms"},
        {"--interval-ms", "1s", "--interval-ms"},
        {"--proc-root", "proc", "--proc-root"},
        {"--node-name", "a/b", "--node-name"},
        {"--bogus", "1", "--bogus"},
        {"--log-level", "loud", "--log-level"},
        {"--samples", "0", "--samples"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        if (args(&a, &err, bad[i][0], bad[i][1], NULL) == 0)
            fail_msg("accepted %s %s", bad[i][0], bad[i][1]);
        if (strstr(err.msg, bad[i][2]) == NULL)
            fail_msg("%s %s: message '%s' does not name the flag", bad[i][0], bad[i][1], err.msg);
    }
    assert_int_equal(args(&a, &err, "--policy", NULL), -EINVAL);
    assert_int_equal(args(&a, &err, "stray", NULL), -EINVAL);
}

/* ---- the judge over a fake /proc ---------------------------------------------------- */

struct judge_fixture {
    char dir[64], proc[96], containers[96];
    char log[4096];
    size_t log_len;
    int resolves;
};

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void fake_proc(struct judge_fixture *f, int pid, const char *cgroup)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%d", f->proc, pid);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/%d/cgroup", f->proc, pid);
    write_file(path, cgroup);
}

static void fake_limits(struct judge_fixture *f, const char *uid, const char *name,
                        const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s_%s", f->containers, uid, name);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/%s_%s/limits", f->containers, uid, name);
    write_file(path, text);
}

static void on_report(void *arg, const struct mon_report *r)
{
    struct judge_fixture *f = arg;
    int n =
        snprintf(f->log + f->log_len, sizeof f->log - f->log_len, "%s %s %s %s %llu %llu;", r->kind,
                 r->gpu_uuid == NULL ? "?" : (strcmp(r->gpu_uuid, GPU0) ? "g1" : "g0"),
                 strcmp(r->pod_uid, UID) == 0 ? "p1" : "p2", r->container[0] ? r->container : "-",
                 (unsigned long long)(r->used / MiB), (unsigned long long)(r->limit / MiB));
    if (n > 0)
        f->log_len += (size_t)n;
}

/* Container names by ID: CID is "main", CID2 "side". */
static int resolve(void *arg, const char *pod, const char *cid, char name[MON_NAME_MAX])
{
    struct judge_fixture *f = arg;
    (void)pod;
    f->resolves++;
    if (strcmp(cid, CID) == 0)
        memcpy(name, "main", 5);
    else if (strcmp(cid, CID2) == 0)
        memcpy(name, "side", 5);
    else
        return -ENOENT;
    return 0;
}

static int judge_setup(void **state)
{
    struct judge_fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/vgpu-monitor-XXXXXX");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    snprintf(f->proc, sizeof f->proc, "%s/proc", f->dir);
    snprintf(f->containers, sizeof f->containers, "%s/containers", f->dir);
    mkdir(f->proc, 0755);
    mkdir(f->containers, 0755);
    *state = f;
    return 0;
}

static int judge_teardown(void **state)
{
    struct judge_fixture *f = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    if (system(cmd) != 0)
        return -1;
    free(f);
    return 0;
}

static struct mon_monitor *judge_new(struct judge_fixture *f, bool with_names)
{
    const char *uuids[] = {GPU0, GPU1};
    struct mon_options o = {.policy = MON_POLICY_WARN,
                            .region_dir = f->containers,
                            .proc_root = f->proc,
                            .resolve = with_names ? resolve : NULL,
                            .resolve_arg = f,
                            .report = on_report,
                            .report_arg = f};
    struct mon_monitor *m;
    struct vg_err err = {0};
    assert_int_equal(mon_new(&o, uuids, 2, &m, &err), 0);
    return m;
}

static void judge(struct mon_monitor *m, struct judge_fixture *f, const struct mon_proc *p,
                  size_t n, const char *want)
{
    struct vg_err err = {0};
    f->log_len = 0;
    f->log[0] = '\0';
    assert_int_equal(mon_judge(m, p, n, &err), 0);
    assert_string_equal(f->log, want);
}

static void test_judge_containers(void **state)
{
    struct judge_fixture *f = *state;
    fake_limits(f, UID, "main",
                "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=1g\nVGPU_DEVICE_UUID_0=" GPU0 "\n");
    fake_limits(f, UID, "side",
                "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=2g\nVGPU_DEVICE_UUID_0=" GPU0 "\n");
    fake_proc(f, 100, "0::/kubepods/pod" UID "/" CID "\n");
    fake_proc(f, 101, "0::/kubepods/pod" UID "/" CID "\n");
    fake_proc(f, 200, "0::/kubepods/pod" UID "/" CID2 "\n");
    fake_proc(f, 300, "0::/user.slice\n"); /* not a pod: never judged */
    struct mon_monitor *m = judge_new(f, true);
    /* main at its limit plus slack exactly: not over; side within */
    struct mon_proc p[] = {{100, 0, 600 * MiB, 0},
                           {101, 0, 488 * MiB, 0},
                           {200, 0, 2 * GiB, 0},
                           {300, 0, 70 * GiB, 0}};
    judge(m, f, p, 4, "");
    /* one MiB more: main is over, once per episode */
    p[1].used += MiB;
    judge(m, f, p, 4, "over g0 p1 main 1089 1024;");
    judge(m, f, p, 4, "");
    /* back under, then over again: a new episode */
    p[1].used = 0;
    judge(m, f, p, 4, "under g0 p1 main 600 1024;");
    p[0].used = 5 * GiB;
    judge(m, f, p, 4, "over g0 p1 main 5120 1024;");
    /* a GPU main was not given: any use past the slack is over */
    p[0].used = 100 * MiB;
    struct mon_proc q[] = {{100, 0, 100 * MiB, 0}, {100, 1, 65 * MiB, 0}};
    judge(m, f, q, 2, "under g0 p1 main 100 1024;over g1 p1 main 65 0;");
    struct mon_counters c;
    mon_get_counters(m, &c);
    assert_int_equal(c.violations, 3);
    assert_int_equal(c.kills, 0);
    assert_int_equal(c.samples, 6);
    mon_free(m);
}

static void test_judge_pods(void **state)
{
    struct judge_fixture *f = *state;
    fake_limits(f, UID, "main",
                "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=1g\nVGPU_DEVICE_UUID_0=" GPU0 "\n");
    fake_limits(f, UID, "side",
                "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=2g\nVGPU_DEVICE_UUID_0=" GPU0 "\n");
    fake_proc(f, 100, "0::/kubepods/pod" UID "/" CID "\n");
    fake_proc(f, 200, "0::/kubepods/pod" UID "/" CID2 "\n");
    fake_proc(f, 400, "0::/kubepods/pod" UID2 "/" CID "\n"); /* a pod vgpu did not allocate */
    /* Without names, the pod's containers share the sum of their limits (3 GiB). */
    struct mon_monitor *m = judge_new(f, false);
    struct mon_proc p[] = {{100, 0, 2 * GiB, 0}, {200, 0, GiB, 0}, {400, 0, 60 * GiB, 0}};
    judge(m, f, p, 3, "");
    p[0].used = 3 * GiB;
    judge(m, f, p, 3, "over g0 p1 - 4096 3072;");
    struct mon_counters c;
    mon_get_counters(m, &c);
    assert_int_equal(c.unlimited, 1);
    mon_free(m);
    /* With names, the same use is main's violation alone. */
    m = judge_new(f, true);
    judge(m, f, p, 3, "over g0 p1 main 3072 1024;");
    mon_free(m);
}

/* A limit so large that adding the slack would wrap around is never passed. */
static void test_judge_huge_limit(void **state)
{
    struct judge_fixture *f = *state;
    fake_limits(f, UID2, "huge",
                "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=18085043209519170000\n"
                "VGPU_DEVICE_UUID_0=" GPU0 "\n");
    fake_proc(f, 500, "0::/kubepods/pod" UID2 "/" CID "\n");
    struct mon_monitor *m = judge_new(f, false);
    struct mon_proc p[] = {{500, 0, 70 * GiB, 0}};
    judge(m, f, p, 1, "");
    struct mon_counters c;
    mon_get_counters(m, &c);
    assert_int_equal(c.violations, 0);
    assert_int_equal(c.unlimited, 0);
    mon_free(m);
}

/* Under kill, a process that is gone by the time of its kill (its pid no longer exists)
 * is neither a kill nor a failed one. */
static void test_judge_kill_gone(void **state)
{
    struct judge_fixture *f = *state;
    fake_limits(f, UID, "main",
                "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=1g\nVGPU_DEVICE_UUID_0=" GPU0 "\n");
    /* Above the kernel's largest pid_max: no process has it. */
    fake_proc(f, 4194305, "0::/kubepods/pod" UID "/" CID "\n");
    const char *uuids[] = {GPU0, GPU1};
    struct mon_options o = {.policy = MON_POLICY_KILL,
                            .region_dir = f->containers,
                            .proc_root = f->proc,
                            .resolve = resolve,
                            .resolve_arg = f,
                            .report = on_report,
                            .report_arg = f};
    struct mon_monitor *m;
    struct vg_err err = {0};
    assert_int_equal(mon_new(&o, uuids, 2, &m, &err), 0);
    struct mon_proc p[] = {{4194305, 0, 8 * GiB, 0}};
    judge(m, f, p, 1, "over g0 p1 main 8192 1024;");
    struct mon_counters c;
    mon_get_counters(m, &c);
    assert_int_equal(c.kills, 0);
    assert_int_equal(c.kill_failures, 0);
    mon_free(m);
}

/* ---- registration: what the monitor verifies from outside ---------------------------- */

#define REGION_FILE_SIZE (64 + 16 * 192 + 1024 * 272)

/* A region file of the right size with a live slot for pid (0: none) in slot 3. */
static void fake_region(struct judge_fixture *f, const char *uid, const char *name, int32_t pid,
                        struct stat *st)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s_%s/region", f->containers, uid, name);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    assert_int_equal(ftruncate(fileno(fp), REGION_FILE_SIZE), 0);
    if (pid) {
        uint32_t live = 1, gen = 7;
        assert_int_equal(fseek(fp, 64 + 16 * 192 + 3 * 272, SEEK_SET), 0);
        fwrite(&live, sizeof live, 1, fp);
        fwrite(&gen, sizeof gen, 1, fp);
        fwrite(&pid, sizeof pid, 1, fp);
    }
    fclose(fp);
    assert_int_equal(stat(path, st), 0);
}

/* /proc/<pid>/status (NSpid: host then container pid) and maps for a fake process. */
static void fake_maps(struct judge_fixture *f, int pid, int nspid, const char *maps)
{
    char path[256], text[256];
    snprintf(path, sizeof path, "%s/%d/status", f->proc, pid);
    snprintf(text, sizeof text, "Name:\tprobe\nPid:\t%d\nNSpid:\t%d\t%d\n", pid, pid, nspid);
    write_file(path, text);
    snprintf(path, sizeof path, "%s/%d/maps", f->proc, pid);
    write_file(path, maps);
}

static void on_report_why(void *arg, const struct mon_report *r)
{
    struct judge_fixture *f = arg;
    int n = snprintf(f->log + f->log_len, sizeof f->log - f->log_len, "%s %d %s;", r->kind,
                     (int)r->pid, r->why ? r->why : "-");
    if (n > 0)
        f->log_len += (size_t)n;
}

static void on_report_compute(void *arg, const struct mon_report *r)
{
    struct judge_fixture *f = arg;
    int n = snprintf(f->log + f->log_len, sizeof f->log - f->log_len, "%s %s %u %u;", r->kind,
                     r->container[0] ? r->container : "-", r->util, r->ceiling);
    if (n > 0)
        f->log_len += (size_t)n;
}

/* samples of p every 20 ms for ms, the reports of all of them in f->log */
static void judge_for(struct mon_monitor *m, struct judge_fixture *f, const struct mon_proc *p,
                      size_t n, unsigned ms)
{
    f->log_len = 0;
    f->log[0] = '\0';
    for (unsigned t = 0; t < ms; t += 20) {
        struct vg_err err = {0};
        assert_int_equal(mon_judge(m, p, n, &err), 0);
        usleep(20000);
    }
}

/* The container's processes' utilization summed against its ceiling (its share, or in
 * burst mode its burst limit) plus the margin, over the window; nothing the tenant writes
 * enters. An episode is reported once, its end once; a container without a share, or with
 * a ceiling of 100, is never judged. */
static void test_judge_compute(void **state)
{
    struct judge_fixture *f = *state;
    fake_limits(f, UID, "main",
                "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=1g\nCUDA_DEVICE_SM_LIMIT_0=30\n"
                "VGPU_DEVICE_UUID_0=" GPU0 "\n");
    fake_limits(f, UID, "side",
                "vgpu-limits 1\nCUDA_DEVICE_SM_LIMIT=20\nVGPU_COMPUTE_MODE=burst\n"
                "VGPU_COMPUTE_BURST_LIMIT=60\nVGPU_DEVICE_UUID_0=" GPU0 "\n");
    fake_limits(f, UID2, "main", "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=1g\n");
    fake_proc(f, 100, "0::/kubepods/pod" UID "/" CID "\n");
    fake_proc(f, 101, "0::/kubepods/pod" UID "/" CID "\n");
    fake_proc(f, 200, "0::/kubepods/pod" UID "/" CID2 "\n");
    fake_proc(f, 300, "0::/kubepods/pod" UID2 "/" CID "\n");
    const char *uuids[] = {GPU0, GPU1};
    struct mon_options o = {.policy = MON_POLICY_WARN,
                            .region_dir = f->containers,
                            .proc_root = f->proc,
                            .resolve = resolve,
                            .resolve_arg = f,
                            .report = on_report_compute,
                            .report_arg = f,
                            .check_compute = true,
                            .compute_window_ms = 200,
                            .compute_margin = 10,
                            .quarantine_after = 1,
                            .quarantine_window_ms = 60000,
                            .quarantine_ms = 600000};
    struct mon_monitor *m;
    struct vg_err err = {0};
    assert_int_equal(mon_new(&o, uuids, 2, &m, &err), 0);
    /* main: 45 % > 30 + 10; side in burst at 65 <= 60 + 10; the other pod's main has no
     * share: 100 % is its right. The first window is not judged before it is whole. */
    struct mon_proc p[] = {
        {100, 0, MiB, 25}, {101, 0, MiB, 20}, {200, 0, MiB, 65}, {300, 0, MiB, 100}};
    struct vg_err e2 = {0};
    f->log_len = 0;
    f->log[0] = '\0';
    assert_int_equal(mon_judge(m, p, 4, &e2), 0);
    assert_string_equal(f->log, "");
    judge_for(m, f, p, 4, 400);
    assert_string_equal(f->log, "compute_over main 45 30;quarantine main 0 0;");
    /* back at 30: the window's mean falls, the episode ends once */
    p[0].util = 20;
    p[1].util = 10;
    judge_for(m, f, p, 4, 400);
    unsigned mean = 0;
    char rest[64] = "";
    assert_int_equal(sscanf(f->log, "compute_under main %u 30;%63s", &mean, rest), 1);
    assert_true(mean >= 30 && mean <= 40);
    /* side past its burst limit plus the margin; a process's util past 100 counts 100 */
    p[2].util = 1000;
    judge_for(m, f, p, 4, 400);
    assert_int_equal(sscanf(f->log, "compute_over side %u 60;%63s", &mean, rest), 2);
    assert_true(mean > 70 && mean <= 100);
    assert_string_equal(rest, "quarantine");
    struct mon_counters c;
    mon_get_counters(m, &c);
    assert_int_equal(c.compute_violations, 2);
    mon_free(m);
    /* off: nothing */
    o.check_compute = false;
    assert_int_equal(mon_new(&o, uuids, 2, &m, &err), 0);
    judge_for(m, f, p, 4, 400);
    assert_string_equal(f->log, "");
    mon_free(m);
}

static struct mon_monitor *judge_new_reg(struct judge_fixture *f, unsigned quarantine_after)
{
    const char *uuids[] = {GPU0, GPU1};
    struct mon_options o = {.policy = MON_POLICY_WARN,
                            .region_dir = f->containers,
                            .proc_root = f->proc,
                            .resolve = resolve,
                            .resolve_arg = f,
                            .report = on_report_why,
                            .report_arg = f,
                            .check_registration = true,
                            .quarantine_after = quarantine_after,
                            .quarantine_window_ms = 60000,
                            .quarantine_ms = 600000};
    struct mon_monitor *m;
    struct vg_err err = {0};
    assert_int_equal(mon_new(&o, uuids, 2, &m, &err), 0);
    return m;
}

/* Each check alone makes a process unregistered; all of them together register it. A
 * slot in the region (the tenant's to write) is not enough. */
static void test_judge_registration(void **state)
{
    struct judge_fixture *f = *state;
    fake_limits(f, UID, "main",
                "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=1g\nVGPU_DEVICE_UUID_0=" GPU0 "\n");
    struct stat st;
    fake_region(f, UID, "main", 7, &st); /* slot: container pid 7 */
    char region[512], line[1024];
    /* 4,000 anonymous mappings (~240 KiB): what follows lies far past one read buffer. */
    size_t big = 4000 * 64 + 4096;
    char *filler = calloc(1, big), *maps = calloc(1, 2 * big);
    assert_non_null(filler);
    assert_non_null(maps);
    for (size_t i = 0, at = 0; i < 4000; i++)
        at += (size_t)snprintf(filler + at, big - at, "%012zx-%012zx rw-p 00000000 00:00 0 \n",
                               0x100000 + i * 2, 0x100000 + i * 2 + 1);
    char region_last[512]; /* the same, as the file's last line without its newline */
    snprintf(region, sizeof region,
             "7f0000000000-7f0000044000 rw-s 00000000 %02x:%02x %llu %s/%s_main/region\n",
             major(st.st_dev), minor(st.st_dev), (unsigned long long)st.st_ino, f->containers, UID);
    snprintf(region_last, sizeof region_last, "%.*s", (int)strlen(region) - 1, region);
    const char *vgpu =
        "7f1000000000-7f1000001000 r--p 00000000 08:01 11 /usr/local/vgpu/libvgpu.so\n";
    const char *cuda = "7f2000000000-7f2000001000 r--p 00000000 08:01 22 /usr/lib/libcuda.so.1\n"
                       "7f2000001000-7f2000009000 r-xp 00001000 08:01 22 /usr/lib/libcuda.so.1\n";
    const char *cuda2 = "7f3000000000-7f3000001000 r--p 00000000 08:01 33 /tmp/x/libcuda.so.535\n";
    struct {
        int pid, nspid;
        const char *vgpu, *cuda, *cuda2, *region;
        const char *why;
        bool filler;
    } cases[] = {
        {101, 7, vgpu, cuda, "", region, NULL, false},               /* registered */
        {102, 7, "", cuda, "", region, "libvgpu not loaded", false}, /* a forged slot, no libvgpu */
        {103, 7, vgpu, cuda, cuda2, region, "the driver loaded twice", false},
        {104, 7, vgpu, cuda, "", "", "the container's region not mapped", false},
        {105, 8, vgpu, cuda, "", region, "no slot in the container's region", false},
        /* past the first read buffer: a second driver, the region as the last line */
        {106, 7, vgpu, cuda, cuda2, region, "the driver loaded twice", true},
        {107, 7, vgpu, cuda, "", region_last, NULL, true},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    struct mon_proc p[N];
    char want[1024] = "";
    for (size_t i = 0; i < N; i++) {
        fake_proc(f, cases[i].pid, "0::/kubepods/pod" UID "/" CID "\n");
        snprintf(maps, 2 * big, "%s%s%s%s%s", cases[i].vgpu, cases[i].cuda,
                 cases[i].filler ? filler : "", cases[i].cuda2, cases[i].region);
        fake_maps(f, cases[i].pid, cases[i].nspid, maps);
        p[i] = (struct mon_proc){cases[i].pid, 0, MiB, 0};
        if (cases[i].why) {
            snprintf(line, sizeof line, "unregistered %d %s;", cases[i].pid, cases[i].why);
            size_t wl = strlen(want);
            snprintf(want + wl, sizeof want - wl, "%s", line);
        }
    }
    struct mon_monitor *m = judge_new_reg(f, 0);
    judge(m, f, p, N, want);
    /* once per process */
    judge(m, f, p, N, "");
    struct mon_counters c;
    mon_get_counters(m, &c);
    assert_int_equal(c.unregistered, 5);
    free(filler);
    free(maps);
    assert_int_equal(c.violations, 0); /* 5 MiB: no memory violation */
    mon_free(m);
}

/* The third violation within the window quarantines the container (under warn: reported,
 * nothing killed); a pod not limited is not judged at all. */
static void test_judge_quarantine(void **state)
{
    struct judge_fixture *f = *state;
    fake_limits(f, UID, "main",
                "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=1g\nVGPU_DEVICE_UUID_0=" GPU0 "\n");
    struct stat st;
    fake_region(f, UID, "main", 0, &st);
    struct mon_monitor *m = judge_new_reg(f, 3);
    for (int pid = 201; pid <= 203; pid++) {
        fake_proc(f, pid, "0::/kubepods/pod" UID "/" CID "\n");
        fake_maps(f, pid, pid, "");
    }
    fake_proc(f, 300, "0::/kubepods/pod" UID2 "/" CID2 "\n"); /* no limits: not judged */
    fake_maps(f, 300, 300, "");
    struct mon_proc p1[] = {{201, 0, MiB, 0}, {300, 0, MiB, 0}};
    judge(m, f, p1, 2, "unregistered 201 libvgpu not loaded;");
    struct mon_proc p2[] = {{202, 0, MiB, 0}};
    judge(m, f, p2, 1, "unregistered 202 libvgpu not loaded;");
    struct mon_proc p3[] = {{203, 0, MiB, 0}};
    judge(m, f, p3, 1, "unregistered 203 libvgpu not loaded;quarantine 0 -;");
    struct mon_counters c;
    mon_get_counters(m, &c);
    assert_int_equal(c.quarantines, 1);
    assert_int_equal(c.kills, 0);
    judge(m, f, p3, 1, "");
    mon_get_counters(m, &c);
    assert_int_equal(c.quarantined, 1);
    mon_free(m);
}

static void test_judge_bad_sample(void **state)
{
    struct judge_fixture *f = *state;
    struct mon_monitor *m = judge_new(f, false);
    struct vg_err err = {0};
    struct mon_proc p[] = {{100, 7, MiB, 0}};
    assert_int_equal(mon_judge(m, p, 1, &err), -EINVAL);
    /* a process that vanished between NVML and /proc is left alone */
    struct mon_proc gone[] = {{12345, 0, 70 * GiB, 0}};
    assert_int_equal(mon_judge(m, gone, 1, &err), 0);
    struct mon_counters c;
    mon_get_counters(m, &c);
    assert_int_equal(c.unattributed, 1);
    struct vg_buf b;
    vg_buf_init(&b, "metrics", 1 << 16);
    struct vg_prom w;
    vg_prom_init(&w, &b, &err);
    mon_metrics_own(&w, &c, "warn", 0, 0);
    assert_int_equal(vg_prom_done(&w), 0);
    assert_non_null(strstr(b.data, "vgpu_monitor_violations_total{policy=\"warn\"} 0\n"));
    assert_non_null(strstr(b.data, "vgpu_monitor_unattributed_processes 1\n"));
    vg_buf_free(&b);
    mon_free(m);
}

/* A live resize lowers a container's limit below what it holds: lowering frees nothing,
 * so the watchdog lets it keep what the old limit allowed until its use falls below the
 * new limit, then holds it to the new one. */
#define MON_TEST_LIMITS_TTL 20 /* monitor.c's MON_LIMITS_TTL: samples between reads */

static void test_judge_lowered_limit(void **state)
{
    struct judge_fixture *f = *state;
    fake_limits(f, UID, "main",
                "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=2g\nVGPU_DEVICE_UUID_0=" GPU0 "\n");
    fake_proc(f, 100, "0::/kubepods/pod" UID "/" CID "\n");
    struct mon_monitor *m = judge_new(f, true);
    struct mon_proc p[] = {{100, 0, 1536 * MiB, 0}};
    judge(m, f, p, 1, "");
    char path[256];
    snprintf(path, sizeof path, "%s/%s_main/limits", f->containers, UID);
    write_file(path, "vgpu-limits 1\nVGPU_LIMITS_GENERATION=1\nCUDA_DEVICE_MEMORY_LIMIT_0=1g\n"
                     "VGPU_DEVICE_UUID_0=" GPU0 "\n");
    for (int i = 0; i < 2 * MON_TEST_LIMITS_TTL; i++)
        judge(m, f, p, 1, ""); /* 1.5 GiB held, new limit 1 GiB: not a violation */
    p[0].used = 900 * MiB;     /* freed below the new limit: from now on it holds */
    judge(m, f, p, 1, "");
    p[0].used = 1536 * MiB;
    judge(m, f, p, 1, "over g0 p1 main 1536 1024;");
    /* Past the old limit at any time is over the old limit too. */
    struct mon_counters c;
    mon_get_counters(m, &c);
    assert_int_equal(c.violations, 1);
    mon_free(m);
}

/* A live resize lowers a container's compute share: the utilization NVML reports lags the
 * change (libvgpu applies it from the next launch, NVML averages over its own interval),
 * so an honest container is judged against the share it had until its window's mean is
 * within the new one, and held to the new one from then on, as with memory. */
static void test_judge_lowered_share(void **state)
{
    struct judge_fixture *f = *state;
    fake_limits(f, UID, "main",
                "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=1g\nCUDA_DEVICE_SM_LIMIT_0=60\n"
                "VGPU_DEVICE_UUID_0=" GPU0 "\n");
    fake_proc(f, 100, "0::/kubepods/pod" UID "/" CID "\n");
    const char *uuids[] = {GPU0, GPU1};
    struct mon_options o = {.policy = MON_POLICY_WARN,
                            .region_dir = f->containers,
                            .proc_root = f->proc,
                            .resolve = resolve,
                            .resolve_arg = f,
                            .report = on_report_compute,
                            .report_arg = f,
                            .check_compute = true,
                            .compute_window_ms = 200,
                            .compute_margin = 10,
                            .quarantine_after = 1,
                            .quarantine_window_ms = 60000,
                            .quarantine_ms = 600000};
    struct mon_monitor *m;
    struct vg_err err = {0};
    assert_int_equal(mon_new(&o, uuids, 2, &m, &err), 0);
    struct mon_proc p[] = {{100, 0, MiB, 55}};
    judge_for(m, f, p, 1, 400);
    assert_string_equal(f->log, "");
    char path[256];
    snprintf(path, sizeof path, "%s/%s_main/limits", f->containers, UID);
    write_file(path, "vgpu-limits 1\nVGPU_LIMITS_GENERATION=1\nCUDA_DEVICE_MEMORY_LIMIT_0=1g\n"
                     "CUDA_DEVICE_SM_LIMIT_0=30\nVGPU_DEVICE_UUID_0=" GPU0 "\n");
    /* Past the new share while the change takes effect (the file is read again in this
     * time): no violation. */
    judge_for(m, f, p, 1, 2 * MON_TEST_LIMITS_TTL * 20);
    assert_string_equal(f->log, "");
    p[0].util = 28;
    judge_for(m, f, p, 1, 400);
    assert_string_equal(f->log, "");
    /* Within the new share once: held to it from then on. */
    p[0].util = 55;
    judge_for(m, f, p, 1, 400);
    unsigned mean = 0;
    char rest[64] = "";
    assert_int_equal(sscanf(f->log, "compute_over main %u 30;%63s", &mean, rest), 2);
    assert_true(mean > 40 && mean <= 55);
    assert_string_equal(rest, "quarantine");
    mon_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cgroup_layouts),
        cmocka_unit_test(test_cgroup_hostile_paths),
        cmocka_unit_test(test_cgroup_files),
        cmocka_unit_test(test_limits_uuid),
        cmocka_unit_test(test_slack),
        cmocka_unit_test(test_args),
        cmocka_unit_test_setup_teardown(test_judge_containers, judge_setup, judge_teardown),
        cmocka_unit_test_setup_teardown(test_judge_pods, judge_setup, judge_teardown),
        cmocka_unit_test_setup_teardown(test_judge_huge_limit, judge_setup, judge_teardown),
        cmocka_unit_test_setup_teardown(test_judge_kill_gone, judge_setup, judge_teardown),
        cmocka_unit_test_setup_teardown(test_judge_registration, judge_setup, judge_teardown),
        cmocka_unit_test_setup_teardown(test_judge_quarantine, judge_setup, judge_teardown),
        cmocka_unit_test_setup_teardown(test_judge_bad_sample, judge_setup, judge_teardown),
        cmocka_unit_test_setup_teardown(test_judge_compute, judge_setup, judge_teardown),
        cmocka_unit_test_setup_teardown(test_judge_lowered_limit, judge_setup, judge_teardown),
        cmocka_unit_test_setup_teardown(test_judge_lowered_share, judge_setup, judge_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
