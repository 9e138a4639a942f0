/* A GPU process for the NVML integration tests, written against fakegpu's state API so
 * that it needs no CUDA: attaches a context on DEV, holds MIB MiB of device memory and,
 * if BUSY_MS > 0, keeps the device busy with one kernel of that length. Prints "ready"
 * once all of that is in place, then waits to be killed.
 *
 *   nvml_gpu_proc DEV MIB BUSY_MS */
#include <stdio.h>
#include <unistd.h>

#include "base/err.h"
#include "base/parse.h"
#include "fakegpu/state.h"

static uint64_t arg(const char *s, const char *what)
{
    uint64_t v;
    struct vg_err err;
    if (vg_parse_u64(s, 0, UINT64_MAX / 1000000, &v, &err) != 0) {
        fprintf(stderr, "nvml_gpu_proc: %s: %s\n", what, err.msg);
        _exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: nvml_gpu_proc DEV MIB BUSY_MS\n");
        return 2;
    }
    int dev = (int)arg(argv[1], "DEV");
    uint64_t mib = arg(argv[2], "MIB"), busy_ms = arg(argv[3], "BUSY_MS");
    struct fg_state *st;
    int stream;
    uint64_t seq;
    if (fg_state_get(&st) != 0 || fg_ctx_attach(st, dev) != 0 ||
        fg_mem_reserve(st, dev, mib << 20) != 0) {
        fprintf(stderr, "nvml_gpu_proc: cannot set up on device %d\n", dev);
        return 1;
    }
    if (busy_ms > 0 && (fg_stream_open(st, dev, &stream) != 0 ||
                        fg_stream_launch(st, stream, busy_ms * 1000000, &seq) != 0)) {
        fprintf(stderr, "nvml_gpu_proc: cannot launch\n");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}
