/* The Prometheus text writer (prom.h). Label values are copied in runs: a value that
 * needs no escaping is one append, so a scrape of thousands of series stays a memcpy per
 * label. */
#include "base/prom.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The hot path (a scrape is tens of thousands of short pieces): a memcpy while the buffer
 * has room (and no error yet), keeping buf.h's invariants (within the ceiling, NUL-terminated;
 * base's own type), vg_buf_append to grow it or to report the ceiling. */
static inline void put(struct vg_prom *p, const char *s, size_t n)
{
    struct vg_buf *b = p->b;
    if (p->rc == 0 && b->data != NULL && n < b->cap - b->len && n <= b->max - b->len) {
        memcpy(b->data + b->len, s, n);
        b->len += n;
        b->data[b->len] = '\0';
        return;
    }
    if (p->rc == 0)
        p->rc = vg_buf_append(b, s, n, p->err);
}

static void puts_(struct vg_prom *p, const char *s)
{
    put(p, s, strlen(s));
}

static int fail(struct vg_prom *p, int rc)
{
    if (p->rc == 0)
        p->rc = rc;
    return rc;
}

/* False (and the error set) when a sample was begun and not given its value. */
static bool sample_closed(struct vg_prom *p)
{
    if (!p->in_sample)
        return true;
    fail(p, vg_err_set(p->err, -EINVAL, "metrics: sample of %s left without a value", p->family));
    return false;
}

void vg_prom_init(struct vg_prom *p, struct vg_buf *b, struct vg_err *err)
{
    memset(p, 0, sizeof *p);
    p->b = b;
    p->err = err;
}

int vg_prom_done(struct vg_prom *p)
{
    if (p->rc == 0)
        (void)sample_closed(p);
    free(p->families);
    p->families = NULL;
    p->family_count = p->family_cap = 0;
    return p->rc;
}

static bool name_ok(const char *s, bool label)
{
    if (*s == '\0')
        return false;
    for (const char *c = s; *c; c++) {
        bool alpha = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_' ||
                     (!label && *c == ':');
        if (!alpha && !(c > s && *c >= '0' && *c <= '9'))
            return false;
    }
    return true;
}

/* HELP text: backslash and newline escaped, as the format says. */
static void put_help(struct vg_prom *p, const char *s)
{
    const char *run = s;
    for (; *s; s++) {
        if (*s != '\\' && *s != '\n')
            continue;
        put(p, run, (size_t)(s - run));
        put(p, *s == '\\' ? "\\\\" : "\\n", 2);
        run = s + 1;
    }
    put(p, run, (size_t)(s - run));
}

void vg_prom_family(struct vg_prom *p, const char *name, const char *type, const char *help)
{
    if (p->rc < 0)
        return;
    if (!sample_closed(p))
        return;
    p->in_set = false;
    if (!name_ok(name, false)) {
        fail(p, vg_err_set(p->err, -EINVAL, "metrics: '%s' is not a metric name", name));
        return;
    }
    static const char *const types[] = {"counter", "gauge", "histogram", "summary", "untyped"};
    bool known = false;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        known = known || strcmp(type, types[i]) == 0;
    if (!known) {
        fail(p, vg_err_set(p->err, -EINVAL, "metrics: %s: unknown type '%s'", name, type));
        return;
    }
    for (size_t i = 0; i < p->family_count; i++)
        if (strcmp(p->families[i], name) == 0) {
            fail(p, vg_err_set(p->err, -EEXIST, "metrics: family %s written twice", name));
            return;
        }
    int rc = vg_array_grow(&p->families, &p->family_cap, p->family_count + 1, sizeof *p->families,
                           VG_PROM_FAMILIES_MAX, "metric families", p->err);
    if (rc < 0) {
        fail(p, rc);
        return;
    }
    p->families[p->family_count++] = name;
    p->family = name;
    p->family_len = strlen(name);
    put(p, "# HELP ", 7);
    put(p, name, p->family_len);
    put(p, " ", 1);
    put_help(p, help);
    put(p, "\n# TYPE ", 8);
    put(p, name, p->family_len);
    put(p, " ", 1);
    puts_(p, type);
    put(p, "\n", 1);
}

void vg_prom_sample(struct vg_prom *p, const char *name)
{
    if (p->rc < 0)
        return;
    if (!sample_closed(p))
        return;
    if (name == p->family) { /* the common case: the family's own name, checked already */
        put(p, name, p->family_len);
    } else if (p->family == NULL || strncmp(name, p->family, p->family_len) != 0 ||
               (name[p->family_len] != '\0' && name[p->family_len] != '_')) {
        fail(p, vg_err_set(p->err, -EINVAL, "metrics: sample %s outside its family (%s)", name,
                           p->family != NULL ? p->family : "none begun"));
        return;
    } else {
        puts_(p, name);
    }
    p->in_sample = true;
    p->in_set = false;
    p->labels = 0;
}

void vg_prom_set_begin(struct vg_prom *p)
{
    p->labels = 0;
    p->in_set = true;
}

/* "{" before a sample's first label, "," before the others; nothing before a set's first. */
static bool label_sep(struct vg_prom *p)
{
    if (!p->in_sample && !p->in_set) {
        fail(p, vg_err_set(p->err, -EINVAL, "metrics: a label outside a sample (%s)",
                           p->family != NULL ? p->family : "no family"));
        return false;
    }
    if (p->labels > 0)
        put(p, ",", 1);
    else if (p->in_sample)
        put(p, "{", 1);
    p->labels++;
    return true;
}

/* The length of the well-formed UTF-8 sequence at s (n bytes left), 0 if there is none. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0; /* shortest form */
        else if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F; /* at most U+10FFFF */
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

void vg_prom_label_n(struct vg_prom *p, const char *name, const char *value, size_t len)
{
    if (p->rc < 0)
        return;
    if (!name_ok(name, true)) {
        fail(p, vg_err_set(p->err, -EINVAL, "metrics: %s: '%s' is not a label name",
                           p->family != NULL ? p->family : "label set", name));
        return;
    }
    if (len > VG_PROM_VALUE_MAX) {
        fail(p,
             vg_err_set(p->err, -E2BIG, "metrics: %s: label %s: value of %zu bytes, longer than %d",
                        p->family != NULL ? p->family : "label set", name, len, VG_PROM_VALUE_MAX));
        return;
    }
    if (!label_sep(p))
        return;
    puts_(p, name);
    put(p, "=\"", 2);
    const unsigned char *s = (const unsigned char *)value;
    size_t run = 0, i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c >= 0x20 && c < 0x80 && c != '\\' && c != '"') {
            i++;
            continue;
        }
        size_t n = c == '\\' || c == '"' || c == '\n' ? 0 : utf8_len(s + i, len - i);
        if (n > 0) { /* other controls pass as they are; so do good sequences */
            i += n;
            continue;
        }
        put(p, value + run, i - run);
        put(p,
            c == '\\'   ? "\\\\"
            : c == '"'  ? "\\\""
            : c == '\n' ? "\\n"
                        : "\xEF\xBF\xBD",
            c == '\\' || c == '"' || c == '\n' ? 2 : 3);
        run = ++i;
    }
    put(p, value + run, i - run);
    put(p, "\"", 1);
}

void vg_prom_label(struct vg_prom *p, const char *name, const char *value)
{
    vg_prom_label_n(p, name, value, strlen(value));
}

static size_t u64_text(char tmp[24], uint64_t v)
{
    size_t i = 24;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return i;
}

void vg_prom_label_u64(struct vg_prom *p, const char *name, uint64_t value)
{
    char tmp[24];
    size_t i = u64_text(tmp, value);
    vg_prom_label_n(p, name, tmp + i, sizeof tmp - i);
}

void vg_prom_label_set(struct vg_prom *p, const char *set, size_t len)
{
    if (len == 0 || p->rc < 0 || !label_sep(p))
        return;
    put(p, set, len);
}

/* A sample's end is built in one piece ("} " or " ", the value, the newline) and written
 * with one copy. The longest: "} ", 20 digits, '.', 18 fraction digits, "\n". */
struct line_end {
    char text[64];
    size_t len;
};

/* Starts the end of the sample; false (nothing to write) outside a sample. */
static bool end_begin(struct vg_prom *p, struct line_end *e)
{
    if (p->rc < 0)
        return false;
    if (!p->in_sample) {
        fail(p, vg_err_set(p->err, -EINVAL, "metrics: a value outside a sample (%s)",
                           p->family != NULL ? p->family : "no family"));
        return false;
    }
    e->len = 0;
    if (p->labels > 0)
        e->text[e->len++] = '}';
    e->text[e->len++] = ' ';
    p->in_sample = false;
    p->labels = 0;
    return true;
}

static void end_u64(struct line_end *e, uint64_t v)
{
    char tmp[24];
    size_t i = u64_text(tmp, v);
    memcpy(e->text + e->len, tmp + i, sizeof tmp - i);
    e->len += sizeof tmp - i;
}

static void end_write(struct vg_prom *p, struct line_end *e)
{
    e->text[e->len++] = '\n';
    put(p, e->text, e->len);
}

void vg_prom_u64(struct vg_prom *p, uint64_t value)
{
    struct line_end e;
    if (!end_begin(p, &e))
        return;
    end_u64(&e, value);
    end_write(p, &e);
}

void vg_prom_fixed(struct vg_prom *p, uint64_t value, uint64_t scale, unsigned digits)
{
    if (scale == 0 || digits > 18) {
        fail(p, vg_err_set(p->err, -EINVAL, "metrics: %s: bad fixed-point scale",
                           p->family != NULL ? p->family : "no family"));
        return;
    }
    struct line_end e;
    if (!end_begin(p, &e))
        return;
    if (scale == 1) {
        end_u64(&e, value);
        end_write(p, &e);
        return;
    }
    end_u64(&e, value / scale);
    uint64_t f = value % scale;
    if (f != 0 && digits > 0) {
        char *t = e.text + e.len; /* '.' then the digits, trailing zeros dropped */
        t[0] = '.';
        for (unsigned i = digits; i > 0; i--) {
            t[i] = (char)('0' + f % 10);
            f /= 10;
        }
        unsigned n = digits;
        while (n > 1 && t[n] == '0')
            n--;
        e.len += n + 1;
    }
    end_write(p, &e);
}

void vg_prom_double(struct vg_prom *p, double value)
{
    struct line_end e;
    if (!end_begin(p, &e))
        return;
    const char *special = isnan(value) ? "NaN" : !isinf(value) ? NULL : value > 0 ? "+Inf" : "-Inf";
    if (special != NULL) {
        memcpy(e.text + e.len, special, strlen(special));
        e.len += strlen(special);
    } else {
        int n = snprintf(e.text + e.len, sizeof e.text - e.len - 1, "%.17g", value);
        e.len += n > 0 && (size_t)n < sizeof e.text - e.len - 1 ? (size_t)n : 0;
    }
    end_write(p, &e);
}
