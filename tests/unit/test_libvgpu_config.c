/* Unit tests for libvgpu's configuration and allocation table: every value a user can
 * write is either read exactly or refused with a message naming it (never "no limit"),
 * the limits file wins over the environment, and the table never loses or invents an
 * allocation. */
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
#include <unistd.h>

#include <cmocka.h>

#include "base/prng.h"
#include "libvgpu/config.h"
#include "libvgpu/track.h"
#include "base/mem.h"

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

static int load(struct vgpu_config *c, struct vg_err *err, ...)
{
    char *env[32];
    int n = 0;
    va_list ap;
    va_start(ap, err);
    for (char *s; (s = va_arg(ap, char *)) != NULL && n < 31;)
        env[n++] = s;
    va_end(ap);
    env[n] = NULL;
    /* Outside a vgpu container, whatever the machine running the test has at
     * /etc/vgpu/limits. */
    return vgpu_config_load_at(c, env, "/nonexistent/vgpu/limits", err);
}

/* The same inside a vgpu container whose fixed-path limits file is fixed. */
static int load_in(struct vgpu_config *c, const char *fixed, struct vg_err *err, ...)
{
    char *env[32];
    int n = 0;
    va_list ap;
    va_start(ap, err);
    for (char *s; (s = va_arg(ap, char *)) != NULL && n < 31;)
        env[n++] = s;
    va_end(ap);
    env[n] = NULL;
    return vgpu_config_load_at(c, env, fixed, err);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void test_hami_values(void **state)
{
    (void)state;
    struct vgpu_config c;
    struct vg_err err = {0};
    assert_int_equal(load(&c, &err, "PATH=/bin", "CUDA_DEVICE_MEMORY_LIMIT=4g",
                          "CUDA_DEVICE_MEMORY_LIMIT_1=4096m", "CUDA_DEVICE_MEMORY_LIMIT_2=1024k",
                          "CUDA_DEVICE_MEMORY_LIMIT_3=123", "CUDA_DEVICE_SM_LIMIT=50",
                          "CUDA_DEVICE_SM_LIMIT_1=0", "CUDA_DEVICE_MEMORY_SHARED_CACHE=/r/x", NULL),
                     0);
    assert_true(c.memory_limit_set);
    assert_int_equal(vgpu_config_memory_limit(&c, 0), 4 * GiB);
    assert_int_equal(vgpu_config_memory_limit(&c, 1), 4096 * MiB);
    assert_int_equal(vgpu_config_memory_limit(&c, 2), 1024 * 1024);
    assert_int_equal(vgpu_config_memory_limit(&c, 3), 123);
    assert_int_equal(vgpu_config_memory_limit(&c, 15), 4 * GiB);
    assert_int_equal(vgpu_config_sm_limit(&c, 0), 50);
    assert_int_equal(vgpu_config_sm_limit(&c, 1), 0);
    assert_string_equal(c.region_path, "/r/x");
    assert_true(c.region_path_given);
}

static void test_defaults(void **state)
{
    (void)state;
    struct vgpu_config c;
    struct vg_err err = {0};
    assert_int_equal(load(&c, &err, "HOME=/root", NULL), 0);
    assert_false(c.memory_limit_set);
    assert_int_equal(vgpu_config_memory_limit(&c, 0), 0);
    assert_string_equal(c.region_path, VGPU_DEFAULT_REGION_PATH);
    assert_int_equal(c.context_bytes, 256 * MiB);
    assert_int_equal(c.log_level, -1);
    /* 0 is HAMi's explicit "no limit". */
    assert_int_equal(load(&c, &err, "CUDA_DEVICE_MEMORY_LIMIT=0", NULL), 0);
    assert_false(c.memory_limit_set);
}

static void test_invalid_env(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "CUDA_DEVICE_MEMORY_LIMIT=abc",
        "CUDA_DEVICE_MEMORY_LIMIT=-1",
        "CUDA_DEVICE_MEMORY_LIMIT=",
        "CUDA_DEVICE_MEMORY_LIMIT=4x",
        "CUDA_DEVICE_MEMORY_LIMIT= 4g",
        "CUDA_DEVICE_MEMORY_LIMIT=99999999999999999999",
        "CUDA_DEVICE_MEMORY_LIMIT_16=1g",
        "CUDA_DEVICE_MEMORY_LIMIT_01=1g",
        "CUDA_DEVICE_MEMORY_LIMIT_x=1g",
        "CUDA_DEVICE_MEMORY_LIMIT_=1g",
        "CUDA_DEVICE_SM_LIMIT=101",
        "CUDA_DEVICE_SM_LIMIT=50%",
        "CUDA_DEVICE_SM_LIMIT=-5",
        "CUDA_DEVICE_SM_LIMIT_3=abc",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE=relative/path",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE=",
        "VGPU_CONTEXT_MIB=70000",
        "VGPU_CONTEXT_MIB=12m",
        "VGPU_LOG_LEVEL=loud",
        "VGPU_LIMITS_FILE=relative",
        "VGPU_LIMITS_FILE=/nonexistent/vgpu-limits",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct vgpu_config c;
        struct vg_err err = {0};
        char *copy = strdup(bad[i]);
        int rc = load(&c, &err, copy, NULL);
        if (rc == 0)
            fail_msg("accepted %s", bad[i]);
        /* The message names the variable, so the user knows what to fix. */
        char name[64];
        size_t nl = strcspn(bad[i], "=");
        snprintf(name, sizeof name, "%.*s", (int)nl, bad[i]);
        if (strstr(err.msg, name) == NULL && strstr(err.msg, "VGPU_LIMITS_FILE") == NULL)
            fail_msg("message for %s does not name it: %s", bad[i], err.msg);
        free(copy);
    }
}

static void test_file(void **state)
{
    (void)state;
    struct vgpu_config c;
    struct vg_err err = {0};
    const char *ok = "# written by vgpu-device-plugin\nvgpu-limits 1\n"
                     "CUDA_DEVICE_MEMORY_LIMIT_0=2g\r\nCUDA_DEVICE_SM_LIMIT=30\n\n"
                     "CUDA_DEVICE_MEMORY_SHARED_CACHE=/var/run/vgpu/region\n";
    vgpu_config_init(&c);
    assert_int_equal(vgpu_config_parse_file(&c, ok, strlen(ok), &err), 0);
    assert_int_equal(vgpu_config_memory_limit(&c, 0), 2 * GiB);
    assert_int_equal(vgpu_config_memory_limit(&c, 1), 0);
    assert_int_equal(vgpu_config_sm_limit(&c, 4), 30);
    assert_true(c.from_file);

    static const char *const bad[] = {
        "",
        "CUDA_DEVICE_MEMORY_LIMIT=1g\n",
        "vgpu-limits 2\nCUDA_DEVICE_MEMORY_LIMIT=1g\n",
        "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT=1g\nCUDA_DEVICE_MEMORY_LIMIT=2g\n",
        "vgpu-limits 1\nUNKNOWN_KEY=1\n",
        "vgpu-limits 1\nVGPU_LOG_LEVEL=debug\n",
        "vgpu-limits 1\nno equals sign\n",
        "vgpu-limits 1\n=1g\n",
        "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT=lots\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vgpu_config_init(&c);
        err.msg[0] = '\0';
        if (vgpu_config_parse_file(&c, bad[i], strlen(bad[i]), &err) == 0)
            fail_msg("accepted file %zu", i);
        assert_true(err.msg[0] != '\0');
    }
    /* NUL byte, over-long line, oversized file. */
    const char nul[] = "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT=1g\0\n";
    vgpu_config_init(&c);
    assert_true(vgpu_config_parse_file(&c, nul, sizeof nul - 1, &err) < 0);
    char *big = malloc(VGPU_LIMITS_FILE_MAX + 2);
    memset(big, '#', VGPU_LIMITS_FILE_MAX + 1);
    vgpu_config_init(&c);
    assert_true(vgpu_config_parse_file(&c, big, VGPU_LIMITS_FILE_MAX + 1, &err) < 0);
    memcpy(big, "vgpu-limits 1\n", 14);
    vgpu_config_init(&c);
    assert_true(vgpu_config_parse_file(&c, big, VGPU_LIMITS_LINE_MAX + 20, &err) < 0);
    assert_non_null(strstr(err.msg, "longer"));
    free(big);
}

static void test_file_precedence(void **state)
{
    (void)state;
    char dir[] = "/tmp/vgpu-cfg-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64], env[96];
    snprintf(path, sizeof path, "%s/limits", dir);
    FILE *f = fopen(path, "w");
    fputs("vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT=1g\n", f);
    fclose(f);
    snprintf(env, sizeof env, "VGPU_LIMITS_FILE=%s", path);
    struct vgpu_config c;
    struct vg_err err = {0};
    /* The environment cannot raise the limit, set a per-device one, or move the region. */
    assert_int_equal(load(&c, &err, "CUDA_DEVICE_MEMORY_LIMIT=8g", env,
                          "CUDA_DEVICE_MEMORY_LIMIT_0=16g", "CUDA_DEVICE_MEMORY_SHARED_CACHE=/x",
                          "VGPU_LOG_LEVEL=warn", NULL),
                     0);
    assert_int_equal(vgpu_config_memory_limit(&c, 0), GiB);
    assert_string_equal(c.region_path, VGPU_DEFAULT_REGION_PATH);
    assert_int_equal(c.log_level, 1);
    /* ...but a malformed file is an error, never "no limit". */
    f = fopen(path, "w");
    fputs("vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT=much\n", f);
    fclose(f);
    assert_true(load(&c, &err, env, NULL) < 0);
    assert_non_null(strstr(err.msg, path));
    unlink(path);
    rmdir(dir);
}

/* A limits file that cannot be read is an error naming the variable, the path and the
 * reason; the file may be up to VGPU_LIMITS_FILE_MAX bytes, not one more. */
static void test_file_unreadable(void **state)
{
    (void)state;
    char dir[] = "/tmp/vgpu-cfg-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64], env[96];
    struct vgpu_config c;
    struct vg_err err = {0};

    snprintf(path, sizeof path, "%s/missing", dir);
    snprintf(env, sizeof env, "VGPU_LIMITS_FILE=%s", path);
    assert_int_equal(load(&c, &err, env, NULL), -ENOENT);
    assert_non_null(strstr(err.msg, "VGPU_LIMITS_FILE"));
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "No such file"));

    snprintf(env, sizeof env, "VGPU_LIMITS_FILE=%s", dir);
    assert_true(load(&c, &err, env, NULL) < 0);
    assert_non_null(strstr(err.msg, "VGPU_LIMITS_FILE"));
    assert_non_null(strstr(err.msg, dir));

    /* Exactly the ceiling: a header, a limit and comment lines padding it out. */
    snprintf(path, sizeof path, "%s/limits", dir);
    snprintf(env, sizeof env, "VGPU_LIMITS_FILE=%s", path);
    char *text = malloc(VGPU_LIMITS_FILE_MAX + 2);
    assert_non_null(text);
    const char *head = "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT=1g\n";
    size_t hl = strlen(head);
    memcpy(text, head, hl);
    for (size_t i = hl; i < VGPU_LIMITS_FILE_MAX + 1; i++)
        text[i] = (i - hl) % 100 == 0 ? '#' : (i - hl) % 100 == 99 ? '\n' : 'x';
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, VGPU_LIMITS_FILE_MAX, f), VGPU_LIMITS_FILE_MAX);
    fclose(f);
    assert_int_equal(load(&c, &err, env, NULL), 0);
    assert_int_equal(vgpu_config_memory_limit(&c, 0), GiB);
    /* One byte more is refused as too large, never read as "no limit". */
    f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, VGPU_LIMITS_FILE_MAX + 1, f), VGPU_LIMITS_FILE_MAX + 1);
    fclose(f);
    err.msg[0] = '\0';
    assert_int_equal(load(&c, &err, env, NULL), -EFBIG);
    assert_non_null(strstr(err.msg, "VGPU_LIMITS_FILE"));
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "16384"));
    free(text);
    unlink(path);
    rmdir(dir);
}

/* A file at the fixed path decides; the environment and VGPU_LIMITS_FILE only lower. */
static void test_fixed_path_precedence(void **state)
{
    (void)state;
    char dir[] = "/tmp/vgpu-cfg-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char fixed[64], other[64], other_env[96];
    snprintf(fixed, sizeof fixed, "%s/fixed", dir);
    snprintf(other, sizeof other, "%s/other", dir);
    snprintf(other_env, sizeof other_env, "VGPU_LIMITS_FILE=%s", other);
    write_text(fixed, "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=2g\nCUDA_DEVICE_SM_LIMIT=40\n"
                      "CUDA_DEVICE_MEMORY_SHARED_CACHE=/c/region\n");
    struct vgpu_config c;
    struct vg_err err = {0};
    /* Raising, removing, moving the region, unlimiting compute: none of it. */
    assert_int_equal(load_in(&c, fixed, &err, "CUDA_DEVICE_MEMORY_LIMIT=8g",
                             "CUDA_DEVICE_MEMORY_LIMIT_0=0", "CUDA_DEVICE_SM_LIMIT=100",
                             "CUDA_DEVICE_MEMORY_SHARED_CACHE=/mine", "VGPU_CONTEXT_MIB=0",
                             "GPU_CORE_UTILIZATION_POLICY=disable", "VGPU_LOG_LEVEL=warn", NULL),
                     0);
    assert_true(c.in_container && !c.closed && c.memory_limit_set);
    assert_int_equal(vgpu_config_memory_limit(&c, 0), 2 * GiB);
    assert_int_equal(vgpu_config_sm_limit(&c, 0), 40);
    assert_string_equal(c.region_path, "/c/region");
    assert_int_equal(c.context_bytes, 256 * MiB);
    assert_false(c.policy_disable);
    assert_int_equal(c.log_level, 1); /* not a limit: the environment's */
    /* Lowering, from the environment. */
    assert_int_equal(load_in(&c, fixed, &err, "CUDA_DEVICE_MEMORY_LIMIT_0=1g",
                             "CUDA_DEVICE_SM_LIMIT_0=25", NULL),
                     0);
    assert_int_equal(vgpu_config_memory_limit(&c, 0), GiB);
    assert_int_equal(vgpu_config_sm_limit(&c, 0), 25);
    /* From another file, whose other keys do not count. */
    write_text(other, "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT=1500m\n"
                      "CUDA_DEVICE_MEMORY_SHARED_CACHE=/other\n");
    assert_int_equal(load_in(&c, fixed, &err, other_env, "CUDA_DEVICE_MEMORY_LIMIT=1800m", NULL),
                     0);
    assert_int_equal(vgpu_config_memory_limit(&c, 0), 1500 * MiB);
    assert_string_equal(c.region_path, "/c/region");
    /* Per-device limits that differ: every device takes the smallest, so reordering the
     * devices (CUDA_VISIBLE_DEVICES) cannot move a larger one. */
    write_text(fixed,
               "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=2g\nCUDA_DEVICE_MEMORY_LIMIT_1=6g\n");
    assert_int_equal(load_in(&c, fixed, &err, NULL), 0);
    assert_int_equal(vgpu_config_memory_limit(&c, 0), 2 * GiB);
    assert_int_equal(vgpu_config_memory_limit(&c, 1), 2 * GiB);
    assert_int_equal(vgpu_config_memory_limit(&c, 7), 2 * GiB);
    /* No limit in the file: a limit from the environment is a lowering. */
    write_text(fixed, "vgpu-limits 1\n");
    assert_int_equal(load_in(&c, fixed, &err, "CUDA_DEVICE_MEMORY_LIMIT_1=3g", NULL), 0);
    assert_int_equal(vgpu_config_memory_limit(&c, 0), 0);
    assert_int_equal(vgpu_config_memory_limit(&c, 1), 3 * GiB);
    assert_true(c.memory_limit_set);
    /* An invalid environment value is refused, as outside a container. */
    assert_true(load_in(&c, fixed, &err, "CUDA_DEVICE_MEMORY_LIMIT=lots", NULL) < 0);
    assert_non_null(strstr(err.msg, "CUDA_DEVICE_MEMORY_LIMIT"));
    /* So is another limits file that cannot be read. */
    unlink(other);
    assert_true(load_in(&c, fixed, &err, other_env, NULL) < 0);
    assert_non_null(strstr(err.msg, "VGPU_LIMITS_FILE"));
    unlink(fixed);
    rmdir(dir);
}

/* Task priority: the limits file decides, the environment (either name) only lowers it,
 * and a value other than 0 or 1 is refused wherever it comes from. */
static void test_priority(void **state)
{
    (void)state;
    char dir[] = "/tmp/vgpu-cfg-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char fixed[64];
    snprintf(fixed, sizeof fixed, "%s/fixed", dir);
    struct vgpu_config c;
    struct vg_err err = {0};
    /* Outside a container: the environment decides; low by default, not named. */
    assert_int_equal(load(&c, &err, NULL), 0);
    assert_int_equal(c.priority, VGPU_PRIORITY_LOW);
    assert_false(c.priority_given);
    assert_int_equal(load(&c, &err, "CUDA_TASK_PRIORITY=0", NULL), 0);
    assert_int_equal(c.priority, VGPU_PRIORITY_HIGH);
    assert_true(c.priority_given);
    /* Both names: the lower priority wins. */
    assert_int_equal(load(&c, &err, "CUDA_DEVICE_TASK_PRIORITY=0", "CUDA_TASK_PRIORITY=1", NULL),
                     0);
    assert_int_equal(c.priority, VGPU_PRIORITY_LOW);
    /* A high-priority container: its environment can lower it, never raise a low one. */
    write_text(fixed, "vgpu-limits 1\nCUDA_DEVICE_TASK_PRIORITY=0\n");
    assert_int_equal(load_in(&c, fixed, &err, NULL), 0);
    assert_int_equal(c.priority, VGPU_PRIORITY_HIGH);
    assert_true(c.priority_given);
    assert_int_equal(load_in(&c, fixed, &err, "CUDA_DEVICE_TASK_PRIORITY=1", NULL), 0);
    assert_int_equal(c.priority, VGPU_PRIORITY_LOW);
    assert_int_equal(load_in(&c, fixed, &err, "CUDA_TASK_PRIORITY=1", NULL), 0);
    assert_int_equal(c.priority, VGPU_PRIORITY_LOW);
    write_text(fixed, "vgpu-limits 1\nCUDA_DEVICE_TASK_PRIORITY=1\n");
    assert_int_equal(
        load_in(&c, fixed, &err, "CUDA_DEVICE_TASK_PRIORITY=0", "CUDA_TASK_PRIORITY=0", NULL), 0);
    assert_int_equal(c.priority, VGPU_PRIORITY_LOW);
    /* No key in the file: low, and the environment cannot make it high. */
    write_text(fixed, "vgpu-limits 1\n");
    assert_int_equal(load_in(&c, fixed, &err, "CUDA_TASK_PRIORITY=0", NULL), 0);
    assert_int_equal(c.priority, VGPU_PRIORITY_LOW);
    /* Bad values, from the environment and from the file. */
    static const char *const bad[] = {"2", "-1", "high", "", "00", " 0", "0 ", "1.0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char e1[64], e2[64], text[96];
        snprintf(e1, sizeof e1, "CUDA_DEVICE_TASK_PRIORITY=%s", bad[i]);
        snprintf(e2, sizeof e2, "CUDA_TASK_PRIORITY=%s", bad[i]);
        assert_true(load(&c, &err, e1, NULL) < 0);
        assert_non_null(strstr(err.msg, "want 0 (high) or 1 (low)"));
        assert_true(load(&c, &err, e2, NULL) < 0);
        assert_non_null(strstr(err.msg, "CUDA_TASK_PRIORITY"));
        assert_true(load_in(&c, fixed, &err, e2, NULL) < 0);
        snprintf(text, sizeof text, "vgpu-limits 1\nCUDA_DEVICE_TASK_PRIORITY=%s\n", bad[i]);
        write_text(fixed, text);
        assert_int_equal(load_in(&c, fixed, &err, NULL), 0);
        assert_true(c.closed); /* an unusable limits file: closed, as for any bad key */
        assert_int_equal(c.priority, VGPU_PRIORITY_LOW);
        write_text(fixed, "vgpu-limits 1\n");
    }
    /* HAMi-core's name is not a limits-file key. */
    write_text(fixed, "vgpu-limits 1\nCUDA_TASK_PRIORITY=0\n");
    assert_int_equal(load_in(&c, fixed, &err, NULL), 0);
    assert_true(c.closed);
    unlink(fixed);
    rmdir(dir);
}

/* A file at the fixed path that cannot be used closes the configuration (the caller
 * refuses allocations); the environment cannot reopen it. */
static void test_fixed_path_closed(void **state)
{
    (void)state;
    char dir[] = "/tmp/vgpu-cfg-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char fixed[64];
    snprintf(fixed, sizeof fixed, "%s/fixed", dir);
    static const char *const bad[] = {"", "vgpu-limits 2\n", "garbage\n",
                                      "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT=lots\n",
                                      "vgpu-limits 1\nVGPU_LIMITS_FILE=/x\n"};
    struct vgpu_config c;
    struct vg_err err = {0};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(fixed, bad[i]);
        assert_int_equal(load_in(&c, fixed, &err, "CUDA_DEVICE_MEMORY_LIMIT=1g",
                                 "CUDA_DEVICE_MEMORY_SHARED_CACHE=/c/region", NULL),
                         0);
        assert_true(c.in_container && c.closed);
        assert_non_null(strstr(c.closed_why, fixed));
        assert_string_equal(c.region_path, "/c/region"); /* where to count the refusals */
    }
    /* A directory in its place cannot be read either. */
    unlink(fixed);
    assert_int_equal(mkdir(fixed, 0755), 0);
    assert_int_equal(load_in(&c, fixed, &err, NULL), 0);
    assert_true(c.closed);
    assert_int_equal(rmdir(fixed), 0);
    /* Nothing there: outside a container. */
    assert_int_equal(load_in(&c, fixed, &err, "CUDA_DEVICE_MEMORY_LIMIT=1g", NULL), 0);
    assert_true(!c.in_container && !c.closed);
    assert_int_equal(vgpu_config_memory_limit(&c, 0), GiB);
    rmdir(dir);
}

/* ---- track ---- */

static void test_track_random(void **state)
{
    (void)state;
    struct lv_track t;
    lv_track_init(&t);
    enum { N = 20000 };
    static uint64_t keys[N];
    static bool live[N];
    struct vg_prng rng;
    vg_prng_seed(&rng, 42);
    for (int i = 0; i < N; i++) /* distinct, scattered like device addresses */
        keys[i] = 0x7f0000000000ull + ((uint64_t)i * 2654435761u % (1u << 31)) * 512;
    for (int round = 0; round < 200000; round++) {
        int i = (int)vg_prng_below(&rng, N);
        struct lv_track_entry out;
        if (live[i]) {
            assert_true(lv_track_remove(&t, LV_TRACK_DEVPTR, keys[i], &out));
            assert_int_equal(out.bytes, (uint64_t)i);
            assert_false(lv_track_find(&t, LV_TRACK_DEVPTR, keys[i], NULL));
        } else {
            struct lv_track_entry e = {
                .key = keys[i], .space = LV_TRACK_DEVPTR, .bytes = (uint64_t)i};
            assert_int_equal(lv_track_insert(&t, &e, NULL), 0);
        }
        live[i] = !live[i];
    }
    size_t count = 0;
    for (int i = 0; i < N; i++) {
        struct lv_track_entry out;
        bool found = lv_track_find(&t, LV_TRACK_DEVPTR, keys[i], &out);
        if (live[i]) {
            assert_true(found);
            assert_int_equal(out.bytes, (uint64_t)i);
            count++;
        }
        /* Same value in another space is another handle. */
        assert_false(lv_track_find(&t, LV_TRACK_VMM, keys[i], NULL));
    }
    assert_int_equal(t.count, count);
    lv_track_free(&t);
}

/* The table's only allocation is its growth. Failing it (each growth in turn) must refuse
 * that one insertion with -ENOMEM and leave every entry and the count as they were; the
 * same insertion then succeeds. */
static void test_track_growth_failure(void **state)
{
    (void)state;
    enum { N = 600 }; /* grows at 0, 128, 256 and 512 entries */
    unsigned failures = 0;
    for (unsigned long n = 1;; n++) {
        struct lv_track t;
        lv_track_init(&t);
        vg_mem_fail_nth(n);
        bool refused = false;
        for (int i = 0; i < N; i++) {
            struct lv_track_entry e = {.key = 0x7f0000000000ull + (uint64_t)i * 4096,
                                       .space = LV_TRACK_DEVPTR,
                                       .bytes = 1};
            int rc = lv_track_insert(&t, &e, NULL);
            if (rc == -ENOMEM) {
                assert_false(refused);
                refused = true;
                assert_int_equal(t.count, (size_t)i);
                for (int j = 0; j < i; j++)
                    assert_true(lv_track_find(&t, LV_TRACK_DEVPTR,
                                              0x7f0000000000ull + (uint64_t)j * 4096, NULL));
                assert_false(lv_track_find(&t, LV_TRACK_DEVPTR, e.key, NULL));
                rc = lv_track_insert(&t, &e, NULL);
            }
            assert_int_equal(rc, 0);
        }
        assert_int_equal(t.count, N);
        bool fired = vg_mem_fail_fired();
        assert_int_equal(fired, refused);
        lv_track_free(&t);
        if (!fired)
            break;
        failures++;
    }
    assert_int_equal(failures, 4);
}

static bool add_maps(struct lv_track_entry *e, void *arg)
{
    e->maps += *(const uint32_t *)arg;
    return e->maps >= 3; /* gone at the third */
}

/* lv_track_modify changes in place and removes on request; the range scans find by key
 * range and by the address an entry covers, in one space only. */
static void test_track_modify_and_ranges(void **state)
{
    (void)state;
    struct lv_track t;
    lv_track_init(&t);
    for (uint64_t i = 1; i <= 100; i++) {
        struct lv_track_entry e = {.key = i << 21, .space = LV_TRACK_VMM_MAP, .bytes = 1 << 20};
        assert_int_equal(lv_track_insert(&t, &e, NULL), 0);
        struct lv_track_entry o = {.key = i << 21, .space = LV_TRACK_VMM_OBJ, .bytes = 5};
        assert_int_equal(lv_track_insert(&t, &o, NULL), 0);
    }
    uint32_t one = 1;
    struct lv_track_entry out;
    assert_false(lv_track_modify(&t, LV_TRACK_VMM_OBJ, 12345, add_maps, &one, &out));
    assert_true(lv_track_modify(&t, LV_TRACK_VMM_OBJ, 7 << 21, add_maps, &one, &out));
    assert_int_equal(out.maps, 1);
    assert_true(lv_track_modify(&t, LV_TRACK_VMM_OBJ, 7 << 21, add_maps, &one, &out));
    assert_true(lv_track_find(&t, LV_TRACK_VMM_OBJ, 7 << 21, NULL));
    assert_true(lv_track_modify(&t, LV_TRACK_VMM_OBJ, 7 << 21, add_maps, &one, &out));
    assert_int_equal(out.maps, 3);
    assert_false(lv_track_find(&t, LV_TRACK_VMM_OBJ, 7 << 21, NULL));
    assert_true(lv_track_find(&t, LV_TRACK_VMM_MAP, 7 << 21, NULL)); /* the other space stays */

    /* By address: inside the first MiB of a mapping, not in the gap after it. */
    assert_true(lv_track_find_holding(&t, LV_TRACK_VMM_MAP, (9 << 21) + 4096, &out));
    assert_int_equal(out.key, 9 << 21);
    assert_false(lv_track_find_holding(&t, LV_TRACK_VMM_MAP, (9 << 21) + (1 << 20), &out));
    assert_false(lv_track_find_holding(&t, LV_TRACK_VMM_MAP, 4096, &out));

    /* Taking every mapping in [10, 20) x 2 MiB leaves the others. */
    size_t taken = 0;
    while (lv_track_find_in_range(&t, LV_TRACK_VMM_MAP, 10 << 21, 20 << 21, true, &out)) {
        assert_true(out.key >= (10 << 21) && out.key < (20 << 21));
        taken++;
    }
    assert_int_equal(taken, 10);
    assert_true(lv_track_find(&t, LV_TRACK_VMM_MAP, 20 << 21, NULL));
    assert_true(lv_track_find(&t, LV_TRACK_VMM_MAP, 9 << 21, NULL));
    assert_true(lv_track_find(&t, LV_TRACK_VMM_OBJ, 15 << 21, NULL));
    assert_false(lv_track_find_in_range(&t, LV_TRACK_VMM_MAP, 10 << 21, 20 << 21, false, NULL));
    lv_track_free(&t);
}

static uint64_t swept;
static void sweep_cb(const struct lv_track_entry *e, void *arg)
{
    (void)arg;
    swept += e->bytes;
}

static void test_track_context_and_replace(void **state)
{
    (void)state;
    struct lv_track t;
    lv_track_init(&t);
    for (uint64_t i = 1; i <= 3000; i++) {
        struct lv_track_entry e = {
            .key = i * 4096, .space = LV_TRACK_DEVPTR, .bytes = i, .ctx = (i % 3) + 1};
        assert_int_equal(lv_track_insert(&t, &e, NULL), 0);
    }
    struct lv_track_entry again = {.key = 4096, .space = LV_TRACK_DEVPTR, .bytes = 7, .ctx = 9};
    struct lv_track_entry old;
    assert_int_equal(lv_track_insert(&t, &again, &old), 1);
    assert_int_equal(old.bytes, 1);
    swept = 0;
    size_t n = lv_track_remove_context(&t, 2, sweep_cb, NULL);
    uint64_t want = 0;
    size_t want_n = 0;
    for (uint64_t i = 2; i <= 3000; i++)
        if ((i % 3) + 1 == 2) {
            want += i;
            want_n++;
        }
    assert_int_equal(n, want_n);
    assert_int_equal(swept, want);
    for (uint64_t i = 2; i <= 3000; i++)
        assert_int_equal(lv_track_find(&t, LV_TRACK_DEVPTR, i * 4096, NULL), (i % 3) + 1 != 2);
    lv_track_reset_after_fork(&t);
    assert_false(lv_track_find(&t, LV_TRACK_DEVPTR, 4096 * 3, NULL));
    assert_int_equal(t.count, 0);
    lv_track_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hami_values),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_invalid_env),
        cmocka_unit_test(test_file),
        cmocka_unit_test(test_file_precedence),
        cmocka_unit_test(test_file_unreadable),
        cmocka_unit_test(test_fixed_path_precedence),
        cmocka_unit_test(test_fixed_path_closed),
        cmocka_unit_test(test_priority),
        cmocka_unit_test(test_track_random),
        cmocka_unit_test(test_track_growth_failure),
        cmocka_unit_test(test_track_context_and_replace),
        cmocka_unit_test(test_track_modify_and_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
