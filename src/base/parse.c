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

/* ---- Kubernetes quantities ---------------------------------------------------------- */

/* Kubernetes keeps a quantity as a whole number of thousandths (a finer value is rounded
 * up to 1m) and refuses one above 2^63-1; so does this parser, in 128-bit arithmetic. */
#define KUBE_MAX_MILLI  ((unsigned __int128)INT64_MAX * 1000)
#define KUBE_MAX_DIGITS 30 /* significant digits kept (< 2^100) */

enum kube_unit { KUBE_PLAIN, KUBE_BYTES, KUBE_MILLI };

/* A parsed quantity: its value in thousandths, and how its suffix was written. */
struct kube_quantity {
    unsigned __int128 milli;
    bool rounded; /* finer than 1m, rounded up */
    enum kube_unit unit;
};

static int kube_bad(struct vg_err *err, const char *s, const char *why)
{
    return vg_err_set(err, -EINVAL,
                      "'%.*s' is not a Kubernetes quantity: %s (examples: 4Gi, 4096Mi, 4G, "
                      "4096, 1e3)",
                      MAX_SHOWN, s, why);
}

static int kube_too_large(struct vg_err *err, const char *s)
{
    return vg_err_set(err, -ERANGE, "quantity '%.*s' is above 2^63-1", MAX_SHOWN, s);
}

static const struct {
    const char *name;
    int exp10;
    unsigned shift;
    enum kube_unit unit;
} kube_suffixes[] = {
    {"", 0, 0, KUBE_PLAIN},    {"k", 3, 0, KUBE_PLAIN},   {"m", -3, 0, KUBE_MILLI},
    {"M", 6, 0, KUBE_BYTES},   {"G", 9, 0, KUBE_BYTES},   {"T", 12, 0, KUBE_BYTES},
    {"P", 15, 0, KUBE_BYTES},  {"E", 18, 0, KUBE_BYTES},  {"Ki", 0, 10, KUBE_BYTES},
    {"Mi", 0, 20, KUBE_BYTES}, {"Gi", 0, 30, KUBE_BYTES}, {"Ti", 0, 40, KUBE_BYTES},
    {"Pi", 0, 50, KUBE_BYTES}, {"Ei", 0, 60, KUBE_BYTES},
};

/* Reads the suffix at p: *exp10 and *shift scale the number. */
static int kube_suffix(const char *s, const char *p, int *exp10, unsigned *shift,
                       enum kube_unit *unit, struct vg_err *err)
{
    for (size_t i = 0; i < sizeof kube_suffixes / sizeof kube_suffixes[0]; i++) {
        if (strcmp(p, kube_suffixes[i].name) == 0) {
            *exp10 = kube_suffixes[i].exp10;
            *shift = kube_suffixes[i].shift;
            *unit = kube_suffixes[i].unit;
            return 0;
        }
    }
    if (*p == 'e' || *p == 'E') { /* an exponent ("E" alone is exa, above) */
        const char *e = p + 1;
        bool neg = *e == '-';
        if (*e == '-' || *e == '+')
            e++;
        int x = 0;
        const char *start = e;
        for (; is_digit(*e); e++)
            if (x < 1000)
                x = x * 10 + (*e - '0'); /* past 1000 nothing fits or is left anyway */
        if (e == start || *e != '\0')
            return kube_bad(err, s, "the exponent is not a whole number");
        *exp10 = neg ? -x : x;
        *shift = 0;
        *unit = KUBE_PLAIN;
        return 0;
    }
    static const char *const other_units[] = {"b",   "kb", "kib", "mb", "mib", "gb",
                                              "gib", "tb", "tib", "g",  "t"};
    for (size_t i = 0; i < sizeof other_units / sizeof other_units[0]; i++)
        if (strcasecmp(p, other_units[i]) == 0)
            return kube_bad(err, s,
                            "Kubernetes has no such suffix; binary ones are Ki Mi Gi Ti Pi Ei "
                            "(4Gi), decimal ones k M G T P E (4G)");
    return kube_bad(err, s, "unknown suffix (Ki Mi Gi Ti Pi Ei, k M G T P E, or e<exponent>)");
}

static int kube_parse(const char *s, struct kube_quantity *q, struct vg_err *err)
{
    memset(q, 0, sizeof *q);
    if (s == NULL || *s == '\0')
        return vg_err_set(err, -EINVAL, "empty quantity");
    if (strpbrk(s, " \t\n\r\v\f") != NULL)
        return kube_bad(err, s, "it contains whitespace");
    const char *p = s;
    bool negative = *p == '-';
    if (*p == '-' || *p == '+')
        p++;
    unsigned __int128 digits = 0;
    unsigned ndigits = 0, nsig = 0;
    int exp10 = 0;
    bool dot = false, dropped = false;
    for (; is_digit(*p) || (*p == '.' && !dot); p++) {
        if (*p == '.') {
            dot = true;
            continue;
        }
        ndigits++;
        if (nsig < KUBE_MAX_DIGITS) {
            digits = digits * 10 + (unsigned)(*p - '0');
            nsig += digits != 0;
            exp10 -= dot;
        } else if (!dot) {
            exp10++; /* a whole digit past the precision kept: the value is too large */
        } else if (*p != '0') {
            dropped = true; /* a fraction digit past it: rounds up */
        }
    }
    if (ndigits == 0)
        return kube_bad(err, s, "no digits");
    if (negative && (digits != 0 || dropped))
        return vg_err_set(err, -EINVAL, "quantity '%.*s' is negative", MAX_SHOWN, s);
    int sexp = 0;
    unsigned shift = 0;
    int rc = kube_suffix(s, p, &sexp, &shift, &q->unit, err);
    if (rc < 0)
        return rc;
    if (digits == 0 && !dropped)
        return 0;
    /* milli = ceil(digits * 10^(exp10 + sexp + 3)) * 2^shift */
    int e = exp10 + sexp + 3;
    unsigned __int128 v = digits;
    q->rounded = dropped;
    for (; e > 0; e--) {
        if (v > KUBE_MAX_MILLI / 10)
            return kube_too_large(err, s);
        v *= 10;
    }
    if (e < 0) {
        unsigned __int128 den = 1;
        for (; e < 0 && den <= v; e++) /* den <= 10 * v < 2^104 */
            den *= 10;
        bool rest = v % den != 0 || e < 0 || dropped;
        v = e < 0 ? 0 : v / den;
        if (rest) {
            v++;
            q->rounded = true;
        }
    } else if (dropped) {
        v++;
    }
    if (v > (KUBE_MAX_MILLI >> shift))
        return kube_too_large(err, s);
    q->milli = v << shift;
    return 0;
}

int vg_parse_kube_mib(const char *s, uint64_t max_mib, uint64_t *out, struct vg_err *err)
{
    struct kube_quantity q;
    int rc = kube_parse(s, &q, err);
    if (rc < 0)
        return rc;
    if (q.unit == KUBE_MILLI)
        return vg_err_set(err, -EINVAL,
                          "quantity '%.*s' is in thousandths (m is milli to Kubernetes, never "
                          "MiB); GPU memory is a whole number of MiB: write e.g. 4096 or 4096Mi",
                          MAX_SHOWN, s);
    /* Byte suffixes count bytes; otherwise the number counts MiB. Both round up. */
    unsigned __int128 per_mib = q.unit == KUBE_BYTES ? (unsigned __int128)1000 << 20 : 1000;
    unsigned __int128 mib = (q.milli + per_mib - 1) / per_mib;
    if (mib > max_mib)
        return vg_err_set(err, -ERANGE, "quantity '%.*s' is %llu MiB, above the most, %llu MiB",
                          MAX_SHOWN, s, (unsigned long long)mib, (unsigned long long)max_mib);
    *out = (uint64_t)mib;
    return 0;
}

int vg_parse_kube_count(const char *s, uint64_t max, uint64_t *out, struct vg_err *err)
{
    struct kube_quantity q;
    int rc = kube_parse(s, &q, err);
    if (rc < 0)
        return rc;
    if (q.rounded || q.milli % 1000 != 0)
        return vg_err_set(err, -EINVAL, "quantity '%.*s' is not a whole number", MAX_SHOWN, s);
    if (q.milli / 1000 > max)
        return vg_err_set(err, -ERANGE, "quantity '%.*s' is %llu, above the most, %llu", MAX_SHOWN,
                          s, (unsigned long long)(q.milli / 1000), (unsigned long long)max);
    *out = (uint64_t)(q.milli / 1000);
    return 0;
}
