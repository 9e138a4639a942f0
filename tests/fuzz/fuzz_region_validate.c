/* Fuzz target for the region file: any bytes found in a region file are either refused
 * with a message, or describe a region that is safe to use. "Safe" is checked, not
 * assumed: an accepted image is put in a file, opened with region_open like libvgpu
 * does, and every accessor is exercised on it (device table, lookups, a process slot,
 * reserve and release, reclaim, the process list), checking each answer stays inside the
 * tables and the counts agree. Under ASan/UBSan an index past a table faults.
 *
 * Input encoding (tests/fuzz/region_corpus.c writes the corpus in it):
 *   byte 0 even: the rest is the file, byte for byte;
 *   byte 0 odd:  bytes 1..4 are the file's length L (little-endian, at most twice a
 *                region), the rest its first bytes, zero-filled to L. A region is
 *                281,664 bytes and mostly its zeroed process table, as region_init_fd
 *                leaves it; this keeps full-size images a few KiB in the corpus. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "region/region.h"

#define REGION_BYTES 281664u /* docs/protocol.md; checked against region_open below */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_region_validate: %s\n", what);
        abort();
    }
}

/* The image as a file region_open can open: a memfd, reached through /proc. */
static struct region *open_image(const uint8_t *image, size_t len, int *fd_out)
{
    int fd = memfd_create("vgpu-region-fuzz", MFD_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, image + done, len - done);
        if (n <= 0) {
            close(fd);
            return NULL;
        }
        done += (size_t)n;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    struct region *r = NULL;
    struct vg_err err = {0};
    int rc = region_open(path, &r, &err);
    if (rc == -EMFILE || rc == -ENFILE || rc == -ENOMEM) {
        close(fd);
        return NULL; /* the machine, not the image */
    }
    check(rc == 0, "region_validate accepted what region_open refuses");
    *fd_out = fd;
    return r;
}

/* Every accessor on an accepted region: answers inside the tables, counts consistent. */
static void exercise(struct region *r)
{
    unsigned count = region_device_count(r);
    check(count >= 1 && count <= REGION_MAX_DEVICES, "device count out of range");
    check(region_device(r, count) == NULL, "a device past the count");
    check(region_compute(r, count) == NULL, "a compute budget past the count");
    check(region_usage(r, count, NULL, NULL) == -EINVAL, "usage of a device past the count");
    check(region_reserve(r, 0, 1) == -EINVAL, "reserve without a slot");
    for (unsigned d = 0; d < count; d++) {
        const struct region_device_config *dev = region_device(r, d);
        check(dev != NULL && region_compute(r, d) != NULL, "a device inside the count missing");
        check(memchr(dev->uuid, '\0', sizeof dev->uuid) != NULL, "unterminated UUID accepted");
        check(region_share(r, d) == 0, "a share read from the file");
        check(dev->sm_limit_percent <= 100, "SM limit over 100 accepted");
        int found = region_find_device(r, dev->uuid);
        check(found >= 0 && (unsigned)found <= d, "a device's own UUID not found first");
        check(strcmp(region_device(r, (unsigned)found)->uuid, dev->uuid) == 0,
              "UUID lookup answered another device");
    }

    /* Limits are this process's own: 1 GiB on device 0, none on the others, the last
     * device closed (when there are two or more). Nothing in the file may change them. */
    const uint64_t GiB = UINT64_C(1) << 30;
    region_set_limit(r, 0, GiB, 50);
    if (count > 1)
        region_set_limit(r, count - 1, REGION_LIMIT_CLOSED, 0);
    struct vg_err err = {0};
    if (region_attach(r, &err) != 0) {
        check(err.msg[0] != '\0', "attach refused without a message");
        return;
    }
    /* Whatever the file said about other processes, this one's bytes add up. */
    unsigned reclaimed = 0;
    (void)region_reclaim(r, &reclaimed);
    check(reclaimed <= REGION_MAX_PROCS, "more slots reclaimed than exist");
    for (unsigned d = 0; d < count; d++) {
        uint64_t before = 0, after = 0, limit = 0;
        check(region_usage(r, d, &before, &limit) == 0, "usage of a device");
        int rc = region_reserve(r, d, 4096);
        check(rc == 0 || rc == -ENOMEM, "reserve failed oddly");
        check(region_usage(r, d, &after, NULL) == 0, "usage after reserve");
        if (d == 0 || (count > 1 && d == count - 1))
            check(limit == (d == 0 ? GiB : REGION_LIMIT_CLOSED), "the limit is not the process's");
        if (count > 1 && d == count - 1)
            check(rc == -ENOMEM, "a closed device accepted a reservation");
        /* Whatever the file said, this process never holds past its own limit. */
        if (d == 0)
            check(region_reserve(r, d, GiB + 1) == -ENOMEM, "one process past its limit");
        if (rc == 0) {
            check(after == before + 4096, "reserve not counted");
            check(limit == 0 || after <= limit, "reserve passed the limit");
            region_release(r, d, 4096);
            check(region_usage(r, d, &after, NULL) == 0 && after == before,
                  "release did not give the bytes back");
        } else {
            check(after == before, "a refused reserve changed the usage");
        }
    }
    /* A recount sets every counter to what the live slots hold; counters stay readable. */
    unsigned repaired = 0, insane = 0;
    int rc = region_recount(r, &repaired, &insane);
    check(rc == 0 || rc == -EAGAIN, "recount failed oddly");
    check(repaired <= count && insane <= count, "recount reported more devices than exist");
    struct region_counters ctr;
    region_counters(r, &ctr);
    for (unsigned d = 0; d < count; d++) {
        uint64_t used = 0;
        check(region_usage(r, d, &used, NULL) == 0 && (used >> 63) == 0,
              "a recounted counter left frozen");
    }
    static struct region_proc_info procs[REGION_MAX_PROCS];
    int live = region_list_procs(r, procs, REGION_MAX_PROCS);
    check(live >= 1 && live <= REGION_MAX_PROCS, "process list count (this one is live)");
    int mine = 0;
    for (int i = 0; i < live; i++) {
        check(procs[i].slot < REGION_MAX_PROCS, "process slot out of range");
        check(i == 0 || procs[i].slot > procs[i - 1].slot, "process list out of order");
        mine += procs[i].pid == (int32_t)getpid();
        for (unsigned d = count; d < REGION_MAX_DEVICES; d++)
            check(procs[i].used[d] == 0, "usage reported on a device past the count");
    }
    check(mine >= 1, "this process is not in the list");
    region_detach(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t len = size > 0 ? size - 1 : 0;
    const uint8_t *body = size > 0 ? data + 1 : data;
    size_t body_len = len;
    if (size >= 5 && (data[0] & 1)) {
        uint32_t l;
        memcpy(&l, data + 1, sizeof l);
        len = l > 2 * REGION_BYTES ? 2 * REGION_BYTES : l;
        body = data + 5;
        body_len = size - 5 < len ? size - 5 : len;
    }
    /* Aligned, as a mapping would be, and exactly len bytes for ASan. */
    uint8_t *image = aligned_alloc(64, (len + 63) / 64 * 64 + 64);
    if (image == NULL)
        return 0;
    memset(image, 0, len + 64);
    memcpy(image, body, body_len);
    struct vg_err err = {0};
    int rc = region_validate(image, len, &err);
    if (rc != 0) {
        check(rc == -EPROTO, "refusal is not -EPROTO");
        check(err.msg[0] != '\0', "refusal without a message");
    } else {
        check(len == REGION_BYTES, "accepted an image of another size");
        int fd = -1;
        struct region *r = open_image(image, len, &fd);
        if (r != NULL) {
            exercise(r);
            region_close(r);
            close(fd);
        }
    }
    free(image);
    return 0;
}
