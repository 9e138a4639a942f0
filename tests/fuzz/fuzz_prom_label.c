/* Fuzz target for the Prometheus writer's label values (src/base/prom.h): any bytes in,
 * and what comes out is always one well-formed sample line. Checked on every input with
 * a UTF-8 decoder of its own (code points, not prom.c's byte ranges):
 * - a value over VG_PROM_VALUE_MAX bytes is refused with a message, nothing cut;
 * - otherwise the line is `vgpu_fuzz{v="..."} 1\n`, valid UTF-8, with no raw newline and
 *   no unescaped quote or backslash, and un-escaping it gives back the input with each
 *   byte that does not begin a well-formed sequence replaced by U+FFFD (the input itself
 *   when it is valid UTF-8). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/prom.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The length of the well-formed sequence at s (n bytes left), 0 if none: decoded to a
 * code point, then held to the shortest form, the surrogates and U+10FFFF. */
static size_t decode(const uint8_t *s, size_t n)
{
    size_t len = s[0] < 0x80         ? 1
                 : (s[0] >> 5) == 6  ? 2
                 : (s[0] >> 4) == 14 ? 3
                 : (s[0] >> 3) == 30 ? 4
                                     : 0;
    if (len == 0 || len > n)
        return 0;
    uint32_t cp = len == 1 ? s[0] : s[0] & (0x7Fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[len] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
        return 0;
    return len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct vg_buf b;
    vg_buf_init(&b, "metrics", 1 << 20);
    struct vg_err err = {0};
    struct vg_prom p;
    vg_prom_init(&p, &b, &err);
    vg_prom_family(&p, "vgpu_fuzz", "gauge", "Fuzzed.");
    vg_prom_sample(&p, "vgpu_fuzz");
    vg_prom_label_n(&p, "v", (const char *)data, size);
    vg_prom_u64(&p, 1);
    int rc = vg_prom_done(&p);
    vg_fuzz_report(rc == 0);
    if (size > VG_PROM_VALUE_MAX) {
        if (rc != -E2BIG || strstr(err.msg, "label v") == NULL)
            abort();
        vg_buf_free(&b);
        return 0;
    }
    if (rc != 0)
        abort();
    const char *head = "# HELP vgpu_fuzz Fuzzed.\n# TYPE vgpu_fuzz gauge\nvgpu_fuzz{v=\"";
    size_t hl = strlen(head);
    if (b.len < hl + 5 || memcmp(b.data, head, hl) != 0 ||
        memcmp(b.data + b.len - 5, "\"} 1\n", 5) != 0)
        abort();
    const uint8_t *v = (const uint8_t *)b.data + hl;
    size_t vn = b.len - hl - 5;
    /* Un-escape the written value, checking it on the way. */
    uint8_t *back = malloc(vn + 1);
    if (back == NULL)
        abort();
    size_t bn = 0;
    for (size_t i = 0; i < vn;) {
        size_t n = decode(v + i, vn - i);
        if (n == 0 || v[i] == '\n' || v[i] == '"')
            abort(); /* not UTF-8, or a raw newline or quote */
        if (v[i] == '\\') {
            if (i + 1 >= vn || (v[i + 1] != '\\' && v[i + 1] != '"' && v[i + 1] != 'n'))
                abort();
            back[bn++] = v[i + 1] == 'n' ? '\n' : v[i + 1];
            i += 2;
            continue;
        }
        memcpy(back + bn, v + i, n);
        bn += n;
        i += n;
    }
    /* The input with the one rule applied, built independently. */
    uint8_t *want = malloc(3 * size + 1);
    if (want == NULL)
        abort();
    size_t wn = 0;
    for (size_t i = 0; i < size;) {
        size_t n = decode(data + i, size - i);
        if (n == 0) {
            memcpy(want + wn, "\xEF\xBF\xBD", 3);
            wn += 3;
            i++;
        } else {
            memcpy(want + wn, data + i, n);
            wn += n;
            i += n;
        }
    }
    if (bn != wn || memcmp(back, want, wn) != 0)
        abort();
    free(back);
    free(want);
    vg_buf_free(&b);
    return 0;
}
