/* Unit tests for src/grpc/wire.c: message framing and reassembly at its boundaries,
 * grpc-timeout, percent-encoding of grpc-message, status names and mappings. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grpc/wire.h"

struct collected {
    unsigned count;
    size_t lens[8];
    uint8_t first_byte[8];
    enum vgrpc_status_code answer;
};

static enum vgrpc_status_code collect(void *arg, const uint8_t *data, size_t len)
{
    struct collected *c = arg;
    if (c->count < 8) {
        c->lens[c->count] = len;
        c->first_byte[c->count] = len ? data[0] : 0;
    }
    c->count++;
    return c->answer;
}

/* A framed message of len bytes, each byte = fill. */
static uint8_t *framed(size_t len, uint8_t fill, size_t *out_len)
{
    uint8_t *buf = malloc(len + VGRPC_PREFIX_LEN);
    assert_non_null(buf);
    vgrpc_frame_prefix(buf, len);
    memset(buf + VGRPC_PREFIX_LEN, fill, len);
    *out_len = len + VGRPC_PREFIX_LEN;
    return buf;
}

static void test_prefix_is_flag_and_big_endian_length(void **state)
{
    (void)state;
    uint8_t p[VGRPC_PREFIX_LEN];
    vgrpc_frame_prefix(p, 0x01020304);
    uint8_t want[] = {0, 1, 2, 3, 4};
    assert_memory_equal(p, want, sizeof want);
    vgrpc_frame_prefix(p, 0);
    uint8_t zero[] = {0, 0, 0, 0, 0};
    assert_memory_equal(p, zero, sizeof zero);
}

static void test_reader_empty_message(void **state)
{
    (void)state;
    struct vgrpc_reader r;
    struct collected c = {0};
    struct vg_err err = {0};
    vgrpc_reader_init(&r, VGRPC_MESSAGE_MAX);
    uint8_t two_empty[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    assert_int_equal(vgrpc_reader_feed(&r, two_empty, sizeof two_empty, collect, &c, &err),
                     VGRPC_STATUS_OK);
    assert_int_equal(c.count, 2);
    assert_int_equal(c.lens[0], 0);
    assert_int_equal(vgrpc_reader_finish(&r, &err), VGRPC_STATUS_OK);
    vgrpc_reader_release(&r);
}

static void test_reader_exactly_4mib_byte_by_byte_boundaries(void **state)
{
    (void)state;
    size_t len;
    uint8_t *msg = framed(VGRPC_MESSAGE_MAX, 0xab, &len);
    struct vgrpc_reader r;
    struct collected c = {0};
    struct vg_err err = {0};
    vgrpc_reader_init(&r, VGRPC_MESSAGE_MAX);
    /* Split inside the prefix, then in uneven pieces. */
    size_t cuts[] = {1, 3, 7, 65536, len};
    size_t at = 0;
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        size_t end = cuts[i] < len ? cuts[i] : len;
        assert_int_equal(vgrpc_reader_feed(&r, msg + at, end - at, collect, &c, &err),
                         VGRPC_STATUS_OK);
        at = end;
    }
    assert_int_equal(c.count, 1);
    assert_int_equal(c.lens[0], VGRPC_MESSAGE_MAX);
    assert_int_equal(c.first_byte[0], 0xab);
    assert_int_equal(vgrpc_reader_finish(&r, &err), VGRPC_STATUS_OK);
    vgrpc_reader_release(&r);
    free(msg);
}

static void test_reader_4mib_plus_one_is_refused_from_the_prefix(void **state)
{
    (void)state;
    struct vgrpc_reader r;
    struct collected c = {0};
    struct vg_err err = {0};
    vgrpc_reader_init(&r, VGRPC_MESSAGE_MAX);
    uint8_t prefix[VGRPC_PREFIX_LEN];
    vgrpc_frame_prefix(prefix, VGRPC_MESSAGE_MAX + 1);
    /* Only the prefix: nothing is buffered before the refusal. */
    assert_int_equal(vgrpc_reader_feed(&r, prefix, sizeof prefix, collect, &c, &err),
                     VGRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err.msg, "4194305"));
    assert_null(r.body);
    assert_int_equal(c.count, 0);
    /* Sticky: later input is refused too. */
    assert_int_not_equal(vgrpc_reader_feed(&r, prefix, 1, collect, &c, &err), VGRPC_STATUS_OK);
    vgrpc_reader_release(&r);
    /* A smaller configured ceiling applies the same way. */
    vgrpc_reader_init(&r, 10);
    vgrpc_frame_prefix(prefix, 11);
    assert_int_equal(vgrpc_reader_feed(&r, prefix, sizeof prefix, collect, &c, &err),
                     VGRPC_STATUS_RESOURCE_EXHAUSTED);
    vgrpc_reader_release(&r);
}

static void test_reader_truncated_prefix_and_body(void **state)
{
    (void)state;
    struct vgrpc_reader r;
    struct collected c = {0};
    struct vg_err err = {0};
    uint8_t partial[] = {0, 0, 0};
    vgrpc_reader_init(&r, VGRPC_MESSAGE_MAX);
    assert_int_equal(vgrpc_reader_feed(&r, partial, sizeof partial, collect, &c, &err),
                     VGRPC_STATUS_OK);
    assert_int_equal(vgrpc_reader_finish(&r, &err), VGRPC_STATUS_INTERNAL);
    assert_non_null(strstr(err.msg, "3 of 5"));
    vgrpc_reader_release(&r);

    uint8_t cut_body[] = {0, 0, 0, 0, 4, 'a', 'b'};
    vgrpc_reader_init(&r, VGRPC_MESSAGE_MAX);
    assert_int_equal(vgrpc_reader_feed(&r, cut_body, sizeof cut_body, collect, &c, &err),
                     VGRPC_STATUS_OK);
    assert_int_equal(c.count, 0);
    assert_int_equal(vgrpc_reader_finish(&r, &err), VGRPC_STATUS_INTERNAL);
    assert_non_null(strstr(err.msg, "7 of 9"));
    vgrpc_reader_release(&r);
}

static void test_reader_compressed_and_bad_flag(void **state)
{
    (void)state;
    struct vgrpc_reader r;
    struct collected c = {0};
    struct vg_err err = {0};
    uint8_t compressed[] = {1, 0, 0, 0, 1, 'x'};
    vgrpc_reader_init(&r, VGRPC_MESSAGE_MAX);
    assert_int_equal(vgrpc_reader_feed(&r, compressed, sizeof compressed, collect, &c, &err),
                     VGRPC_STATUS_UNIMPLEMENTED);
    assert_non_null(strstr(err.msg, "compressed"));
    vgrpc_reader_release(&r);
    uint8_t bad_flag[] = {7, 0, 0, 0, 1, 'x'};
    vgrpc_reader_init(&r, VGRPC_MESSAGE_MAX);
    assert_int_equal(vgrpc_reader_feed(&r, bad_flag, sizeof bad_flag, collect, &c, &err),
                     VGRPC_STATUS_INTERNAL);
    vgrpc_reader_release(&r);
    assert_int_equal(c.count, 0);
}

static void test_reader_sink_can_stop_it(void **state)
{
    (void)state;
    struct vgrpc_reader r;
    struct collected c = {.answer = VGRPC_STATUS_INVALID_ARGUMENT};
    struct vg_err err = {0};
    uint8_t two[] = {0, 0, 0, 0, 1, 'a', 0, 0, 0, 0, 1, 'b'};
    vgrpc_reader_init(&r, VGRPC_MESSAGE_MAX);
    assert_int_equal(vgrpc_reader_feed(&r, two, sizeof two, collect, &c, &err),
                     VGRPC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(c.count, 1); /* the second message is never delivered */
    vgrpc_reader_release(&r);
}

static void test_timeout_parse(void **state)
{
    (void)state;
    uint64_t ms;
    struct vg_err err = {0};
    assert_int_equal(vgrpc_timeout_parse("1H", &ms, &err), 0);
    assert_int_equal(ms, 3600000);
    assert_int_equal(vgrpc_timeout_parse("2M", &ms, &err), 0);
    assert_int_equal(ms, 120000);
    assert_int_equal(vgrpc_timeout_parse("30S", &ms, &err), 0);
    assert_int_equal(ms, 30000);
    assert_int_equal(vgrpc_timeout_parse("250m", &ms, &err), 0);
    assert_int_equal(ms, 250);
    assert_int_equal(vgrpc_timeout_parse("1500u", &ms, &err), 0);
    assert_int_equal(ms, 2); /* rounded up */
    assert_int_equal(vgrpc_timeout_parse("1n", &ms, &err), 0);
    assert_int_equal(ms, 1); /* a non-zero timeout never becomes 0 */
    assert_int_equal(vgrpc_timeout_parse("0m", &ms, &err), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(vgrpc_timeout_parse("99999999H", &ms, &err), 0);
    assert_int_equal(ms, 99999999ull * 3600000ull);

    const char *bad[] = {"",    "m",   "5",   "123456789m", "5s",   "5x",
                         "-5m", " 5m", "5 m", "+5m",        "0x5m", "5mm"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vg_err_clear(&err);
        assert_int_equal(vgrpc_timeout_parse(bad[i], &ms, &err), -EINVAL);
        assert_non_null(strstr(err.msg, "grpc-timeout"));
    }
}

static void test_timeout_format_round_trips(void **state)
{
    (void)state;
    char buf[VGRPC_TIMEOUT_TEXT_MAX + 1];
    vgrpc_timeout_format(250, buf);
    assert_string_equal(buf, "250m");
    vgrpc_timeout_format(99999999, buf);
    assert_string_equal(buf, "99999999m");
    vgrpc_timeout_format(100000000, buf);
    assert_string_equal(buf, "100000S");
    vgrpc_timeout_format(UINT64_MAX, buf);
    assert_string_equal(buf, "99999999H");
    uint64_t values[] = {1, 999, 123456789, 86400000};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        uint64_t back;
        vgrpc_timeout_format(values[i], buf);
        assert_int_equal(vgrpc_timeout_parse(buf, &back, NULL), 0);
        assert_true(back >= values[i]); /* never shorter than asked */
        assert_true(back - values[i] < 1000);
    }
}

static void test_percent_encoding(void **state)
{
    (void)state;
    char out[64];
    const char *msg = "bad 100% état\n";
    assert_int_equal(vgrpc_percent_encode(msg, strlen(msg), out, sizeof out), 23);
    assert_string_equal(out, "bad 100%25 %C3%A9tat%0A");
    char back[64];
    assert_int_equal(vgrpc_percent_decode(out, strlen(out), back, sizeof back), strlen(msg));
    assert_string_equal(back, msg);
    /* Plain ASCII passes through; too small an output is an error, not a cut. */
    assert_int_equal(vgrpc_percent_encode("ok", 2, out, sizeof out), 2);
    assert_string_equal(out, "ok");
    assert_int_equal(vgrpc_percent_encode("%%", 2, out, 6), -ENOSPC);
    assert_int_equal(vgrpc_percent_encode("%%", 2, out, 7), 6);
    /* Malformed sequences decode as themselves. */
    assert_int_equal(vgrpc_percent_decode("a%zz%4", 6, back, sizeof back), 6);
    assert_string_equal(back, "a%zz%4");
    assert_int_equal(vgrpc_percent_decode("%41%", 4, back, sizeof back), 2);
    assert_string_equal(back, "A%");
    /* Output is cut at its size and stays terminated. */
    assert_int_equal(vgrpc_percent_decode("abcdef", 6, back, 4), 3);
    assert_string_equal(back, "abc");
}

static void test_status_names_and_mappings(void **state)
{
    (void)state;
    assert_string_equal(vgrpc_status_name(VGRPC_STATUS_OK), "OK");
    assert_string_equal(vgrpc_status_name(VGRPC_STATUS_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
    assert_string_equal(vgrpc_status_name(VGRPC_STATUS_UNAUTHENTICATED), "UNAUTHENTICATED");
    assert_string_equal(vgrpc_status_name(17), "UNKNOWN_CODE");
    assert_string_equal(vgrpc_status_name(-1), "UNKNOWN_CODE");
    assert_int_equal(vgrpc_status_from_http(400), VGRPC_STATUS_INTERNAL);
    assert_int_equal(vgrpc_status_from_http(401), VGRPC_STATUS_UNAUTHENTICATED);
    assert_int_equal(vgrpc_status_from_http(403), VGRPC_STATUS_PERMISSION_DENIED);
    assert_int_equal(vgrpc_status_from_http(404), VGRPC_STATUS_UNIMPLEMENTED);
    assert_int_equal(vgrpc_status_from_http(429), VGRPC_STATUS_UNAVAILABLE);
    assert_int_equal(vgrpc_status_from_http(503), VGRPC_STATUS_UNAVAILABLE);
    assert_int_equal(vgrpc_status_from_http(500), VGRPC_STATUS_UNKNOWN);
    assert_int_equal(vgrpc_status_from_rst(0x0), VGRPC_STATUS_INTERNAL);
    assert_int_equal(vgrpc_status_from_rst(0x1), VGRPC_STATUS_INTERNAL);
    assert_int_equal(vgrpc_status_from_rst(0x7), VGRPC_STATUS_UNAVAILABLE);
    assert_int_equal(vgrpc_status_from_rst(0x8), VGRPC_STATUS_CANCELLED);
    assert_int_equal(vgrpc_status_from_rst(0xb), VGRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_int_equal(vgrpc_status_from_rst(0xc), VGRPC_STATUS_PERMISSION_DENIED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_is_flag_and_big_endian_length),
        cmocka_unit_test(test_reader_empty_message),
        cmocka_unit_test(test_reader_exactly_4mib_byte_by_byte_boundaries),
        cmocka_unit_test(test_reader_4mib_plus_one_is_refused_from_the_prefix),
        cmocka_unit_test(test_reader_truncated_prefix_and_body),
        cmocka_unit_test(test_reader_compressed_and_bad_flag),
        cmocka_unit_test(test_reader_sink_can_stop_it),
        cmocka_unit_test(test_timeout_parse),
        cmocka_unit_test(test_timeout_format_round_trips),
        cmocka_unit_test(test_percent_encoding),
        cmocka_unit_test(test_status_names_and_mappings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
