/* Unit tests for src/base: errors, scope cleanup, bounded buffers and file reading, number
 * and quantity parsing, the PRNG, logging, the Prometheus text writer. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/times.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/auto.h"
#include "base/auto_json.h"
#include "base/buf.h"
#include "base/fs.h"
#include "base/mem.h"
#include "base/err.h"
#include "base/log.h"
#include "base/parse.h"
#include "base/prng.h"
#include "base/proc.h"
#include "base/prom.h"
#include "base/str.h"

static void test_err_set_and_wrap(void **state)
{
    (void)state;
    struct vg_err err = {0};
    assert_int_equal(vg_err_set(&err, EINVAL, "bad port '%s'", "x"), -EINVAL);
    assert_int_equal(err.code, -EINVAL);
    assert_string_equal(err.msg, "bad port 'x'");
    assert_int_equal(vg_err_wrap(&err, "reading %s", "config.yaml"), -EINVAL);
    assert_string_equal(err.msg, "reading config.yaml: bad port 'x'");
    assert_int_equal(vg_err_set(NULL, -ENOENT, "ignored"), -ENOENT);
    vg_err_clear(&err);
    assert_int_equal(err.code, 0);
    assert_string_equal(err.msg, "");
}

static void test_err_truncation_is_marked(void **state)
{
    (void)state;
    struct vg_err err;
    char big[600];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    vg_err_set(&err, -E2BIG, "%s", big);
    assert_int_equal(strlen(err.msg), VG_ERR_MSG_MAX - 1);
    assert_string_equal(err.msg + VG_ERR_MSG_MAX - 4, "...");
    vg_err_wrap(&err, "context");
    assert_memory_equal(err.msg, "context: aaa", 12);
    assert_string_equal(err.msg + VG_ERR_MSG_MAX - 4, "...");
}

static void test_parse_u64(void **state)
{
    (void)state;
    struct vg_err err;
    uint64_t v = 7;
    assert_int_equal(vg_parse_u64("0", 0, 10, &v, &err), 0);
    assert_int_equal(v, 0);
    assert_int_equal(vg_parse_u64("18446744073709551615", 0, UINT64_MAX, &v, &err), 0);
    assert_true(v == UINT64_MAX);
    assert_int_equal(vg_parse_u64("007", 0, 10, &v, &err), 0);
    assert_int_equal(v, 7);
    const char *bad[] = {"", " 1", "1 ", "-1", "+1", "1x", "0x10", "1.0", "1e3", "١"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 99;
        assert_int_equal(vg_parse_u64(bad[i], 0, 100, &v, &err), -EINVAL);
        assert_int_equal(v, 99); /* output untouched on error */
    }
    assert_int_equal(vg_parse_u64(NULL, 0, 1, &v, &err), -EINVAL);
    assert_int_equal(vg_parse_u64("18446744073709551616", 0, UINT64_MAX, &v, &err), -ERANGE);
    assert_int_equal(vg_parse_u64("101", 1, 100, &v, &err), -ERANGE);
    assert_string_equal(err.msg, "101 is outside 1..100");
    assert_int_equal(vg_parse_u64("0", 1, 100, &v, &err), -ERANGE);
}

static void test_parse_i64(void **state)
{
    (void)state;
    struct vg_err err;
    int64_t v;
    assert_int_equal(vg_parse_i64("-9223372036854775808", INT64_MIN, INT64_MAX, &v, &err), 0);
    assert_true(v == INT64_MIN);
    assert_int_equal(vg_parse_i64("9223372036854775807", INT64_MIN, INT64_MAX, &v, &err), 0);
    assert_true(v == INT64_MAX);
    assert_int_equal(vg_parse_i64("9223372036854775808", INT64_MIN, INT64_MAX, &v, &err), -ERANGE);
    assert_int_equal(vg_parse_i64("-9223372036854775809", INT64_MIN, INT64_MAX, &v, &err), -ERANGE);
    assert_int_equal(vg_parse_i64("-", INT64_MIN, INT64_MAX, &v, &err), -EINVAL);
    assert_int_equal(vg_parse_i64("--1", INT64_MIN, INT64_MAX, &v, &err), -EINVAL);
    assert_int_equal(vg_parse_i64("-5", -4, 4, &v, &err), -ERANGE);
    assert_int_equal(vg_parse_i64("-4", -4, 4, &v, &err), 0);
    assert_int_equal(v, -4);
}

static void test_parse_bytes_units(void **state)
{
    (void)state;
    struct {
        const char *text;
        uint64_t bytes;
    } good[] = {
        {"0", 0},
        {"4096", 4096},
        {"4096b", 4096},
        {"4096B", 4096},
        {"1k", 1024},
        {"1K", 1024},
        {"1KB", 1024},
        {"1KiB", 1024},
        {"4096m", 4096ULL << 20},
        {"4096M", 4096ULL << 20},
        {"4g", 4ULL << 30},
        {"4G", 4ULL << 30},
        {"1gb", 1ULL << 30}, /* CUDA_DEVICE_MEMORY_LIMIT=1gb is 1 GiB, as HAMi reads it */
        {"4GB", 4ULL << 30},
        {"80GiB", 80ULL << 30},
        {"80gib", 80ULL << 30},
        {"81559MiB", 81559ULL << 20},
        {"2t", 2ULL << 40},
        {"2TiB", 2ULL << 40},
        {"1.5GiB", 3ULL << 29},
        {"0.5k", 512},
        {"1.0", 1},
        {"16777215TiB", 16777215ULL << 40},
        {"18446744073709551615", UINT64_MAX},
    };
    struct vg_err err;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 0;
        int rc = vg_parse_bytes(good[i].text, &v, &err);
        if (rc != 0)
            fail_msg("'%s' rejected: %s", good[i].text, err.msg);
        if (v != good[i].bytes)
            fail_msg("'%s' -> %llu", good[i].text, (unsigned long long)v);
    }
}

static void test_parse_bytes_malformed(void **state)
{
    (void)state;
    const char *bad[] = {
        "",     " ",   "m",   "g4",   "4 g",     " 4g",   "4g ",   "4gg",  "4gi",           "4GiBs",
        "4x",   "-4g", "+4g", "4.g",  ".5g",     "4..5g", "1.5",   "0.1k", "1.0000000001g", "4,096",
        "0x10", "1e9", "4\n", "4g\t", "4096mb ", "Mi",    "4 096", "4-",   "4pb",           "4P",
        "NaN",  "inf",
    };
    struct vg_err err;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 12345;
        int rc = vg_parse_bytes(bad[i], &v, &err);
        if (rc != -EINVAL)
            fail_msg("'%s' gave %d, want -EINVAL", bad[i], rc);
        assert_int_equal(v, 12345);
        assert_true(strlen(err.msg) > 0);
    }
    uint64_t v;
    assert_int_equal(vg_parse_bytes(NULL, &v, &err), -EINVAL);
    const char *huge[] = {"18446744073709551616", "16777216TiB", "17179869184g",
                          "99999999999999999999999k", "16777215.9999TiB"};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        int rc = vg_parse_bytes(huge[i], &v, &err);
        if (rc != -ERANGE && rc != -EINVAL)
            fail_msg("'%s' gave %d, want an error", huge[i], rc);
    }
    assert_int_equal(vg_parse_bytes("18446744073709551616", &v, &err), -ERANGE);
    assert_int_equal(vg_parse_bytes("16777216TiB", &v, &err), -ERANGE);
    assert_non_null(strstr(err.msg, "64 bits"));
}

static void test_parse_mib_default(void **state)
{
    (void)state;
    struct vg_err err;
    uint64_t v;
    assert_int_equal(vg_parse_mib_default("81559", &v, &err), 0);
    assert_true(v == 81559ULL << 20);
    assert_int_equal(vg_parse_mib_default("80GiB", &v, &err), 0);
    assert_true(v == 80ULL << 30);
    assert_int_equal(vg_parse_mib_default("512b", &v, &err), 0);
    assert_int_equal(v, 512);
    assert_int_equal(vg_parse_mib_default("17592186044416", &v, &err), -ERANGE);
}

/* nvidia.com/gpumem as Kubernetes writes it: the grammar is Kubernetes' resource.Quantity,
 * binary suffixes and M..E count bytes, a plain number, k and exponents count MiB (HAMi's
 * reading; Kubernetes rewrites a plain 3000 as 3k), everything rounds up to whole MiB. */
static void test_parse_kube_mib(void **state)
{
    (void)state;
    const struct {
        const char *text;
        uint64_t mib;
    } good[] = {
        {"4Gi", 4096},
        {"4096Mi", 4096},
        {"4G", 3815}, /* 4e9 bytes = 3814.7 MiB, rounded up */
        {"4096", 4096},
        {"+4096", 4096},
        {"3k", 3000}, /* what Kubernetes stores for a plain 3000 */
        {"1e3", 1000},
        {"1E3", 1000},
        {"3e+3", 3000},
        {"30e-1", 3},
        {"0", 0},
        {"-0", 0},
        {"0.5Gi", 512},
        {"1.5Gi", 1536},
        {".5Gi", 512},
        {"4.Gi", 4096},
        {"1Ki", 1}, /* 1024 bytes round up to 1 MiB */
        {"1048577", 1048577},
        {"1048576Ki", 1024},
        {"1048577Ki", 1025},
        {"1M", 1},
        {"1000M", 954},
        {"80G", 76294},
        {"1Ti", 1048576},
        {"1.5", 2},
        {"0.001", 1},
        {"2147483647", 2147483647},
        {"2Pi", 2147483648ULL},
        {"1Ei", 1ULL << 40},
    };
    struct vg_err err;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 0;
        int rc = vg_parse_kube_mib(good[i].text, UINT64_MAX, &v, &err);
        if (rc != 0)
            fail_msg("'%s' rejected: %s", good[i].text, err.msg);
        if (v != good[i].mib)
            fail_msg("'%s' -> %llu MiB, want %llu", good[i].text, (unsigned long long)v,
                     (unsigned long long)good[i].mib);
    }
    /* Refused, each with a message: the old vgpu spellings Kubernetes never accepts
     * (GiB, g, mb) name the Kubernetes suffix to use instead. */
    const struct {
        const char *text;
        int rc;
        const char *says;
    } bad[] = {
        {"4GiB", -EINVAL, "4Gi"},
        {"4g", -EINVAL, "4Gi"},
        {"4096mb", -EINVAL, "4Gi"},
        {"4gi", -EINVAL, "unknown suffix"},
        {"4096m", -EINVAL, "milli"},
        {"1500m", -EINVAL, "milli"},
        {"-1", -EINVAL, "negative"},
        {"-4Gi", -EINVAL, "negative"},
        {"-0.5", -EINVAL, "negative"},
        {"", -EINVAL, "empty"},
        {" 4Gi", -EINVAL, "whitespace"},
        {"4Gi ", -EINVAL, "whitespace"},
        {"4 Gi", -EINVAL, "whitespace"},
        {"4Gi\n", -EINVAL, "whitespace"},
        {"Gi", -EINVAL, "no digits"},
        {".", -EINVAL, "no digits"},
        {"+", -EINVAL, "no digits"},
        {"1..5", -EINVAL, "unknown suffix"},
        {"1e", -EINVAL, "exponent"},
        {"1e+", -EINVAL, "exponent"},
        {"1e3Mi", -EINVAL, "exponent"},
        {"1e1.5", -EINVAL, "exponent"},
        {"0x10", -EINVAL, "unknown suffix"},
        {"4,096", -EINVAL, "unknown suffix"},
        {"NaN", -EINVAL, "no digits"},
        {"9223372036854775808", -ERANGE, "2^63-1"},
        {"8Ei", -ERANGE, "2^63-1"},
        {"9223372036854775807k", -ERANGE, "2^63-1"},
        {"1e19", -ERANGE, "2^63-1"},
        {"1e999999999999", -ERANGE, "2^63-1"},
        {"100000000000000000000000000000000000000000", -ERANGE, "2^63-1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 12345;
        int rc = vg_parse_kube_mib(bad[i].text, UINT64_MAX, &v, &err);
        if (rc != bad[i].rc)
            fail_msg("'%s' gave %d, want %d", bad[i].text, rc, bad[i].rc);
        assert_int_equal(v, 12345);
        if (strstr(err.msg, bad[i].says) == NULL)
            fail_msg("'%s': message '%s' does not say '%s'", bad[i].text, err.msg, bad[i].says);
    }
    uint64_t v;
    assert_int_equal(vg_parse_kube_mib(NULL, UINT64_MAX, &v, &err), -EINVAL);
    /* The caller's ceiling applies after rounding. */
    assert_int_equal(vg_parse_kube_mib("2Pi", 2147483647, &v, &err), -ERANGE);
    assert_non_null(strstr(err.msg, "2147483648 MiB"));
    assert_int_equal(vg_parse_kube_mib("2147483647Mi", 2147483647, &v, &err), 0);
    assert_int_equal(vg_parse_kube_mib("2147483647.5Mi", 2147483647, &v, &err), -ERANGE);
}

/* Counts (nvidia.com/gpu, gpucores, gpumem-percentage): Kubernetes quantities that must
 * be whole numbers. */
static void test_parse_kube_count(void **state)
{
    (void)state;
    const struct {
        const char *text;
        uint64_t v;
    } good[] = {
        {"1", 1},     {"2", 2},      {"+3", 3},    {"100", 100}, {"1e2", 100}, {"0.1k", 100},
        {"1k", 1000}, {"1Ki", 1024}, {"2000m", 2}, {"0", 0},     {"1.0", 1},   {"10E-1", 1},
    };
    struct vg_err err;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 0;
        int rc = vg_parse_kube_count(good[i].text, 1000000, &v, &err);
        if (rc != 0)
            fail_msg("'%s' rejected: %s", good[i].text, err.msg);
        if (v != good[i].v)
            fail_msg("'%s' -> %llu", good[i].text, (unsigned long long)v);
    }
    const char *fraction[] = {"0.5", "500m", "1.5", "1e-1", "1.0001"};
    for (size_t i = 0; i < sizeof fraction / sizeof fraction[0]; i++) {
        uint64_t v = 7;
        assert_int_equal(vg_parse_kube_count(fraction[i], 100, &v, &err), -EINVAL);
        assert_non_null(strstr(err.msg, "whole number"));
        assert_int_equal(v, 7);
    }
    uint64_t v;
    assert_int_equal(vg_parse_kube_count("-1", 100, &v, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "negative"));
    assert_int_equal(vg_parse_kube_count("101", 100, &v, &err), -ERANGE);
    assert_non_null(strstr(err.msg, "above the most, 100"));
    assert_int_equal(vg_parse_kube_count("1x", 100, &v, &err), -EINVAL);
    assert_int_equal(vg_parse_kube_count("", 100, &v, &err), -EINVAL);
}

static void test_prng_reference_vectors(void **state)
{
    (void)state;
    /* splitmix64 from seed 1234567: the published reference outputs. */
    uint64_t sm = 1234567;
    const uint64_t want[] = {6457827717110365317ULL, 3203168211198807973ULL, 9817491932198370423ULL,
                             4593380528125082431ULL, 16408922859458223821ULL};
    for (size_t i = 0; i < 5; i++)
        assert_true(vg_splitmix64(&sm) == want[i]);
    /* xoshiro256** with state {1, 2, 3, 4}: 11520, 0, 1509978240, 1215971899390074240. */
    struct vg_prng rng = {{1, 2, 3, 4}};
    assert_true(vg_prng_next(&rng) == 11520ULL);
    assert_true(vg_prng_next(&rng) == 0ULL);
    assert_true(vg_prng_next(&rng) == 1509978240ULL);
    assert_true(vg_prng_next(&rng) == 1215971899390074240ULL);
}

static void test_prng_determinism_and_ranges(void **state)
{
    (void)state;
    struct vg_prng a, b, c;
    vg_prng_seed(&a, 42);
    vg_prng_seed(&b, 42);
    vg_prng_seed(&c, 43);
    int same_as_other_seed = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = vg_prng_next(&a);
        assert_true(x == vg_prng_next(&b));
        same_as_other_seed += x == vg_prng_next(&c);
    }
    assert_true(same_as_other_seed < 2);
    /* below(): in range, and every value of a small range shows up about equally. */
    int counts[7] = {0};
    for (int i = 0; i < 70000; i++) {
        uint64_t x = vg_prng_below(&a, 7);
        assert_true(x < 7);
        counts[x]++;
    }
    for (int i = 0; i < 7; i++)
        assert_true(counts[i] > 9000 && counts[i] < 11000);
    assert_int_equal(vg_prng_below(&a, 0), 0);
    assert_int_equal(vg_prng_below(&a, 1), 0);
    for (int i = 0; i < 1000; i++) {
        double u = vg_prng_unit(&a);
        assert_true(u >= 0.0 && u < 1.0);
    }
}

static void test_log_format_text_and_json(void **state)
{
    (void)state;
    char buf[512];
    long long ts = 1763769600123LL; /* 2025-11-22T00:00:00.123Z */
    int n = vg_log_format(buf, sizeof buf, false, VG_LOG_WARN, ts, "/x/src/base/log.c", 12,
                          "listening", "addr=0.0.0.0 port=8080");
    buf[n] = '\0';
    assert_string_equal(buf, "warn 2025-11-22T00:00:00.123Z src/base/log.c:12 listening "
                             "addr=0.0.0.0 port=8080\n");
    n = vg_log_format(buf, sizeof buf, true, VG_LOG_ERROR, ts, "a.c", 3, "bad \"x\"",
                      "path=\"/a b\" code=-2");
    buf[n] = '\0';
    assert_string_equal(buf, "{\"level\":\"error\",\"ts\":\"2025-11-22T00:00:00.123Z\","
                             "\"src\":\"a.c:3\",\"msg\":\"bad \\\"x\\\"\",\"path\":\"/a b\","
                             "\"code\":\"-2\"}\n");
    /* A line longer than the buffer is cut but still ends in a newline. */
    char small[32];
    n = vg_log_format(small, sizeof small, false, VG_LOG_INFO, ts, "a.c", 1, "m", "");
    assert_int_equal(n, 32);
    assert_int_equal(small[31], '\n');
    assert_int_equal(vg_log_level_from_name("debug"), VG_LOG_DEBUG);
    assert_int_equal(vg_log_level_from_name("loud"), -1);
}

static int evaluated;
static int side_effect(void)
{
    return ++evaluated;
}

static void test_log_disabled_level_skips_arguments(void **state)
{
    (void)state;
    vg_log_max_level = VG_LOG_WARN;
    evaluated = 0;
    vg_log(VG_LOG_DEBUG, "never", "n=%d", side_effect());
    assert_int_equal(evaluated, 0);
    vg_log_max_level = VG_LOG_INFO;
}

static void test_checked_strings(void **state)
{
    (void)state;
    char buf[8];
    assert_int_equal(vg_snprintf(buf, sizeof buf, "%s", "1234567"), 7);
    assert_int_equal(vg_snprintf(buf, sizeof buf, "%s", "12345678"), -ENOSPC);
    assert_string_equal(buf, "1234567");
    assert_int_equal(vg_strlcpy(buf, "abc", sizeof buf), 3);
    assert_string_equal(buf, "abc");
    assert_int_equal(vg_strlcpy(buf, "abcdefghij", sizeof buf), -ENOSPC);
    assert_string_equal(buf, "abcdefg");
}

static int fails_and_wraps(struct vg_err *err)
{
    vg_err_set(err, -EINVAL, "bad value");
    return vg_err_wrap(err, "reading %s", "x");
}

/* `return vg_err_wrap(...)` is how an error passes upward; a caller that passes no err
 * (NULL is allowed everywhere) must still see a failure, not 0. */
static void test_err_wrap_passes_failure_up(void **state)
{
    (void)state;
    struct vg_err err;
    assert_int_equal(fails_and_wraps(&err), -EINVAL);
    assert_string_equal(err.msg, "reading x: bad value");
    assert_true(fails_and_wraps(NULL) < 0);
}

static void test_err_errno(void **state)
{
    (void)state;
    struct vg_err err;
    vg_err_clear(&err);
    /* Positive and negative errno give the same code and the system's text. */
    assert_int_equal(vg_err_errno(&err, ENOENT, "%s: cannot open", "/x"), -ENOENT);
    assert_int_equal(err.code, -ENOENT);
    assert_string_equal(err.msg, "/x: cannot open: No such file or directory");
    assert_int_equal(vg_err_errno(&err, -EACCES, "reading %d", 7), -EACCES);
    assert_string_equal(err.msg, "reading 7: Permission denied");
    /* errno 0 (a caller that read errno too late) still reads as a failure. */
    assert_int_equal(vg_err_errno(&err, 0, "x"), -EIO);
    assert_int_equal(vg_err_errno(NULL, EPERM, "x"), -EPERM);
    /* An unknown number still gives a message, never an empty one. */
    vg_err_errno(&err, 100000, "odd");
    assert_int_equal(strncmp(err.msg, "odd: ", 5), 0);
    assert_true(strlen(err.msg) > 5);
    /* A long prefix is cut and marked, the buffer never overrun. */
    char longp[400];
    memset(longp, 'p', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    vg_err_errno(&err, ENOENT, "%s", longp);
    assert_int_equal(strlen(err.msg), VG_ERR_MSG_MAX - 1);
    assert_string_equal(err.msg + VG_ERR_MSG_MAX - 4, "...");
    /* Wrapping keeps the errno text at the end. */
    vg_err_errno(&err, ENOSPC, "writing");
    vg_err_wrap(&err, "saving state");
    assert_string_equal(err.msg, "saving state: writing: No space left on device");
    char buf[8];
    assert_non_null(vg_strerror(ENOENT, buf, sizeof buf)); /* small buffers are safe */
    assert_string_equal(VG_STRERROR(-ENOENT), "No such file or directory");
}

static char *make_owned(const char *s, bool hand_over)
{
    VG_AUTO_FREE char *p = strdup(s);
    if (!hand_over)
        return NULL; /* p is freed here (ASan would report a leak otherwise) */
    return vg_steal_ptr(&p);
}

static void test_auto_cleanup(void **state)
{
    (void)state;
    char *kept = make_owned("abc", true);
    assert_string_equal(kept, "abc");
    free(kept);
    assert_null(make_owned("abc", false));

    int fds[2];
    assert_int_equal(pipe(fds), 0);
    {
        VG_AUTO_CLOSE int r = fds[0];
        (void)r;
    }
    assert_int_equal(fcntl(fds[0], F_GETFD), -1); /* closed at scope exit */
    int w;
    {
        VG_AUTO_CLOSE int fd = fds[1];
        w = vg_steal_fd(&fd);
        assert_int_equal(fd, -1);
    }
    assert_true(fcntl(w, F_GETFD) >= 0); /* handed over, still open */
    {
        VG_AUTO_FILE FILE *f = fdopen(w, "w");
        assert_non_null(f);
    }
    assert_int_equal(fcntl(w, F_GETFD), -1); /* fclose closed it */
    json_t *outer = json_object();
    if (outer == NULL)
        abort();
    {
        VG_AUTO_JSON json_t *j = json_incref(outer);
        assert_ptr_equal(j, outer);
        assert_int_equal(outer->refcount, 2);
    }
    assert_int_equal(outer->refcount, 1); /* the scope exit dropped its reference */
    {
        VG_AUTO_JSON json_t *j = json_incref(outer);
        json_t *taken = vg_steal_ptr(&j);
        assert_null(j);
        json_decref(taken);
    }
    json_decref(outer);
}

static void test_buf_append_and_ceiling(void **state)
{
    (void)state;
    struct vg_err err;
    vg_err_clear(&err);
    struct vg_buf b;
    vg_buf_init(&b, "test body", 100);
    assert_null(b.data);
    assert_int_equal(vg_buf_append(&b, "hello", 5, &err), 0);
    assert_int_equal(vg_buf_appendf(&b, &err, " %d%s", 42, "!"), 0);
    assert_int_equal(b.len, 9);
    assert_string_equal(b.data, "hello 42!");
    /* Grows past its first allocation up to exactly the ceiling. */
    char block[91];
    memset(block, 'x', sizeof block);
    assert_int_equal(vg_buf_append(&b, block, 91, &err), 0);
    assert_int_equal(b.len, 100);
    assert_int_equal(b.data[100], '\0');
    /* One byte more is refused, with a message naming the buffer, and changes nothing. */
    assert_int_equal(vg_buf_append(&b, "y", 1, &err), -E2BIG);
    assert_int_equal(err.code, -E2BIG);
    assert_string_equal(err.msg, "test body: larger than 100 bytes");
    assert_int_equal(b.len, 100);
    assert_int_equal(vg_buf_appendf(&b, &err, "%s", "z"), -E2BIG);
    assert_int_equal(b.len, 100);
    assert_int_equal(b.data[99], 'x');
    /* A huge append cannot wrap the length arithmetic. */
    assert_int_equal(vg_buf_append(&b, block, SIZE_MAX, &err), -E2BIG);
    /* Reset keeps the ceiling and the memory. */
    char *mem = b.data;
    vg_buf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    assert_int_equal(vg_buf_append_str(&b, "again", &err), 0);
    assert_ptr_equal(b.data, mem);
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(vg_buf_steal(&b, &out, &len, &err), 0);
    assert_string_equal(out, "again");
    assert_int_equal(len, 5);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    free(out);
    /* Stealing an empty buffer gives "", never NULL. */
    assert_int_equal(vg_buf_steal(&b, &out, NULL, &err), 0);
    assert_string_equal(out, "");
    free(out);
    vg_buf_free(&b);
    /* A zero ceiling takes nothing. */
    vg_buf_init(&b, "empty", 0);
    assert_int_equal(vg_buf_append(&b, "", 0, &err), 0);
    assert_int_equal(vg_buf_append(&b, "a", 1, &err), -E2BIG);
    assert_string_equal(err.msg, "empty: larger than 0 bytes");
    vg_buf_free(&b);
}

static void test_array_grow(void **state)
{
    (void)state;
    struct vg_err err;
    vg_err_clear(&err);
    uint64_t *v = NULL;
    size_t cap = 0;
    assert_int_equal(vg_array_grow(&v, &cap, 1, sizeof *v, 40, "pods", &err), 0);
    assert_true(cap >= 1 && cap <= 40);
    for (size_t i = 0; i < 40; i++) {
        assert_int_equal(vg_array_grow(&v, &cap, i + 1, sizeof *v, 40, "pods", &err), 0);
        v[i] = i;
    }
    assert_int_equal(cap, 40); /* clamped to the ceiling, not doubled past it */
    uint64_t *before = v;
    assert_int_equal(vg_array_grow(&v, &cap, 41, sizeof *v, 40, "pods", &err), -E2BIG);
    assert_string_equal(err.msg, "pods: more than 40 items");
    assert_ptr_equal(v, before);
    assert_int_equal(cap, 40);
    assert_int_equal(v[39], 39);
    /* An element count whose byte size would overflow is refused, not wrapped. */
    assert_int_equal(vg_array_grow(&v, &cap, SIZE_MAX / 4, sizeof *v, SIZE_MAX, "big", &err),
                     -E2BIG);
    free(v);
}

/* Growth goes through vg_realloc, so the allocation-failure tests of the modules that grow
 * arrays (placement's node table and mix) reach it; a failure leaves the array as it was. */
static void test_array_grow_allocation_failure(void **state)
{
    (void)state;
    struct vg_err err;
    vg_err_clear(&err);
    uint32_t *v = NULL;
    size_t cap = 0;
    assert_int_equal(vg_array_grow(&v, &cap, 16, sizeof *v, 1000, "gpus", &err), 0);
    v[15] = 7;
    uint32_t *before = v;
    vg_mem_fail_nth(1);
    assert_int_equal(vg_array_grow(&v, &cap, 17, sizeof *v, 1000, "gpus", &err), -ENOMEM);
    assert_true(vg_mem_fail_fired());
    assert_non_null(strstr(err.msg, "gpus: out of memory"));
    assert_ptr_equal(v, before);
    assert_int_equal(cap, 16);
    assert_int_equal(v[15], 7);
    assert_int_equal(vg_array_grow(&v, &cap, 17, sizeof *v, 1000, "gpus", &err), 0);
    assert_int_equal(v[15], 7);
    free(v);
}

static void write_file(const char *path, const char *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
}

static void test_read_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/vgpu-test-base-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/f", dir);
    struct vg_err err;
    vg_err_clear(&err);
    char *text = NULL;
    size_t len = 0;

    write_file(path, "a\0b\n", 4); /* embedded NUL kept, length exact */
    assert_int_equal(vg_read_file(path, 4, &text, &len, &err), 0);
    assert_int_equal(len, 4);
    assert_memory_equal(text, "a\0b\n", 5);
    free(text);

    /* Exactly at the ceiling is fine; one byte over is refused with the path. */
    assert_int_equal(vg_read_file(path, 3, &text, &len, &err), -EFBIG);
    char want[256];
    snprintf(want, sizeof want, "%s: larger than 3 bytes", path);
    assert_string_equal(err.msg, want);

    write_file(path, "", 0);
    assert_int_equal(vg_read_file(path, 10, &text, NULL, &err), 0);
    assert_string_equal(text, "");
    free(text);

    /* A file larger than one read chunk. */
    size_t big = 100000;
    char *data = malloc(big);
    assert_non_null(data);
    for (size_t i = 0; i < big; i++)
        data[i] = (char)('a' + i % 26);
    write_file(path, data, big);
    assert_int_equal(vg_read_file(path, big, &text, &len, &err), 0);
    assert_int_equal(len, big);
    assert_memory_equal(text, data, big);
    free(text);
    free(data);

    /* A file without a size (/proc) is read to its end and still bounded. */
    assert_int_equal(vg_read_file("/proc/self/status", 1 << 20, &text, &len, &err), 0);
    assert_non_null(strstr(text, "Name:"));
    free(text);
    assert_int_equal(vg_read_file("/proc/self/status", 16, &text, &len, &err), -EFBIG);
    assert_string_equal(err.msg, "/proc/self/status: larger than 16 bytes");

    assert_int_equal(vg_read_file(dir, 10, &text, &len, &err), -EISDIR);
    snprintf(want, sizeof want, "%s: is a directory", dir);
    assert_string_equal(err.msg, want);

    snprintf(path, sizeof path, "%s/missing", dir);
    assert_int_equal(vg_read_file(path, 10, &text, &len, &err), -ENOENT);
    snprintf(want, sizeof want, "%s: cannot open: No such file or directory", path);
    assert_string_equal(err.msg, want);

    snprintf(path, sizeof path, "%s/f", dir);
    unlink(path);
    rmdir(dir);
}

/* mkdir -p with a mode: missing parents made, an existing directory's mode set, a file in
 * the way and an empty name refused with the path in the message. */
static void test_mkdir_parents(void **state)
{
    (void)state;
    char tmp[] = "/tmp/vgpu-fs-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char path[256], file[256];
    snprintf(path, sizeof path, "%s/a/b/c", tmp);
    struct vg_err err = {0};
    assert_int_equal(vg_mkdir_parents(path, 0755, &err), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0755);
    assert_int_equal(chmod(path, 01777), 0);
    assert_int_equal(vg_mkdir_parents(path, 0755, &err), 0); /* again: the mode is closed */
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0755);
    snprintf(file, sizeof file, "%s/f", tmp);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(path, sizeof path, "%s/f/d", tmp);
    assert_true(vg_mkdir_parents(path, 0755, &err) < 0);
    assert_non_null(strstr(err.msg, file));
    assert_true(vg_mkdir_parents("", 0755, &err) < 0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    assert_int_equal(system(cmd), 0);
}

/* Atomic replacement: the new content whole with the mode asked for; a symbolic link at
 * PATH.tmp is not followed; with SWAP the old content is left at PATH.tmp; a directory in
 * the way leaves the old file and no PATH.tmp. */
static void test_write_file_atomic(void **state)
{
    (void)state;
    char tmp[] = "/tmp/vgpu-fs-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char path[256], side[256], text[64];
    snprintf(path, sizeof path, "%s/f", tmp);
    snprintf(side, sizeof side, "%s/f.tmp", tmp);
    struct vg_err err = {0};
    assert_int_equal(vg_write_file_atomic(path, "one", 3, 0600, 0, &err), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(
        vg_write_file_atomic(path, "two!", 4, 0644, VG_WRITE_SYNC | VG_WRITE_SWAP, &err), 0);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(text, 1, sizeof text, f);
    fclose(f);
    assert_int_equal(n, 4);
    assert_memory_equal(text, "two!", 4);
    f = fopen(side, "r"); /* swapped: the previous content is the next write's file */
    assert_non_null(f);
    n = fread(text, 1, sizeof text, f);
    fclose(f);
    assert_int_equal(n, 3);
    assert_int_equal(unlink(side), 0);
    char target[256];
    snprintf(target, sizeof target, "%s/elsewhere", tmp);
    assert_int_equal(symlink(target, side), 0);
    assert_true(vg_write_file_atomic(path, "x", 1, 0644, 0, &err) < 0);
    assert_int_not_equal(access(target, F_OK), 0); /* nothing written through the link */
    assert_int_equal(unlink(side), 0);
    assert_int_equal(mkdir(side, 0755), 0);
    assert_true(vg_write_file_atomic(path, "x", 1, 0644, 0, &err) < 0);
    assert_non_null(strstr(err.msg, side));
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 4);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    assert_int_equal(system(cmd), 0);
}

/* A stat line as the kernel writes it, with COMM as the command and 52 fields. */
static size_t stat_line(char *buf, size_t size, const char *comm, char state,
                        unsigned long long start)
{
    int n = snprintf(buf, size,
                     "4242 (%s) %c 1 4242 4242 0 -1 4194560 100 0 0 0 3 1 0 0 20 0 1 0 %llu "
                     "12345678 300 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 17 3 0 0 0 "
                     "0 0 0 0 0 0 0 0 0 0\n",
                     comm, state, start);
    assert_true(n > 0 && (size_t)n < size);
    return (size_t)n;
}

/* The start time is field 22 counted from the last ')', whatever the command holds; a
 * line cut anywhere up to and including the start time is refused, never misread. */
static void test_proc_stat_parse(void **state)
{
    (void)state;
    static const char *const comms[] = {
        "sleep", ") 1 2 3 (", "a b",
        "((",    "))",        ") R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99 ",
        ""};
    char line[1024];
    struct vg_proc_stat st;
    struct vg_err err = {0};
    for (size_t i = 0; i < sizeof comms / sizeof comms[0]; i++) {
        size_t len = stat_line(line, sizeof line, comms[i], 'S', 987654321ULL);
        memset(&st, 0, sizeof st);
        assert_int_equal(vg_proc_stat_parse(line, len, &st, &err), 0);
        assert_int_equal(st.state, 'S');
        assert_int_equal(st.utime, 3);
        assert_int_equal(st.stime, 1);
        assert_int_equal(st.start_time, 987654321ULL);
    }
    size_t len = stat_line(line, sizeof line, ") 1 2 3 (", 'Z', 77);
    const char *after = strstr(line, " 77 ");
    assert_non_null(after);
    size_t whole = (size_t)(after - line) + 4; /* through the space after the start time */
    for (size_t cut = 0; cut < whole; cut++)
        assert_int_equal(vg_proc_stat_parse(line, cut, &st, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "field 22"));
    assert_int_equal(vg_proc_stat_parse(line, whole, &st, &err), 0);
    assert_int_equal(st.start_time, 77);
    assert_true(vg_proc_state_exited(st.state));
    assert_int_equal(vg_proc_stat_parse(line, len, &st, &err), 0);

    assert_int_equal(vg_proc_stat_parse("4242 sleep S 1", 14, &st, &err), -EINVAL);
    assert_string_equal(err.msg, "stat line: no ')' after the command");
    len = stat_line(line, sizeof line, "x", 'S', 0);
    char *start = strstr(line, " 0 12345678");
    assert_non_null(start);
    memcpy(start + 1, "x", 1); /* not a number */
    assert_int_equal(vg_proc_stat_parse(line, len, &st, &err), -EINVAL);
    char big[1024];
    snprintf(big, sizeof big,
             "1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 18446744073709551616 1 1\n");
    assert_int_equal(vg_proc_stat_parse(big, strlen(big), &st, &err), -EINVAL);
    assert_string_equal(err.msg, "stat line: field 22 missing, cut or not a number");
    snprintf(big, sizeof big, "1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0  5 1\n");
    assert_int_equal(vg_proc_stat_parse(big, strlen(big), &st, &err), -EINVAL);
}

/* A live process renames itself ") 1 2 3 (" (prctl, as any program may): its start time
 * reads the same as under its first name; once it exits it reads as exited, once reaped
 * as gone; a truncated file under another proc root is refused with its path. */
static void test_proc_stat_read(void **state)
{
    (void)state;
    int go[2], ready[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(ready), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        char c;
        close(go[1]);
        close(ready[0]);
        prctl(PR_SET_NAME, "plainname");
        if (write(ready[1], "a", 1) != 1 || read(go[0], &c, 1) != 1)
            _exit(1);
        prctl(PR_SET_NAME, ") 1 2 3 (");
        if (write(ready[1], "b", 1) != 1 || read(go[0], &c, 1) != 1)
            _exit(1);
        _exit(0);
    }
    close(go[0]);
    close(ready[1]);
    char c;
    struct vg_err err = {0};
    struct vg_proc_stat first, renamed;
    assert_int_equal(read(ready[0], &c, 1), 1);
    assert_int_equal(vg_proc_stat_read(NULL, child, &first, &err), 0);
    assert_false(vg_proc_state_exited(first.state));
    uint64_t self = 0;
    assert_int_equal(vg_proc_start_time(NULL, getpid(), &self, &err), 0);
    /* utime + stime are this process's CPU ticks, as times() counts them (a tick may
     * pass between the two reads); burnt first so that another field cannot pass. */
    struct tms t;
    volatile uint64_t spin = 0;
    while (times(&t) != (clock_t)-1 && t.tms_utime + t.tms_stime < 5)
        spin++;
    struct vg_proc_stat me;
    assert_int_equal(vg_proc_stat_read(NULL, getpid(), &me, &err), 0);
    uint64_t ticks = (uint64_t)(t.tms_utime + t.tms_stime);
    assert_true(me.utime + me.stime >= ticks && me.utime + me.stime <= ticks + 2);
    assert_true(first.start_time >= self && first.start_time > 0);
    assert_int_equal(write(go[1], "x", 1), 1);
    assert_int_equal(read(ready[0], &c, 1), 1);
    char path[64], comm[64] = {0};
    snprintf(path, sizeof path, "/proc/%d/comm", (int)child);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(comm, sizeof comm, f));
    fclose(f);
    assert_string_equal(comm, ") 1 2 3 (\n"); /* the hostile name is really in place */
    assert_int_equal(vg_proc_stat_read(NULL, child, &renamed, &err), 0);
    assert_int_equal(renamed.start_time, first.start_time);
    assert_false(vg_proc_state_exited(renamed.state));

    assert_int_equal(write(go[1], "x", 1), 1);
    siginfo_t info;
    assert_int_equal(waitid(P_PID, (id_t)child, &info, WEXITED | WNOWAIT), 0); /* a zombie */
    assert_int_equal(vg_proc_stat_read(NULL, child, &renamed, &err), 0);
    assert_true(vg_proc_state_exited(renamed.state));
    assert_int_equal(renamed.start_time, first.start_time);
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    int rc = vg_proc_stat_read(NULL, child, &renamed, &err);
    assert_true(rc == -ENOENT || rc == -ESRCH);
    assert_int_equal(vg_proc_start_time(NULL, 0, &self, &err), -ESRCH);
    close(go[1]);
    close(ready[0]);

    char root[] = "/tmp/vgpu-proc-XXXXXX";
    assert_non_null(mkdtemp(root));
    char dir[128], file[160];
    snprintf(dir, sizeof dir, "%s/4242", root);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(file, sizeof file, "%s/stat", dir);
    f = fopen(file, "w");
    assert_non_null(f);
    fputs("4242 (a) b) S 1 4242 4242 0 -1 4194560 100 0 0 0 3 1 0 0 20 0 1 0 5551", f);
    fclose(f);
    assert_int_equal(vg_proc_start_time(root, 4242, &self, &err), -EINVAL);
    assert_non_null(strstr(err.msg, file));
    f = fopen(file, "a");
    assert_non_null(f);
    fputs(" 12 34\n", f);
    fclose(f);
    assert_int_equal(vg_proc_start_time(root, 4242, &self, &err), 0);
    assert_int_equal(self, 5551);
    assert_int_equal(vg_proc_start_time(root, 4343, &self, &err), -ENOENT);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
}

static void test_buf_reserve(void **state)
{
    (void)state;
    struct vg_err err = {0};
    struct vg_buf b;
    vg_buf_init(&b, "reserved", 100);
    assert_int_equal(vg_buf_reserve(&b, 0, &err), 0);
    assert_non_null(b.data);
    assert_string_equal(b.data, "");
    assert_int_equal(vg_buf_reserve(&b, 90, &err), 0);
    size_t cap = b.cap;
    assert_true(cap >= 91);
    char block[90];
    memset(block, 'a', sizeof block);
    assert_int_equal(vg_buf_append(&b, block, sizeof block, &err), 0);
    assert_int_equal(b.cap, cap); /* no growth: the room was there */
    assert_int_equal(vg_buf_reserve(&b, 11, &err), -E2BIG);
    assert_non_null(strstr(err.msg, "reserved: larger than 100 bytes"));
    assert_int_equal(b.len, 90); /* unchanged */
    assert_int_equal(vg_buf_reserve(&b, 10, &err), 0);
    vg_buf_free(&b);
}

/* Writes one family of one labelled sample through a writer; returns its rc. */
static int prom_one(struct vg_buf *b, struct vg_err *err, const char *value, size_t len)
{
    struct vg_prom p;
    vg_prom_init(&p, b, err);
    vg_prom_family(&p, "vgpu_test", "gauge", "A test.");
    vg_prom_sample(&p, "vgpu_test");
    vg_prom_label_n(&p, "v", value, len);
    vg_prom_u64(&p, 1);
    return vg_prom_done(&p);
}

static void test_prom_writer(void **state)
{
    (void)state;
    struct vg_err err = {0};
    struct vg_buf b;
    vg_buf_init(&b, "metrics", 1 << 16);
    struct vg_prom p;
    vg_prom_init(&p, &b, &err);
    vg_prom_family(&p, "vgpu_things_total", "counter", "Things\\done,\nby kind.");
    vg_prom_sample(&p, "vgpu_things_total");
    vg_prom_label(&p, "kind", "a");
    vg_prom_label_u64(&p, "gpu", 3);
    vg_prom_u64(&p, 18446744073709551615ull);
    vg_prom_sample(&p, "vgpu_things_total");
    vg_prom_u64(&p, 0);
    vg_prom_family(&p, "vgpu_ratio", "gauge", "Fixed and floating.");
    vg_prom_sample(&p, "vgpu_ratio");
    vg_prom_fixed(&p, 1250, 10000, 4);
    vg_prom_sample(&p, "vgpu_ratio");
    vg_prom_fixed(&p, 7000000000, 1000000000, 9);
    vg_prom_sample(&p, "vgpu_ratio");
    vg_prom_double(&p, 0.1);
    vg_prom_sample(&p, "vgpu_ratio");
    vg_prom_double(&p, 1.0 / 0.0);
    vg_prom_sample(&p, "vgpu_ratio");
    vg_prom_double(&p, 0.0 / 0.0);
    vg_prom_family(&p, "vgpu_seconds", "histogram", "A histogram.");
    vg_prom_sample(&p, "vgpu_seconds_bucket");
    vg_prom_label(&p, "le", "+Inf");
    vg_prom_u64(&p, 2);
    assert_int_equal(vg_prom_done(&p), 0);
    assert_string_equal(b.data, "# HELP vgpu_things_total Things\\\\done,\\nby kind.\n"
                                "# TYPE vgpu_things_total counter\n"
                                "vgpu_things_total{kind=\"a\",gpu=\"3\"} 18446744073709551615\n"
                                "vgpu_things_total 0\n"
                                "# HELP vgpu_ratio Fixed and floating.\n"
                                "# TYPE vgpu_ratio gauge\n"
                                "vgpu_ratio 0.125\n"
                                "vgpu_ratio 7\n"
                                "vgpu_ratio 0.10000000000000001\n"
                                "vgpu_ratio +Inf\n"
                                "vgpu_ratio NaN\n"
                                "# HELP vgpu_seconds A histogram.\n"
                                "# TYPE vgpu_seconds histogram\n"
                                "vgpu_seconds_bucket{le=\"+Inf\"} 2\n");
    vg_buf_free(&b);
}

static void test_prom_family_once(void **state)
{
    (void)state;
    struct vg_err err = {0};
    struct vg_buf b;
    vg_buf_init(&b, "metrics", 1 << 16);
    struct vg_prom p;
    vg_prom_init(&p, &b, &err);
    vg_prom_family(&p, "vgpu_a", "gauge", "A.");
    vg_prom_family(&p, "vgpu_b", "gauge", "B.");
    vg_prom_family(&p, "vgpu_a", "gauge", "A again.");
    assert_int_equal(vg_prom_done(&p), -EEXIST);
    assert_non_null(strstr(err.msg, "family vgpu_a written twice"));
    assert_null(strstr(b.data, "A again")); /* nothing of the second written */
    /* Sticky: nothing written after the first error. */
    vg_buf_reset(&b);
    vg_prom_init(&p, &b, &err);
    vg_prom_family(&p, "vgpu_a", "gauge", "A.");
    vg_prom_sample(&p, "vgpu_b"); /* not the family's */
    vg_prom_family(&p, "vgpu_c", "gauge", "C.");
    assert_int_equal(vg_prom_done(&p), -EINVAL);
    assert_non_null(strstr(err.msg, "sample vgpu_b outside its family (vgpu_a)"));
    assert_null(strstr(b.data, "vgpu_c"));
    /* vgpu_ab is not of family vgpu_a; bad names and types refused. */
    vg_buf_reset(&b);
    vg_prom_init(&p, &b, &err);
    vg_prom_family(&p, "vgpu_a", "gauge", "A.");
    vg_prom_sample(&p, "vgpu_ab");
    assert_int_equal(vg_prom_done(&p), -EINVAL);
    vg_prom_init(&p, &b, &err);
    vg_prom_family(&p, "vgpu-a", "gauge", "A.");
    assert_int_equal(vg_prom_done(&p), -EINVAL);
    vg_prom_init(&p, &b, &err);
    vg_prom_family(&p, "vgpu_a", "meter", "A.");
    assert_int_equal(vg_prom_done(&p), -EINVAL);
    vg_prom_init(&p, &b, &err);
    vg_prom_family(&p, "vgpu_a", "gauge", "A.");
    vg_prom_sample(&p, "vgpu_a");
    assert_int_equal(vg_prom_done(&p), -EINVAL); /* a sample without its value */
    vg_prom_init(&p, &b, &err);
    vg_prom_family(&p, "vgpu_a", "gauge", "A.");
    vg_prom_label(&p, "x", "y"); /* a label outside a sample or set */
    assert_int_equal(vg_prom_done(&p), -EINVAL);
    assert_non_null(strstr(err.msg, "a label outside a sample (vgpu_a)"));
    vg_prom_init(&p, &b, &err);
    vg_prom_family(&p, "vgpu_a", "gauge", "A.");
    vg_prom_u64(&p, 1); /* a value outside a sample */
    assert_int_equal(vg_prom_done(&p), -EINVAL);
    vg_buf_free(&b);
}

static void test_prom_escaping_and_utf8(void **state)
{
    (void)state;
    struct vg_err err = {0};
    struct vg_buf b;
    vg_buf_init(&b, "metrics", 1 << 16);
    const struct {
        const char *in, *out;
    } cases[] = {
        {"plain", "plain"},
        {"a\\b\"c\nd", "a\\\\b\\\"c\\nd"},
        {"tab\there", "tab\there"}, /* other controls pass */
        {"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"},
        {"a\xFFz", "a\xEF\xBF\xBDz"},             /* a byte that never starts one */
        {"\xC3", "\xEF\xBF\xBD"},                 /* cut short at the end */
        {"\xC3(", "\xEF\xBF\xBD("},               /* bad continuation: next tried */
        {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"}, /* overlong: each byte replaced */
        {"\xE0\x80\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},                 /* a surrogate */
        {"\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* > 10FFFF */
        {"\xF4\x8F\xBF\xBF", "\xF4\x8F\xBF\xBF"},                                 /* U+10FFFF */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vg_buf_reset(&b);
        assert_int_equal(prom_one(&b, &err, cases[i].in, strlen(cases[i].in)), 0);
        char want[256];
        snprintf(want, sizeof want, "vgpu_test{v=\"%s\"} 1\n", cases[i].out);
        assert_non_null(strstr(b.data, want));
    }
    /* An embedded NUL is a control byte like another (label_n takes a length). */
    vg_buf_reset(&b);
    assert_int_equal(prom_one(&b, &err, "a\0b", 3), 0);
    assert_int_equal(memcmp(b.data + b.len - 12, "{v=\"a\0b\"} 1\n", 12), 0);
    /* The longest value passes whole; one byte more is an error, never a cut. */
    static char big[VG_PROM_VALUE_MAX + 1];
    memset(big, 'x', sizeof big);
    vg_buf_reset(&b);
    assert_int_equal(prom_one(&b, &err, big, VG_PROM_VALUE_MAX), 0);
    assert_true(b.len > VG_PROM_VALUE_MAX);
    vg_buf_reset(&b);
    assert_int_equal(prom_one(&b, &err, big, VG_PROM_VALUE_MAX + 1), -E2BIG);
    assert_non_null(strstr(err.msg, "vgpu_test: label v: value of 4097 bytes"));
    /* Label sets built once, used in many samples. */
    struct vg_buf sets;
    vg_buf_init(&sets, "label sets", 1024);
    struct vg_prom s;
    vg_prom_init(&s, &sets, &err);
    vg_prom_set_begin(&s);
    vg_prom_label(&s, "pod", "p\"1");
    vg_prom_label_u64(&s, "gpu", 0);
    assert_int_equal(vg_prom_done(&s), 0);
    assert_string_equal(sets.data, "pod=\"p\\\"1\",gpu=\"0\"");
    vg_buf_reset(&b);
    struct vg_prom p;
    vg_prom_init(&p, &b, &err);
    vg_prom_family(&p, "vgpu_x", "gauge", "X.");
    vg_prom_sample(&p, "vgpu_x");
    vg_prom_label_set(&p, sets.data, sets.len);
    vg_prom_label(&p, "zone", "vGPU");
    vg_prom_u64(&p, 5);
    assert_int_equal(vg_prom_done(&p), 0);
    assert_non_null(strstr(b.data, "\nvgpu_x{pod=\"p\\\"1\",gpu=\"0\",zone=\"vGPU\"} 5\n"));
    vg_buf_free(&sets);
    vg_buf_free(&b);
}

static void test_prom_ceiling(void **state)
{
    (void)state;
    struct vg_err err = {0};
    struct vg_buf b;
    vg_buf_init(&b, "metrics", 100);
    struct vg_prom p;
    vg_prom_init(&p, &b, &err);
    vg_prom_family(&p, "vgpu_test", "gauge", "A test.");
    for (int i = 0; i < 20; i++) {
        vg_prom_sample(&p, "vgpu_test");
        vg_prom_label_u64(&p, "i", (uint64_t)i);
        vg_prom_u64(&p, 1);
    }
    assert_int_equal(vg_prom_done(&p), -E2BIG);
    assert_non_null(strstr(err.msg, "metrics: larger than 100 bytes"));
    assert_true(b.len <= 100);
    vg_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_err_set_and_wrap),
        cmocka_unit_test(test_err_truncation_is_marked),
        cmocka_unit_test(test_err_wrap_passes_failure_up),
        cmocka_unit_test(test_err_errno),
        cmocka_unit_test(test_auto_cleanup),
        cmocka_unit_test(test_buf_append_and_ceiling),
        cmocka_unit_test(test_array_grow),
        cmocka_unit_test(test_array_grow_allocation_failure),
        cmocka_unit_test(test_read_file),
        cmocka_unit_test(test_parse_u64),
        cmocka_unit_test(test_parse_i64),
        cmocka_unit_test(test_parse_bytes_units),
        cmocka_unit_test(test_parse_bytes_malformed),
        cmocka_unit_test(test_parse_mib_default),
        cmocka_unit_test(test_parse_kube_mib),
        cmocka_unit_test(test_parse_kube_count),
        cmocka_unit_test(test_prng_reference_vectors),
        cmocka_unit_test(test_prng_determinism_and_ranges),
        cmocka_unit_test(test_log_format_text_and_json),
        cmocka_unit_test(test_log_disabled_level_skips_arguments),
        cmocka_unit_test(test_checked_strings),
        cmocka_unit_test(test_mkdir_parents),
        cmocka_unit_test(test_write_file_atomic),
        cmocka_unit_test(test_proc_stat_parse),
        cmocka_unit_test(test_proc_stat_read),
        cmocka_unit_test(test_buf_reserve),
        cmocka_unit_test(test_prom_writer),
        cmocka_unit_test(test_prom_family_once),
        cmocka_unit_test(test_prom_escaping_and_utf8),
        cmocka_unit_test(test_prom_ceiling),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
