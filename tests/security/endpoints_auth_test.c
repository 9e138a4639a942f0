/* The extender's bearer-token helpers (src/scheduler/auth.h): the Authorization header
 * reader, the comparison, and the token file loader with every refusal it words. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "scheduler/auth.h"

static void test_bearer_header(void **state)
{
    (void)state;
    const char *tok;
    size_t len;
    assert_int_equal(sched_auth_bearer("Bearer abc", &tok, &len), 0);
    assert_int_equal(len, 3);
    assert_memory_equal(tok, "abc", 3);
    assert_int_equal(sched_auth_bearer("bEARER   a-b.c_d~e+f/g==  \t", &tok, &len), 0);
    assert_int_equal(len, 15);
    assert_memory_equal(tok, "a-b.c_d~e+f/g==", 15);
    const char *refused[] = {"",          "Bearer",     "Bearer ",      "Basic abc",
                             "Bearerabc", "Bearer a b", "Bearer =a",    "Bearer a=b",
                             " Bearer a", "Bearer\ta",  "Bearer a\x01", "Bearer \xc3\xa9"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        assert_int_equal(sched_auth_bearer(refused[i], &tok, &len), -EINVAL);
        assert_null(tok);
        assert_int_equal(len, 0);
    }
    assert_int_equal(sched_auth_bearer(NULL, &tok, &len), -EINVAL);
    char big[SCHED_TOKEN_MAX + 16];
    memcpy(big, "Bearer ", 7);
    memset(big + 7, 'a', SCHED_TOKEN_MAX);
    big[7 + SCHED_TOKEN_MAX] = '\0';
    assert_int_equal(sched_auth_bearer(big, &tok, &len), 0);
    assert_int_equal(len, SCHED_TOKEN_MAX);
    big[7 + SCHED_TOKEN_MAX] = 'a';
    big[8 + SCHED_TOKEN_MAX] = '\0';
    assert_int_equal(sched_auth_bearer(big, &tok, &len), -EINVAL);
}

static void test_token_equal(void **state)
{
    (void)state;
    assert_true(sched_auth_token_equal("secret", 6, "secret", 6));
    assert_false(sched_auth_token_equal("secreT", 6, "secret", 6));
    assert_false(sched_auth_token_equal("secre", 5, "secret", 6));
    assert_false(sched_auth_token_equal("secrets", 7, "secret", 6));
    assert_false(sched_auth_token_equal("", 0, "secret", 6));
}

static char dir[64];

static const char *write_file(const char *name, const char *text, size_t len)
{
    static char path[128];
    (void)snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    fclose(f);
    return path;
}

static void expect_refused(const char *path, const char *needle)
{
    char buf[SCHED_TOKEN_MAX + 1];
    size_t len = 99;
    struct vg_err err = {0};
    assert_true(sched_auth_load_token(path, buf, sizeof buf, &len, &err) < 0);
    assert_int_equal(len, 0);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("'%s' lacks '%s'", err.msg, needle);
    assert_non_null(strstr(err.msg, path));
}

static void test_token_file(void **state)
{
    (void)state;
    char buf[SCHED_TOKEN_MAX + 1];
    size_t len;
    struct vg_err err = {0};
    const char *path = write_file("ok", "s3cr3t-token==\r\n\n", 17);
    assert_int_equal(sched_auth_load_token(path, buf, sizeof buf, &len, &err), 0);
    assert_string_equal(buf, "s3cr3t-token==");
    assert_int_equal(len, 14);
    expect_refused(write_file("empty", "", 0), "is empty");
    expect_refused(write_file("blank", " \n\t\n", 4), "is empty");
    expect_refused(write_file("words", "two words\n", 10), "one word");
    expect_refused(write_file("nul", "ab\0cd", 5), "one word");
    expect_refused(write_file("leading", " tok\n", 5), "one word");
    static char big[SCHED_TOKEN_MAX + 2];
    memset(big, 'a', sizeof big);
    expect_refused(write_file("big", big, SCHED_TOKEN_MAX + 1), "over 4096 bytes");
    path = write_file("max", big, SCHED_TOKEN_MAX);
    assert_int_equal(sched_auth_load_token(path, buf, sizeof buf, &len, &err), 0);
    assert_int_equal(len, SCHED_TOKEN_MAX);
    (void)snprintf(big, sizeof big, "%s/missing", dir);
    expect_refused(big, "cannot read the token file");
}

int main(void)
{
    (void)snprintf(dir, sizeof dir, "/tmp/vgpu-auth-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bearer_header),
        cmocka_unit_test(test_token_equal),
        cmocka_unit_test(test_token_file),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    const char *names[] = {"ok", "empty", "blank", "words", "nul", "leading", "big", "max"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[128];
        (void)snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
    return rc;
}
