/* Fuzz target for libvgpu's limits file: any bytes are either refused with a message or
 * give a configuration whose every value is within its documented bounds. The same bytes
 * are then put at the fixed path (a memfd standing in for /etc/vgpu/limits) beside an
 * environment that tries to raise every limit: the configuration is closed exactly when
 * the parser refused the file, and otherwise no limit is above the file's or gone. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "libvgpu/config.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The file at a path of its own; -1 when the machine cannot make one. */
static int as_file(const uint8_t *data, size_t size, char *path, size_t path_size)
{
    int fd = memfd_create("vgpu-limits-fuzz", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    for (size_t done = 0; done < size;) {
        ssize_t n = write(fd, data + done, size - done);
        if (n <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)n;
    }
    snprintf(path, path_size, "/proc/self/fd/%d", fd);
    return fd;
}

static void fixed_path(const uint8_t *data, size_t size, const struct vgpu_config *file,
                       bool accepted)
{
    char path[64];
    int fd = as_file(data, size, path, sizeof path);
    if (fd < 0)
        return;
    char raise_all[] = "CUDA_DEVICE_MEMORY_LIMIT=64g", raise_0[] = "CUDA_DEVICE_MEMORY_LIMIT_0=0",
         sm[] = "CUDA_DEVICE_SM_LIMIT=100", region[] = "CUDA_DEVICE_MEMORY_SHARED_CACHE=/mine";
    char *env[] = {raise_all, raise_0, sm, region, NULL};
    struct vgpu_config c;
    struct vg_err err = {0};
    int rc = vgpu_config_load_at(&c, env, path, &err);
    close(fd);
    if (rc != 0 || !c.in_container || c.closed != !accepted)
        abort(); /* the environment is valid: only the file decides, closed iff refused */
    if (c.closed) {
        if (c.closed_why[0] == '\0')
            abort();
        return;
    }
    if (strcmp(c.region_path, file->region_path) != 0)
        abort(); /* the environment moved the region */
    for (unsigned n = 0; n < VGPU_CONFIG_MAX_DEVICES; n++) {
        uint64_t want = vgpu_config_memory_limit(file, n), got = vgpu_config_memory_limit(&c, n);
        uint32_t want_sm = vgpu_config_sm_limit(file, n), got_sm = vgpu_config_sm_limit(&c, n);
        if (got > (UINT64_C(64) << 30) || (want != 0 && (got == 0 || got > want)))
            abort(); /* removed or raised */
        if ((want_sm != 0 && (got_sm == 0 || got_sm > want_sm)) || got_sm > 100)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct vgpu_config c;
    struct vg_err err = {0};
    vgpu_config_init(&c);
    int rc = vgpu_config_parse_file(&c, (const char *)data, size, &err);
    vg_fuzz_report(rc == 0);
    if (rc != 0 && err.msg[0] == '\0')
        abort(); /* every refusal says why */
    if (rc == 0) {
        if (!c.from_file || size > VGPU_LIMITS_FILE_MAX || c.region_path[0] != '/' ||
            memchr(c.region_path, '\0', sizeof c.region_path) == NULL ||
            c.context_bytes > (UINT64_C(65536) << 20))
            abort();
        for (unsigned i = 0; i < VGPU_CONFIG_MAX_DEVICES; i++)
            if (vgpu_config_sm_limit(&c, i) > 100)
                abort();
    }
    fixed_path(data, size, &c, rc == 0);
    return 0;
}
