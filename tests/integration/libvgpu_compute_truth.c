/* fakegpu's truth for libvgpu's compute-share tests: each group's share of device time.
 *   libvgpu_compute_truth DEV WARMUP_S WINDOWS GROUP...
 * A GROUP is a comma-separated list of pids (one container's processes). After WARMUP_S
 * seconds it reads, once a second for WINDOWS seconds, how much device time each group's
 * processes used in the last second (fakegpu's timeline, 10 ms buckets), and prints per
 * group "group=<i> mean=<pct> min=<pct> max=<pct>" with the per-window shares.
 *   libvgpu_compute_truth steps DEV STEP_MS STEPS GROUP...
 * prints, every STEP_MS for STEPS steps, "t=<ms since start>" and each group's share of the
 * last STEP_MS as "g<i>=<pct>" (for hand-back times; resolution: fakegpu's 10 ms buckets). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/parse.h"
#include "fakegpu/state.h"

#define MAX_GROUPS 8
#define WINDOW_NS  1000000000ull

static bool in_group(const char *group, pid_t pid)
{
    while (*group != '\0') {
        const char *comma = strchr(group, ',');
        size_t len = comma != NULL ? (size_t)(comma - group) : strlen(group);
        char tok[24];
        if (len > 0 && len < sizeof tok) {
            memcpy(tok, group, len);
            tok[len] = '\0';
            uint64_t p;
            if (vg_parse_u64(tok, 1, INT32_MAX, &p, NULL) == 0 && (pid_t)p == pid)
                return true;
        }
        group += len + (comma != NULL ? 1 : 0);
    }
    return false;
}

static double group_share(const struct fg_proc_usage *procs, unsigned count, const char *group,
                          uint64_t window_ns)
{
    double busy = 0;
    for (unsigned i = 0; i < count; i++)
        if (in_group(group, procs[i].pid))
            busy += (double)procs[i].busy_ns;
    return 100.0 * busy / (double)window_ns;
}

static int steps(int argc, char **argv)
{
    uint64_t dev, step_ms, nsteps;
    if (argc < 6 || vg_parse_u64(argv[2], 0, FG_MAX_DEVICES - 1, &dev, NULL) != 0 ||
        vg_parse_u64(argv[3], 10, 1000, &step_ms, NULL) != 0 ||
        vg_parse_u64(argv[4], 1, 100000, &nsteps, NULL) != 0 || argc - 5 > MAX_GROUPS) {
        fprintf(stderr, "usage: libvgpu_compute_truth steps DEV STEP_MS STEPS GROUP...\n");
        return 2;
    }
    struct fg_state *st;
    if (fg_state_get(&st) != 0)
        return 2;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    t = t0;
    for (uint64_t k = 1; k <= nsteps; k++) {
        t.tv_nsec += (long)(step_ms * 1000000);
        while (t.tv_nsec >= 1000000000) {
            t.tv_nsec -= 1000000000;
            t.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);
        struct fg_proc_usage procs[FG_MAX_PROCS];
        unsigned count = FG_MAX_PROCS;
        if (fg_procs_on_device(st, (int)dev, step_ms * 1000000, procs, &count) != 0)
            return 2;
        printf("t=%llu", (unsigned long long)(k * step_ms));
        for (int g = 5; g < argc; g++)
            printf(" g%d=%.1f", g - 5, group_share(procs, count, argv[g], step_ms * 1000000));
        printf("\n");
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "steps") == 0)
        return steps(argc, argv);
    uint64_t dev, warm, windows;
    if (argc < 5 || vg_parse_u64(argv[1], 0, FG_MAX_DEVICES - 1, &dev, NULL) != 0 ||
        vg_parse_u64(argv[2], 0, 600, &warm, NULL) != 0 ||
        vg_parse_u64(argv[3], 1, 600, &windows, NULL) != 0 || argc - 4 > MAX_GROUPS) {
        fprintf(stderr, "usage: libvgpu_compute_truth DEV WARMUP_S WINDOWS GROUP...\n");
        return 2;
    }
    int ngroups = argc - 4;
    struct fg_state *st;
    if (fg_state_get(&st) != 0)
        return 2;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += (time_t)warm;
    double sum[MAX_GROUPS] = {0}, lo[MAX_GROUPS], hi[MAX_GROUPS] = {0};
    for (int g = 0; g < ngroups; g++)
        lo[g] = 1e9;
    for (uint64_t w = 0; w < windows; w++) {
        t.tv_sec += 1;
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);
        struct fg_proc_usage procs[FG_MAX_PROCS];
        unsigned count = FG_MAX_PROCS;
        if (fg_procs_on_device(st, (int)dev, WINDOW_NS, procs, &count) != 0)
            return 2;
        for (int g = 0; g < ngroups; g++) {
            double pct = group_share(procs, count, argv[4 + g], WINDOW_NS);
            sum[g] += pct;
            lo[g] = pct < lo[g] ? pct : lo[g];
            hi[g] = pct > hi[g] ? pct : hi[g];
        }
    }
    for (int g = 0; g < ngroups; g++)
        printf("group=%d mean=%.2f min=%.2f max=%.2f\n", g, sum[g] / (double)windows, lo[g], hi[g]);
    return 0;
}
