/* Lays out a node's containers directory as vgpu-device-plugin and libvgpu leave it, for
 * `vgpu top`'s tests and benchmark: per GPU UUID given, PER_GPU containers, each a
 * directory <pod uid>_<container> with the plugin's limits file and a region that holds
 * some memory and a compute history.
 *
 *   top_fixture DIR PER_GPU UUID...
 *
 * Container k on GPU g: pod team-<g>/job-<k>, container main, limit 4 GiB and 25 % of the
 * compute; it holds (k % 4 + 1) GiB, has achieved (10 + k % 20) % and waited k seconds;
 * its pod names priority 1 (low) when k % 3 is 1, held k / 2 seconds, 0 (high) when k % 3 is
 * 2, none otherwise. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/parse.h"
#include "base/str.h"
#include "region/region.h"

int main(int argc, char **argv)
{
    struct vg_err err = {0};
    uint64_t per_gpu = 0;
    if (argc < 4 || vg_parse_u64(argv[2], 1, 4096, &per_gpu, &err) < 0) {
        fprintf(stderr, "usage: top_fixture DIR PER_GPU UUID...\n");
        return 2;
    }
    (void)mkdir(argv[1], 0755);
    char dir[4096];
    if (realpath(argv[1], dir) == NULL) /* the limits file takes absolute paths only */
        return 1;
    for (int g = 3; g < argc; g++) {
        for (uint64_t k = 0; k < per_gpu; k++) {
            char cdir[4096], path[4200];
            unsigned gi = (unsigned)(g - 3);
            if (vg_snprintf(cdir, sizeof cdir, "%s/%08x-0000-4000-8000-%012llx_main", dir, gi,
                            (unsigned long long)k) < 0 ||
                (mkdir(cdir, 0755) != 0 && errno != EEXIST))
                return 1;
            (void)vg_snprintf(path, sizeof path, "%s/limits", cdir);
            FILE *f = fopen(path, "w");
            if (f == NULL)
                return 1;
            fprintf(f,
                    "# written by vgpu-device-plugin for pod team-%u/job-%llu, container main\n"
                    "vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=4096m\nVGPU_DEVICE_UUID_0=%s\n"
                    "CUDA_DEVICE_SM_LIMIT_0=25\nCUDA_DEVICE_MEMORY_SHARED_CACHE=%s/region\n%s",
                    gi, (unsigned long long)k, argv[g], cdir,
                    k % 3 == 1   ? "CUDA_DEVICE_TASK_PRIORITY=1\n"
                    : k % 3 == 2 ? "CUDA_DEVICE_TASK_PRIORITY=0\n"
                                 : "");
            fclose(f);
            (void)vg_snprintf(path, sizeof path, "%s/region", cdir);
            struct region_config config = {.device_count = 1};
            (void)vg_strlcpy(config.devices[0].uuid, argv[g], sizeof config.devices[0].uuid);
            config.devices[0].memory_limit = 4ULL << 30;
            config.devices[0].sm_limit_percent = 25;
            struct region *r = NULL;
            if (region_create(path, &config, &err) < 0 || region_open(path, &r, &err) < 0) {
                fprintf(stderr, "top_fixture: %s\n", err.msg);
                return 1;
            }
            region_set_limit(r, 0, 4ULL << 30, 25);
            if (region_attach(r, &err) < 0 || region_reserve(r, 0, (k % 4 + 1) << 30) < 0) {
                fprintf(stderr, "top_fixture: cannot reserve in %s\n", path);
                return 1;
            }
            struct region_compute *c = region_compute(r, 0);
            atomic_store(&c->achieved_ppm, (int64_t)(10 + k % 20) * 10000);
            atomic_store(&c->waited_ns, (int64_t)k * 1000000000LL);
            if (k % 3 == 1)
                atomic_store(&c->held_ns, (int64_t)k * 500000000LL);
        }
    }
    /* Leaves without detaching, as a killed process would: the counters stay as they are.
     * _exit, so that nothing (LeakSanitizer's exit check included) tidies up behind it. */
    _exit(0);
}
