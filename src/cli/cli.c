/* The `vgpu` command's parsers and formatting (cli.h). */
#include "cli/cli.h"

#include <errno.h>
#include <string.h>

#include "annot/annot.h"
#include "base/str.h"

/* ---- quantities ------------------------------------------------------------------ */

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

int cli_quantity_milli(const char *s, uint64_t *out, struct vg_err *err)
{
    if (s == NULL || *s == '\0')
        return vg_err_set(err, -EINVAL, "empty quantity");
    const char *p = s;
    if (*p == '+')
        p++;
    else if (*p == '-')
        return vg_err_set(err, -EINVAL, "quantity '%.64s' is negative", s);
    unsigned __int128 mant = 0;
    int digits = 0, frac = 0;
    bool dot = false, any = false;
    for (;; p++) {
        if (is_digit(*p)) {
            any = true;
            if (mant == 0 && *p == '0') {
                /* leading zeros carry nothing */
            } else if (++digits > 30) {
                return vg_err_set(err, -ERANGE, "quantity '%.64s' has too many digits", s);
            }
            mant = mant * 10 + (unsigned)(*p - '0');
            if (dot)
                frac++;
        } else if (*p == '.' && !dot) {
            dot = true;
        } else {
            break;
        }
    }
    if (!any)
        return vg_err_set(err, -EINVAL, "quantity '%.64s' has no number", s);
    int exp10 = 3 - frac;
    unsigned bin = 0;
    static const struct {
        const char *suffix;
        int exp10;
        unsigned bin;
    } suffixes[] = {{"Ki", 0, 1}, {"Mi", 0, 2}, {"Gi", 0, 3}, {"Ti", 0, 4}, {"Pi", 0, 5},
                    {"Ei", 0, 6}, {"m", -3, 0}, {"k", 3, 0},  {"M", 6, 0},  {"G", 9, 0},
                    {"T", 12, 0}, {"P", 15, 0}, {"E", 18, 0}, {"", 0, 0}};
    bool matched = false;
    if ((*p == 'e' || *p == 'E') && (is_digit(p[1]) || p[1] == '+' || p[1] == '-')) {
        const char *q = p + 1;
        bool neg = *q == '-';
        if (*q == '+' || *q == '-')
            q++;
        int e = 0, n = 0;
        for (; is_digit(*q); q++) {
            if (++n > 3)
                return vg_err_set(err, -ERANGE, "quantity '%.64s': exponent too large", s);
            e = e * 10 + (*q - '0');
        }
        if (n == 0 || *q != '\0')
            return vg_err_set(err, -EINVAL, "quantity '%.64s': bad exponent", s);
        exp10 += neg ? -e : e;
        matched = true;
    } else {
        for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
            if (strcmp(p, suffixes[i].suffix) == 0) {
                exp10 += suffixes[i].exp10;
                bin = suffixes[i].bin;
                matched = true;
                break;
            }
        }
    }
    if (!matched)
        return vg_err_set(err, -EINVAL, "quantity '%.64s': unknown suffix '%.16s'", s, p);
    const unsigned __int128 max = UINT64_MAX;
    for (unsigned i = 0; i < bin; i++) {
        mant *= 1024;
        if (mant > max)
            return vg_err_set(err, -ERANGE, "quantity '%.64s' is too large", s);
    }
    for (; exp10 > 0; exp10--) {
        mant *= 10;
        if (mant > max)
            return vg_err_set(err, -ERANGE, "quantity '%.64s' is too large", s);
    }
    for (; exp10 < 0 && mant > 0; exp10++)
        mant = mant / 10 + (mant % 10 != 0); /* rounded up, as Kubernetes rounds */
    *out = (uint64_t)mant;
    return 0;
}

/* ---- FailedScheduling messages ---------------------------------------------------- */

/* Reads decimal digits at *p (at least one, at most 19); advances *p. */
static bool read_count(const char **p, const char *end, uint64_t *out)
{
    const char *q = *p;
    uint64_t v = 0;
    int n = 0;
    while (q < end && is_digit(*q)) {
        if (++n > 19)
            return false;
        v = v * 10 + (uint64_t)(*q - '0');
        q++;
    }
    if (n == 0)
        return false;
    *p = q;
    *out = v;
    return true;
}

/* True when p starts ", <digits> " (the next reason). */
static bool next_reason_at(const char *p, const char *end)
{
    if (end - p < 4 || p[0] != ',' || p[1] != ' ' || !is_digit(p[2]))
        return false;
    for (p += 2; p < end && is_digit(*p); p++)
        ;
    return p < end && *p == ' ';
}

static void copy_text(char *dst, size_t size, const char *from, const char *to)
{
    size_t n = (size_t)(to - from);
    if (n >= size)
        n = size - 1;
    memcpy(dst, from, n);
    dst[n] = '\0';
}

int cli_sched_message_parse(const char *msg, size_t len, struct cli_sched_message *out,
                            struct vg_err *err)
{
    memset(out, 0, sizeof *out);
    const char *p = msg, *end = msg + len;
    static const char head[] = " nodes are available: ";
    if (memchr(msg, '\0', len) != NULL)
        return vg_err_set(err, -EINVAL, "message holds a NUL byte");
    if (!read_count(&p, end, &out->available) || p >= end || *p++ != '/' ||
        !read_count(&p, end, &out->total))
        return vg_err_set(err, -EINVAL, "message does not start with 'A/T nodes'");
    if ((size_t)(end - p) < sizeof head - 1 || memcmp(p, head, sizeof head - 1) != 0)
        return vg_err_set(err, -EINVAL, "message lacks ' nodes are available: '");
    if (out->available > out->total)
        return vg_err_set(err, -EINVAL, "%llu of %llu nodes available",
                          (unsigned long long)out->available, (unsigned long long)out->total);
    p += sizeof head - 1;
    for (;;) {
        if (out->count == CLI_REASONS_MAX)
            return vg_err_set(err, -E2BIG, "more than %d reasons", CLI_REASONS_MAX);
        struct cli_reason *r = &out->reasons[out->count];
        if (!read_count(&p, end, &r->nodes) || p >= end || *p++ != ' ')
            return vg_err_set(err, -EINVAL, "reason %zu does not start with a node count",
                              out->count + 1);
        const char *start = p;
        while (p < end && !next_reason_at(p, end) && !(*p == '.' && (p + 1 == end || p[1] == ' ')))
            p++;
        if (p == start)
            return vg_err_set(err, -EINVAL, "reason %zu is empty", out->count + 1);
        copy_text(r->text, sizeof r->text, start, p);
        out->count++;
        if (p < end && *p == ',') {
            p += 2;
            continue;
        }
        if (p < end) /* ". " or the final '.' */
            p++;
        while (p < end && *p == ' ')
            p++;
        copy_text(out->tail, sizeof out->tail, p, end);
        return 0;
    }
}

/* ---- container directories -------------------------------------------------------- */

int cli_container_dir_parse(const char *name, char uid[CLI_NAME_MAX], char container[CLI_NAME_MAX],
                            struct vg_err *err)
{
    const char *us = strchr(name, '_');
    if (us == NULL || (size_t)(us - name) >= CLI_NAME_MAX || strlen(us + 1) >= CLI_NAME_MAX)
        return vg_err_set(err, -EINVAL, "'%.80s' is not <pod uid>_<container>", name);
    copy_text(uid, CLI_NAME_MAX, name, us);
    (void)vg_strlcpy(container, us + 1, CLI_NAME_MAX);
    if (!annot_pod_uid(uid) || !annot_dns_label(container))
        return vg_err_set(err, -EINVAL, "'%.80s': not a pod uid and a container name", name);
    return 0;
}

int cli_limits_owner_parse(const char *text, size_t len, char ns[CLI_NAME_MAX],
                           char pod[CLI_NAME_MAX], char container[CLI_NAME_MAX], struct vg_err *err)
{
    static const char head[] = "# written by vgpu-device-plugin for pod ";
    static const char mid[] = ", container ";
    const char *nl = memchr(text, '\n', len);
    const char *end = nl != NULL ? nl : text + len;
    size_t n = (size_t)(end - text);
    if (n < sizeof head - 1 || memcmp(text, head, sizeof head - 1) != 0)
        return vg_err_set(err, -ENOENT, "the limits file does not name its pod");
    char line[3 * CLI_NAME_MAX + 64];
    if (n >= sizeof line)
        return vg_err_set(err, -EINVAL, "the limits file's first line is too long");
    copy_text(line, sizeof line, text + sizeof head - 1, end);
    char *slash = strchr(line, '/');
    char *comma = slash != NULL ? strstr(slash, mid) : NULL;
    if (slash == NULL || comma == NULL)
        return vg_err_set(err, -EINVAL, "the limits file's first line is malformed");
    *slash = '\0';
    *comma = '\0';
    if (!annot_dns_label(line) || !annot_dns_subdomain(slash + 1) ||
        !annot_dns_label(comma + sizeof mid - 1))
        return vg_err_set(err, -EINVAL, "the limits file's first line names no valid pod");
    (void)vg_strlcpy(ns, line, CLI_NAME_MAX);
    (void)vg_strlcpy(pod, slash + 1, CLI_NAME_MAX);
    (void)vg_strlcpy(container, comma + sizeof mid - 1, CLI_NAME_MAX);
    return 0;
}

/* ---- formatting ------------------------------------------------------------------- */

char *cli_put_u64(char *p, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

char *cli_put_tenths(char *p, uint64_t tenths)
{
    p = cli_put_u64(p, tenths / 10);
    *p++ = '.';
    *p++ = (char)('0' + tenths % 10);
    return p;
}

/* Formatted by hand, not with snprintf: `vgpu top` prints a few of these per container
 * per refresh. */
void cli_format_bytes(uint64_t bytes, char *buf, size_t size)
{
    const uint64_t mi = 1ULL << 20, gi = 1ULL << 30, ti = 1ULL << 40;
    char tmp[40], *p = tmp;
    if (bytes == 0) {
        *p++ = '0';
    } else if (bytes < mi) {
        p = cli_put_u64(p, (bytes + 1023) >> 10);
        *p++ = 'K';
        *p++ = 'i';
    } else if (bytes < gi) {
        p = cli_put_u64(p, (bytes + mi / 2) >> 20);
        *p++ = 'M';
        *p++ = 'i';
    } else if (bytes < ti && bytes % gi == 0) {
        p = cli_put_u64(p, bytes >> 30);
        *p++ = 'G';
        *p++ = 'i';
    } else if (bytes < ti) {
        p = cli_put_tenths(p, (bytes * 10 + gi / 2) / gi);
        *p++ = 'G';
        *p++ = 'i';
    } else {
        p = cli_put_tenths(p, (uint64_t)(((unsigned __int128)bytes * 10 + ti / 2) / ti));
        *p++ = 'T';
        *p++ = 'i';
    }
    *p = '\0';
    (void)vg_strlcpy(buf, tmp, size);
}

void cli_format_age(int64_t seconds, char *buf, size_t size)
{
    if (seconds < 0)
        (void)vg_snprintf(buf, size, "<unknown>");
    else if (seconds < 120)
        (void)vg_snprintf(buf, size, "%llds", (long long)seconds);
    else if (seconds < 120 * 60)
        (void)vg_snprintf(buf, size, "%lldm", (long long)(seconds / 60));
    else if (seconds < 48 * 3600)
        (void)vg_snprintf(buf, size, "%lldh", (long long)(seconds / 3600));
    else
        (void)vg_snprintf(buf, size, "%lldd", (long long)(seconds / 86400));
}
