/* A lock-free snapshot of a container's shared region (region_read.h). */
#define _GNU_SOURCE
#include "monitor/region_read.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/auto.h"
#include "base/str.h"

/* Offsets of docs/protocol.md, version 2. */
enum {
    OFF_MAGIC = 0,
    OFF_VERSION = 8,
    OFF_DEVICE_COUNT = 12,
    OFF_FILE_SIZE = 16,
    OFF_PROC_COUNT = 24,
    OFF_CLOSED = 32,
    OFF_REPAIRED = 40,
    OFF_REFUSED = 48,
    OFF_DEVICES = 64,
    DEVICE_SIZE = 192,
    DEV_USED = 80,
    DEV_COMPUTE = 88,
};

_Static_assert(MON_REGION_FILE_SIZE == 281664, "region size of docs/protocol.md");

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t nonneg(const unsigned char *p)
{
    int64_t v;
    memcpy(&v, p, sizeof v);
    return v < 0 ? 0 : (uint64_t)v;
}

int mon_region_parse(const void *buf, size_t len, uint64_t file_size,
                     struct mon_region_snapshot *out, struct vg_err *err)
{
    const unsigned char *b = buf;
    memset(out, 0, sizeof *out);
    if (file_size != MON_REGION_FILE_SIZE)
        return vg_err_set(err, -EMSGSIZE, "region file is %llu bytes, expected %d",
                          (unsigned long long)file_size, MON_REGION_FILE_SIZE);
    if (len < MON_REGION_HEAD)
        return vg_err_set(err, -EMSGSIZE, "region read %zu bytes of its %d-byte head", len,
                          MON_REGION_HEAD);
    if (get_u64(b + OFF_MAGIC) != REGION_MAGIC)
        return vg_err_set(err, -EPROTO, "not a vgpu region (bad magic)");
    uint32_t version = get_u32(b + OFF_VERSION);
    if (version != REGION_VERSION)
        return vg_err_set(err, -EPROTO, "region version %u, this build reads version %d", version,
                          REGION_VERSION);
    if (get_u64(b + OFF_FILE_SIZE) != MON_REGION_FILE_SIZE)
        return vg_err_set(err, -EPROTO, "region header says %llu bytes, expected %d",
                          (unsigned long long)get_u64(b + OFF_FILE_SIZE), MON_REGION_FILE_SIZE);
    uint32_t count = get_u32(b + OFF_DEVICE_COUNT);
    if (count == 0 || count > REGION_MAX_DEVICES)
        return vg_err_set(err, -EPROTO, "region has %u devices, expected 1..%d", count,
                          REGION_MAX_DEVICES);
    if (get_u32(b + OFF_PROC_COUNT) != REGION_MAX_PROCS)
        return vg_err_set(err, -EPROTO, "region has %u process slots, expected %d",
                          get_u32(b + OFF_PROC_COUNT), REGION_MAX_PROCS);
    for (unsigned i = 0; i < count; i++) {
        const unsigned char *d = b + OFF_DEVICES + (size_t)i * DEVICE_SIZE;
        struct mon_region_device *o = &out->devices[i];
        if (memchr(d, '\0', REGION_UUID_MAX) == NULL) {
            memset(out, 0, sizeof *out);
            return vg_err_set(err, -EPROTO, "region device %u has an unterminated UUID", i);
        }
        memcpy(o->uuid, d, REGION_UUID_MAX);
        o->used = get_u64(d + DEV_USED) & ~(UINT64_C(1) << 63); /* bit 63: a recount */
        const unsigned char *c = d + DEV_COMPUTE;
        o->busy_ns = nonneg(c + offsetof(struct region_compute, busy_ns));
        o->waited_ns = nonneg(c + offsetof(struct region_compute, waited_ns));
        uint64_t ppm = nonneg(c + offsetof(struct region_compute, achieved_ppm));
        o->achieved_ppm = ppm > 1000000 ? 1000000 : (uint32_t)ppm;
        o->closed_launches = nonneg(c + offsetof(struct region_compute, closed_n));
        o->held_ns = nonneg(c + offsetof(struct region_compute, held_ns));
    }
    out->device_count = count;
    out->closed = get_u64(b + OFF_CLOSED);
    out->repaired = get_u64(b + OFF_REPAIRED);
    out->refused = get_u64(b + OFF_REFUSED);
    return 0;
}

int mon_region_open_at(int dirfd, const char *path, struct vg_err *err)
{
    int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return vg_err_errno(err, errno, "region %s", path);
    return fd;
}

int mon_region_read_fd(int fd, const char *path, bool check, struct mon_region_snapshot *out,
                       struct vg_err *err)
{
    memset(out, 0, sizeof *out);
    struct stat st = {.st_size = MON_REGION_FILE_SIZE};
    if (check) {
        if (fstat(fd, &st) != 0)
            return vg_err_errno(err, errno, "region %s", path);
        if (!S_ISREG(st.st_mode))
            return vg_err_set(err, -EINVAL, "region %s is not a regular file", path);
        if (st.st_nlink == 0)
            return vg_err_set(err, -ESTALE, "region %s was removed", path);
    }
    unsigned char head[MON_REGION_HEAD];
    ssize_t n;
    do
        n = pread(fd, head, sizeof head, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return vg_err_errno(err, errno, "region %s", path);
    int rc = mon_region_parse(head, (size_t)n, (uint64_t)st.st_size, out, err);
    out->file_size = (uint64_t)st.st_size;
    if (rc < 0) {
        char msg[VG_ERR_MSG_MAX];
        (void)vg_strlcpy(msg, err ? err->msg : "", sizeof msg);
        return vg_err_set(err, rc, "region %s: %s", path, msg);
    }
    return 0;
}

int mon_region_read_at(int dirfd, const char *path, struct mon_region_snapshot *out,
                       struct vg_err *err)
{
    memset(out, 0, sizeof *out);
    VG_AUTO_CLOSE int fd = mon_region_open_at(dirfd, path, err);
    if (fd < 0)
        return fd;
    return mon_region_read_fd(fd, path, true, out, err);
}
