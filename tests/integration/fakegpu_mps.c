/* Integration tests of fakegpu's MPS client side through the real ABI: a process with
 * CUDA_MPS_PIPE_DIRECTORY set obeys CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (allocations past it
 * fail with CUDA_ERROR_OUT_OF_MEMORY) and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (its kernels
 * take 100/P times as long); malformed values make cuInit fail naming the variable.
 * `fakegpu_mps <case>` runs one case under cuda_run.sh (fresh FAKEGPU_STATE_DIR); each
 * setting runs in a forked child, since the driver reads the variables once, at cuInit.
 * `fakegpu_mps spin MS` prints "device_ms=<x>", the device time one vgpu_spin of MS ms
 * took under the caller's environment (for the device plugin's end-to-end test). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "abi/cuda.h"
#include "base/parse.h"

static int failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define CU_EQ(call, want)                                                                          \
    do {                                                                                           \
        CUresult got_ = (call);                                                                    \
        if (got_ != (want)) {                                                                      \
            const char *name_ = NULL;                                                              \
            cuGetErrorName(got_, &name_);                                                          \
            fprintf(stderr, "%s:%d: %s returned %d (%s), want %s\n", __FILE__, __LINE__, #call,    \
                    (int)got_, name_ ? name_ : "?", #want);                                        \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define CU_OK(call) CU_EQ(call, CUDA_SUCCESS)
#define MIB         (1024ULL * 1024ULL)

#define PIPE_VAR  "CUDA_MPS_PIPE_DIRECTORY"
#define SHARE_VAR "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
#define LIMIT_VAR "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"

/* Runs fn in a child whose environment has the three MPS variables set to pipe, share
 * and limit (NULL: unset); a failure in the child counts once here, with the setting. */
static void with_mps(const char *pipe, const char *share, const char *limit, void (*fn)(void))
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        const char *names[] = {PIPE_VAR, SHARE_VAR, LIMIT_VAR};
        const char *values[] = {pipe, share, limit};
        for (int i = 0; i < 3; i++) {
            if (values[i])
                setenv(names[i], values[i], 1);
            else
                unsetenv(names[i]);
        }
        failures = 0;
        fn();
        _exit(failures ? 1 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "  ... with %s=%s %s=%s %s=%s\n", PIPE_VAR, pipe ? pipe : "(unset)",
                SHARE_VAR, share ? share : "(unset)", LIMIT_VAR, limit ? limit : "(unset)");
        failures++;
    }
}

static CUcontext setup(void)
{
    CUcontext ctx = NULL;
    CU_OK(cuInit(0));
    CU_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CU_OK(cuCtxSetCurrent(ctx));
    return ctx;
}

/* ---- memory: FAKEGPU_DEVICES="Test GPU:2GiB:8", context 256 MiB ---- */

/* The process holds at most 300 MiB, whatever the card has free. */
static void limited_300(void)
{
    setup();
    size_t free_b = 0, total = 0;
    CU_OK(cuMemGetInfo_v2(&free_b, &total));
    CHECK(total == 2048 * MIB); /* the card */
    CHECK(free_b == 300 * MIB); /* what the limit allows (2 GiB - 256 MiB is free on it) */

    CUdeviceptr a = 0, b = 0, c = 0, d = 0;
    CU_OK(cuMemAlloc_v2(&a, 200 * MIB));
    CU_EQ(cuMemAlloc_v2(&b, 101 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(cuMemAlloc_v2(&b, 100 * MIB)); /* exactly up to the limit */
    CU_EQ(cuMemAlloc_v2(&c, 1), CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(cuMemGetInfo_v2(&free_b, &total));
    CHECK(free_b == 0);
    /* Every kind of device allocation counts: managed, pitched, arrays, VMM, pools. */
    CU_EQ(cuMemAllocManaged(&c, MIB, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
    size_t pitch = 0;
    CU_EQ(cuMemAllocPitch_v2(&c, &pitch, 1024, 1024, 4), CUDA_ERROR_OUT_OF_MEMORY);
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle h = 0;
    CU_EQ(cuMemCreate(&h, 2 * MIB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CU_EQ(cuMemAllocAsync(&c, MIB, NULL), CUDA_ERROR_OUT_OF_MEMORY);

    /* Freeing gives the room back. */
    CU_OK(cuMemFree_v2(a));
    CU_OK(cuMemGetInfo_v2(&free_b, &total));
    CHECK(free_b == 200 * MIB);
    CU_OK(cuMemCreate(&h, 150 * MIB, &prop, 0));
    CU_EQ(cuMemAlloc_v2(&c, 51 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(cuMemAlloc_v2(&c, 50 * MIB));
    CU_OK(cuMemRelease(h));
    CU_OK(cuMemAllocAsync(&d, 150 * MIB, NULL)); /* b + c + d: 300 MiB */
    CU_OK(cuStreamSynchronize(NULL));
    CU_EQ(cuMemAlloc_v2(&a, MIB), CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(cuMemFreeAsync(d, NULL));
    CU_OK(cuStreamSynchronize(NULL)); /* the pool gives its memory back at synchronisation */
    CU_OK(cuMemAlloc_v2(&a, 100 * MIB));
    CU_OK(cuMemFree_v2(a));
    CU_OK(cuMemFree_v2(b));
    CU_OK(cuMemFree_v2(c));
}

/* Without the limit (or without CUDA_MPS_PIPE_DIRECTORY) the card's capacity is all that
 * counts: 2 GiB - 256 MiB of context. */
static void unlimited(void)
{
    setup();
    size_t free_b = 0, total = 0;
    CU_OK(cuMemGetInfo_v2(&free_b, &total));
    CHECK(free_b == 1792 * MIB);
    CUdeviceptr a = 0, b = 0;
    CU_OK(cuMemAlloc_v2(&a, 1000 * MIB));
    CU_OK(cuMemAlloc_v2(&b, 792 * MIB));
    CU_OK(cuMemFree_v2(a));
    CU_OK(cuMemFree_v2(b));
}

/* A limit above what the card has free: the card's capacity still decides. */
static void limit_above_card(void)
{
    setup();
    size_t free_b = 0, total = 0;
    CU_OK(cuMemGetInfo_v2(&free_b, &total));
    CHECK(free_b == 1792 * MIB);
    CUdeviceptr a = 0;
    CU_EQ(cuMemAlloc_v2(&a, 1793 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(cuMemAlloc_v2(&a, 1792 * MIB));
    CU_OK(cuMemFree_v2(a));
}

static volatile int *shared_flag;

/* Holds 300 MiB (its whole limit) until told to stop. */
static void hold_limit(void)
{
    setup();
    CUdeviceptr a = 0, b = 0;
    CU_OK(cuMemAlloc_v2(&a, 300 * MIB));
    CU_EQ(cuMemAlloc_v2(&b, 1), CUDA_ERROR_OUT_OF_MEMORY);
    __atomic_store_n(&shared_flag[0], 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < 30000 && !__atomic_load_n(&shared_flag[1], __ATOMIC_SEQ_CST); i++)
        usleep(1000);
    CU_OK(cuMemFree_v2(a));
}

/* Next to a client holding its 300 MiB: this one has its own 300 MiB (the limit is per
 * process, not per device). */
static void second_client(void)
{
    setup();
    CUdeviceptr a = 0, b = 0;
    CU_OK(cuMemAlloc_v2(&a, 300 * MIB));
    CU_EQ(cuMemAlloc_v2(&b, 1), CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(cuMemFree_v2(a));
}

static void test_memory(void)
{
    with_mps("/tmp/mps-pipe", NULL, "0=300M", limited_300);
    with_mps("/tmp/mps-pipe", NULL, "0=300MB", limited_300);
    with_mps("/tmp/mps-pipe", "100", "0=300MiB", limited_300);
    with_mps(NULL, NULL, "0=300M", unlimited);      /* not an MPS client: ignored */
    with_mps("", NULL, "0=300M", unlimited);        /* empty pipe directory: not a client */
    with_mps("/tmp/mps-pipe", NULL, "", unlimited); /* empty limit: none */
    with_mps("/tmp/mps-pipe", NULL, NULL, unlimited);
    with_mps("/tmp/mps-pipe", NULL, "0=4G", limit_above_card);

    /* Two clients at once, each held to its own limit. */
    shared_flag =
        mmap(NULL, 2 * sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(shared_flag != MAP_FAILED);
    if (shared_flag == MAP_FAILED)
        return;
    shared_flag[0] = shared_flag[1] = 0;
    fflush(stderr);
    pid_t holder = fork();
    if (holder == 0) {
        setenv(PIPE_VAR, "/tmp/mps-pipe", 1);
        setenv(LIMIT_VAR, "0=300M", 1);
        failures = 0;
        hold_limit();
        _exit(failures ? 1 : 0);
    }
    for (int i = 0; i < 30000 && !__atomic_load_n(&shared_flag[0], __ATOMIC_SEQ_CST); i++)
        usleep(1000);
    CHECK(shared_flag[0] == 1);
    with_mps("/tmp/mps-pipe", NULL, "0=300M", second_client);
    __atomic_store_n(&shared_flag[1], 1, __ATOMIC_SEQ_CST);
    int status = 0;
    waitpid(holder, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* ---- limits by UUID and per visible device ---- */

struct dev_uuid {
    char uuid[48];
};
static struct dev_uuid *uuids;

static void uuid_text(const CUuuid *u, char *out, size_t size)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, size, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

static void record_uuids(void)
{
    CU_OK(cuInit(0));
    for (int i = 0; i < 2; i++) {
        CUuuid u;
        CU_OK(cuDeviceGetUuid(&u, i));
        uuid_text(&u, uuids[i].uuid, sizeof uuids[i].uuid);
    }
}

/* Allocating on ordinal dev: want_mib fits, one more MiB does not. */
static void expect_room(int dev, unsigned long long want_mib)
{
    CUcontext ctx = NULL;
    CU_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU_OK(cuCtxSetCurrent(ctx));
    CUdeviceptr a = 0, b = 0;
    CU_OK(cuMemAlloc_v2(&a, want_mib * MIB));
    CU_EQ(cuMemAlloc_v2(&b, MIB), CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(cuMemFree_v2(a));
}

/* CUDA_VISIBLE_DEVICES=1,0: ordinal 0 is the 2 GiB card B, ordinal 1 the 1 GiB card A. */
static void two_limits(void)
{
    CU_OK(cuInit(0));
    expect_room(0, 100); /* named by ordinal 0 */
    expect_room(1, 200); /* named by UUID */
}

static void one_limit(void)
{
    CU_OK(cuInit(0));
    expect_room(0, 100);
    expect_room(1, 1024 - 256); /* no limit on the other device */
}

static void test_devices(void)
{
    uuids =
        mmap(NULL, 2 * sizeof *uuids, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(uuids != MAP_FAILED);
    if (uuids == MAP_FAILED)
        return;
    memset(uuids, 0, 2 * sizeof *uuids);
    unsetenv("CUDA_VISIBLE_DEVICES");
    with_mps(NULL, NULL, NULL, record_uuids);
    CHECK(strncmp(uuids[0].uuid, "GPU-", 4) == 0 && strcmp(uuids[0].uuid, uuids[1].uuid) != 0);
    setenv("CUDA_VISIBLE_DEVICES", "1,0", 1);
    char value[160];
    snprintf(value, sizeof value, "0=100M,%s=200M", uuids[0].uuid);
    with_mps("/tmp/mps-pipe", NULL, value, two_limits);
    /* A UUID prefix that names one device is enough. */
    size_t len = 5;
    while (len < 40 && strncmp(uuids[0].uuid, uuids[1].uuid, len) == 0)
        len++;
    snprintf(value, sizeof value, "%.*s=200M,0=100M", (int)len, uuids[0].uuid);
    with_mps("/tmp/mps-pipe", NULL, value, two_limits);
    with_mps("/tmp/mps-pipe", NULL, "0=100M", one_limit);
    snprintf(value, sizeof value, "%s=100M", uuids[1].uuid); /* card B is ordinal 0 here */
    with_mps("/tmp/mps-pipe", NULL, value, one_limit);
    unsetenv("CUDA_VISIBLE_DEVICES");
}

/* ---- active thread percentage: FAKEGPU_DEVICES default, vgpu_spin ---- */

static float want_ms;

/* Queues a long kernel, then measures vgpu_spin(ns) between two events: device time,
 * exact when the process is alone on the device. Returns milliseconds (-1 on failure). */
static float spin_device_ms(unsigned long long ns)
{
    setup();
    static const char ptx[] = ".version 8.0\n.target sm_80\n.address_size 64\n";
    CUmodule mod = NULL;
    CUfunction f = NULL;
    CU_OK(cuModuleLoadData(&mod, ptx));
    CU_OK(cuModuleGetFunction(&f, mod, "vgpu_spin"));
    CUevent e0 = NULL, e1 = NULL;
    CU_OK(cuEventCreate(&e0, 0));
    CU_OK(cuEventCreate(&e1, 0));
    /* The first kernel keeps the device busy while the rest is queued, so the events
     * measure device time only, not the gaps between launches. */
    unsigned long long first = 200000000ULL;
    void *p0[] = {&first}, *p1[] = {&ns};
    CU_OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, p0, NULL));
    CU_OK(cuEventRecord(e0, NULL));
    CU_OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, p1, NULL));
    CU_OK(cuEventRecord(e1, NULL));
    CU_OK(cuEventSynchronize(e1));
    float ms = -1;
    CU_OK(cuEventElapsedTime(&ms, e0, e1));
    return ms;
}

static float want_ms;

static void measure_spin(void)
{
    float ms = spin_device_ms(20000000ULL);
    if (ms < want_ms - 0.01f || ms > want_ms + 0.01f) {
        fprintf(stderr, "vgpu_spin(20 ms) took %.3f ms of device time, want %.3f\n", (double)ms,
                (double)want_ms);
        failures++;
    }
    /* The SM count is the card's: a client's share does not show in the attributes. */
    int sms = 0;
    CU_OK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
    CHECK(sms == 132);
}

static void test_share(void)
{
    want_ms = 20.0f;
    with_mps(NULL, NULL, NULL, measure_spin);
    with_mps(NULL, "25", NULL, measure_spin); /* not an MPS client: ignored */
    with_mps("/tmp/mps-pipe", "100", NULL, measure_spin);
    with_mps("/tmp/mps-pipe", "", NULL, measure_spin);
    want_ms = 80.0f;
    with_mps("/tmp/mps-pipe", "25", NULL, measure_spin);
    want_ms = 40.0f;
    with_mps("/tmp/mps-pipe", "50", "0=1G", measure_spin);
    want_ms = 160.0f;
    with_mps("/tmp/mps-pipe", "12.5", NULL, measure_spin);
}

/* ---- malformed values ---- */

static const char *bad_var;

/* cuInit fails with CUDA_ERROR_INVALID_VALUE and one line on stderr naming bad_var;
 * later calls answer CUDA_ERROR_NOT_INITIALIZED. */
static void expect_refused(void)
{
    int fd = memfd_create("stderr", 0);
    int saved = dup(2);
    CHECK(fd >= 0 && saved >= 0);
    if (fd < 0 || saved < 0)
        return;
    dup2(fd, 2);
    CUresult r = cuInit(0);
    dup2(saved, 2);
    close(saved);
    char text[512] = "";
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    text[n > 0 ? n : 0] = '\0';
    CU_EQ(r, CUDA_ERROR_INVALID_VALUE);
    if (strncmp(text, "fakegpu: ", 9) != 0 || strstr(text, bad_var) == NULL ||
        strchr(text, '\n') != text + strlen(text) - 1) {
        fprintf(stderr, "stderr was '%s', want one line naming %s\n", text, bad_var);
        failures++;
    }
    int count = 0;
    CU_EQ(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
}

static void expect_init(void)
{
    CU_OK(cuInit(0));
}

static void test_bad(void)
{
    static const char *const shares[] = {"0",   "101",   "100.001", "abc",  "50%",  "-5",
                                         "+50", " 50",   "50 ",     "12.",  ".5",   "12.3456",
                                         "1e2", "0.000", "12.5.1",  "0x10", "50,50"};
    bad_var = SHARE_VAR;
    for (size_t i = 0; i < sizeof shares / sizeof shares[0]; i++)
        with_mps("/tmp/mps-pipe", shares[i], NULL, expect_refused);
    static const char *const limits[] = {"1G",           "0=",
                                         "=1G",          "0=1024",
                                         "0=0M",         "0=0G",
                                         "1=1G",         "-1=1G",
                                         "0=1G,0=2G",    "0=1G,",
                                         ",0=1G",        "GPU-zzzz=1G",
                                         "GPU-=1G",      "0=1X",
                                         "0=-1G",        "0=1G=2G",
                                         "MIG-GPU-1=1G", "0 =1G",
                                         "0= 1G",        "x=1G",
                                         "0=1.5.5G",     "0=99999999999999999999G"};
    bad_var = LIMIT_VAR;
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++)
        with_mps("/tmp/mps-pipe", NULL, limits[i], expect_refused);
    /* Both bad: one of them is named. */
    bad_var = "CUDA_MPS_";
    with_mps("/tmp/mps-pipe", "0", "0=", expect_refused);
    /* Not an MPS client: nothing is read. */
    with_mps(NULL, "0", "0=", expect_init);
    /* Accepted forms. */
    static const char *const good_shares[] = {"1", "100", "100.0", "0.001", "33.3", "050"};
    for (size_t i = 0; i < sizeof good_shares / sizeof good_shares[0]; i++)
        with_mps("/tmp/mps-pipe", good_shares[i], NULL, expect_init);
    static const char *const good_limits[] = {"0=1G",    "0=512MB",  "0=1.5GiB",
                                              "0=1024k", "0=10240M", "0=1t"};
    for (size_t i = 0; i < sizeof good_limits / sizeof good_limits[0]; i++)
        with_mps("/tmp/mps-pipe", NULL, good_limits[i], expect_init);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "spin") == 0) {
        /* For end-to-end tests: the device time of one vgpu_spin of argv[2] ms, under
         * whatever MPS variables the caller set. */
        uint64_t ms = 0;
        struct vg_err err = {0};
        if (vg_parse_u64(argv[2], 1, 10000, &ms, &err) != 0) {
            fprintf(stderr, "fakegpu_mps spin: MS: %s\n", err.msg);
            return 2;
        }
        float got = spin_device_ms((unsigned long long)ms * 1000000ULL);
        printf("device_ms=%.3f\n", (double)got);
        return failures ? 1 : 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: fakegpu_mps memory|devices|share|bad|spin MS\n");
        return 2;
    }
    const char *t = argv[1];
    if (strcmp(t, "memory") == 0)
        test_memory();
    else if (strcmp(t, "devices") == 0)
        test_devices();
    else if (strcmp(t, "share") == 0)
        test_share();
    else if (strcmp(t, "bad") == 0)
        test_bad();
    else {
        fprintf(stderr, "fakegpu_mps: unknown case '%s'\n", t);
        return 2;
    }
    if (failures)
        fprintf(stderr, "fakegpu_mps %s: %d check(s) failed\n", t, failures);
    return failures ? 1 : 0;
}
