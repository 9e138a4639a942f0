/* Unit tests for src/base/flags: every accepted form, bad values naming the flag, unknown
 * flags, aliases, once-only flags, positional arguments and the generated --help. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/flags.h"

struct opts {
    const char *listen, *dir;
    bool json, help, jobs_given;
    uint64_t jobs;
    int policy;
    int level;
};

static int parse_level(const char *value, void *target, struct vg_err *err)
{
    if (strcmp(value, "debug") != 0 && strcmp(value, "info") != 0)
        return vg_err_set(err, -EINVAL, "unknown level '%s'", value);
    *(int *)target = value[0] == 'd' ? 2 : 1;
    return 0;
}

static const char *const policies[] = {"spread", "binpack", "fgd", NULL};

/* Runs one command line against the test table: the code, positionals into pos. */
static int run(struct opts *o, const char **pos, size_t *npos, struct vg_err *err, int argc,
               const char **cargv)
{
    const struct vg_flag flags[] = {
        {.name = "listen",
         .value = "ADDR:PORT",
         .type = VG_FLAG_STRING,
         .target = &o->listen,
         .doc = "where to listen",
         .def = "127.0.0.1:8888"},
        {.name = "region-dir",
         .value = "DIR",
         .type = VG_FLAG_STRING,
         .target = &o->dir,
         .doc = "the regions",
         .opts = VG_FLAG_ONCE},
        {.name = "containers-dir", .alias_of = "region-dir"},
        {.name = "json", .type = VG_FLAG_BOOL, .target = &o->json, .doc = "JSON output"},
        {.name = "jobs",
         .value = "N",
         .type = VG_FLAG_U64,
         .target = &o->jobs,
         .min = 1,
         .max = 64,
         .doc = "parallel runs",
         .given = &o->jobs_given},
        {.name = "policy",
         .value = "NAME",
         .type = VG_FLAG_ENUM,
         .target = &o->policy,
         .choices = policies,
         .doc = "node policy"},
        {.name = "log-level",
         .value = "LEVEL",
         .type = VG_FLAG_FUNC,
         .target = &o->level,
         .fn = parse_level,
         .doc = "debug or info"},
        {.name = "help", .type = VG_FLAG_HELP, .target = &o->help, .doc = "this text"},
    };
    char *argv[16];
    assert_true(argc <= 16);
    for (int i = 0; i < argc; i++)
        argv[i] = (char *)(uintptr_t)cargv[i]; /* argv's type; the parser never writes it */
    memset(o, 0, sizeof *o);
    o->policy = -1;
    vg_err_clear(err);
    return vg_flags_parse(flags, VG_FLAGS_COUNT(flags), argc, argv, pos, 2, npos, err);
}

#define RUN(o, pos, npos, err, ...)                                                                \
    run(o, pos, npos, err, (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *)),          \
        (const char *[]){__VA_ARGS__})

static void test_forms(void **state)
{
    (void)state;
    struct opts o;
    struct vg_err err;
    const char *pos[2];
    size_t npos;
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "--listen", "a:1", "--jobs=7", "--json",
                         "--policy", "fgd", "--log-level=debug", "x"),
                     0);
    assert_string_equal(o.listen, "a:1");
    assert_int_equal(o.jobs, 7);
    assert_true(o.jobs_given);
    assert_true(o.json);
    assert_int_equal(o.policy, 2);
    assert_int_equal(o.level, 2);
    assert_int_equal(npos, 1);
    assert_string_equal(pos[0], "x");
    /* Bools: bare, =true, =false; the last one wins. */
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "--json=true"), 0);
    assert_true(o.json);
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "--json", "--json=false"), 0);
    assert_false(o.json);
    /* A value may start with a dash or be empty; "--" ends the flags; "-" is positional. */
    assert_int_equal(
        RUN(&o, pos, &npos, &err, "p", "--listen", "-x", "--listen=", "-", "--", "--json"), 0);
    assert_string_equal(o.listen, "");
    assert_false(o.json);
    assert_int_equal(npos, 2);
    assert_string_equal(pos[0], "-");
    assert_string_equal(pos[1], "--json");
    /* Not given: untouched, and "given" stays false. */
    assert_int_equal(RUN(&o, pos, &npos, &err, "p"), 0);
    assert_null(o.listen);
    assert_false(o.jobs_given);
    assert_int_equal(npos, 0);
}

static void test_errors_name_the_flag(void **state)
{
    (void)state;
    struct opts o;
    struct vg_err err;
    const char *pos[2];
    size_t npos;
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "--jobs", "0"), -ERANGE);
    assert_non_null(strstr(err.msg, "--jobs: "));
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "--jobs=65"), -ERANGE);
    assert_non_null(strstr(err.msg, "--jobs: "));
    assert_true(RUN(&o, pos, &npos, &err, "p", "--jobs=x") < 0);
    assert_non_null(strstr(err.msg, "--jobs: "));
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "--jobs"), -EINVAL);
    assert_string_equal(err.msg, "--jobs needs a value");
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "--json=yes"), -EINVAL);
    assert_string_equal(err.msg, "--json takes true or false, not 'yes'");
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "--policy", "best"), -EINVAL);
    assert_string_equal(err.msg, "--policy: 'best' is not spread, binpack or fgd");
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "--log-level=loud"), -EINVAL);
    assert_string_equal(err.msg, "--log-level: unknown level 'loud'");
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "--nope=1"), -EINVAL);
    assert_string_equal(err.msg, "unknown option '--nope' (see --help)");
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "-j"), -EINVAL);
    assert_string_equal(err.msg, "unknown option '-j' (see --help)");
    /* No prefix matching: a flag is named in full. */
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "--lis", "a:1"), -EINVAL);
    assert_string_equal(err.msg, "unknown option '--lis' (see --help)");
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "a", "b", "c"), -EINVAL);
    assert_string_equal(err.msg, "unexpected argument 'c'");
}

static void test_alias_and_once(void **state)
{
    (void)state;
    struct opts o;
    struct vg_err err;
    const char *pos[2];
    size_t npos;
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "--containers-dir", "/c"), 0);
    assert_string_equal(o.dir, "/c");
    /* A once-only flag given twice, under either name, is refused. */
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "--region-dir=/a", "--containers-dir=/b"),
                     -EINVAL);
    assert_string_equal(err.msg, "--containers-dir given twice");
    /* Others: the last one wins. */
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "--listen=a:1", "--listen=b:2"), 0);
    assert_string_equal(o.listen, "b:2");
}

static void test_help_stops_parsing(void **state)
{
    (void)state;
    struct opts o;
    struct vg_err err;
    const char *pos[2];
    size_t npos;
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "--help", "--nope"), 1);
    assert_true(o.help);
    assert_int_equal(RUN(&o, pos, &npos, &err, "p", "-h"), 1);
}

static void test_help_text(void **state)
{
    (void)state;
    bool b = false;
    const char *s = NULL;
    uint64_t n = 0;
    const struct vg_flag flags[] = {
        {.name = "listen",
         .value = "ADDR:PORT",
         .type = VG_FLAG_STRING,
         .target = &s,
         .doc = "where to listen",
         .def = "127.0.0.1:8888"},
        {.name = "max-assumptions-per-namespace",
         .value = "N",
         .type = VG_FLAG_U64,
         .target = &n,
         .max = 10,
         .doc = "a long flag whose doc goes on the next line"},
        {.name = "json",
         .type = VG_FLAG_BOOL,
         .target = &b,
         .doc = "a doc long enough to wrap: one JSON object per policy on stdout, written "
                "as soon as the policy's runs are done"},
        {.name = "containers-dir", .alias_of = "listen"},
    };
    char out[2048] = "";
    FILE *f = fmemopen(out, sizeof out, "w");
    assert_non_null(f);
    vg_flags_help(f, "usage: p [options]", flags, VG_FLAGS_COUNT(flags));
    fclose(f);
    assert_string_equal(
        out, "usage: p [options]\n"
             "  --listen ADDR:PORT          where to listen (default: 127.0.0.1:8888)\n"
             "  --max-assumptions-per-namespace N\n"
             "                              a long flag whose doc goes on the next line\n"
             "  --json                      a doc long enough to wrap: one JSON object "
             "per policy on\n"
             "                              stdout, written as soon as the policy's "
             "runs are done\n"
             "  --containers-dir ADDR:PORT  alias of --listen\n");
}

/* vg_flags_take: this table's flags leave argv, everything else stays in order. */
static void test_take_leaves_the_rest(void **state)
{
    (void)state;
    const char *dir = NULL;
    bool on = false;
    const struct vg_flag flags[] = {
        {.name = "state-dir",
         .value = "DIR",
         .type = VG_FLAG_STRING,
         .target = &dir,
         .opts = VG_FLAG_NONEMPTY},
        {.name = "on", .type = VG_FLAG_BOOL, .target = &on},
    };
    char a0[] = "p", a1[] = "--node-name", a2[] = "n1", a3[] = "--state-dir", a4[] = "/s",
         a5[] = "--on=true", a6[] = "pos", a7[] = "--", a8[] = "--on=false";
    char *argv[] = {a0, a1, a2, a3, a4, a5, a6, a7, a8};
    int argc = 9;
    struct vg_err err = {0};
    assert_int_equal(vg_flags_take(flags, VG_FLAGS_COUNT(flags), &argc, argv, &err), 0);
    assert_string_equal(dir, "/s");
    assert_true(on);
    assert_int_equal(argc, 6);
    assert_string_equal(argv[1], "--node-name");
    assert_string_equal(argv[2], "n1");
    assert_string_equal(argv[3], "pos");
    assert_string_equal(argv[4], "--");
    assert_string_equal(argv[5], "--on=false");
    char b0[] = "p", b1[] = "--state-dir=";
    char *argv2[] = {b0, b1};
    argc = 2;
    assert_int_equal(vg_flags_take(flags, VG_FLAGS_COUNT(flags), &argc, argv2, &err), -EINVAL);
    assert_string_equal(err.msg, "--state-dir is empty");
}

/* Short names (-n NS, -nNS, -n=NS, -A) and kubectl's wording for the CLI. */
static void test_short_names_and_kubectl_words(void **state)
{
    (void)state;
    const char *ns = NULL;
    bool all = false;
    const struct vg_flag flags[] = {
        {.name = "namespace",
         .short_name = 'n',
         .value = "NS",
         .type = VG_FLAG_STRING,
         .target = &ns,
         .doc = "namespace"},
        {.name = "all-namespaces",
         .short_name = 'A',
         .type = VG_FLAG_BOOL,
         .target = &all,
         .doc = "every namespace"},
    };
    const size_t n = VG_FLAGS_COUNT(flags);
    const char *pos[1];
    size_t npos;
    struct vg_err err = {0};
    char a0[] = "vgpu", a1[] = "-n", a2[] = "team", a3[] = "-nteam2", a4[] = "-A", a5[] = "pods",
         a6[] = "-n=team3", a7[] = "--bogus=1", a8[] = "extra";
    char *argv[] = {a0, a1, a2, a4, a5};
    assert_int_equal(vg_flags_parse_kubectl(flags, n, 5, argv, pos, 1, &npos, &err), 0);
    assert_string_equal(ns, "team");
    assert_true(all);
    assert_int_equal(npos, 1);
    assert_string_equal(pos[0], "pods");
    char *argv2[] = {a0, a3};
    assert_int_equal(vg_flags_parse(flags, n, 2, argv2, pos, 1, &npos, &err), 0);
    assert_string_equal(ns, "team2");
    char *argv3[] = {a0, a6};
    assert_int_equal(vg_flags_parse(flags, n, 2, argv3, pos, 1, &npos, &err), 0);
    assert_string_equal(ns, "team3");
    char *argv4[] = {a0, a5, a7};
    assert_int_equal(vg_flags_parse_kubectl(flags, n, 3, argv4, pos, 1, &npos, &err), -EINVAL);
    assert_string_equal(err.msg, "unknown flag: --bogus");
    assert_int_equal(npos, 1); /* the verb read before the failure */
    char *argv5[] = {a0, a1};
    assert_int_equal(vg_flags_parse_kubectl(flags, n, 2, argv5, pos, 1, &npos, &err), -EINVAL);
    assert_string_equal(err.msg, "flag needs an argument: --namespace");
    char *argv6[] = {a0, a5, a8};
    assert_int_equal(vg_flags_parse_kubectl(flags, n, 3, argv6, pos, 1, &npos, &err), -EINVAL);
    assert_string_equal(err.msg, "unexpected argument \"extra\"");
    char out[512] = "";
    FILE *f = fmemopen(out, sizeof out, "w");
    assert_non_null(f);
    vg_flags_help(f, NULL, flags, n);
    fclose(f);
    assert_string_equal(out, "  -n, --namespace NS          namespace\n"
                             "  -A, --all-namespaces        every namespace\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forms),
        cmocka_unit_test(test_errors_name_the_flag),
        cmocka_unit_test(test_alias_and_once),
        cmocka_unit_test(test_help_stops_parsing),
        cmocka_unit_test(test_help_text),
        cmocka_unit_test(test_take_leaves_the_rest),
        cmocka_unit_test(test_short_names_and_kubectl_words),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
