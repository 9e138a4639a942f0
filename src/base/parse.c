#include "base/parse.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#define MAX_SHOWN 40 /* characters of bad input quoted back in a message */

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Accumulates the run of digits at *p into *value; false on overflow. */
static bool take_digits(const char **p, uint64_t *value, unsigned *ndigits)
{
    uint64_t v = *value;
    unsigned n = 0;
    for (; is_digit(**p); (*p)++, n++) {
        unsigned d = (unsigned)(**p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *value = v;
    *ndigits = n;
    return true;
}

int vg_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out, struct vg_err *err)
{
    if (s == NULL || *s == '\0')
        return vg_err_set(err, -EINVAL, "empty number");
    const char *p = s;
    uint64_t v = 0;
    unsigned n;
    if (!take_digits(&p, &v, &n))
        return vg_err_set(err, -ERANGE, "number '%.*s' is too large", MAX_SHOWN, s);
    if (n == 0 || *p != '\0')
        return vg_err_set(err, -EINVAL, "'%.*s' is not a whole number", MAX_SHOWN, s);
    if (v < min || v > max)
        return vg_err_set(err, -ERANGE, "%llu is outside %llu..%llu", (unsigned long long)v,
                          (unsigned long long)min, (unsigned long long)max);
    *out = v;
    return 0;
}

int vg_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out, struct vg_err *err)
{
    if (s == NULL || *s == '\0')
        return vg_err_set(err, -EINVAL, "empty number");
    bool negative = s[0] == '-';
    uint64_t magnitude;
    /* Parse the magnitude with the unsigned parser so both share one set of checks. */
    int rc = vg_parse_u64(s + negative, 0, (uint64_t)INT64_MAX + negative, &magnitude, err);
    if (rc == -ERANGE)
        return vg_err_set(err, -ERANGE, "number '%.*s' is out of range", MAX_SHOWN, s);
    if (rc < 0)
        return vg_err_set(err, rc, "'%.*s' is not a whole number", MAX_SHOWN, s);
    int64_t v = negative ? (int64_t)(0 - magnitude) : (int64_t)magnitude;
    if (v < min || v > max)
        return vg_err_set(err, -ERANGE, "%lld is outside %lld..%lld", (long long)v, (long long)min,
                          (long long)max);
    *out = v;
    return 0;
}

struct unit {
    const char *name;
    unsigned shift;
};

static const struct unit units[] = {
    {"", 0},     {"b", 0},  {"k", 10},  {"kb", 10},  {"kib", 10}, {"m", 20},  {"mb", 20},
    {"mib", 20}, {"g", 30}, {"gb", 30}, {"gib", 30}, {"t", 40},   {"tb", 40}, {"tib", 40},
};

static int parse_quantity(const char *s, unsigned default_shift, uint64_t *out, struct vg_err *err)
{
    if (s == NULL || *s == '\0')
        return vg_err_set(err, -EINVAL, "empty quantity");
    const char *p = s;
    uint64_t whole = 0, frac = 0;
    unsigned nwhole, nfrac = 0;
    if (!take_digits(&p, &whole, &nwhole))
        return vg_err_set(err, -ERANGE, "quantity '%.*s' is too large", MAX_SHOWN, s);
    if (*p == '.') {
        p++;
        if (!take_digits(&p, &frac, &nfrac) || nfrac > 9)
            return vg_err_set(err, -EINVAL, "quantity '%.*s' has more than 9 decimals", MAX_SHOWN,
                              s);
        if (nfrac == 0)
            return vg_err_set(err, -EINVAL, "quantity '%.*s' has no digits after '.'", MAX_SHOWN,
                              s);
    }
    if (nwhole == 0)
        return vg_err_set(err, -EINVAL, "quantity '%.*s' does not start with a digit", MAX_SHOWN,
                          s);
    const struct unit *unit = NULL;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(p, units[i].name) == 0) {
            unit = &units[i];
            break;
        }
    }
    if (unit == NULL)
        return vg_err_set(err, -EINVAL,
                          "quantity '%.*s' has an unknown unit (use B, KiB, MiB, GiB, TiB "
                          "or k, m, g, t)",
                          MAX_SHOWN, s);
    unsigned shift = *p == '\0' ? default_shift : unit->shift;
    if (shift > 0 && whole > (UINT64_MAX >> shift))
        return vg_err_set(err, -ERANGE, "quantity '%.*s' does not fit in 64 bits", MAX_SHOWN, s);
    uint64_t bytes = whole << shift;
    if (nfrac > 0) {
        uint64_t scale = 1;
        for (unsigned i = 0; i < nfrac; i++)
            scale *= 10;
        /* frac < 10^9 and shift <= 40 would overflow, so split the product. */
        uint64_t unit_bytes = (uint64_t)1 << shift;
        uint64_t q = unit_bytes / scale, r = unit_bytes % scale;
        uint64_t part_whole = frac * q;
        uint64_t rem = frac * r; /* < 10^18, fits */
        if (rem % scale != 0)
            return vg_err_set(err, -EINVAL, "quantity '%.*s' is not a whole number of bytes",
                              MAX_SHOWN, s);
        uint64_t part = part_whole + rem / scale;
        if (bytes > UINT64_MAX - part)
            return vg_err_set(err, -ERANGE, "quantity '%.*s' does not fit in 64 bits", MAX_SHOWN,
                              s);
        bytes += part;
    }
    *out = bytes;
    return 0;
}

int vg_parse_bytes(const char *s, uint64_t *out, struct vg_err *err)
{
    return parse_quantity(s, 0, out, err);
}

int vg_parse_mib_default(const char *s, uint64_t *out, struct vg_err *err)
{
    return parse_quantity(s, 20, out, err);
}
