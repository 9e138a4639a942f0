/* The driver's truth for libvgpu's tests: what fakegpu says each process holds on a
 * device (allocations plus context overhead, as NVML reports it on a real GPU).
 *   libvgpu_truth <dev> <seconds> [pid...]
 * samples every millisecond for that long and prints "max=<bytes> last=<bytes>", the
 * largest and the final sum over the given pids (all processes when none are given). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/parse.h"
#include "base/proc.h"
#include "fakegpu/state.h"

/* fakegpu gives a process's memory back when it notices the process is gone, which for
 * a zombie (exited, not yet reaped) is later than a real driver, which frees it as the
 * process's files close. Zombies are therefore not counted. */
static bool exited(pid_t pid)
{
    struct vg_proc_stat st;
    return vg_proc_stat_read(NULL, pid, &st, NULL) < 0 || vg_proc_state_exited(st.state);
}

static uint64_t sum(struct fg_state *st, int dev, int npids, char **pids)
{
    struct fg_proc_usage procs[FG_MAX_PROCS];
    unsigned count = FG_MAX_PROCS;
    if (fg_procs_on_device(st, dev, 1000000, procs, &count) != 0)
        return 0;
    uint64_t total = 0;
    for (unsigned i = 0; i < count; i++) {
        bool mine = npids == 0;
        for (int k = 0; k < npids && !mine; k++) {
            uint64_t pid;
            mine =
                vg_parse_u64(pids[k], 1, INT32_MAX, &pid, NULL) == 0 && (pid_t)pid == procs[i].pid;
        }
        if (mine && !exited(procs[i].pid))
            total += procs[i].used_bytes;
    }
    return total;
}

int main(int argc, char **argv)
{
    uint64_t dev, ms;
    if (argc < 3 || vg_parse_u64(argv[1], 0, FG_MAX_DEVICES - 1, &dev, NULL) != 0 ||
        vg_parse_u64(argv[2], 0, 3600, &ms, NULL) != 0) {
        fprintf(stderr, "usage: libvgpu_truth DEV SECONDS [PID...]\n");
        return 2;
    }
    ms *= 1000;
    struct fg_state *st;
    if (fg_state_get(&st) != 0)
        return 2;
    uint64_t max = 0, last = 0;
    for (uint64_t i = 0; i <= ms; i++) {
        last = sum(st, (int)dev, argc - 3, argv + 3);
        if (last > max)
            max = last;
        if (ms > 0) {
            struct timespec d = {0, 1000000};
            nanosleep(&d, NULL);
        }
    }
    printf("max=%llu last=%llu\n", (unsigned long long)max, (unsigned long long)last);
    return 0;
}
