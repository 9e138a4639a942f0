/* Fuzz target for the extender's Authorization header reader (src/scheduler/auth.c).
 * Input: the header value. Checked: an accepted header is "Bearer" in any case, spaces,
 * a token68 and optional trailing blanks, and the token points into it; "Bearer " plus
 * the token reads back as the same token; the constant-time comparison says equal for
 * the token against itself and unequal for every one-byte change and for a prefix. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "scheduler/auth.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool token68_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~' || c == '+' || c == '/' || c == '=';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 2 * SCHED_TOKEN_MAX)
        return 0;
    char *header = malloc(size + 1);
    if (header == NULL)
        return 0;
    memcpy(header, data, size);
    header[size] = '\0';
    const char *tok;
    size_t len;
    int rc = sched_auth_bearer(header, &tok, &len);
    vg_fuzz_report(rc == 0);
    if (rc == 0) {
        if (strncasecmp(header, "Bearer ", 7) != 0 || tok < header + 7 ||
            tok + len > header + strlen(header) || len == 0 || len > SCHED_TOKEN_MAX)
            abort();
        for (const char *p = header + 6; p < tok; p++)
            if (*p != ' ')
                abort();
        for (size_t i = 0; i < len; i++)
            if (!token68_char((unsigned char)tok[i]) || (tok[i] == '=' && i == 0))
                abort();
        for (const char *p = tok + len; *p != '\0'; p++)
            if (*p != ' ' && *p != '\t')
                abort();
        /* Read back. */
        char *again = malloc(len + 8);
        if (again == NULL)
            abort();
        memcpy(again, "Bearer ", 7);
        memcpy(again + 7, tok, len);
        again[len + 7] = '\0';
        const char *t2;
        size_t l2;
        if (sched_auth_bearer(again, &t2, &l2) != 0 || l2 != len || memcmp(t2, tok, len) != 0)
            abort();
        free(again);
        /* The comparison. */
        if (!sched_auth_token_equal(tok, len, tok, len))
            abort();
        if (len > 1 && sched_auth_token_equal(tok, len - 1, tok, len))
            abort();
        char *copy = malloc(len);
        if (copy == NULL)
            abort();
        memcpy(copy, tok, len);
        for (size_t i = 0; i < len; i++) {
            copy[i] ^= 1;
            if (sched_auth_token_equal(copy, len, tok, len))
                abort();
            copy[i] ^= 1;
        }
        free(copy);
    } else if (tok != NULL || len != 0) {
        abort();
    }
    free(header);
    return 0;
}
