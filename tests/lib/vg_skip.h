/* The one way a C test skips (tests/lib/README.md): skips locally, with a message that
 * names what is missing; fails when the CI environment variable is set, because CI has
 * everything a test needs and a skip there means a broken set-up, not a pass.
 *
 *     if (access(trace, R_OK) != 0)
 *         vg_test_skip("the openb trace (%s)", trace);
 *
 * Call it from a cmocka test function (it ends the test through skip() or fail_msg()). */
#ifndef VGPU_TESTS_VG_SKIP_H
#define VGPU_TESTS_VG_SKIP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CI is set to anything but "", "0" or "false". */
static inline bool vg_test_in_ci(void)
{
    const char *ci = getenv("CI");
    return ci != NULL && ci[0] != '\0' && strcmp(ci, "0") != 0 && strcmp(ci, "false") != 0;
}

static inline bool vg_test_skip_message(char *buf, size_t size, const char *fmt, va_list ap)
{
    char what[512];
    (void)vsnprintf(what, sizeof what, fmt, ap);
    bool ci = vg_test_in_ci();
    (void)snprintf(buf, size,
                   ci ? "missing under CI (CI=%s), failing instead of skipping: %s"
                      : "skipping: missing %s%s",
                   ci ? getenv("CI") : "", what);
    return ci;
}

#if defined(cmocka_unit_test)
/* Set by vg_test_skip, read by VG_TEST_RUN: cmocka counts only failures in its result. */
static int vg_test_skipped;

__attribute__((format(printf, 1, 2))) static inline void vg_test_skip(const char *fmt, ...)
{
    char msg[640];
    va_list ap;
    va_start(ap, fmt);
    bool ci = vg_test_skip_message(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ci)
        fail_msg("%s", msg);
    print_message("%s\n", msg);
    vg_test_skipped = 1;
    skip();
}

/* main()'s return for a cmocka group: the number of failures, else 77 (CTest's
 * SKIP_RETURN_CODE, which every unit test sets) when a test skipped, so that a local skip
 * reads as "Not Run" in CTest instead of "Passed". */
#define VG_TEST_RUN(tests)                                                                         \
    __extension__({                                                                                \
        int vg_failed_ = cmocka_run_group_tests(tests, NULL, NULL);                                \
        vg_failed_ != 0 ? vg_failed_ : vg_test_skipped ? 77 : 0;                                   \
    })
#endif

#endif
