/* vgpu-monitor: the node-side watchdog (docs/monitor.md). Exits 2 on bad flags, 1 when it
 * cannot start (no NVML, bad API credentials), 0 after a signal or --samples samples. */
#include <stdio.h>

#include "monitor/monitor.h"

int main(int argc, char **argv)
{
    struct mon_args args;
    struct vg_err err = {0};
    if (mon_args_parse(argc - 1, argv + 1, &args, &err) < 0) {
        fprintf(stderr, "vgpu-monitor: %s\n", err.msg);
        mon_args_usage(stderr);
        return 2;
    }
    if (args.help) {
        mon_args_usage(stdout);
        return 0;
    }
    if (mon_daemon_run(&args, &err) < 0) {
        fprintf(stderr, "vgpu-monitor: %s\n", err.msg);
        return 1;
    }
    return 0;
}
