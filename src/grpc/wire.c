/* See wire.h. The names and mappings follow the gRPC protocol documents
 * (docs/interfaces.md, "gRPC on the wire", lists them). */
#include "grpc/wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"

static const char *const status_names[] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

const char *vgrpc_status_name(int code)
{
    if (code < 0 || (size_t)code >= sizeof status_names / sizeof status_names[0])
        return "UNKNOWN_CODE";
    return status_names[code];
}

enum vgrpc_status_code vgrpc_status_from_http(int http_status)
{
    switch (http_status) {
    case 400:
        return VGRPC_STATUS_INTERNAL;
    case 401:
        return VGRPC_STATUS_UNAUTHENTICATED;
    case 403:
        return VGRPC_STATUS_PERMISSION_DENIED;
    case 404:
        return VGRPC_STATUS_UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
        return VGRPC_STATUS_UNAVAILABLE;
    default:
        return VGRPC_STATUS_UNKNOWN;
    }
}

enum vgrpc_status_code vgrpc_status_from_rst(uint32_t h2_error_code)
{
    switch (h2_error_code) {
    case 0x7: /* REFUSED_STREAM: not processed, safe to retry */
        return VGRPC_STATUS_UNAVAILABLE;
    case 0x8: /* CANCEL */
        return VGRPC_STATUS_CANCELLED;
    case 0xb: /* ENHANCE_YOUR_CALM */
        return VGRPC_STATUS_RESOURCE_EXHAUSTED;
    case 0xc: /* INADEQUATE_SECURITY */
        return VGRPC_STATUS_PERMISSION_DENIED;
    default: /* NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR, ... */
        return VGRPC_STATUS_INTERNAL;
    }
}

void vgrpc_frame_prefix(uint8_t out[VGRPC_PREFIX_LEN], size_t len)
{
    out[0] = 0;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
}

void vgrpc_reader_init(struct vgrpc_reader *r, size_t max)
{
    memset(r, 0, sizeof *r);
    r->max = max;
}

void vgrpc_reader_release(struct vgrpc_reader *r)
{
    free(r->body);
    r->body = NULL;
    r->in_body = false;
}

static enum vgrpc_status_code reader_fail(struct vgrpc_reader *r, enum vgrpc_status_code status,
                                          struct vg_err *err, const char *what, size_t n)
{
    r->failed = true;
    vgrpc_reader_release(r);
    vg_err_set(err, -EPROTO, "%s (%zu bytes)", what, n);
    return status;
}

static enum vgrpc_status_code reader_deliver(struct vgrpc_reader *r, vgrpc_message_sink sink,
                                             void *arg, struct vg_err *err)
{
    uint8_t *body = r->body;
    size_t len = r->body_len;
    r->body = NULL;
    r->in_body = false;
    r->prefix_len = 0;
    r->messages++;
    enum vgrpc_status_code st = sink(arg, len ? body : NULL, len);
    free(body);
    if (st != VGRPC_STATUS_OK) {
        r->failed = true;
        if (err != NULL && err->code == 0)
            vg_err_set(err, -EPROTO, "message refused with %s", vgrpc_status_name((int)st));
    }
    return st;
}

enum vgrpc_status_code vgrpc_reader_feed(struct vgrpc_reader *r, const uint8_t *data, size_t len,
                                         vgrpc_message_sink sink, void *arg, struct vg_err *err)
{
    if (r->failed)
        return reader_fail(r, VGRPC_STATUS_INTERNAL, err, "input after a failed message", len);
    while (len > 0) {
        if (!r->in_body) {
            size_t take = VGRPC_PREFIX_LEN - r->prefix_len;
            if (take > len)
                take = len;
            memcpy(r->prefix + r->prefix_len, data, take);
            r->prefix_len += take;
            data += take;
            len -= take;
            if (r->prefix_len < VGRPC_PREFIX_LEN)
                break;
            size_t want = (size_t)r->prefix[1] << 24 | (size_t)r->prefix[2] << 16 |
                          (size_t)r->prefix[3] << 8 | (size_t)r->prefix[4];
            if (r->prefix[0] == 1)
                return reader_fail(r, VGRPC_STATUS_UNIMPLEMENTED, err,
                                   "compressed messages are not supported", want);
            if (r->prefix[0] != 0)
                return reader_fail(r, VGRPC_STATUS_INTERNAL, err, "bad compressed-flag byte",
                                   (size_t)r->prefix[0]);
            if (want > r->max)
                return reader_fail(r, VGRPC_STATUS_RESOURCE_EXHAUSTED, err,
                                   "message larger than the limit", want);
            r->in_body = true;
            r->body_want = want;
            r->body_len = 0;
            r->body = want ? xmalloc(want) : NULL;
        }
        size_t take = r->body_want - r->body_len;
        if (take > len)
            take = len;
        if (take > 0) {
            memcpy(r->body + r->body_len, data, take);
            r->body_len += take;
            data += take;
            len -= take;
        }
        if (r->body_len == r->body_want) {
            enum vgrpc_status_code st = reader_deliver(r, sink, arg, err);
            if (st != VGRPC_STATUS_OK)
                return st;
        }
    }
    return VGRPC_STATUS_OK;
}

enum vgrpc_status_code vgrpc_reader_finish(const struct vgrpc_reader *r, struct vg_err *err)
{
    if (r->in_body || r->prefix_len > 0) {
        vg_err_set(err, -EPROTO, "stream ended inside a message (%zu of %zu bytes)",
                   r->in_body ? r->body_len + VGRPC_PREFIX_LEN : r->prefix_len,
                   r->in_body ? r->body_want + VGRPC_PREFIX_LEN : (size_t)VGRPC_PREFIX_LEN);
        return VGRPC_STATUS_INTERNAL;
    }
    return VGRPC_STATUS_OK;
}

int vgrpc_timeout_parse(const char *text, uint64_t *out_ms, struct vg_err *err)
{
    size_t n = strlen(text);
    if (n < 2 || n > 9)
        return vg_err_set(err, -EINVAL, "grpc-timeout '%.16s': want 1 to 8 digits and a unit",
                          text);
    char digits[9];
    memcpy(digits, text, n - 1);
    digits[n - 1] = '\0';
    for (size_t i = 0; i + 1 < n; i++)
        if (digits[i] < '0' || digits[i] > '9')
            return vg_err_set(err, -EINVAL, "grpc-timeout '%s': not a number", text);
    uint64_t v;
    if (vg_parse_u64(digits, 0, 99999999, &v, err) < 0)
        return vg_err_wrap(err, "grpc-timeout '%s'", text);
    uint64_t ms;
    switch (text[n - 1]) {
    case 'H':
        ms = v * 3600000u;
        break;
    case 'M':
        ms = v * 60000u;
        break;
    case 'S':
        ms = v * 1000u;
        break;
    case 'm':
        ms = v;
        break;
    case 'u':
        ms = (v + 999u) / 1000u;
        break;
    case 'n':
        ms = (v + 999999u) / 1000000u;
        break;
    default:
        return vg_err_set(err, -EINVAL, "grpc-timeout '%s': unit must be one of H M S m u n", text);
    }
    *out_ms = ms;
    return 0;
}

void vgrpc_timeout_format(uint64_t ms, char buf[VGRPC_TIMEOUT_TEXT_MAX + 1])
{
    static const struct {
        uint64_t per;
        char unit;
    } units[] = {{1, 'm'}, {1000, 'S'}, {60000, 'M'}, {3600000, 'H'}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        uint64_t v = ms / units[i].per + (ms % units[i].per != 0); /* no overflow */
        if (v <= 99999999u) {
            vg_snprintf(buf, VGRPC_TIMEOUT_TEXT_MAX + 1, "%llu%c", (unsigned long long)v,
                        units[i].unit);
            return;
        }
    }
    vg_snprintf(buf, VGRPC_TIMEOUT_TEXT_MAX + 1, "99999999H");
}

int vgrpc_percent_encode(const char *in, size_t in_len, char *out, size_t size)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (size_t i = 0; i < in_len; i++) {
        unsigned char c = (unsigned char)in[i];
        bool plain = c >= 0x20 && c <= 0x7e && c != '%';
        size_t need = plain ? 1 : 3;
        if (o + need + 1 > size) {
            if (size > 0)
                out[o < size ? o : size - 1] = '\0';
            return -ENOSPC;
        }
        if (plain) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 0xf];
        }
    }
    if (size == 0)
        return -ENOSPC;
    out[o] = '\0';
    return (int)o;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

size_t vgrpc_percent_decode(const char *in, size_t in_len, char *out, size_t size)
{
    size_t o = 0;
    if (size == 0)
        return 0;
    for (size_t i = 0; i < in_len && o + 1 < size; i++) {
        int hi, lo;
        if (in[i] == '%' && i + 2 < in_len && (hi = hex_value(in[i + 1])) >= 0 &&
            (lo = hex_value(in[i + 2])) >= 0) {
            out[o++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            out[o++] = in[i];
        }
    }
    out[o] = '\0';
    return o;
}
