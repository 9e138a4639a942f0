/* MPS mode of the device plugin: resources, Allocate responses (goldens in
 * tests/data/deviceplugin/, VGPU_UPDATE_GOLDEN=1 rewrites them), the percentage parser,
 * and the control daemons' life cycle on a libevent loop against the fake
 * nvidia-cuda-mps-control (tests/integration/fake_mps_control.c, $FAKE_MPS_CONTROL):
 * start and per-GPU defaults, adoption of a running daemon, restart after a kill,
 * restart of a daemon that stops answering, a missing control program, quit at the end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/proc.h"
#include "base/str.h"
#include "deviceplugin/deviceplugin.h"
#include "dp_test.h"

/* The second GPU is an H100 with 40 GiB here. */
static void two_gpus_mps(struct dp_gpu g[2])
{
    two_gpus(g);
    g[1].memory_mib = 40960;
}

static void test_resources(void **state)
{
    (void)state;
    struct dp_gpu g[2];
    two_gpus_mps(g);
    struct dpconfig cfg;
    load(&cfg, "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n"
               "      replicas: 4\n");
    struct dp_resources res;
    struct vg_err err = {0};
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
    assert_int_equal(res.mode, ANNOT_MODE_MPS);
    assert_int_equal(res.count, 1);
    assert_string_equal(res.items[0].name, "nvidia.com/gpu");
    assert_string_equal(res.items[0].endpoint, "nvidia-gpu.sock");
    assert_true(res.items[0].mps);
    assert_true(res.items[0].fail_requests_greater_than_one); /* MPS default */
    assert_int_equal(res.items[0].replicas, 4);
    assert_int_equal(res.items[0].device_count, 8);
    assert_string_equal(res.items[0].devices[0].id, UUID_A "::0");
    assert_string_equal(res.items[0].devices[7].id, UUID_B "::3");
    dp_resources_release(&res);

    /* GPUs no entry selects stay plain, without a daemon. */
    dpconfig_free(&cfg);
    load(&cfg, "version: v1\nsharing:\n  mps:\n    renameByDefault: true\n    resources:\n"
               "    - name: gpu\n      replicas: 2\n      devices: [\"1\"]\n");
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
    assert_int_equal(res.count, 2);
    assert_string_equal(res.items[0].name, "nvidia.com/gpu");
    assert_false(res.items[0].mps);
    assert_string_equal(res.items[1].name, "nvidia.com/gpu.shared");
    assert_true(res.items[1].mps);
    assert_int_equal(res.items[1].device_count, 2);
    dp_resources_release(&res);

    /* MPS on a MIG-enabled GPU is refused. */
    g[1].mig_enabled = true;
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), -ENOTSUP);
    assert_non_null(strstr(err.msg, "MPS sharing is not supported on MIG devices"));
    dpconfig_free(&cfg);
}

static void test_config_validation(void **state)
{
    (void)state;
    static const struct {
        const char *yaml, *msg;
    } bad[] = {
        {"flags:\n  mpsRoot: \"\"\nsharing:\n  mps:\n    resources:\n    - name: gpu\n"
         "      replicas: 2\n",
         "key 'flags.mpsRoot': must be set when sharing.mps is used"},
        {"flags:\n  migStrategy: mixed\nsharing:\n  mps:\n    resources:\n    - name: gpu\n"
         "      replicas: 2\n",
         "MPS sharing cannot be combined with flags.migStrategy 'mixed'"},
        {"sharing:\n  mps:\n    resources:\n    - name: gpu\n      replicas: 1\n",
         "key 'sharing.mps.resources[0].replicas'"},
        {"sharing:\n  mps:\n    resources:\n    - name: gpu\n      replicas: 2\n"
         "      devices: [\"0:1\"]\n",
         ":4: key 'sharing.mps.resources[0].devices': '0:1' is a MIG device: MPS sharing is not "
         "supported on MIG devices"},
        {"sharing:\n  mps:\n    resources:\n    - name: gpu\n      replicas: 2\n"
         "      devices: [MIG-11111111-2222-3333-4444-555555555555]\n",
         "is a MIG device"},
        {"vgpu:\n  mpsControlPath: \"\"\nsharing:\n  mps:\n    resources:\n    - name: gpu\n"
         "      replicas: 2\n",
         "key 'vgpu.mpsControlPath': must be set when sharing.mps is used"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct dpconfig cfg;
        struct vg_err err = {0};
        dpconfig_defaults(&cfg);
        int rc = dpconfig_load_buffer("m.yaml", bad[i].yaml, strlen(bad[i].yaml), &cfg, &err);
        if (rc == 0 || !strstr(err.msg, bad[i].msg))
            fail_msg("case %zu: rc %d, message '%s', want '%s'", i, rc, err.msg, bad[i].msg);
        dpconfig_free(&cfg);
    }
    /* The control program's path, from the file and from the command line. */
    struct dpconfig cfg;
    struct vg_err err = {0};
    load(&cfg, "vgpu:\n  mpsControlPath: /opt/mps/control\n");
    assert_string_equal(cfg.vgpu.mps_control_path, "/opt/mps/control");
    char a0[] = "--mps-control-path=/x/y";
    char *argv[] = {a0};
    assert_int_equal(dpconfig_apply_overrides(&cfg, 1, argv, NULL, NULL, &err), 0);
    assert_string_equal(cfg.vgpu.mps_control_path, "/x/y");
    dpconfig_free(&cfg);
}

static void test_allocate(void **state)
{
    (void)state;
    struct dp_gpu g[2];
    two_gpus_mps(g);
    struct dpconfig cfg;
    load(&cfg, "version: v1\nflags:\n  mpsRoot: /run/nvidia/mps\nsharing:\n  mps:\n"
               "    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n");
    struct dp_resources res;
    struct vg_err err = {0};
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
    char a0[] = UUID_A "::0", a1[] = UUID_A "::1", b2[] = UUID_B "::2";
    char *one[] = {b2};
    struct dp_response resp;
    assert_int_equal(dp_allocate_mps(&cfg, &res.items[0], g, 2, one, 1, &resp, &err), 0);
    golden("mps_one_replica", &resp);
    /* failRequestsGreaterThanOne defaults to true with MPS. */
    char *two[] = {a0, a1};
    assert_int_equal(dp_allocate_mps(&cfg, &res.items[0], g, 2, two, 2, &resp, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "maximum request size for shared resources is 1"));
    char bad0[] = UUID_A "::9";
    char *bad[] = {bad0};
    assert_int_equal(dp_allocate_mps(&cfg, &res.items[0], g, 2, bad, 1, &resp, &err), -ENOENT);
    dp_resources_release(&res);
    dpconfig_free(&cfg);

    /* Without it: two replicas of one GPU give twice the share; two GPUs are refused. */
    load(&cfg, "version: v1\nflags:\n  mpsRoot: /run/nvidia/mps\nsharing:\n  mps:\n"
               "    failRequestsGreaterThanOne: false\n"
               "    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n");
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
    assert_int_equal(dp_allocate_mps(&cfg, &res.items[0], g, 2, two, 2, &resp, &err), 0);
    golden("mps_two_replicas_one_gpu", &resp);
    char *mixed[] = {a0, b2};
    assert_int_equal(dp_allocate_mps(&cfg, &res.items[0], g, 2, mixed, 2, &resp, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "must all be on one GPU"));
    dp_resources_release(&res);
    dpconfig_free(&cfg);
}

static void test_parse_percentage(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int rc;
        unsigned value;
    } cases[] = {
        {"25", 0, 25},           {"33.0\n", 0, 33},
        {" 100.0 \r\n", 0, 100}, {"0", 0, 0},
        {"", -EINVAL, 0},        {"\n", -EINVAL, 0},
        {"abc", -EINVAL, 0},     {"12.", -EINVAL, 0},
        {"-1", -EINVAL, 0},      {"101", -ERANGE, 0},
        {"1000", -ERANGE, 0},    {"5 5", -EINVAL, 0},
        {"5.5.5", -EINVAL, 0},   {"Cannot find MPS control daemon process\n", -EINVAL, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        unsigned v = 999;
        struct vg_err err = {0};
        int rc = dp_mps_parse_percentage(cases[i].text, strlen(cases[i].text), &v, &err);
        if (rc != cases[i].rc || (rc == 0 && v != cases[i].value))
            fail_msg("'%s': rc %d value %u", cases[i].text, rc, v);
    }
}

static void test_dirs(void **state)
{
    (void)state;
    struct dpconfig cfg;
    load(&cfg, "flags:\n  mpsRoot: /run/mps\n");
    char pipe[256], log[256];
    struct vg_err err = {0};
    assert_int_equal(dp_mps_dirs(&cfg, "nvidia.com/gpu", UUID_A, pipe, log, sizeof(pipe), &err), 0);
    assert_string_equal(pipe, "/run/mps/nvidia.com/gpu/" UUID_A "/pipe");
    assert_string_equal(log, "/run/mps/nvidia.com/gpu/" UUID_A "/log");
    assert_int_equal(dp_mps_dirs(&cfg, "nvidia.com/gpu", "../x", pipe, log, sizeof(pipe), &err),
                     -EINVAL);
    char small[16];
    assert_int_equal(dp_mps_dirs(&cfg, "nvidia.com/gpu", UUID_A, small, small, sizeof(small), &err),
                     -ENAMETOOLONG);
    dpconfig_free(&cfg);
}

/* ---- daemon life cycle against the fake control program ---------------------------- */

struct loop {
    struct event_base *base;
    struct dp_mps *mps;
    int changes;
};

static void changed(void *arg)
{
    ((struct loop *)arg)->changes++;
}

typedef bool (*cond_fn)(struct loop *l);

static void tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

/* Runs the loop until cond holds; fails after 20 s. */
static void run_until(struct loop *l, cond_fn cond, const char *what)
{
    struct event *t = event_new(l->base, -1, EV_PERSIST, tick, l->base);
    struct timeval tv = {0, 10000};
    event_add(t, &tv);
    for (int i = 0; i < 2000 && !cond(l); i++)
        event_base_dispatch(l->base);
    event_free(t);
    if (!cond(l))
        fail_msg("timed out waiting for %s", what);
}

static bool both_ready(struct loop *l)
{
    return dp_mps_ready(l->mps, 0) && dp_mps_ready(l->mps, 1);
}
static bool first_down(struct loop *l)
{
    return !dp_mps_ready(l->mps, 0);
}
static bool two_failures(struct loop *l)
{
    struct dp_mps_stats s;
    dp_mps_get_stats(l->mps, &s);
    return s.failures >= 2;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static pid_t daemon_pid(const char *root, const char *uuid)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/nvidia.com/gpu/%s/pipe/" DP_MPS_PID_FILE, root, uuid);
    char *text = slurp(path);
    return text ? (pid_t)strtol(text, NULL, 10) : 0;
}

/* Gone: no such process, or a zombie nobody reaped yet. */
static bool process_gone(pid_t pid)
{
    for (int i = 0; i < 500; i++) {
        struct vg_proc_stat st;
        if (vg_proc_stat_read(NULL, pid, &st, NULL) < 0 || vg_proc_state_exited(st.state))
            return true;
        usleep(10000);
    }
    return false;
}

struct fixture {
    char root[128];
    const char *fake;
    struct dpconfig cfg;
    struct dp_gpu gpus[2];
    struct dp_resources res;
    struct loop loop;
};

static void fixture_start(struct fixture *f, const char *control, bool start_now)
{
    memset(f, 0, sizeof(*f));
    f->fake = getenv("FAKE_MPS_CONTROL");
    if (!f->fake)
        fail_msg("FAKE_MPS_CONTROL is not set");
    snprintf(f->root, sizeof(f->root), "/tmp/dp-mps.XXXXXX");
    assert_non_null(mkdtemp(f->root));
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "flags:\n  mpsRoot: %s\nvgpu:\n  mpsControlPath: %s\nsharing:\n  mps:\n"
             "    resources:\n    - name: gpu\n      replicas: 2\n",
             f->root, control ? control : f->fake);
    load(&f->cfg, yaml);
    two_gpus_mps(f->gpus);
    struct vg_err err = {0};
    assert_int_equal(dp_resources_build(&f->cfg, f->gpus, 2, &f->res, &err), 0);
    f->loop.base = event_base_new();
    if (start_now) {
        struct dp_mps_options o = {.check_interval_ms = 50,
                                   .backoff_min_ms = 50,
                                   .backoff_max_ms = 200,
                                   .command_timeout_ms = 5000,
                                   .changed = changed,
                                   .arg = &f->loop};
        assert_int_equal(
            dp_mps_new(f->loop.base, &f->cfg, f->gpus, 2, &f->res, &o, &f->loop.mps, &err), 0);
        assert_non_null(f->loop.mps);
    }
}

static void fixture_stop(struct fixture *f)
{
    dp_mps_free(f->loop.mps);
    event_base_free(f->loop.base);
    dp_resources_release(&f->res);
    dpconfig_free(&f->cfg);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->root);
    assert_int_equal(system(cmd), 0);
}

static void test_lifecycle(void **state)
{
    (void)state;
    struct fixture f;
    fixture_start(&f, NULL, true);
    /* Not ready until the daemons answered. */
    assert_false(dp_mps_ready(f.loop.mps, 0));
    run_until(&f.loop, both_ready, "both daemons up");
    assert_true(dp_mps_ready(f.loop.mps, 5)); /* a GPU without a daemon */
    assert_true(dp_mps_ready(NULL, 0));
    struct dp_mps_stats s;
    dp_mps_get_stats(f.loop.mps, &s);
    assert_int_equal(s.starts, 2);
    assert_int_equal(s.adopted, 0);
    assert_int_equal(s.failures, 0);
    assert_int_equal(f.loop.changes, 2);

    char path[512];
    snprintf(path, sizeof(path), "%s/nvidia.com/gpu/%s/log/control.log", f.root, UUID_B);
    char *log = slurp(path);
    assert_non_null(log);
    assert_non_null(strstr(log, "[")); /* the daemon saw CUDA_VISIBLE_DEVICES: */
    assert_non_null(strstr(log, " " UUID_B "] start"));
    assert_non_null(strstr(log, "cmd set_default_active_thread_percentage 50\n"));
    assert_non_null(strstr(log, "cmd set_default_device_pinned_mem_limit 0 20480M\n"));
    assert_non_null(strstr(log, "cmd get_default_active_thread_percentage\n"));
    struct stat st;
    snprintf(path, sizeof(path), "%s/shm", f.root);
    assert_int_equal(stat(path, &st), 0);

    /* Killed: down at once (pidfd), then back with a new daemon. */
    pid_t old = daemon_pid(f.root, UUID_A);
    assert_true(old > 0);
    assert_int_equal(kill(old, SIGKILL), 0);
    run_until(&f.loop, first_down, "GPU 0 down after the kill");
    assert_true(dp_mps_ready(f.loop.mps, 1));
    run_until(&f.loop, both_ready, "GPU 0 restarted");
    pid_t fresh = daemon_pid(f.root, UUID_A);
    assert_true(fresh > 0 && fresh != old);
    dp_mps_get_stats(f.loop.mps, &s);
    assert_int_equal(s.starts, 3);
    assert_int_equal(s.failures, 1);

    /* Quit at the end: no daemon left, sockets and pid files gone. */
    pid_t b = daemon_pid(f.root, UUID_B);
    dp_mps_free(f.loop.mps);
    f.loop.mps = NULL;
    assert_true(process_gone(fresh));
    assert_true(process_gone(b));
    assert_int_equal(daemon_pid(f.root, UUID_A), 0);
    snprintf(path, sizeof(path), "%s/nvidia.com/gpu/%s/log/control.log", f.root, UUID_A);
    assert_non_null(strstr(slurp(path), "cmd quit\n"));
    fixture_stop(&f);
}

static void test_adopt_and_mute(void **state)
{
    (void)state;
    struct fixture f;
    fixture_start(&f, NULL, false);
    /* A daemon left running for GPU 0 (the plugin restarted): adopted, not started twice. */
    char cmd[4096], mute[256];
    snprintf(mute, sizeof(mute), "%s/mute", f.root);
    snprintf(cmd, sizeof(cmd),
             "mkdir -p %s/nvidia.com/gpu/%s/pipe %s/nvidia.com/gpu/%s/log && "
             "CUDA_MPS_PIPE_DIRECTORY=%s/nvidia.com/gpu/%s/pipe "
             "CUDA_MPS_LOG_DIRECTORY=%s/nvidia.com/gpu/%s/log FAKE_MPS_MUTE=%s %s -d",
             f.root, UUID_A, f.root, UUID_A, f.root, UUID_A, f.root, UUID_A, mute, f.fake);
    assert_int_equal(system(cmd), 0);
    pid_t left = daemon_pid(f.root, UUID_A);
    assert_true(left > 0);
    struct dp_mps_options o = {.check_interval_ms = 50,
                               .backoff_min_ms = 50,
                               .backoff_max_ms = 200,
                               .command_timeout_ms = 5000,
                               .changed = changed,
                               .arg = &f.loop};
    struct vg_err err = {0};
    assert_int_equal(dp_mps_new(f.loop.base, &f.cfg, f.gpus, 2, &f.res, &o, &f.loop.mps, &err), 0);
    run_until(&f.loop, both_ready, "both up");
    struct dp_mps_stats s;
    dp_mps_get_stats(f.loop.mps, &s);
    assert_int_equal(s.adopted, 1);
    assert_int_equal(s.starts, 1);
    assert_int_equal(daemon_pid(f.root, UUID_A), left);

    /* It stops answering: down, stopped (SIGTERM), a new one started. */
    FILE *m = fopen(mute, "w");
    assert_non_null(m);
    fclose(m);
    run_until(&f.loop, first_down, "GPU 0 down when its daemon stops answering");
    assert_true(process_gone(left));
    unlink(mute);
    run_until(&f.loop, both_ready, "GPU 0 back");
    assert_true(daemon_pid(f.root, UUID_A) != left);
    fixture_stop(&f);
}

static void test_missing_program(void **state)
{
    (void)state;
    struct fixture f;
    fixture_start(&f, "/nonexistent/nvidia-cuda-mps-control", true);
    run_until(&f.loop, two_failures, "two failed starts");
    assert_false(dp_mps_ready(f.loop.mps, 0));
    assert_false(dp_mps_ready(f.loop.mps, 1));
    assert_int_equal(f.loop.changes, 0);
    fixture_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resources),      cmocka_unit_test(test_config_validation),
        cmocka_unit_test(test_allocate),       cmocka_unit_test(test_parse_percentage),
        cmocka_unit_test(test_dirs),           cmocka_unit_test(test_lifecycle),
        cmocka_unit_test(test_adopt_and_mute), cmocka_unit_test(test_missing_program),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
