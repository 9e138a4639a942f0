/* Validators for the names that reach paths, environment variables, log lines and files
 * (annot.h, "Names"). Kubernetes' own rules (RFC 1123, as the API server applies them to
 * container names, namespaces, pod and node names): a label is 1..63 characters of
 * [a-z0-9-] that starts and ends with a letter or digit; a subdomain is 1..253 characters
 * of such labels joined by dots. None of them can hold '/', '_', "..", whitespace, a
 * control character or a byte above 0x7f. */
#include "annot/annot.h"

#include <string.h>

static bool alnum_lower(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* A label of exactly n bytes at s. */
static bool label_n(const char *s, size_t n)
{
    if (n == 0 || n > ANNOT_LABEL_MAX || !alnum_lower(s[0]) || !alnum_lower(s[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!alnum_lower(s[i]) && s[i] != '-')
            return false;
    return true;
}

bool annot_dns_label(const char *s)
{
    return s != NULL && label_n(s, strnlen(s, ANNOT_LABEL_MAX + 1));
}

bool annot_dns_subdomain(const char *s)
{
    if (s == NULL)
        return false;
    size_t n = strnlen(s, ANNOT_SUBDOMAIN_MAX + 1);
    if (n == 0 || n > ANNOT_SUBDOMAIN_MAX)
        return false;
    const char *p = s, *end = s + n;
    while (p < end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t len = dot ? (size_t)(dot - p) : (size_t)(end - p);
        if (!label_n(p, len))
            return false;
        if (!dot)
            return true;
        p = dot + 1;
        if (p == end)
            return false; /* a trailing dot */
    }
    return false;
}

bool annot_pod_uid(const char *s)
{
    /* Kubernetes assigns RFC 4122 UUIDs (8-4-4-4-12 lowercase hex), which are labels; the
     * test API servers' "uid-pods-7" are too. A label never holds the '_' that separates
     * the uid from the container name in a container directory's name. */
    return annot_dns_label(s);
}

bool annot_key_reserved(const char *key)
{
    /* The author's scoring policy, and a live-resize request: who may resize is the API
     * server's RBAC on the pod (docs/security.md "What a resize trusts"). */
    static const char *const open_keys[] = {"vgpu.io/policy", ANNOT_KEY_RESIZE};
    if (key == NULL || strncmp(key, ANNOT_PREFIX, strlen(ANNOT_PREFIX)) != 0)
        return false;
    for (size_t i = 0; i < sizeof(open_keys) / sizeof(open_keys[0]); i++)
        if (strcmp(key, open_keys[i]) == 0)
            return false;
    return true;
}

int64_t annot_kube_time(const char *s)
{
    /* "YYYY-MM-DDThh:mm:ssZ": digits where the form has them, nothing else. */
    static const char form[] = "dddd-dd-ddTdd:dd:ddZ";
    if (s == NULL || strlen(s) != sizeof(form) - 1)
        return -1;
    for (size_t i = 0; form[i]; i++)
        if (form[i] == 'd' ? (s[i] < '0' || s[i] > '9') : s[i] != form[i])
            return -1;
#define NUM2(at) ((unsigned)(s[at] - '0') * 10u + (unsigned)(s[(at) + 1] - '0'))
    unsigned y = NUM2(0) * 100u + NUM2(2), mo = NUM2(5), d = NUM2(8), h = NUM2(11), mi = NUM2(14),
             sec = NUM2(17);
#undef NUM2
    static const unsigned month_days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    static const unsigned days_before[12] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (y < 1970 || mo < 1 || mo > 12 || d < 1 ||
        d > month_days[mo - 1] + (mo == 2 && leap ? 1u : 0u) || h > 23 || mi > 59 || sec > 59)
        return -1;
    /* Whole days since 1970-01-01: 365 a year, plus the Gregorian leap days of the years
     * before y (every 4th, not every 100th, every 400th), plus this year's months. */
    int64_t before = (int64_t)y - 1;
    int64_t leaps =
        (before / 4 - before / 100 + before / 400) - (1969 / 4 - 1969 / 100 + 1969 / 400);
    int64_t days = ((int64_t)y - 1970) * 365 + leaps + days_before[mo - 1] +
                   (mo > 2 && leap ? 1 : 0) + (int64_t)d - 1;
    return days * 86400 + (int64_t)h * 3600 + (int64_t)mi * 60 + (int64_t)sec;
}
