/* fakegpu's shared state: device-list parsing, memory accounting, the timeline under a
 * fake clock, and recovery from processes that die (with or without the lock). */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/err.h"
#include "base/str.h"
#include "fakegpu/state.h"
#include "fakegpu/timeline.h"

#define MS       1000000ULL
#define MIB      (1ULL << 20)
#define GIB      (1ULL << 30)
#define T0       (10000ULL * MS) /* on a 10 ms bucket boundary */
#define ONE_GPU  "Test GPU:1GiB:8"
#define TWO_GPUS "NVIDIA H100 80GB HBM3:81559MiB:132,NVIDIA A100-SXM4-40GB:40GiB:108"

static uint64_t fake_now = T0;
static uint64_t fake_clock(void)
{
    return fake_now;
}

static uint64_t real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct fixture {
    char dir[64];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_true(vg_snprintf(f->dir, sizeof f->dir, "/tmp/fakegpu-test-XXXXXX") > 0);
    assert_non_null(mkdtemp(f->dir));
    fake_now = T0;
    unsetenv("FAKEGPU_CONTEXT_MIB");
    unsetenv("FAKEGPU_KERNEL_NS");
    unsetenv("FAKEGPU_TIMESLICE_US");
    unsetenv("FAKEGPU_MIG");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    char path[128];
    assert_true(vg_snprintf(path, sizeof path, "%s/fakegpu.state", f->dir) > 0);
    unlink(path);
    rmdir(f->dir);
    free(f);
    return 0;
}

static struct fg_state *open_fake(struct fixture *f, const char *devices)
{
    struct fg_state *st = NULL;
    assert_int_equal(fg_state_open(&st, f->dir, devices, fake_clock), 0);
    return st;
}

static bool stream_done(struct fg_state *st, int stream, uint64_t seq)
{
    bool done = false;
    assert_int_equal(fg_stream_done(st, stream, seq, &done), 0);
    return done;
}

/* ---- FAKEGPU_DEVICES -------------------------------------------------------------- */

static void test_parse_good(void **state)
{
    (void)state;
    struct fg_device_info d[FG_MAX_DEVICES], again[FG_MAX_DEVICES];
    struct vg_err err;
    int n = 0;
    assert_int_equal(fg_parse_devices(TWO_GPUS, d, FG_MAX_DEVICES, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(d[0].name, "NVIDIA H100 80GB HBM3");
    assert_int_equal(d[0].total_bytes, 81559 * MIB);
    assert_int_equal(d[0].sm_count, 132);
    assert_int_equal(d[0].cc_major, 9);
    assert_int_equal(d[0].cc_minor, 0);
    assert_int_equal(d[1].total_bytes, 40 * GIB);
    assert_int_equal(d[1].cc_major, 8);
    assert_int_equal(d[1].cc_minor, 0);
    /* UUIDs look real, differ between devices and are the same every time. */
    assert_int_equal(strlen(d[0].uuid), 40);
    assert_memory_equal(d[0].uuid, "GPU-", 4);
    assert_int_equal(d[0].uuid[12], '-');
    assert_int_equal(d[0].uuid[17], '-');
    assert_int_equal(d[0].uuid[22], '-');
    assert_int_equal(d[0].uuid[27], '-');
    assert_string_not_equal(d[0].uuid, d[1].uuid);
    assert_string_not_equal(d[0].pci_bus_id, d[1].pci_bus_id);
    assert_int_equal(fg_parse_devices(TWO_GPUS, again, FG_MAX_DEVICES, &n, &err), 0);
    assert_string_equal(d[0].uuid, again[0].uuid);
    assert_string_equal(d[1].uuid, again[1].uuid);
    /* Same name at another index: another GPU. */
    assert_int_equal(fg_parse_devices("G:1GiB:1,G:1GiB:1", d, FG_MAX_DEVICES, &n, &err), 0);
    assert_string_not_equal(d[0].uuid, d[1].uuid);
    /* A bare MEMORY is MiB. */
    assert_int_equal(fg_parse_devices("G:2048:4", d, FG_MAX_DEVICES, &n, &err), 0);
    assert_int_equal(d[0].total_bytes, 2 * GIB);
    /* Exactly FG_MAX_DEVICES is fine. */
    char many[512] = "";
    for (int i = 0; i < FG_MAX_DEVICES; i++)
        strncat(many, i ? ",G:1GiB:1" : "G:1GiB:1", sizeof many - strlen(many) - 1);
    assert_int_equal(fg_parse_devices(many, d, FG_MAX_DEVICES, &n, &err), 0);
    assert_int_equal(n, FG_MAX_DEVICES);
}

static void test_parse_compute_capability(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int major, minor;
    } cases[] = {
        {"NVIDIA H100 80GB HBM3", 9, 0},
        {"NVIDIA H200", 9, 0},
        {"NVIDIA H800", 9, 0},
        {"NVIDIA A100-SXM4-80GB", 8, 0},
        {"NVIDIA A800", 8, 0},
        {"NVIDIA A30", 8, 0},
        {"NVIDIA A10", 8, 6},
        {"NVIDIA A40", 8, 6},
        {"GeForce RTX 3090", 8, 6},
        {"NVIDIA RTX A6000", 8, 6},
        {"NVIDIA L4", 8, 9},
        {"NVIDIA L40S", 8, 9},
        {"GeForce RTX 4090", 8, 9},
        {"Tesla V100", 7, 0},
        {"Tesla T4", 7, 5},
        {"NVIDIA B200", 10, 0},
        {"NVIDIA GB200", 10, 0},
        {"Mystery GPU", 8, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char spec[128];
        assert_true(vg_snprintf(spec, sizeof spec, "%s:1GiB:1", cases[i].name) > 0);
        struct fg_device_info d;
        struct vg_err err;
        int n;
        assert_int_equal(fg_parse_devices(spec, &d, 1, &n, &err), 0);
        if (d.cc_major != cases[i].major || d.cc_minor != cases[i].minor)
            fail_msg("%s: got %d.%d", cases[i].name, d.cc_major, d.cc_minor);
    }
}

static void test_parse_malformed(void **state)
{
    (void)state;
    char long_name[FG_NAME_MAX + 16];
    memset(long_name, 'N', FG_NAME_MAX);
    memcpy(long_name + FG_NAME_MAX, ":1GiB:1", 8);
    char seventeen[512] = "";
    for (int i = 0; i <= FG_MAX_DEVICES; i++)
        strncat(seventeen, i ? ",G:1GiB:1" : "G:1GiB:1", sizeof seventeen - strlen(seventeen) - 1);
    const char *bad[] = {
        "",           /* empty */
        "G",          /* one field */
        "G:1GiB",     /* two fields */
        "G:1GiB:1:1", /* four fields */
        ":1GiB:1",    /* empty name */
        "G::1",       /* empty memory */
        "G:1GiB:",    /* empty SMs */
        "G:lots:1",   /* not a number */
        "G:1PiB:1",   /* unknown unit */
        "G:0:1",      /* no memory */
        "G:1KiB:1",   /* below 1 MiB */
        "G:99999999999999999999GiB:1",
        "G:1GiB:0",    /* SMs out of range */
        "G:1GiB:1025", /* SMs out of range */
        "G:1GiB:-3",   /* sign */
        "G:1GiB: 4",   /* whitespace */
        "G:1GiB:1,",   /* trailing comma */
        ",G:1GiB:1",   /* leading comma */
        "G:1GiB:1,,G:1GiB:1",
        "G\tX:1GiB:1", /* control character */
        long_name,
        seventeen,
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct fg_device_info d[FG_MAX_DEVICES];
        struct vg_err err = {0};
        int n = -1;
        int rc = fg_parse_devices(bad[i], d, FG_MAX_DEVICES, &n, &err);
        if (rc != -EINVAL)
            fail_msg("'%s' accepted (rc %d)", bad[i], rc);
        if (strncmp(err.msg, "FAKEGPU_DEVICES", 15) != 0)
            fail_msg("'%s': message does not name the variable: %s", bad[i], err.msg);
        assert_int_equal(n, -1);
    }
}

static void test_open_rejects_bad_environment(void **state)
{
    struct fixture *f = *state;
    struct fg_state *st = NULL;
    assert_int_equal(fg_state_open(&st, f->dir, "G:1GiB", fake_clock), -EINVAL);
    static const char *cases[][2] = {
        {"FAKEGPU_CONTEXT_MIB", "abc"}, {"FAKEGPU_CONTEXT_MIB", "-1"},
        {"FAKEGPU_CONTEXT_MIB", ""},    {"FAKEGPU_KERNEL_NS", "10us"},
        {"FAKEGPU_TIMESLICE_US", "0"},  {"FAKEGPU_TIMESLICE_US", "99999999999"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv(cases[i][0], cases[i][1], 1);
        int rc = fg_state_open(&st, f->dir, ONE_GPU, fake_clock);
        if (rc != -EINVAL)
            fail_msg("%s='%s' accepted", cases[i][0], cases[i][1]);
        unsetenv(cases[i][0]);
    }
    setenv("FAKEGPU_KERNEL_NS", "12345", 1);
    assert_int_equal(fg_state_open(&st, f->dir, ONE_GPU, fake_clock), 0);
    assert_int_equal(fg_kernel_ns(st), 12345);
    fg_state_close(st);
    unsetenv("FAKEGPU_KERNEL_NS");
    assert_int_equal(fg_state_open(&st, f->dir, ONE_GPU, fake_clock), 0);
    assert_int_equal(fg_kernel_ns(st), 10000);
    fg_state_close(st);
}

/* ---- state file ------------------------------------------------------------------- */

static void write_state_file(struct fixture *f, const void *data, size_t size)
{
    char path[128];
    assert_true(vg_snprintf(path, sizeof path, "%s/fakegpu.state", f->dir) > 0);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, size, fp), size);
    fclose(fp);
}

static void test_bad_state_file_refused(void **state)
{
    struct fixture *f = *state;
    struct fg_state *st = NULL;
    write_state_file(f, "not a fakegpu state", 19);
    assert_int_equal(fg_state_open(&st, f->dir, ONE_GPU, fake_clock), -EIO);

    /* Right size, wrong magic. */
    struct fg_shared *junk = calloc(1, sizeof *junk);
    assert_non_null(junk);
    junk->magic = 0x1234;
    junk->version = FG_STATE_VERSION;
    junk->size = sizeof *junk;
    write_state_file(f, junk, sizeof *junk);
    assert_int_equal(fg_state_open(&st, f->dir, ONE_GPU, fake_clock), -EIO);

    /* Right magic, another version. */
    junk->magic = FG_STATE_MAGIC;
    junk->version = FG_STATE_VERSION + 1;
    junk->device_count = 1;
    write_state_file(f, junk, sizeof *junk);
    assert_int_equal(fg_state_open(&st, f->dir, ONE_GPU, fake_clock), -EIO);
    free(junk);
}

static void test_state_shared_between_handles(void **state)
{
    struct fixture *f = *state;
    struct fg_state *a = open_fake(f, TWO_GPUS);
    /* A later opener sees the creator's devices, whatever its own list says. */
    struct fg_state *b = open_fake(f, ONE_GPU);
    assert_int_equal(fg_state_device_count(b), 2);
    struct fg_device_info da, db;
    assert_int_equal(fg_state_device_info(a, 1, &da), 0);
    assert_int_equal(fg_state_device_info(b, 1, &db), 0);
    assert_string_equal(da.uuid, db.uuid);
    assert_int_equal(fg_state_device_info(b, 2, &db), -EINVAL);
    assert_int_equal(fg_state_device_info(b, -1, &db), -EINVAL);
    fg_state_close(a);
    fg_state_close(b);
}

/* ---- memory ----------------------------------------------------------------------- */

static void test_capacity_exact(void **state)
{
    struct fixture *f = *state;
    setenv("FAKEGPU_CONTEXT_MIB", "0", 1);
    struct fg_state *a = open_fake(f, ONE_GPU);
    struct fg_state *b = open_fake(f, ONE_GPU);
    uint64_t used, total;
    assert_int_equal(fg_mem_reserve(a, 0, GIB - 4096), 0);
    assert_int_equal(fg_mem_reserve(b, 0, 4097), -ENOMEM);
    assert_int_equal(fg_mem_info(b, 0, &used, &total), 0);
    assert_int_equal(used, GIB - 4096);
    assert_int_equal(total, GIB);
    assert_int_equal(fg_mem_reserve(b, 0, 4096), 0); /* exactly full */
    assert_int_equal(fg_mem_reserve(a, 0, 1), -ENOMEM);
    assert_int_equal(fg_mem_reserve(a, 0, UINT64_MAX), -ENOMEM);
    assert_int_equal(fg_mem_release(b, 0, 4096), 0);
    assert_int_equal(fg_mem_release(b, 0, 1), -EINVAL); /* more than it holds */
    assert_int_equal(fg_mem_reserve(a, 0, 1), 0);
    assert_int_equal(fg_mem_info(a, 0, &used, NULL), 0);
    assert_int_equal(used, GIB - 4095);
    assert_int_equal(fg_mem_reserve(a, 1, 1), -EINVAL); /* no such device */
    /* Closing a handle gives back what it held. */
    fg_state_close(a);
    assert_int_equal(fg_mem_info(b, 0, &used, NULL), 0);
    assert_int_equal(used, 0);
    fg_state_close(b);
}

static void test_context_cost(void **state)
{
    struct fixture *f = *state;
    setenv("FAKEGPU_CONTEXT_MIB", "400", 1);
    struct fg_state *a = open_fake(f, ONE_GPU);
    struct fg_state *monitor = open_fake(f, ONE_GPU);
    uint64_t used;
    assert_int_equal(fg_ctx_attach(a, 0), 0);
    assert_int_equal(fg_mem_reserve(a, 0, 10 * MIB), 0);
    assert_int_equal(fg_mem_info(monitor, 0, &used, NULL), 0);
    assert_int_equal(used, 410 * MIB);
    struct fg_proc_usage procs[4];
    unsigned n = 4;
    assert_int_equal(fg_procs_on_device(monitor, 0, 1000 * MS, procs, &n), 0);
    assert_int_equal(n, 1); /* the monitor itself is no GPU process */
    assert_int_equal(procs[0].pid, getpid());
    assert_int_equal(procs[0].used_bytes, 410 * MIB);
    assert_int_equal(fg_state_slot(monitor), FG_NO_SLOT);
    /* Too small an array: the count needed and -ENOSPC. */
    n = 0;
    assert_int_equal(fg_procs_on_device(monitor, 0, 1000 * MS, NULL, &n), -ENOSPC);
    assert_int_equal(n, 1);
    /* A context needs room like any allocation: 3 x 400 MiB do not fit in 1 GiB. */
    assert_int_equal(fg_ctx_attach(a, 0), 0);
    assert_int_equal(fg_ctx_attach(a, 0), -ENOMEM);
    assert_int_equal(fg_ctx_detach(a, 0), 0);
    assert_int_equal(fg_ctx_detach(a, 0), 0);
    assert_int_equal(fg_ctx_detach(a, 0), -EINVAL);
    assert_int_equal(fg_mem_info(monitor, 0, &used, NULL), 0);
    assert_int_equal(used, 10 * MIB);
    fg_state_close(a);
    fg_state_close(monitor);
}

/* ---- timeline --------------------------------------------------------------------- */

static void test_single_kernel(void **state)
{
    struct fixture *f = *state;
    struct fg_state *a = open_fake(f, ONE_GPU);
    int s;
    uint64_t seq;
    assert_int_equal(fg_stream_open(a, 0, &s), 0);
    fake_now = T0 + 5 * MS; /* idle time before the launch does not count */
    assert_int_equal(fg_stream_launch(a, s, 1 * MS, &seq), 0);
    fake_now = T0 + 6 * MS - 1;
    assert_false(stream_done(a, s, seq));
    fake_now = T0 + 6 * MS;
    assert_true(stream_done(a, s, seq));
    assert_int_equal(fg_stream_launch(a, 99999, 1, &seq), -EINVAL);
    fg_state_close(a);
}

static void test_stream_in_order(void **state)
{
    struct fixture *f = *state;
    struct fg_state *a = open_fake(f, ONE_GPU);
    int s;
    uint64_t s1, s2;
    assert_int_equal(fg_stream_open(a, 0, &s), 0);
    assert_int_equal(fg_stream_launch(a, s, 1 * MS, &s1), 0);
    assert_int_equal(fg_stream_launch(a, s, 2 * MS, &s2), 0);
    assert_true(s2 > s1);
    fake_now = T0 + 1 * MS;
    assert_true(stream_done(a, s, s1));
    assert_false(stream_done(a, s, s2));
    fake_now = T0 + 3 * MS - 1;
    assert_false(stream_done(a, s, s2));
    fake_now = T0 + 3 * MS;
    assert_true(stream_done(a, s, s2));
    fg_state_close(a);
}

static void test_two_contexts_round_robin(void **state)
{
    struct fixture *f = *state;
    setenv("FAKEGPU_TIMESLICE_US", "2000", 1);
    struct fg_state *a = open_fake(f, ONE_GPU);
    struct fg_state *b = open_fake(f, ONE_GPU);
    int sa, sb;
    uint64_t qa, qb;
    assert_int_equal(fg_stream_open(a, 0, &sa), 0);
    assert_int_equal(fg_stream_open(b, 0, &sb), 0);
    assert_true(fg_state_slot(a) < fg_state_slot(b));
    assert_int_equal(fg_stream_launch(a, sa, 10 * MS, &qa), 0);
    assert_int_equal(fg_stream_launch(b, sb, 10 * MS, &qb), 0);
    /* 2 ms slices, A first: A runs 0-2, 4-6, 8-10, 12-14, 16-18; B the gaps. */
    fake_now = T0 + 18 * MS - 1;
    assert_false(stream_done(a, sa, qa));
    fake_now = T0 + 18 * MS;
    assert_true(stream_done(a, sa, qa));
    fake_now = T0 + 20 * MS - 1;
    assert_false(stream_done(b, sb, qb));
    fake_now = T0 + 20 * MS;
    assert_true(stream_done(b, sb, qb));
    /* Each had half the device; the device was busy throughout. */
    fake_now = T0 + 20 * MS;
    struct fg_proc_usage p[2];
    unsigned n = 2;
    assert_int_equal(fg_procs_on_device(a, 0, 20 * MS, p, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(p[0].busy_ns, 10 * MS);
    assert_int_equal(p[1].busy_ns, 10 * MS);
    unsigned pct;
    assert_int_equal(fg_util_device(a, 0, 20 * MS, &pct), 0);
    assert_int_equal(pct, 100);
    fg_state_close(a);
    fg_state_close(b);
}

/* A GPU in MIG mode: each MIG device is a timeline of its own (work in one instance
 * never waits for another's, nor for work on the whole GPU), while the processes inside
 * one instance take turns in time slices. Durations are the timeline's (libcuda stretches
 * kernels to the instance's SMs before they get here). */
static void test_mig_devices_have_own_timelines(void **state)
{
    struct fixture *f = *state;
    setenv("FAKEGPU_TIMESLICE_US", "2000", 1);
    setenv("FAKEGPU_MIG", "0:1g.10gb,1g.10gb", 1);
    const char *h100 = "NVIDIA H100 80GB HBM3:81559MiB:132";
    struct fg_state *a = open_fake(f, h100), *b = open_fake(f, h100), *c = open_fake(f, h100),
                    *g = open_fake(f, h100);
    assert_int_equal(fg_mig_bind(a, 0, 0), 0);
    assert_int_equal(fg_mig_bind(b, 0, 1), 0);
    assert_int_equal(fg_mig_bind(c, 0, 0), 0); /* beside a */
    int sa, sb, sc, sg;
    uint64_t qa, qb, qc, qg;
    assert_int_equal(fg_stream_open(a, 0, &sa), 0);
    assert_int_equal(fg_stream_open(b, 0, &sb), 0);
    assert_int_equal(fg_stream_open(c, 0, &sc), 0);
    assert_int_equal(fg_stream_open(g, 0, &sg), 0);
    assert_true(fg_state_slot(a) < fg_state_slot(c));
    /* Three timelines at once: instance 0 (a), instance 1 (b), the whole GPU (g). */
    assert_int_equal(fg_stream_launch(a, sa, 10 * MS, &qa), 0);
    assert_int_equal(fg_stream_launch(b, sb, 10 * MS, &qb), 0);
    assert_int_equal(fg_stream_launch(g, sg, 10 * MS, &qg), 0);
    fake_now = T0 + 10 * MS - 1;
    assert_false(stream_done(a, sa, qa));
    assert_false(stream_done(b, sb, qb));
    assert_false(stream_done(g, sg, qg));
    fake_now = T0 + 10 * MS;
    assert_true(stream_done(a, sa, qa));
    assert_true(stream_done(b, sb, qb));
    assert_true(stream_done(g, sg, qg));
    /* a and c share instance 0 in 2 ms slices, a first; b's work beside them is not
     * delayed. */
    assert_int_equal(fg_stream_launch(a, sa, 10 * MS, &qa), 0);
    assert_int_equal(fg_stream_launch(c, sc, 10 * MS, &qc), 0);
    assert_int_equal(fg_stream_launch(b, sb, 10 * MS, &qb), 0);
    fake_now = T0 + 20 * MS;
    assert_true(stream_done(b, sb, qb));
    fake_now = T0 + 28 * MS - 1;
    assert_false(stream_done(a, sa, qa));
    fake_now = T0 + 28 * MS;
    assert_true(stream_done(a, sa, qa));
    fake_now = T0 + 30 * MS - 1;
    assert_false(stream_done(c, sc, qc));
    fake_now = T0 + 30 * MS;
    assert_true(stream_done(c, sc, qc));
    fg_state_close(a);
    fg_state_close(b);
    fg_state_close(c);
    fg_state_close(g);
}

static void test_late_competitor_gets_a_slice(void **state)
{
    struct fixture *f = *state;
    struct fg_state *a = open_fake(f, ONE_GPU);
    struct fg_state *b = open_fake(f, ONE_GPU);
    int sa, sb;
    uint64_t qa, qb;
    assert_int_equal(fg_stream_open(a, 0, &sa), 0);
    assert_int_equal(fg_stream_open(b, 0, &sb), 0);
    assert_int_equal(fg_stream_launch(a, sa, 100 * MS, &qa), 0);
    fake_now = T0 + 51 * MS; /* A alone so far: no slicing needed */
    assert_false(stream_done(a, sa, qa));
    assert_int_equal(fg_stream_launch(b, sb, 1 * MS, &qb), 0);
    /* A's slice now ends 2 ms after B arrived; B's 1 ms kernel then runs. */
    fake_now = T0 + 54 * MS - 1;
    assert_false(stream_done(b, sb, qb));
    fake_now = T0 + 54 * MS;
    assert_true(stream_done(b, sb, qb));
    fake_now = T0 + 101 * MS - 1;
    assert_false(stream_done(a, sa, qa));
    fake_now = T0 + 101 * MS;
    assert_true(stream_done(a, sa, qa));
    fg_state_close(a);
    fg_state_close(b);
}

static void test_endless_kernel_does_not_wrap_time(void **state)
{
    struct fixture *f = *state;
    struct fg_state *a = open_fake(f, ONE_GPU);
    struct fg_state *b = open_fake(f, ONE_GPU);
    int sa, sb;
    uint64_t qa, qb;
    assert_int_equal(fg_stream_open(a, 0, &sa), 0);
    assert_int_equal(fg_stream_open(b, 0, &sb), 0);
    assert_int_equal(fg_stream_launch(a, sa, UINT64_MAX, &qa), 0);
    assert_int_equal(fg_stream_launch(b, sb, 1 * MS, &qb), 0);
    fake_now = T0 + 3 * MS; /* A 0-2, B 2-3 */
    assert_true(stream_done(b, sb, qb));
    fake_now = T0 + 1000 * MS;
    assert_false(stream_done(a, sa, qa));
    fg_state_close(a);
    fg_state_close(b);
}

static void test_streams_of_one_context_overlap(void **state)
{
    struct fixture *f = *state;
    struct fg_state *a = open_fake(f, ONE_GPU);
    int s1, s2;
    uint64_t q1, q2;
    assert_int_equal(fg_stream_open(a, 0, &s1), 0);
    assert_int_equal(fg_stream_open(a, 0, &s2), 0);
    assert_int_equal(fg_stream_launch(a, s1, 5 * MS, &q1), 0);
    assert_int_equal(fg_stream_launch(a, s2, 5 * MS, &q2), 0);
    fake_now = T0 + 5 * MS;
    assert_true(stream_done(a, s1, q1));
    assert_true(stream_done(a, s2, q2));
    fake_now = T0 + 10 * MS;
    unsigned pct;
    assert_int_equal(fg_util_device(a, 0, 10 * MS, &pct), 0);
    assert_int_equal(pct, 50); /* overlapped: 5 ms busy, not 10 */
    fg_state_close(a);
}

static void test_events(void **state)
{
    struct fixture *f = *state;
    struct fg_state *a = open_fake(f, ONE_GPU);
    int s, ev, never;
    uint64_t seq, t = 0;
    assert_int_equal(fg_stream_open(a, 0, &s), 0);
    assert_int_equal(fg_event_create(a, &ev), 0);
    assert_int_equal(fg_event_create(a, &never), 0);
    assert_int_equal(fg_event_query(a, never, &t), -EINVAL);
    assert_int_equal(fg_event_wait(a, never), 0);
    assert_int_equal(fg_stream_launch(a, s, 2 * MS, &seq), 0);
    assert_int_equal(fg_event_record(a, ev, s), 0);
    fake_now = T0 + 1 * MS;
    assert_int_equal(fg_event_query(a, ev, &t), -EAGAIN);
    fake_now = T0 + 7 * MS;
    assert_int_equal(fg_event_query(a, ev, &t), 0);
    assert_int_equal(t, T0 + 2 * MS); /* when the device got there, not when we asked */
    /* Recorded on an idle stream: completes at the time of recording. */
    fake_now = T0 + 9 * MS;
    assert_int_equal(fg_event_record(a, ev, s), 0);
    assert_int_equal(fg_event_query(a, ev, &t), 0);
    assert_int_equal(t, T0 + 9 * MS);
    assert_int_equal(fg_event_destroy(a, ev), 0);
    assert_int_equal(fg_event_query(a, ev, &t), -EINVAL);
    assert_int_equal(fg_event_record(a, ev, s), -EINVAL);
    fg_state_close(a);
}

/* A record whose marker is reached inside the record call itself (an idle stream, with
 * the periodic reap due, which advances the timeline) still completes its event. */
static void test_event_record_when_reap_is_due(void **state)
{
    struct fixture *f = *state;
    struct fg_state *a = open_fake(f, ONE_GPU);
    int s, ev;
    uint64_t seq, t = 0;
    assert_int_equal(fg_stream_open(a, 0, &s), 0);
    assert_int_equal(fg_event_create(a, &ev), 0);
    assert_int_equal(fg_stream_launch(a, s, 1 * MS, &seq), 0);
    for (int i = 1; i <= 5; i++) {
        fake_now = T0 + (uint64_t)i * 1000 * MS; /* past the 100 ms reap interval each time */
        assert_int_equal(fg_event_record(a, ev, s), 0);
        assert_int_equal(fg_event_query(a, ev, &t), 0);
        assert_true(t == fake_now);
    }
    fg_state_close(a);
}

static void test_stream_wait_event(void **state)
{
    struct fixture *f = *state;
    struct fg_state *a = open_fake(f, ONE_GPU);
    int s1, s2, ev;
    uint64_t q1, q2;
    assert_int_equal(fg_stream_open(a, 0, &s1), 0);
    assert_int_equal(fg_stream_open(a, 0, &s2), 0);
    assert_int_equal(fg_event_create(a, &ev), 0);
    assert_int_equal(fg_stream_launch(a, s1, 3 * MS, &q1), 0);
    assert_int_equal(fg_event_record(a, ev, s1), 0);
    assert_int_equal(fg_stream_wait_event(a, s2, ev), 0);
    assert_int_equal(fg_stream_launch(a, s2, 1 * MS, &q2), 0);
    /* Without the wait s2's kernel would finish at 1 ms; with it, at 3 + 1. */
    fake_now = T0 + 4 * MS - 1;
    assert_true(stream_done(a, s1, q1));
    assert_false(stream_done(a, s2, q2));
    fake_now = T0 + 4 * MS;
    assert_true(stream_done(a, s2, q2));
    /* Waiting for an event that is already complete costs nothing. */
    assert_int_equal(fg_stream_wait_event(a, s2, ev), 0);
    assert_int_equal(fg_stream_launch(a, s2, 1 * MS, &q2), 0);
    fake_now = T0 + 5 * MS;
    assert_true(stream_done(a, s2, q2));
    fg_state_close(a);
}

static void test_utilization_buckets(void **state)
{
    struct fixture *f = *state;
    struct fg_state *a = open_fake(f, ONE_GPU);
    int s;
    uint64_t q;
    unsigned pct;
    assert_int_equal(fg_stream_open(a, 0, &s), 0);
    assert_int_equal(fg_stream_launch(a, s, 250 * MS, &q), 0);
    fake_now = T0 + 1000 * MS;
    assert_int_equal(fg_util_device(a, 0, 1000 * MS, &pct), 0);
    assert_int_equal(pct, 25);
    assert_int_equal(fg_util_device(a, 0, 500 * MS, &pct), 0);
    assert_int_equal(pct, 0); /* the busy quarter is older than the window */
    /* Past the history (2 s), busy time is forgotten rather than wrapped around. */
    fake_now = T0 + 5000 * MS;
    assert_int_equal(fg_util_device(a, 0, 1000 * MS, &pct), 0);
    assert_int_equal(pct, 0);
    struct fg_util u;
    memset(&u, 0, sizeof u);
    fg_util_add(&u, 5 * MS, 25 * MS); /* spans three buckets */
    uint64_t span;
    assert_int_equal(fg_util_sum(&u, 30 * MS, 30 * MS, &span), 20 * MS);
    assert_int_equal(span, 30 * MS);
    fg_state_close(a);
}

/* ---- real-time behaviour ---------------------------------------------------------- */

static void test_full_ring_blocks_launch(void **state)
{
    struct fixture *f = *state;
    struct fg_state *a = NULL;
    assert_int_equal(fg_state_open(&a, f->dir, ONE_GPU, NULL), 0);
    int s;
    uint64_t q;
    assert_int_equal(fg_stream_open(a, 0, &s), 0);
    uint64_t start = real_ms();
    for (int i = 0; i < FG_STREAM_DEPTH; i++)
        assert_int_equal(fg_stream_launch(a, s, 20 * MS, &q), 0);
    /* The ring holds 256 items: one more waits for the first 20 ms kernel, no error. */
    assert_int_equal(fg_stream_launch(a, s, 1, &q), 0);
    assert_true(real_ms() - start >= 19);
    assert_int_equal(q, FG_STREAM_DEPTH + 1);
    fg_state_close(a);
}

static void test_wait_sleeps_until_done(void **state)
{
    struct fixture *f = *state;
    struct fg_state *a = NULL;
    assert_int_equal(fg_state_open(&a, f->dir, ONE_GPU, NULL), 0);
    int s, ev;
    uint64_t q;
    assert_int_equal(fg_stream_open(a, 0, &s), 0);
    assert_int_equal(fg_event_create(a, &ev), 0);
    uint64_t start = real_ms();
    assert_int_equal(fg_stream_launch(a, s, 30 * MS, &q), 0);
    assert_int_equal(fg_event_record(a, ev, s), 0);
    assert_int_equal(fg_event_wait(a, ev), 0);
    assert_true(real_ms() - start >= 29);
    assert_int_equal(fg_stream_launch(a, s, 30 * MS, &q), 0);
    assert_int_equal(fg_stream_wait(a, s), 0);
    assert_true(real_ms() - start >= 59);
    assert_int_equal(fg_stream_launch(a, s, 30 * MS, &q), 0);
    assert_int_equal(fg_device_wait(a, 0), 0);
    uint64_t took = real_ms() - start;
    assert_true(took >= 89);
    assert_true(took < 5000);
    assert_true(stream_done(a, s, q));
    fg_state_close(a);
}

/* ---- dead processes --------------------------------------------------------------- */

enum child_mode { CHILD_MEMORY, CHILD_HOLDS_LOCK, CHILD_LONG_KERNEL };

/* Forks a child that attaches to dir, does `mode`, reports a number through the pipe
 * and waits to be killed. */
static pid_t spawn_child(const char *dir, enum child_mode mode, int *reported)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        struct fg_state *st = NULL;
        int value = -1;
        if (fg_state_open(&st, dir, ONE_GPU, NULL) == 0 && fg_mem_reserve(st, 0, 512 * MIB) == 0)
            value = 0;
        if (value == 0 && mode == CHILD_LONG_KERNEL) {
            uint64_t q;
            if (fg_stream_open(st, 0, &value) != 0 ||
                fg_stream_launch(st, value, 3600000 * MS, &q) != 0)
                value = -1;
        }
        if (value == 0 && mode == CHILD_HOLDS_LOCK)
            pthread_mutex_lock(&fg_state_shared(st)->lock);
        if (write(fds[1], &value, sizeof value) != sizeof value)
            _exit(1);
        for (;;)
            pause();
    }
    close(fds[1]);
    assert_int_equal(read(fds[0], reported, sizeof *reported), sizeof *reported);
    close(fds[0]);
    assert_true(*reported >= 0);
    return pid;
}

static void kill_child(pid_t pid)
{
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
}

static void test_reap_killed_process(void **state)
{
    struct fixture *f = *state;
    struct fg_state *a = NULL;
    assert_int_equal(fg_state_open(&a, f->dir, ONE_GPU, NULL), 0);
    int ignored;
    pid_t child = spawn_child(f->dir, CHILD_MEMORY, &ignored);
    uint64_t used;
    assert_int_equal(fg_mem_info(a, 0, &used, NULL), 0);
    assert_int_equal(used, 512 * MIB);
    /* Full: the child's memory is really held. */
    assert_int_equal(fg_mem_reserve(a, 0, 768 * MIB), -ENOMEM);
    kill_child(child);
    assert_int_equal(fg_mem_info(a, 0, &used, NULL), 0);
    assert_int_equal(used, 0);
    assert_int_equal(fg_mem_reserve(a, 0, 768 * MIB), 0);
    fg_state_close(a);
}

static void test_reap_process_killed_holding_lock(void **state)
{
    struct fixture *f = *state;
    struct fg_state *a = NULL;
    assert_int_equal(fg_state_open(&a, f->dir, ONE_GPU, NULL), 0);
    int ignored;
    pid_t child = spawn_child(f->dir, CHILD_HOLDS_LOCK, &ignored);
    kill_child(child);
    alarm(20); /* a stuck mutex fails the test instead of hanging it */
    uint64_t start = real_ms();
    uint64_t used = 1;
    assert_int_equal(fg_mem_info(a, 0, &used, NULL), 0);
    assert_int_equal(used, 0);
    assert_int_equal(fg_mem_reserve(a, 0, GIB), 0);
    alarm(0);
    assert_true(real_ms() - start < 5000);
    fg_state_close(a);
}

static void test_wait_on_dead_process_stream_returns(void **state)
{
    struct fixture *f = *state;
    struct fg_state *a = NULL;
    assert_int_equal(fg_state_open(&a, f->dir, ONE_GPU, NULL), 0);
    int stream;
    pid_t child = spawn_child(f->dir, CHILD_LONG_KERNEL, &stream);
    kill_child(child);
    alarm(20);
    uint64_t start = real_ms();
    assert_int_equal(fg_stream_wait(a, stream), 0); /* an hour of work, owner gone */
    alarm(0);
    assert_true(real_ms() - start < 5000);
    fg_state_close(a);
}

static void test_fork_child_gets_own_slot(void **state)
{
    struct fixture *f = *state;
    struct fg_state *a = NULL;
    assert_int_equal(fg_state_open(&a, f->dir, ONE_GPU, NULL), 0);
    assert_int_equal(fg_mem_reserve(a, 0, 100 * MIB), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* The parent's slot is not the child's: releasing the parent's memory fails, and
         * what the child reserves is the child's own. */
        int ok = fg_mem_release(a, 0, 100 * MIB) == -EINVAL && fg_mem_reserve(a, 0, MIB) == 0 &&
                 fg_state_slot(a) != FG_NO_SLOT;
        _exit(ok ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    uint64_t used;
    assert_int_equal(fg_mem_info(a, 0, &used, NULL), 0);
    assert_int_equal(used, 100 * MIB); /* the child's MiB went with it */
    fg_state_close(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_good),
        cmocka_unit_test(test_parse_compute_capability),
        cmocka_unit_test(test_parse_malformed),
        cmocka_unit_test_setup_teardown(test_open_rejects_bad_environment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_state_file_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_state_shared_between_handles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_capacity_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_context_cost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_single_kernel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_contexts_round_robin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_late_competitor_gets_a_slice, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mig_devices_have_own_timelines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_endless_kernel_does_not_wrap_time, setup, teardown),
        cmocka_unit_test_setup_teardown(test_streams_of_one_context_overlap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_events, setup, teardown),
        cmocka_unit_test_setup_teardown(test_event_record_when_reap_is_due, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_wait_event, setup, teardown),
        cmocka_unit_test_setup_teardown(test_utilization_buckets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_ring_blocks_launch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_sleeps_until_done, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reap_killed_process, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reap_process_killed_holding_lock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_on_dead_process_stream_returns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fork_child_gets_own_slot, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
