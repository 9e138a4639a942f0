/* The extender's client authentication helpers (auth.h). */
#include "scheduler/auth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/auto.h"
#include "base/mem.h"

static bool token68_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~' || c == '+' || c == '/';
}

/* The length of the token68 at s (its padding included), or 0 when s does not start
 * with one. */
static size_t token68_len(const char *s)
{
    size_t n = 0;
    while (token68_char((unsigned char)s[n]))
        n++;
    if (n == 0)
        return 0;
    while (s[n] == '=')
        n++;
    return n;
}

int sched_auth_bearer(const char *header, const char **tok, size_t *len)
{
    *tok = NULL;
    *len = 0;
    if (header == NULL || strncasecmp(header, "Bearer", 6) != 0 || header[6] != ' ')
        return -EINVAL;
    const char *p = header + 6;
    while (*p == ' ')
        p++;
    size_t n = token68_len(p);
    if (n == 0 || n > SCHED_TOKEN_MAX)
        return -EINVAL;
    for (const char *q = p + n; *q != '\0'; q++)
        if (*q != ' ' && *q != '\t')
            return -EINVAL;
    *tok = p;
    *len = n;
    return 0;
}

bool sched_auth_token_equal(const char *presented, size_t plen, const char *expected, size_t elen)
{
    /* Every byte of the expected token is compared, whatever the presented one holds;
     * a length difference counts as a difference. */
    unsigned char diff = (unsigned char)(plen != elen);
    for (size_t i = 0; i < elen; i++) {
        unsigned char p = i < plen ? (unsigned char)presented[i] : 0;
        diff |= (unsigned char)(p ^ (unsigned char)expected[i]);
    }
    /* Read through a volatile so the compiler keeps the loop whole. */
    volatile unsigned char result = diff;
    return result == 0;
}

int sched_auth_load_token(const char *file, char *buf, size_t size, size_t *len, struct vg_err *err)
{
    buf[0] = '\0';
    *len = 0;
    VG_AUTO_FILE FILE *f = fopen(file, "r");
    if (f == NULL)
        return vg_err_errno(err, errno, "cannot read the token file %s", file);
    char text[SCHED_TOKEN_MAX + 64];
    size_t n = fread(text, 1, sizeof text - 1, f);
    if (ferror(f))
        return vg_err_errno(err, EIO, "cannot read the token file %s", file);
    if (n == sizeof text - 1)
        return vg_err_set(err, -EINVAL, "token file %s: the token is over %d bytes", file,
                          SCHED_TOKEN_MAX);
    text[n] = '\0';
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ' ||
                     text[n - 1] == '\t'))
        text[--n] = '\0';
    if (n == 0)
        return vg_err_set(err, -EINVAL, "token file %s is empty", file);
    if (memchr(text, '\0', n) != NULL || token68_len(text) != n)
        return vg_err_set(err, -EINVAL,
                          "token file %s: the token must be one word of letters, digits and "
                          "-._~+/ (then any '=')",
                          file);
    if (n > SCHED_TOKEN_MAX || n >= size)
        return vg_err_set(err, -EINVAL, "token file %s: the token is over %d bytes", file,
                          SCHED_TOKEN_MAX);
    memcpy(buf, text, n + 1);
    *len = n;
    return 0;
}
