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
    static const char *const open_keys[] = {"vgpu.io/policy"};
    if (key == NULL || strncmp(key, ANNOT_PREFIX, strlen(ANNOT_PREFIX)) != 0)
        return false;
    for (size_t i = 0; i < sizeof(open_keys) / sizeof(open_keys[0]); i++)
        if (strcmp(key, open_keys[i]) == 0)
            return false;
    return true;
}
