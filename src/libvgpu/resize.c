/* Live resize: a running container's limits change without a restart (docs/libvgpu.md,
 * "Live resize").
 *
 * The device plugin replaces the limits file by rename inside a read-only directory
 * mounted at /etc/vgpu (a file bind-mounted on its own would keep showing the old inode),
 * then raises the generation beside it, in place. Every process maps that generation
 * read-only when it sets up and compares it with the generation its limits were read at
 * wherever it reads its limits already (an allocation, a memory query, a limited launch):
 * one load and one compare, no system call. When they differ it reads the limits file
 * again with the same parser and the same precedence as at start (the environment can
 * only lower), and hands the new limits to the region and the compute limiter.
 *
 * A reader sees the old file or the new one, whole: rename is atomic, and the generation
 * is read before the file, so a generation raised while a process reads leads it to read
 * again. A lower memory limit frees nothing: the region refuses new reservations until
 * the container's usage is below it. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "libvgpu/compute.h"
#include "libvgpu/vgpu.h"

extern char **environ;

const _Atomic uint64_t lv_limits_none = 0;

void lv_limits_map(void)
{
    if (lv_g.limits_gen != &lv_limits_none)
        return; /* mapped by an earlier setup attempt */
    int fd = open(VGPU_GENERATION_PATH, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return; /* no live resize here: the limits stay those read at start */
    struct stat st;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == VGPU_GENERATION_SIZE)
        map = mmap(NULL, VGPU_GENERATION_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return;
    if (memcmp(map, VGPU_GENERATION_MAGIC, 8) != 0) {
        munmap(map, VGPU_GENERATION_SIZE);
        return;
    }
    const _Atomic uint64_t *gen = (const _Atomic uint64_t *)((const char *)map + 8);
    atomic_store(&lv_g.limits_seen, atomic_load_explicit(gen, memory_order_acquire));
    lv_g.limits_gen = gen;
}

__attribute__((noinline, cold)) void lv_limits_reload(void)
{
    pthread_mutex_lock(&lv_g.limits_lock);
    uint64_t gen = atomic_load_explicit(lv_g.limits_gen, memory_order_acquire);
    if (gen == atomic_load(&lv_g.limits_seen) || lv_g.region == NULL || lv_g.closed ||
        !lv_g.config.in_container) {
        atomic_store(&lv_g.limits_seen, gen); /* nothing to reload into */
        pthread_mutex_unlock(&lv_g.limits_lock);
        return;
    }
    struct vgpu_config c;
    struct vg_err err = {0};
    /* The same reading as at start; a file that cannot be used now closes enforcement
     * (every new allocation refused) until a later generation brings a good one. */
    bool ok = vgpu_config_load(&c, environ, &err) == 0 && !c.closed && c.in_container;
    for (unsigned d = 0; d < region_device_count(lv_g.region) && d < REGION_MAX_DEVICES; d++) {
        int n = lv_g.limit_index[d];
        unsigned k = n >= 0 ? (unsigned)n : d;
        uint64_t limit = ok ? vgpu_config_memory_limit(&c, k) : REGION_LIMIT_CLOSED;
        uint32_t share =
            n >= 0 ? (ok ? vgpu_config_sm_limit(&c, k) : region_share(lv_g.region, d)) : 0;
        region_set_limit(lv_g.region, d, limit, share);
        if (ok && n >= 0)
            vgc_set_share(d, share, c.burst_limit);
    }
    if (ok)
        vg_log(VG_LOG_INFO, "limits changed", "generation=%llu", (unsigned long long)gen);
    else
        vg_log(VG_LOG_WARN, "new limits unusable; allocations refused",
               "generation=%llu err=\"%s\"", (unsigned long long)gen,
               err.code < 0 ? err.msg : c.closed_why);
    atomic_store(&lv_g.limits_seen, gen);
    pthread_mutex_unlock(&lv_g.limits_lock);
}
