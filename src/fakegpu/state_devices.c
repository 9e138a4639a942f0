/* FAKEGPU_DEVICES: `NAME:MEMORY:SMS,...` -> fixed device descriptions.
 *
 * Everything derived here (UUID, PCI location, compute capability) is a function of the
 * device's index and name only, so every process, and every run, agrees on it without
 * talking to the others. The parser is separate from the state file so that it can be a
 * fuzz target (tests/fuzz/fuzz_fakegpu_devices.c). */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "base/err.h"
#include "base/parse.h"
#include "base/str.h"
#include "fakegpu/state.h"

#define FIELD_MAX 64 /* MEMORY and SMS fields; longer is certainly malformed */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static void derive_uuid(struct fg_device_info *d, int index)
{
    uint32_t idx = (uint32_t)index;
    uint64_t a = fnv1a(0xcbf29ce484222325ULL, d->name, strlen(d->name));
    a = fnv1a(a, &idx, sizeof idx);
    uint64_t b = fnv1a(a ^ 0x9e3779b97f4a7c15ULL, "fakegpu", 7);
    b = fnv1a(b, &idx, sizeof idx);
    for (int i = 0; i < 8; i++) {
        d->uuid_bytes[i] = (uint8_t)(a >> (56 - 8 * i));
        d->uuid_bytes[8 + i] = (uint8_t)(b >> (56 - 8 * i));
    }
    const uint8_t *u = d->uuid_bytes;
    (void)vg_snprintf(d->uuid, sizeof d->uuid,
                      "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                      u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
                      u[12], u[13], u[14], u[15]);
}

struct cc_rule {
    const char *needle;
    int major, minor;
};

/* First match wins, so longer names come before their prefixes (A100 before A10). */
static const struct cc_rule cc_rules[] = {
    {"GB200", 10, 0}, {"B200", 10, 0}, {"H100", 9, 0}, {"H200", 9, 0}, {"H800", 9, 0},
    {"A100", 8, 0},   {"A800", 8, 0},  {"A30", 8, 0},  {"A10", 8, 6},  {"A40", 8, 6},
    {"RTX 30", 8, 6}, {"A6000", 8, 6}, {"L40", 8, 9},  {"L4", 8, 9},   {"RTX 40", 8, 9},
    {"V100", 7, 0},   {"T4", 7, 5},
};

static void derive_cc(struct fg_device_info *d)
{
    d->cc_major = 8;
    d->cc_minor = 0;
    for (size_t i = 0; i < sizeof cc_rules / sizeof cc_rules[0]; i++) {
        if (strstr(d->name, cc_rules[i].needle) != NULL) {
            d->cc_major = cc_rules[i].major;
            d->cc_minor = cc_rules[i].minor;
            return;
        }
    }
}

static void derive_pci(struct fg_device_info *d, int index)
{
    d->pci_domain = 0;
    d->pci_bus = 0x18 + 0x0c * (unsigned)index; /* 0x18 .. 0xCC for 16 devices */
    d->pci_device = 0;
    (void)vg_snprintf(d->pci_bus_id, sizeof d->pci_bus_id, "%04X:%02X:%02X.0", d->pci_domain,
                      d->pci_bus, d->pci_device);
}

/* Copies [s, s+n) into buf[size] as a string; false if it does not fit. */
static bool copy_field(char *buf, size_t size, const char *s, size_t n)
{
    if (n >= size)
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return true;
}

static int parse_one(const char *s, size_t n, int index, struct fg_device_info *d,
                     struct vg_err *err)
{
    const char *c1 = memchr(s, ':', n);
    const char *c2 = c1 ? memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - s)) : NULL;
    const char *c3 = c2 ? memchr(c2 + 1, ':', n - (size_t)(c2 + 1 - s)) : NULL;
    if (c1 == NULL || c2 == NULL || c3 != NULL)
        return vg_err_set(err, -EINVAL, "FAKEGPU_DEVICES: device %d '%.*s' is not NAME:MEMORY:SMS",
                          index, (int)(n > 80 ? 80 : n), s);
    size_t name_len = (size_t)(c1 - s);
    if (name_len == 0)
        return vg_err_set(err, -EINVAL, "FAKEGPU_DEVICES: device %d has an empty name", index);
    if (name_len > FG_NAME_MAX - 1)
        return vg_err_set(err, -EINVAL,
                          "FAKEGPU_DEVICES: device %d's name is %zu bytes (at most %d)", index,
                          name_len, FG_NAME_MAX - 1);
    for (size_t i = 0; i < name_len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch == 0x7f)
            return vg_err_set(err, -EINVAL,
                              "FAKEGPU_DEVICES: device %d's name has a control character", index);
    }
    memset(d, 0, sizeof *d);
    memcpy(d->name, s, name_len);

    char mem[FIELD_MAX], sms[FIELD_MAX];
    size_t mem_len = (size_t)(c2 - c1 - 1), sms_len = n - (size_t)(c2 + 1 - s);
    if (!copy_field(mem, sizeof mem, c1 + 1, mem_len))
        return vg_err_set(err, -EINVAL, "FAKEGPU_DEVICES: device %d's MEMORY is too long", index);
    if (!copy_field(sms, sizeof sms, c2 + 1, sms_len))
        return vg_err_set(err, -EINVAL, "FAKEGPU_DEVICES: device %d's SMS is too long", index);

    struct vg_err sub;
    uint64_t bytes, count;
    if (vg_parse_mib_default(mem, &bytes, &sub) != 0)
        return vg_err_set(err, -EINVAL, "FAKEGPU_DEVICES: device %d's MEMORY '%s': %s", index, mem,
                          sub.msg);
    if (bytes < ((uint64_t)1 << 20))
        return vg_err_set(err, -EINVAL, "FAKEGPU_DEVICES: device %d's MEMORY '%s' is below 1 MiB",
                          index, mem);
    if (vg_parse_u64(sms, 1, 1024, &count, &sub) != 0)
        return vg_err_set(err, -EINVAL, "FAKEGPU_DEVICES: device %d's SMS '%s': %s", index, sms,
                          sub.msg);
    d->total_bytes = bytes;
    d->sm_count = (int)count;
    derive_uuid(d, index);
    derive_pci(d, index);
    derive_cc(d);
    return 0;
}

int fg_parse_devices(const char *spec, struct fg_device_info *out, int max, int *count,
                     struct vg_err *err)
{
    if (spec == NULL || out == NULL || count == NULL || max <= 0)
        return vg_err_set(err, -EINVAL, "FAKEGPU_DEVICES: no value");
    if (spec[0] == '\0')
        return vg_err_set(err, -EINVAL, "FAKEGPU_DEVICES is empty (want NAME:MEMORY:SMS,...)");
    int n = 0;
    const char *p = spec;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0)
            return vg_err_set(err, -EINVAL, "FAKEGPU_DEVICES: device %d is empty (stray ',')", n);
        if (n >= max)
            return vg_err_set(err, -EINVAL, "FAKEGPU_DEVICES: more than %d devices", max);
        int rc = parse_one(p, len, n, &out[n], err);
        if (rc != 0)
            return rc;
        n++;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    *count = n;
    return 0;
}
