/* The attacker and the neighbour of the watchdog replays (watchdog.cmake, watchdog_test.sh),
 * linked against fakegpu's libcuda like any CUDA program; the attackers run without
 * libvgpu, the neighbour under it. Each prints "ready" once it is set up.
 *
 *   burst PERIOD_MS BURST_MS   keeps a context; every PERIOD_MS fills the card (256 MiB
 *                              chunks until the driver refuses) for BURST_MS, then frees
 *   relay                      a parent that never touches the GPU forks children one
 *                              after another, each filling the card and holding it until
 *                              it dies; prints "child N pid P" per child
 *   hold BYTES                 a context and BYTES, held until killed
 *   forge REGION BYTES         writes a live slot with its own pid into the container's
 *                              region (and holds the slot's lock, as libvgpu does), then
 *                              holds BYTES without libvgpu
 *   neighbour SECONDS BYTES PERIOD_MS   every PERIOD_MS allocates BYTES and frees them,
 *                              for SECONDS; prints "attempts=N failed=M" */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "abi/cuda.h"

#define MiB        (UINT64_C(1) << 20)
#define CHUNK      (256 * MiB)
#define MAX_CHUNKS 1024

static _Noreturn void die(const char *what, int rc)
{
    fprintf(stderr, "%s: %d\n", what, rc);
    exit(1);
}

static void context(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUresult r;
    if ((r = cuInit(0)) != CUDA_SUCCESS)
        die("cuInit", (int)r);
    if ((r = cuDeviceGet(&dev, 0)) != CUDA_SUCCESS)
        die("cuDeviceGet", (int)r);
    if ((r = cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS)
        die("cuDevicePrimaryCtxRetain", (int)r);
    if ((r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS)
        die("cuCtxSetCurrent", (int)r);
}

static void sleep_ms(double ms)
{
    struct timespec t = {.tv_sec = (time_t)(ms / 1000),
                         .tv_nsec = (long)((ms - (double)(time_t)(ms / 1000) * 1000) * 1e6)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Allocates CHUNK at a time until the driver refuses; how many. */
static unsigned fill(CUdeviceptr *p)
{
    unsigned n = 0;
    while (n < MAX_CHUNKS && cuMemAlloc_v2(&p[n], CHUNK) == CUDA_SUCCESS)
        n++;
    return n;
}

/* "ready" with the wall clock (ms since the epoch), the time the test measures from. */
static void ready(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    printf("ready at_ms=%lld\n", (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000);
    fflush(stdout);
}

static int burst(double period, double length)
{
    static CUdeviceptr p[MAX_CHUNKS];
    context();
    ready();
    for (;;) {
        unsigned n = fill(p);
        sleep_ms(length);
        for (unsigned i = 0; i < n; i++)
            (void)cuMemFree_v2(p[i]);
        sleep_ms(period - length);
    }
    return 0;
}

static int relay(void)
{
    ready();
    for (unsigned child = 1;; child++) {
        pid_t pid = fork();
        if (pid < 0)
            die("fork", errno);
        if (pid == 0) {
            static CUdeviceptr p[MAX_CHUNKS];
            context();
            (void)fill(p);
            for (;;)
                pause();
        }
        printf("child %u pid %d\n", child, (int)pid);
        fflush(stdout);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    return 0;
}

static int hold(uint64_t bytes)
{
    context();
    CUdeviceptr p;
    if (bytes && cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS)
        die("cuMemAlloc", 0);
    ready();
    for (;;)
        pause();
    return 0;
}

/* The region's layout (docs/protocol.md): the process slots after the header and device
 * table; a slot is state u32, generation u32, pid i32, ... */
#define REGION_SLOTS_AT 3136
#define SLOT_SIZE       272
#define SLOTS           1024

static int forge(const char *path, uint64_t bytes)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        die("open the region", errno);
    size_t size = REGION_SLOTS_AT + (size_t)SLOTS * SLOT_SIZE;
    unsigned char *r = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r == MAP_FAILED)
        die("mmap the region", errno);
    for (unsigned i = 0; i < SLOTS; i++) {
        unsigned char *slot = r + REGION_SLOTS_AT + (size_t)i * SLOT_SIZE;
        uint32_t state;
        memcpy(&state, slot, sizeof state);
        if (state != 0)
            continue;
        struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 1 + i, .l_len = 1};
        if (fcntl(fd, F_OFD_SETLK, &l) != 0)
            continue;
        int32_t pid = (int32_t)getpid();
        uint32_t gen = 1, live = 1;
        memcpy(slot + 4, &gen, sizeof gen);
        memcpy(slot + 8, &pid, sizeof pid);
        memcpy(slot, &live, sizeof live);
        fprintf(stderr, "forged slot %u for pid %d\n", i, (int)pid);
        break;
    }
    return hold(bytes);
}

static int neighbour(double seconds, uint64_t bytes, double period)
{
    context();
    ready();
    unsigned attempts = 0, failed = 0;
    double end = now_ms() + seconds * 1000;
    while (now_ms() < end) {
        CUdeviceptr p;
        attempts++;
        if (cuMemAlloc_v2(&p, bytes) == CUDA_SUCCESS)
            (void)cuMemFree_v2(p);
        else
            failed++;
        sleep_ms(period);
    }
    printf("attempts=%u failed=%u\n", attempts, failed);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *cmd = argc > 1 ? argv[1] : "";
    if (strcmp(cmd, "burst") == 0 && argc == 4)
        return burst(atof(argv[2]), atof(argv[3]));
    if (strcmp(cmd, "relay") == 0 && argc == 2)
        return relay();
    if (strcmp(cmd, "hold") == 0 && argc == 3)
        return hold(strtoull(argv[2], NULL, 10));
    if (strcmp(cmd, "forge") == 0 && argc == 4)
        return forge(argv[2], strtoull(argv[3], NULL, 10));
    if (strcmp(cmd, "neighbour") == 0 && argc == 5)
        return neighbour(atof(argv[2]), strtoull(argv[3], NULL, 10), atof(argv[4]));
    fprintf(stderr, "usage: watchdog_attack burst PERIOD_MS BURST_MS | relay | hold BYTES | "
                    "forge REGION BYTES | neighbour SECONDS BYTES PERIOD_MS\n");
    return 2;
}
