/* Fuzz target for vgpu-monitor's region snapshot parser (mon_region_parse): any bytes a
 * tenant leaves in its region file are either refused with a message or give a snapshot
 * whose every value is bounded (1..16 devices, NUL-terminated UUIDs, usage under 2^63, an
 * achieved share of at most 1). Whatever region_validate (libvgpu's own check) accepts,
 * the monitor reads too.
 *
 * Input encoding (fuzz_region_validate.c's; the corpus is a copy of its corpus):
 *   byte 0 even: the rest is the file, byte for byte;
 *   byte 0 odd:  bytes 1..4 are the file's length L (little-endian, at most twice a
 *                region), the rest its first bytes, zero-filled to L. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "monitor/region_read.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *body = data + 1;
    size_t blen = size - 1, flen = blen;
    if (data[0] & 1) {
        if (size < 5)
            return 0;
        uint32_t l;
        memcpy(&l, data + 1, 4);
        if (l > 2 * MON_REGION_FILE_SIZE)
            return 0;
        flen = l;
        body = data + 5;
        blen = size - 5 < flen ? size - 5 : flen;
    }
    size_t hlen = flen < MON_REGION_HEAD ? flen : MON_REGION_HEAD;
    uint8_t *head = calloc(1, MON_REGION_HEAD);
    if (!head)
        return 0;
    memcpy(head, body, blen < hlen ? blen : hlen);
    struct mon_region_snapshot s;
    struct vg_err err = {0};
    int rc = mon_region_parse(head, hlen, flen, &s, &err);
    vg_fuzz_report(rc == 0);
    if (rc != 0) {
        if (err.msg[0] == '\0' || s.device_count != 0)
            abort(); /* every refusal says why, and leaves nothing behind */
    } else {
        if (s.device_count < 1 || s.device_count > REGION_MAX_DEVICES)
            abort();
        for (unsigned i = 0; i < s.device_count; i++) {
            if (memchr(s.devices[i].uuid, '\0', sizeof s.devices[i].uuid) == NULL ||
                s.devices[i].used >> 63 || s.devices[i].achieved_ppm > 1000000 ||
                s.devices[i].busy_ns >> 63 || s.devices[i].waited_ns >> 63)
                abort();
        }
    }
    /* libvgpu's own check on a whole image implies the monitor's. */
    if (flen == MON_REGION_FILE_SIZE) {
        uint8_t *image = calloc(1, MON_REGION_FILE_SIZE);
        if (image) {
            memcpy(image, body, blen);
            struct vg_err verr = {0};
            if (region_validate(image, MON_REGION_FILE_SIZE, &verr) == 0 && rc != 0)
                abort();
            free(image);
        }
    }
    free(head);
    return 0;
}
