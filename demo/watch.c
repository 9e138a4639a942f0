/* The demo's view of the GPU, through NVML as nvidia-smi would see it: device
 * utilization and memory, and each process's memory and share of the GPU.
 *
 *   watch SECONDS [INTERVAL_MS]
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "abi/nvml.h"
#include "base/parse.h"

#define MAX_PROCS 16

static int check(nvmlReturn_t rc, const char *what)
{
    if (rc == NVML_SUCCESS)
        return 0;
    fprintf(stderr, "watch: %s failed: %s\n", what, nvmlErrorString(rc));
    return -1;
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Share of the GPU each pid had since last_seen, from NVML's process samples. */
static unsigned sm_share(const nvmlProcessUtilizationSample_t *samples, unsigned n, unsigned pid)
{
    unsigned best = 0;
    for (unsigned i = 0; i < n; i++)
        if (samples[i].pid == pid && samples[i].smUtil > best)
            best = samples[i].smUtil;
    return best;
}

int main(int argc, char **argv)
{
    uint64_t seconds = 10, interval_ms = 500;
    struct vg_err err;
    if (argc < 2 || vg_parse_u64(argv[1], 1, 3600, &seconds, &err) != 0 ||
        (argc > 2 && vg_parse_u64(argv[2], 50, 60000, &interval_ms, &err) != 0)) {
        fprintf(stderr, "usage: watch SECONDS [INTERVAL_MS]\n");
        return 2;
    }
    nvmlDevice_t dev;
    char name[96];
    if (check(nvmlInit_v2(), "nvmlInit") ||
        check(nvmlDeviceGetHandleByIndex_v2(0, &dev), "nvmlDeviceGetHandleByIndex") ||
        check(nvmlDeviceGetName(dev, name, sizeof name), "nvmlDeviceGetName"))
        return 1;
    printf("%s\n", name);
    printf("%6s %5s %12s   %s\n", "time", "util", "memory MiB", "processes (pid: MiB, GPU share)");
    unsigned long long last_seen = 0;
    for (uint64_t tick = 1; tick * interval_ms <= seconds * 1000; tick++) {
        sleep_ms(interval_ms);
        nvmlUtilization_t util;
        nvmlMemory_t mem;
        nvmlProcessInfo_t procs[MAX_PROCS];
        unsigned nprocs = MAX_PROCS;
        nvmlProcessUtilizationSample_t samples[MAX_PROCS];
        unsigned nsamples = MAX_PROCS;
        if (check(nvmlDeviceGetUtilizationRates(dev, &util), "utilization") ||
            check(nvmlDeviceGetMemoryInfo(dev, &mem), "memory info") ||
            check(nvmlDeviceGetComputeRunningProcesses_v3(dev, &nprocs, procs), "processes"))
            return 1;
        if (nvmlDeviceGetProcessUtilization(dev, samples, &nsamples, last_seen) != NVML_SUCCESS)
            nsamples = 0;
        for (unsigned i = 0; i < nsamples; i++)
            if (samples[i].timeStamp > last_seen)
                last_seen = samples[i].timeStamp;
        char line[512];
        size_t len = 0;
        line[0] = '\0';
        for (unsigned i = 0; i < nprocs && len < sizeof line - 64; i++) {
            int n = snprintf(line + len, sizeof line - len, "%s%u: %llu MiB, %u%%", i ? "   " : "",
                             procs[i].pid, (unsigned long long)(procs[i].usedGpuMemory >> 20),
                             sm_share(samples, nsamples, procs[i].pid));
            if (n > 0)
                len += (size_t)n;
        }
        printf("%5.1fs %4u%% %5llu/%-6llu   %s\n", (double)(tick * interval_ms) / 1000.0, util.gpu,
               (unsigned long long)(mem.used >> 20), (unsigned long long)(mem.total >> 20),
               nprocs ? line : "idle");
        fflush(stdout);
    }
    nvmlShutdown();
    return 0;
}
