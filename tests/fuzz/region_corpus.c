/* Writes the seed corpus of fuzz_region_validate: regions made by the real region code
 * (region_create), states a live container leaves behind, and near misses of each
 * validated field (off by one, bad magic and version, truncated, oversized, unterminated
 * UUIDs). Usage: region_corpus DIR. The committed corpus (tests/fuzz/corpus/
 * region_validate) is this program's output; the test fuzz.region_corpus checks it is
 * current. Offsets are the file layout of docs/protocol.md. The input encoding is
 * described in fuzz_region_validate.c. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "region/region.h"

enum {
    OFF_MAGIC = 0,
    OFF_VERSION = 8,
    OFF_DEVICES = 12,
    OFF_FILE_SIZE = 16,
    OFF_PROCS = 24,
    OFF_CLOSED = 32, /* version 2's counters */
    OFF_REPAIRED = 40,
    OFF_DEVICE = 64, /* 16 x 192 */
    DEVICE_BYTES = 192,
    DEV_LIMIT = 64,
    DEV_SM = 72,
    DEV_USED = 80,
    OFF_SLOT = 3136, /* 1024 x 272 */
    SLOT_BYTES = 272,
    SLOT_PID = 8,
    SLOT_USED = 16,
    SLOT_INFLIGHT = 144,
};

static const char *out_dir;
static size_t region_bytes;

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void put(uint8_t *img, size_t off, const void *v, size_t n)
{
    memcpy(img + off, v, n);
}

static void put32(uint8_t *img, size_t off, uint32_t v)
{
    put(img, off, &v, sizeof v);
}

static void put64(uint8_t *img, size_t off, uint64_t v)
{
    put(img, off, &v, sizeof v);
}

static void write_file(const char *name, const uint8_t *bytes, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out_dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(bytes, 1, n, f) != n || fclose(f) != 0)
        die(path);
}

/* Compact form: a file of file_len bytes whose content is img up to its last non-zero
 * byte, zeros after. */
static void emit(const char *name, const uint8_t *img, size_t img_len, size_t file_len)
{
    size_t used = img_len < file_len ? img_len : file_len;
    while (used > 0 && img[used - 1] == 0)
        used--;
    uint8_t *buf = calloc(1, 5 + used);
    if (buf == NULL)
        die("calloc");
    buf[0] = 1;
    uint32_t l = (uint32_t)file_len;
    memcpy(buf + 1, &l, sizeof l);
    memcpy(buf + 5, img, used);
    write_file(name, buf, 5 + used);
    free(buf);
}

/* Raw form: the file is exactly these bytes. */
static void emit_raw(const char *name, const uint8_t *bytes, size_t n)
{
    uint8_t *buf = calloc(1, n + 1);
    if (buf == NULL)
        die("calloc");
    memcpy(buf + 1, bytes, n);
    write_file(name, buf, n + 1);
    free(buf);
}

/* A new region of the given devices, as region_create writes it. */
static uint8_t *make(unsigned devices, const uint64_t *limits, const uint32_t *sm)
{
    struct region_config c = {.device_count = devices};
    for (unsigned i = 0; i < devices; i++) {
        snprintf(c.devices[i].uuid, sizeof c.devices[i].uuid, "GPU-%08x-1111-2222-3333-%012x",
                 0xabc00000u + i, i);
        c.devices[i].memory_limit = limits[i];
        c.devices[i].sm_limit_percent = sm[i];
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/.region.tmp", out_dir);
    unlink(path);
    struct vg_err err = {0};
    if (region_create(path, &c, &err) != 0) {
        fprintf(stderr, "region_create: %s\n", err.msg);
        exit(1);
    }
    struct stat st;
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fstat(fd, &st) != 0)
        die(path);
    region_bytes = (size_t)st.st_size;
    uint8_t *img = malloc(region_bytes);
    if (img == NULL || pread(fd, img, region_bytes, 0) != (ssize_t)region_bytes)
        die("reading the region");
    close(fd);
    unlink(path);
    return img;
}

/* Three processes died holding 1 GiB each of device 0; the first was between its counter
 * and slot updates. */
static void dead_processes(uint8_t *img)
{
    static const unsigned slots[] = {0, 3, 17};
    put64(img, OFF_DEVICE + DEV_USED, UINT64_C(3) << 30);
    for (unsigned k = 0; k < sizeof slots / sizeof slots[0]; k++) {
        size_t slot = OFF_SLOT + (size_t)slots[k] * SLOT_BYTES;
        put32(img, slot, 1);
        put32(img, slot + SLOT_PID, 1000 + slots[k]);
        put64(img, slot + SLOT_USED, UINT64_C(1) << 30);
    }
    put64(img, OFF_SLOT + SLOT_INFLIGHT, (uint64_t)-4096);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: region_corpus DIR\n");
        return 2;
    }
    out_dir = argv[1];
    const uint64_t GiB = UINT64_C(1) << 30;
    uint64_t limits[REGION_MAX_DEVICES];
    uint32_t sm[REGION_MAX_DEVICES];
    for (unsigned i = 0; i < REGION_MAX_DEVICES; i++) {
        limits[i] = (i + 1) * GiB;
        sm[i] = i * 6;
    }

    /* Valid regions. */
    uint8_t *one = make(1, limits, sm);
    emit("valid-one-device", one, region_bytes, region_bytes);
    uint8_t *all = make(REGION_MAX_DEVICES, limits, sm);
    emit("valid-sixteen-devices", all, region_bytes, region_bytes);
    free(all);
    const uint64_t two_limits[2] = {8 * GiB, 0};
    const uint32_t two_sm[2] = {30, 100};
    uint8_t *base = make(2, two_limits, two_sm);
    const size_t size = region_bytes;
    emit("valid-two-devices", base, size, size);
    uint8_t *img = malloc(size);
    if (img == NULL)
        die("malloc");
#define VARIANT(name, edits, file_len)                                                             \
    do {                                                                                           \
        memcpy(img, base, size);                                                                   \
        edits;                                                                                     \
        emit(name, img, size, file_len);                                                           \
    } while (0)

    /* What a live container leaves: slots of processes that died holding memory (one
     * between its counter and slot updates), a recount that died with the counter frozen,
     * a device used up to its limit. All valid; opening them must reclaim correctly. */
    VARIANT("valid-dead-processes", dead_processes(img), size);
    VARIANT("valid-frozen-counter", put64(img, OFF_DEVICE + DEV_USED, (UINT64_C(1) << 63) | GiB),
            size);
    VARIANT("valid-at-limit", put64(img, OFF_DEVICE + DEV_USED, 8 * GiB), size);
    VARIANT("valid-counter-past-limit", put64(img, OFF_DEVICE + DEV_USED, 9 * GiB), size);
    VARIANT("valid-huge-counter",
            put64(img, OFF_DEVICE + DEVICE_BYTES + DEV_USED, (UINT64_C(1) << 63) - 1), size);
    VARIANT("valid-duplicate-uuids", put(img, OFF_DEVICE + DEVICE_BYTES, base + OFF_DEVICE, 64),
            size);
    /* What a hostile process of the container may write: the device table's limits are
     * a record, never enforced, and a forged count is repaired or read as a full device. */
    VARIANT("valid-forged-limit-zero", put64(img, OFF_DEVICE + DEV_LIMIT, 0), size);
    VARIANT("valid-forged-zero-counter",
            (dead_processes(img), put64(img, OFF_DEVICE + DEV_USED, 0)), size);
    VARIANT("valid-forged-huge-slots",
            (put32(img, OFF_SLOT, 1), put64(img, OFF_SLOT + SLOT_USED, UINT64_MAX),
             put32(img, OFF_SLOT + SLOT_BYTES, 1),
             put64(img, OFF_SLOT + SLOT_BYTES + SLOT_USED, UINT64_MAX)),
            size);
    VARIANT("valid-counters-garbage",
            (put64(img, OFF_CLOSED, UINT64_MAX),
             put64(img, OFF_REPAIRED, UINT64_C(0x6565656565656565))),
            size);
    VARIANT("valid-three-devices", put32(img, OFF_DEVICES, 3), size); /* a zeroed third */
    VARIANT("valid-uuid-past-count-unterminated",
            memset(img + OFF_DEVICE + 2 * DEVICE_BYTES, 'A', 64), size);

    /* Near misses of each validated field. */
    VARIANT("bad-magic", img[OFF_MAGIC] ^= 1, size);
    VARIANT("bad-magic-last-byte", img[OFF_MAGIC + 7] ^= 0x80, size);
    VARIANT("version-0", put32(img, OFF_VERSION, 0), size);
    VARIANT("version-1", put32(img, OFF_VERSION, 1), size); /* enforced its limits: refused */
    VARIANT("version-3", put32(img, OFF_VERSION, 3), size);
    VARIANT("file-size-field-minus-1", put64(img, OFF_FILE_SIZE, size - 1), size);
    VARIANT("file-size-field-plus-1", put64(img, OFF_FILE_SIZE, size + 1), size);
    VARIANT("devices-0", put32(img, OFF_DEVICES, 0), size);
    VARIANT("devices-17", put32(img, OFF_DEVICES, REGION_MAX_DEVICES + 1), size);
    VARIANT("devices-huge", put32(img, OFF_DEVICES, UINT32_MAX), size);
    VARIANT("procs-1023", put32(img, OFF_PROCS, REGION_MAX_PROCS - 1), size);
    VARIANT("procs-1025", put32(img, OFF_PROCS, REGION_MAX_PROCS + 1), size);
    VARIANT("uuid-unterminated-first", memset(img + OFF_DEVICE, 'A', 64), size);
    VARIANT("uuid-unterminated-last", memset(img + OFF_DEVICE + DEVICE_BYTES, 'A', 64), size);
    VARIANT("sm-101", put32(img, OFF_DEVICE + DEVICE_BYTES + DEV_SM, 101), size);
    VARIANT("sm-101-past-count", put32(img, OFF_DEVICE + 2 * DEVICE_BYTES + DEV_SM, 101),
            size); /* not a device: accepted */
    VARIANT("limit-max", put64(img, OFF_DEVICE + DEV_LIMIT, UINT64_MAX), size);
    VARIANT("truncated-by-1", (void)0, size - 1);
    VARIANT("truncated-to-tables", (void)0, OFF_SLOT);
    VARIANT("truncated-header", (void)0, 63);
    VARIANT("oversized-by-1", (void)0, size + 1);
    VARIANT("oversized-double", (void)0, 2 * size);
    emit_raw("empty", base, 0);
    emit_raw("magic-only", base, 8);
    emit_raw("magic-and-version", base, 12);
    emit_raw("header-only", base, 64);
    free(img);
    free(base);
    free(one);
    return 0;
}
