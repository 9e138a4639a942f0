/* The extender's fast lane: ExtenderArgs streaming reader and JSON writer (args.h).
 * The grammar checked is RFC 8259 with jansson's own rules on top (strings are UTF-8
 * without overlong forms or surrogates, \u0000 is refused, surrogate escapes come in
 * pairs); anything the reader is unsure of is declined, never guessed. */
#include "scheduler/args.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/mem.h"

struct rd {
    const unsigned char *p, *end;
};

static void skip_ws(struct rd *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static bool at(const struct rd *r, unsigned char c)
{
    return r->p < r->end && *r->p == c;
}

size_t sched_utf8_len(const unsigned char *s, size_t avail)
{
    unsigned char c = s[0];
    size_t n;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        cp = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        cp = c & 0x0Fu;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        cp = c & 0x07u;
    } else {
        return 0; /* ASCII is not asked about; 0x80-0xC1 and 0xF5-0xFF never start one */
    }
    if (avail < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3Fu);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

static int hex4(const unsigned char *p, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        uint32_t d;
        if (c >= '0' && c <= '9')
            d = (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (uint32_t)(c - 'A' + 10);
        else
            return -1;
        v = (v << 4) | d;
    }
    *out = v;
    return 0;
}

/* The \u escape at r->p (just past the 'u'): one code point, or a surrogate pair. */
static int read_u_escape(struct rd *r, uint32_t *cp)
{
    if (r->end - r->p < 4 || hex4(r->p, cp) < 0)
        return SCHED_ARGS_DECLINE;
    r->p += 4;
    if (*cp >= 0xDC00 && *cp <= 0xDFFF)
        return SCHED_ARGS_DECLINE; /* a low surrogate alone */
    if (*cp >= 0xD800 && *cp <= 0xDBFF) {
        uint32_t lo;
        if (r->end - r->p < 6 || r->p[0] != '\\' || r->p[1] != 'u' || hex4(r->p + 2, &lo) < 0 ||
            lo < 0xDC00 || lo > 0xDFFF)
            return SCHED_ARGS_DECLINE; /* a high surrogate without its pair */
        r->p += 6;
        *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    return *cp == 0 ? SCHED_ARGS_DECLINE : 0;
}

static size_t utf8_put(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The end of the run of bytes at p that stand for themselves in a JSON string (printable
 * ASCII but '"' and '\\'): sixteen at a time with SSE2 (x86-64's baseline), else eight
 * at a time, while they last. A node name of up to 15 bytes takes one step. */
static const unsigned char *plain_run(const unsigned char *p, const unsigned char *end)
{
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'),
                  space = _mm_set1_epi8(0x20);
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
        /* Signed: bytes >= 0x80 are negative, so "< 0x20" catches them too. */
        __m128i stop =
            _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                         _mm_cmplt_epi8(v, space));
        unsigned bits = (unsigned)_mm_movemask_epi8(stop);
        if (bits != 0)
            return p + __builtin_ctz(bits);
        p += 16;
    }
#endif
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
        uint64_t stop = ((q - ones) & ~q) | ((b - ones) & ~b) | /* a '"' or '\\' */
                        ((w - ones * 0x20) & ~w) |              /* a byte < 0x20 */
                        w;                                      /* a byte >= 0x80 */
        if ((stop & highs) != 0)
            break;
        p += 8;
    }
    while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
        p++;
    return p;
}

/* The string at r->p (a '"'), decoded into out (cap bytes with the NUL). */
static int read_string(struct rd *r, char *out, size_t cap, size_t *out_len)
{
    r->p++;
    size_t n = 0;
    for (;;) {
        const unsigned char *s = plain_run(r->p, r->end);
        size_t run = (size_t)(s - r->p);
        if (run >= cap - n)
            return SCHED_ARGS_DECLINE;
        memcpy(out + n, r->p, run);
        n += run;
        r->p = s;
        if (s >= r->end)
            return SCHED_ARGS_DECLINE;
        if (*s == '"') {
            r->p++;
            out[n] = '\0';
            *out_len = n;
            return 0;
        }
        if (*s < 0x20)
            return SCHED_ARGS_DECLINE; /* raw control characters are not allowed */
        if (*s >= 0x80) {
            size_t k = sched_utf8_len(s, (size_t)(r->end - s));
            if (k == 0 || k >= cap - n)
                return SCHED_ARGS_DECLINE;
            memcpy(out + n, s, k);
            n += k;
            r->p += k;
            continue;
        }
        /* A backslash. */
        if (r->end - s < 2)
            return SCHED_ARGS_DECLINE;
        r->p = s + 2;
        uint32_t cp;
        switch (s[1]) {
        case '"':
        case '\\':
        case '/':
            cp = s[1];
            break;
        case 'b':
            cp = '\b';
            break;
        case 'f':
            cp = '\f';
            break;
        case 'n':
            cp = '\n';
            break;
        case 'r':
            cp = '\r';
            break;
        case 't':
            cp = '\t';
            break;
        case 'u':
            if (read_u_escape(r, &cp) != 0)
                return SCHED_ARGS_DECLINE;
            break;
        default:
            return SCHED_ARGS_DECLINE;
        }
        if (cap - n <= 4)
            return SCHED_ARGS_DECLINE;
        n += utf8_put(cp, out + n);
    }
}

/* Skips the object at r->p (a '{') without reading it: strings are stepped over with
 * their escapes, brackets matched up to SCHED_ARGS_MAX_DEPTH. jansson then reads the
 * slice; if it accepts it, the slice is one well-formed object and this is its end. */
static int skip_object(struct rd *r)
{
    unsigned depth = 0;
    uint64_t braces[(SCHED_ARGS_MAX_DEPTH + 63) / 64] = {0}; /* bit set: '{' at that depth */
    while (r->p < r->end) {
        unsigned char c = *r->p++;
        if (c == '"') {
            while (r->p < r->end && *r->p != '"') {
                if (*r->p == '\\' && r->end - r->p < 2)
                    return SCHED_ARGS_DECLINE;
                r->p += *r->p == '\\' ? 2 : 1;
            }
            if (r->p >= r->end)
                return SCHED_ARGS_DECLINE;
            r->p++;
        } else if (c == '{' || c == '[') {
            if (depth >= SCHED_ARGS_MAX_DEPTH)
                return SCHED_ARGS_DECLINE;
            uint64_t bit = (uint64_t)1 << (depth % 64);
            if (c == '{')
                braces[depth / 64] |= bit;
            else
                braces[depth / 64] &= ~bit;
            depth++;
        } else if (c == '}' || c == ']') {
            if (depth == 0)
                return SCHED_ARGS_DECLINE;
            depth--;
            bool brace = (braces[depth / 64] >> (depth % 64)) & 1;
            if (brace != (c == '}'))
                return SCHED_ARGS_DECLINE; /* "{]" or "[}" */
            if (depth == 0)
                return 0;
        }
    }
    return SCHED_ARGS_DECLINE;
}

static int read_names(struct rd *r, struct sched_args_view *v, sched_args_name_fn fn, void *ctx)
{
    char name[SCHED_ARGS_NAME_MAX + 1];
    struct sched_args_name batch[SCHED_ARGS_BATCH];
    size_t pending = 0, count = 0;
    int rc;
    r->p++; /* '[' */
    skip_ws(r);
    if (at(r, ']')) {
        r->p++;
        return 0;
    }
    /* The cursor lives in p (a register) while the names last; r->p is kept in step
     * wherever a helper takes r. */
    const unsigned char *p = r->p, *const end = r->end;
    for (;;) {
        if (p >= end || *p != '"')
            return SCHED_ARGS_DECLINE;
        /* A name without escapes or multi-byte characters (node names are DNS labels)
         * is handed over where it lies in the body; others are decoded into name, and
         * handed over alone after the ones before it. */
        const unsigned char *start = p + 1, *stop = plain_run(start, end);
        size_t n = (size_t)(stop - start);
        if (stop < end && *stop == '"' && n < sizeof name) {
            batch[pending++] = (struct sched_args_name){(const char *)start, n};
            p = stop + 1;
            if (pending == SCHED_ARGS_BATCH) {
                if ((rc = fn(ctx, batch, pending)) != 0)
                    return rc;
                pending = 0;
            }
        } else {
            if (pending > 0 && (rc = fn(ctx, batch, pending)) != 0)
                return rc;
            pending = 0;
            r->p = p;
            if (read_string(r, name, sizeof name, &n) != 0)
                return SCHED_ARGS_DECLINE;
            p = r->p;
            const struct sched_args_name one = {name, n};
            if ((rc = fn(ctx, &one, 1)) != 0)
                return rc;
        }
        count++;
        if (end - p >= 2 && p[0] == ',' && p[1] == '"') {
            p++; /* the compact '","' that encoders write: straight to the next name */
            continue;
        }
        r->p = p;
        skip_ws(r);
        if (at(r, ']')) {
            r->p++;
            v->name_count = count;
            return pending > 0 ? fn(ctx, batch, pending) : 0;
        }
        if (!at(r, ','))
            return SCHED_ARGS_DECLINE;
        r->p++;
        skip_ws(r);
        p = r->p;
    }
}

int sched_args_scan(const char *body, size_t len, struct sched_args_view *v, sched_args_name_fn fn,
                    void *ctx)
{
    memset(v, 0, sizeof *v);
    struct rd r = {(const unsigned char *)body, (const unsigned char *)body + len};
    bool seen_pod = false, seen_nodes = false, seen_names = false;
    skip_ws(&r);
    if (!at(&r, '{'))
        return SCHED_ARGS_DECLINE;
    r.p++;
    skip_ws(&r);
    for (;;) {
        char key[16];
        size_t klen;
        if (!at(&r, '"') || read_string(&r, key, sizeof key, &klen) != 0)
            return SCHED_ARGS_DECLINE;
        skip_ws(&r);
        if (!at(&r, ':'))
            return SCHED_ARGS_DECLINE;
        r.p++;
        skip_ws(&r);
        if (strcmp(key, "Pod") == 0 && !seen_pod && at(&r, '{')) {
            seen_pod = true;
            const unsigned char *start = r.p;
            if (skip_object(&r) != 0)
                return SCHED_ARGS_DECLINE;
            v->pod = (const char *)start;
            v->pod_len = (size_t)(r.p - start);
        } else if (strcmp(key, "Nodes") == 0 && !seen_nodes && r.end - r.p >= 4 &&
                   memcmp(r.p, "null", 4) == 0) {
            seen_nodes = true;
            r.p += 4;
        } else if (strcmp(key, "NodeNames") == 0 && !seen_names && at(&r, '[')) {
            seen_names = true;
            int rc = read_names(&r, v, fn, ctx);
            if (rc != 0)
                return rc;
        } else {
            return SCHED_ARGS_DECLINE; /* unknown or repeated key, or another shape */
        }
        skip_ws(&r);
        if (at(&r, '}')) {
            r.p++;
            break;
        }
        if (!at(&r, ','))
            return SCHED_ARGS_DECLINE;
        r.p++;
        skip_ws(&r);
    }
    skip_ws(&r);
    if (r.p != r.end || !seen_pod || !seen_names)
        return SCHED_ARGS_DECLINE;
    return 0;
}

/* ---- writer --------------------------------------------------------------------------- */

/* Not a vg_buf: this writes every filter response, name by name, and stays infallible
 * (xarray_grow aborts, as the daemon treats running out of memory). Its size follows from the
 * request, which is at most SCHED_MAX_BODY_BYTES. */
static void reserve(struct sched_jbuf *b, size_t more)
{
    xarray_grow(&b->p, &b->cap, b->len + more + 1, 1); /* + 1: the NUL */
}

void sched_jbuf_raw(struct sched_jbuf *b, const char *s, size_t n)
{
    reserve(b, n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void sched_jbuf_lit(struct sched_jbuf *b, const char *s)
{
    sched_jbuf_raw(b, s, strlen(s));
}

void sched_jbuf_str(struct sched_jbuf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    reserve(b, n + 2);
    b->p[b->len++] = '"';
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        while (i < n && u[i] >= 0x20 && u[i] < 0x80 && u[i] != '"' && u[i] != '\\')
            i++;
        if (i > start)
            sched_jbuf_raw(b, s + start, i - start);
        if (i >= n)
            break;
        unsigned char c = u[i];
        char esc[8];
        size_t k = 0;
        if (c >= 0x80) {
            size_t m = sched_utf8_len(u + i, n - i);
            if (m > 0) {
                sched_jbuf_raw(b, s + i, m);
                i += m;
                continue;
            }
            sched_jbuf_raw(b, "\\ufffd", 6);
            i++;
            continue;
        }
        esc[k++] = '\\';
        switch (c) {
        case '"':
        case '\\':
            esc[k++] = (char)c;
            break;
        case '\n':
            esc[k++] = 'n';
            break;
        case '\r':
            esc[k++] = 'r';
            break;
        case '\t':
            esc[k++] = 't';
            break;
        case '\b':
            esc[k++] = 'b';
            break;
        case '\f':
            esc[k++] = 'f';
            break;
        default:
            esc[k++] = 'u';
            esc[k++] = '0';
            esc[k++] = '0';
            esc[k++] = hex[c >> 4];
            esc[k++] = hex[c & 15];
            break;
        }
        sched_jbuf_raw(b, esc, k);
        i++;
    }
    sched_jbuf_raw(b, "\"", 1);
}

char *sched_jbuf_take(struct sched_jbuf *b)
{
    if (b->p == NULL)
        return xstrdup("");
    char *p = b->p;
    memset(b, 0, sizeof *b);
    return p;
}
