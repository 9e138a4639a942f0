/* fakegpu libcuda: the client side of MPS, read once by cuInit.
 *
 * A process is an MPS client when CUDA_MPS_PIPE_DIRECTORY is set and not empty (fakegpu
 * runs no MPS server and contacts no control daemon; the real driver's default directory
 * /tmp/nvidia-mps is never probed, so a process is a client only when told so). A client
 * obeys, as the real driver does for the client's environment:
 *   - CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: comma-separated `DEVICE=LIMIT` entries. DEVICE is
 *     a CUDA ordinal of this process (after CUDA_VISIBLE_DEVICES) or a GPU UUID, whole or
 *     a prefix naming one visible device; LIMIT a quantity with a unit (`1G`, `512MB`,
 *     `10240M`, all binary). Device memory the process allocates on that device beyond
 *     LIMIT is refused with CUDA_ERROR_OUT_OF_MEMORY (the context's own cost is not
 *     counted: under MPS it lives in the server);
 *   - CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: the share of the device's SMs the process's
 *     kernels may use, `P` or `P.FFF` in (0, 100]. fakegpu treats every kernel as one
 *     that fills the device, so a kernel of the process takes 100/P times its duration.
 * A variable set to the empty string counts as unset. Anything else malformed (no `=`,
 * no unit, a zero or unknown device, a device named twice, a percentage out of range)
 * makes cuInit fail with CUDA_ERROR_INVALID_VALUE and one line on stderr naming the
 * variable: the real driver's handling of malformed values is not documented. Without
 * CUDA_MPS_PIPE_DIRECTORY the other two are ignored, as by a driver that finds no MPS
 * control daemon. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/parse.h"
#include "fakegpu/cuda_internal.h"

#define MPS_LIMIT_VAR "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
#define MPS_SHARE_VAR "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
#define MPS_SPEC_MAX  1024

static bool set(const char *v)
{
    return v != NULL && v[0] != '\0';
}

static int parse_share(const char *v, uint32_t *out, struct vg_err *err)
{
    char buf[32];
    size_t len = strlen(v);
    if (len >= sizeof buf)
        return vg_err_set(err, -EINVAL, MPS_SHARE_VAR " '%.16s...' is too long", v);
    memcpy(buf, v, len + 1);
    char *dot = strchr(buf, '.');
    uint64_t whole = 0, frac = 0;
    struct vg_err sub = {0};
    if (dot != NULL) {
        *dot = '\0';
        size_t flen = strlen(dot + 1);
        if (flen == 0 || flen > 3 || vg_parse_u64(dot + 1, 0, 999, &frac, &sub) != 0)
            return vg_err_set(err, -EINVAL,
                              MPS_SHARE_VAR " '%s': at most three decimals after the point", v);
        for (size_t i = flen; i < 3; i++)
            frac *= 10;
    }
    if (vg_parse_u64(buf, 0, 100, &whole, &sub) != 0)
        return vg_err_set(err, -EINVAL, MPS_SHARE_VAR " '%s': %s", v, sub.msg);
    uint64_t share = whole * 1000 + frac;
    if (share == 0 || share > FG_MPS_SHARE_FULL)
        return vg_err_set(err, -EINVAL, MPS_SHARE_VAR " '%s': must be above 0 and at most 100", v);
    *out = (uint32_t)share;
    return 0;
}

/* The ordinal an entry's device part names, or -1 with err set. */
static int limit_device(const char *d, const struct fg_device_info *visible, int n,
                        struct vg_err *err)
{
    if (strncmp(d, "GPU-", 4) == 0) {
        int found = -1;
        size_t len = strlen(d);
        if (len == 4)
            return vg_err_set(err, -EINVAL, MPS_LIMIT_VAR ": 'GPU-' alone names no device");
        for (int i = 0; i < n; i++) {
            if (strncmp(visible[i].uuid, d, len) != 0)
                continue;
            if (found >= 0)
                return vg_err_set(err, -EINVAL, MPS_LIMIT_VAR ": '%s' names several devices", d);
            found = i;
        }
        if (found < 0)
            return vg_err_set(err, -EINVAL, MPS_LIMIT_VAR ": no visible device '%s'", d);
        return found;
    }
    uint64_t ord = 0;
    struct vg_err sub = {0};
    if (vg_parse_u64(d, 0, (uint64_t)n - 1, &ord, &sub) != 0)
        return vg_err_set(err, -EINVAL,
                          MPS_LIMIT_VAR ": device '%s' is neither a visible ordinal (0..%d) nor "
                                        "a GPU UUID: %s",
                          d, n - 1, sub.msg);
    return (int)ord;
}

static int parse_limits(const char *v, const struct fg_device_info *visible, int n, uint64_t *limit,
                        struct vg_err *err)
{
    char buf[MPS_SPEC_MAX];
    size_t len = strlen(v);
    if (len >= sizeof buf)
        return vg_err_set(err, -EINVAL, MPS_LIMIT_VAR " is longer than %d characters",
                          MPS_SPEC_MAX - 1);
    memcpy(buf, v, len + 1);
    bool named[FG_MAX_DEVICES] = {false};
    char *entry = buf;
    for (;;) {
        char *comma = strchr(entry, ',');
        if (comma != NULL)
            *comma = '\0';
        char *eq = strchr(entry, '=');
        if (entry[0] == '\0')
            return vg_err_set(err, -EINVAL, MPS_LIMIT_VAR ": empty entry in '%s'", v);
        if (eq == NULL || eq == entry || eq[1] == '\0')
            return vg_err_set(err, -EINVAL, MPS_LIMIT_VAR ": entry '%s' is not DEVICE=LIMIT",
                              entry);
        *eq = '\0';
        const char *q = eq + 1;
        int dev = limit_device(entry, visible, n, err);
        if (dev < 0)
            return dev;
        if (named[dev])
            return vg_err_set(err, -EINVAL, MPS_LIMIT_VAR ": device %d is named twice", dev);
        named[dev] = true;
        char last = q[strlen(q) - 1];
        if (!((last >= 'a' && last <= 'z') || (last >= 'A' && last <= 'Z')))
            return vg_err_set(err, -EINVAL,
                              MPS_LIMIT_VAR ": limit '%s' needs a unit (M, MB, G, GB, ...)", q);
        uint64_t bytes = 0;
        struct vg_err sub = {0};
        if (vg_parse_bytes(q, &bytes, &sub) != 0)
            return vg_err_set(err, -EINVAL, MPS_LIMIT_VAR ": limit '%s': %s", q, sub.msg);
        if (bytes == 0)
            return vg_err_set(err, -EINVAL, MPS_LIMIT_VAR ": limit '%s' is zero", q);
        limit[dev] = bytes;
        if (comma == NULL)
            return 0;
        entry = comma + 1;
    }
}

int fg_mps_parse(const char *pipe, const char *share, const char *limits,
                 const struct fg_device_info *visible, int n, struct fg_mps *out,
                 struct vg_err *err)
{
    struct fg_mps m = {.client = false, .share = FG_MPS_SHARE_FULL};
    for (int i = 0; i < FG_MAX_DEVICES; i++)
        m.limit[i] = UINT64_MAX;
    if (n < 0 || n > FG_MAX_DEVICES)
        return vg_err_set(err, -EINVAL, "bad device count %d", n);
    if (set(pipe)) {
        m.client = true;
        if (set(share)) {
            int rc = parse_share(share, &m.share, err);
            if (rc != 0)
                return rc;
        }
        if (set(limits)) {
            int rc = parse_limits(limits, visible, n, m.limit, err);
            if (rc != 0)
                return rc;
        }
    }
    *out = m;
    return 0;
}

uint64_t fg_stretch_ns(uint64_t ns, uint64_t num, uint64_t den)
{
    if (den == 0 || num <= den)
        return ns;
    /* ns * num / den without overflow: split ns so each product fits 64 bits (num and den
     * stay below 2^32). */
    uint64_t q = ns / den, r = ns % den;
    if (q > UINT64_MAX / num)
        return UINT64_MAX;
    uint64_t hi = q * num;
    uint64_t lo = (r * num + den - 1) / den;
    return hi > UINT64_MAX - lo ? UINT64_MAX : hi + lo;
}

uint64_t fg_mps_kernel_ns(const struct fg_mps *m, uint64_t ns)
{
    if (m->share >= FG_MPS_SHARE_FULL || m->share == 0)
        return ns;
    return fg_stretch_ns(ns, FG_MPS_SHARE_FULL, m->share);
}
