/* The extender's streaming ExtenderArgs reader and JSON writer (src/scheduler/args.c):
 * what it decodes, that every malformed body is refused with jansson's verdict, and a
 * differential test: the fast filter and the jansson filter, fed the same random valid
 * requests on twin states, answer the same JSON and hold the same allocations. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/log.h"
#include "scheduler/args.h"
#include "scheduler/internal.h"

#define POD_A                                                                                      \
    "{\"metadata\":{\"name\":\"a\",\"namespace\":\"default\",\"resourceVersion\":\"7\"},"          \
    "\"spec\":{\"containers\":[{\"name\":\"main\",\"resources\":{\"limits\":{"                     \
    "\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpumem\":\"1000\"}}}]}}"

static struct sched_state *new_state(int nodes)
{
    struct sched_options o;
    sched_options_default(&o);
    struct sched_state *s = NULL;
    struct vg_err err = {0};
    assert_int_equal(sched_state_new(&o, &s, &err), 0);
    for (int n = 0; n < nodes; n++) {
        char inv[512], name[32];
        snprintf(name, sizeof name, "n%d", n);
        snprintf(inv, sizeof inv,
                 "{\"version\":1,\"heartbeat\":1,\"mode\":\"vgpu\",\"gpus\":[{\"uuid\":\"GPU-%d\","
                 "\"index\":0,\"model\":\"H100\",\"memoryMiB\":%u,\"cores\":100,\"slots\":4,"
                 "\"healthy\":true}]}",
                 n, 4000u + 1000u * (unsigned)(n % 3));
        /* Every fifth node has no inventory. */
        json_t *node = n % 5 == 4 ? json_pack("{s:{s:s}}", "metadata", "name", name)
                                  : json_pack("{s:{s:s, s:{s:s}}}", "metadata", "name", name,
                                              "annotations", "vgpu.io/gpus", inv);
        sched_node_update(s, node);
        json_decref(node);
    }
    return s;
}

/* ---- the reader ------------------------------------------------------------------------ */

struct names {
    char text[64][64];
    size_t len[64];
    size_t n;
};

static int collect(void *ctx, const struct sched_args_name *names, size_t count)
{
    struct names *c = ctx;
    assert_true(count >= 1 && count <= SCHED_ARGS_BATCH);
    for (size_t k = 0; k < count; k++) {
        const char *name = names[k].name;
        size_t len = names[k].len;
        if (c->n >= 64 || len >= 64)
            return -1;
        assert_null(memchr(name, '\0', len)); /* no NULs inside; not NUL-terminated */
        memcpy(c->text[c->n], name, len);
        c->text[c->n][len] = '\0';
        c->len[c->n++] = len;
    }
    return 0;
}

static int scan(const char *body, struct names *c, struct sched_args_view *v)
{
    memset(c, 0, sizeof *c);
    return sched_args_scan(body, strlen(body), v, collect, c);
}

static void test_reader_decodes(void **unused)
{
    (void)unused;
    struct names c;
    struct sched_args_view v;
    const char *body =
        " \r\n\t{ \"NodeNames\" : [ \"n0\" ,\"n\\u0031\", \"\\/x\\\"\\\\\\b\\f\\n\\r\\t\","
        "\"\\u00e9\\u20AC\\ud83d\\ude00\", \"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\","
        "\"\" ] , \"Nodes\" :null, \"P\\u006fd\":" POD_A " } \n";
    assert_int_equal(scan(body, &c, &v), 0);
    assert_int_equal(v.name_count, 6);
    assert_string_equal(c.text[0], "n0");
    assert_string_equal(c.text[1], "n1");
    assert_string_equal(c.text[2], "/x\"\\\b\f\n\r\t");
    assert_string_equal(c.text[3], "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    assert_string_equal(c.text[4], c.text[3]);
    assert_int_equal(c.len[5], 0);
    assert_int_equal(v.pod_len, strlen(POD_A));
    assert_memory_equal(v.pod, POD_A, strlen(POD_A));
    /* An empty list, and Nodes left out. */
    assert_int_equal(scan("{\"Pod\":{},\"NodeNames\":[]}", &c, &v), 0);
    assert_int_equal(v.name_count, 0);
    assert_int_equal(v.pod_len, 2);
    /* A callback's refusal stops the scan and comes back. */
    memset(&c, 0, sizeof c);
    c.n = 64;
    assert_int_equal(sched_args_scan("{\"Pod\":{},\"NodeNames\":[\"x\"]}", 27, &v, collect, &c),
                     -1);
}

/* Names around the reader's 16-byte steps: lengths 15 to 17 and an escape, a multi-byte
 * character or a control character as the 15th, 16th or 17th byte, in compact and spaced
 * lists. Each is decoded exactly, or (a raw control character) refused. */
static void test_reader_block_edges(void **unused)
{
    (void)unused;
    struct names c;
    struct sched_args_view v;
    const char *body = "{\"Pod\":{},\"NodeNames\":[\"abcdefghijklmno\",\"abcdefghijklmnop\","
                       "\"abcdefghijklmnopq\",\"abcdefghijklmn\\\"\",\"abcdefghijklmno\\\\\","
                       "\"abcdefghijklmnop\\u0041\",\"abcdefghijklmn\xc3\xa9\","
                       "\"abcdefghijklmno\xe2\x82\xac\"  ,  \"x\",\"\"]}";
    assert_int_equal(scan(body, &c, &v), 0);
    assert_int_equal(v.name_count, 10);
    assert_string_equal(c.text[0], "abcdefghijklmno");
    assert_string_equal(c.text[1], "abcdefghijklmnop");
    assert_string_equal(c.text[2], "abcdefghijklmnopq");
    assert_string_equal(c.text[3], "abcdefghijklmn\"");
    assert_string_equal(c.text[4], "abcdefghijklmno\\");
    assert_string_equal(c.text[5], "abcdefghijklmnopA");
    assert_string_equal(c.text[6], "abcdefghijklmn\xc3\xa9");
    assert_string_equal(c.text[7], "abcdefghijklmno\xe2\x82\xac");
    assert_string_equal(c.text[8], "x");
    assert_int_equal(c.len[9], 0);
    /* A raw control character, or invalid UTF-8, at each position of a block. */
    for (size_t at = 0; at < 20; at++) {
        char bad[128], name[32];
        memset(name, 'a', sizeof name);
        name[at] = '\x01';
        name[20] = '\0';
        snprintf(bad, sizeof bad, "{\"Pod\":{},\"NodeNames\":[\"%s\"]}", name);
        assert_int_equal(scan(bad, &c, &v), SCHED_ARGS_DECLINE);
        name[at] = '\xff';
        snprintf(bad, sizeof bad, "{\"Pod\":{},\"NodeNames\":[\"%s\"]}", name);
        assert_int_equal(scan(bad, &c, &v), SCHED_ARGS_DECLINE);
    }
    /* Cut inside a 16-byte step, after a compact separator, and a comma before ']'. */
    assert_int_equal(scan("{\"Pod\":{},\"NodeNames\":[\"abcdefghijklmnopqrstuvwxyz", &c, &v),
                     SCHED_ARGS_DECLINE);
    assert_int_equal(scan("{\"Pod\":{},\"NodeNames\":[\"a\",\"", &c, &v), SCHED_ARGS_DECLINE);
    assert_int_equal(scan("{\"Pod\":{},\"NodeNames\":[\"a\",]}", &c, &v), SCHED_ARGS_DECLINE);
}

/* Batches: 150 names, the 70th with an escape, arrive in order, at most
 * SCHED_ARGS_BATCH at a time, the decoded one alone. */
struct numbered {
    size_t n, calls, alone_at;
};

static int check_numbered(void *ctx, const struct sched_args_name *names, size_t count)
{
    struct numbered *c = ctx;
    assert_true(count >= 1 && count <= SCHED_ARGS_BATCH);
    c->calls++;
    for (size_t k = 0; k < count; k++, c->n++) {
        char want[16];
        snprintf(want, sizeof want, "%s%zu", c->n == 70 ? "\"" : "n", c->n);
        assert_int_equal(names[k].len, strlen(want));
        assert_memory_equal(names[k].name, want, names[k].len);
        if (c->n == 70)
            c->alone_at = count;
    }
    return 0;
}

static void test_reader_batches(void **unused)
{
    (void)unused;
    char body[4096];
    size_t len = (size_t)snprintf(body, sizeof body, "{\"Pod\":{},\"NodeNames\":[");
    for (size_t i = 0; i < 150; i++)
        len += (size_t)snprintf(body + len, sizeof body - len, "%s\"%s%zu\"", i ? "," : "",
                                i == 70 ? "\\\"" : "n", i);
    len += (size_t)snprintf(body + len, sizeof body - len, "]}");
    struct numbered c = {0};
    struct sched_args_view v;
    assert_int_equal(sched_args_scan(body, len, &v, check_numbered, &c), 0);
    assert_int_equal(c.n, 150);
    assert_int_equal(v.name_count, 150);
    assert_int_equal(c.alone_at, 1);
    assert_int_equal(c.calls, 5); /* 0-63, 64-69, 70, 71-134, 135-149 */
}

/* Bodies the reader must decline; each with what the filter then answers. */
struct bad {
    const char *body;
    int code;
    const char *msg; /* a part of the message */
};

static void check_refused(struct sched_state *s, const char *body, size_t len, int code,
                          const char *msg)
{
    struct names c;
    struct sched_args_view v;
    memset(&c, 0, sizeof c);
    int rc = sched_args_scan(body, len, &v, collect, &c);
    if (rc == 0) {
        /* Only the Pod can still be wrong: as JSON (jansson reads the slice), or as a
         * pod (no name). */
        json_t *pod = json_loadb(v.pod, v.pod_len, JSON_REJECT_DUPLICATES, NULL);
        if (pod != NULL && strncmp(msg, "ExtenderArgs:", 13) != 0)
            fail_msg("body %.80s was read as the fast shape", body);
        json_decref(pod);
    } else {
        assert_int_equal(rc, SCHED_ARGS_DECLINE);
    }
    char *out = NULL;
    struct vg_err err = {0};
    assert_int_equal(sched_filter(s, body, len, (struct sched_now){0, 0}, &out, &err), code);
    assert_null(out);
    if (strstr(err.msg, msg) == NULL)
        fail_msg("body %.80s: message \"%s\" lacks \"%s\"", body, err.msg, msg);
}

static void test_reader_refuses(void **unused)
{
    (void)unused;
    struct sched_state *s = new_state(2);
#define NN(x) "{\"Pod\":" POD_A ",\"NodeNames\":[" x "]}"
    static const struct bad bad[] = {
        {"", -EBADMSG, "malformed JSON"},
        {"   ", -EBADMSG, "malformed JSON"},
        {"[]", -EBADMSG, "not a JSON object"},
        {"{", -EBADMSG, "malformed JSON"},
        {"{}", -EBADMSG, "Pod is missing"},
        {NN("\"n0\","), -EBADMSG, "malformed JSON"},
        {NN("\"n0\" \"n1\""), -EBADMSG, "malformed JSON"},
        {NN("\"n0"), -EBADMSG, "malformed JSON"},
        {NN("\"n0\"") " x", -EBADMSG, "malformed JSON"},
        {NN("\"n0\"") "}", -EBADMSG, "malformed JSON"},
        {NN("1"), -EBADMSG, "node 0 has no name"},
        {NN("null"), -EBADMSG, "node 0 has no name"},
        {NN("\"n\x01\""), -EBADMSG, "malformed JSON"},
        {NN("\"n\t\""), -EBADMSG, "malformed JSON"},
        {NN("\"n\\q\""), -EBADMSG, "malformed JSON"},
        {NN("\"n\\u12\""), -EBADMSG, "malformed JSON"},
        {NN("\"n\\u12g4\""), -EBADMSG, "malformed JSON"},
        {NN("\"\\ud800\""), -EBADMSG, "malformed JSON"},
        {NN("\"\\ud800x\""), -EBADMSG, "malformed JSON"},
        {NN("\"\\ud800\\u0041\""), -EBADMSG, "malformed JSON"},
        {NN("\"\\udc00\""), -EBADMSG, "malformed JSON"},
        {NN("\"\\u0000\""), -EBADMSG, "malformed JSON"},
        {NN("\"\xc0\x80\""), -EBADMSG, "malformed JSON"},         /* overlong NUL */
        {NN("\"\xe0\x80\xaf\""), -EBADMSG, "malformed JSON"},     /* overlong '/' */
        {NN("\"\xed\xa0\x80\""), -EBADMSG, "malformed JSON"},     /* encoded surrogate */
        {NN("\"\xf4\x90\x80\x80\""), -EBADMSG, "malformed JSON"}, /* past U+10FFFF */
        {NN("\"\xf5\x80\x80\x80\""), -EBADMSG, "malformed JSON"},
        {NN("\"\xe2\x82\""), -EBADMSG, "malformed JSON"}, /* cut short */
        {NN("\"\x80\""), -EBADMSG, "malformed JSON"},
        {NN("\"n0\"") "\xff", -EBADMSG, "malformed JSON"},
        {"{\"Pod\":" POD_A ",\"NodeNames\":[\"n0\"],\"NodeNames\":[]}", -EBADMSG, "duplicate"},
        {"{\"Pod\":" POD_A ",\"NodeNames\":[],\"N\\u006fdeNames\":[]}", -EBADMSG, "duplicate"},
        {"{\"Pod\":" POD_A ",\"Pod\":" POD_A ",\"NodeNames\":[]}", -EBADMSG, "duplicate"},
        {"{\"Pod\":" POD_A ",\"Nodes\":null,\"Nodes\":null,\"NodeNames\":[]}", -EBADMSG,
         "duplicate"},
        {"{\"Pod\":{\"metadata\":{\"name\":\"a\",\"name\":\"b\"}},\"NodeNames\":[]}", -EBADMSG,
         "duplicate"},
        {"{\"Pod\":" POD_A ",\"NodeNames\":[],\"Extra\":1}", -EBADMSG, "unknown field \"Extra\""},
        {"{\"Pod\":" POD_A ",\"NodeNames\":[],\"Extra\":[}", -EBADMSG, "malformed JSON"},
        {"{\"Pod\":1,\"NodeNames\":[]}", -EBADMSG, "Pod is missing or not an object"},
        {"{\"Pod\":{\"metadata\":{}},\"NodeNames\":[]}", -EBADMSG, "ExtenderArgs:"},
        {"{\"Pod\":{\"a\":1,},\"NodeNames\":[]}", -EBADMSG, "malformed JSON"},
        {"{\"Pod\":{\"a\":]},\"NodeNames\":[]}", -EBADMSG, "malformed JSON"},
        {"{\"Pod\":{\"a\":\"\\\"},\"NodeNames\":[]}", -EBADMSG, "malformed JSON"},
        {"{\"Pod\":{\"a\":99999999999999999999999},\"NodeNames\":[]}", -EBADMSG, "malformed JSON"},
        {"{\"Pod\":" POD_A ",\"NodeNames\":null}", -EBADMSG, "neither NodeNames nor Nodes"},
        {"{\"Pod\":" POD_A "}", -EBADMSG, "neither NodeNames nor Nodes"},
        {"{\"Pod\":" POD_A ",\"Nodes\":nul,\"NodeNames\":[]}", -EBADMSG, "malformed JSON"},
        {"{\"Pod\":" POD_A ",\"Nodes\":nullx,\"NodeNames\":[]}", -EBADMSG, "malformed JSON"},
        {"{\"Pod\":" POD_A " \"NodeNames\":[]}", -EBADMSG, "malformed JSON"},
        {"{\"Pod\"" POD_A ",\"NodeNames\":[]}", -EBADMSG, "malformed JSON"},
        {"{Pod:" POD_A ",\"NodeNames\":[]}", -EBADMSG, "malformed JSON"},
    };
#undef NN
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        check_refused(s, bad[i].body, strlen(bad[i].body), bad[i].code, bad[i].msg);

    /* Nesting: deeper than jansson allows inside Pod is refused; deeper than the reader
     * passes on (but within jansson's limit) is still served, by jansson. */
    for (int pass = 0; pass < 2; pass++) {
        size_t depth = pass == 0 ? 3000 : SCHED_ARGS_MAX_DEPTH + 10;
        size_t len = 0, cap = 2 * depth + 512;
        char *body = malloc(cap);
        assert_non_null(body);
        len += (size_t)snprintf(body, cap,
                                "{\"NodeNames\":[\"n0\"],\"Pod\":{\"metadata\":"
                                "{\"name\":\"deep\"},\"spec\":{\"containers\":[]},\"x\":");
        for (size_t d = 0; d < depth; d++)
            body[len++] = '[';
        for (size_t d = 0; d < depth; d++)
            body[len++] = ']';
        len += (size_t)snprintf(body + len, cap - len, "}}");
        if (pass == 0) {
            check_refused(s, body, len, -EBADMSG, "malformed JSON");
        } else {
            char *out = NULL;
            struct vg_err err = {0};
            assert_int_equal(sched_filter(s, body, len, (struct sched_now){0, 0}, &out, &err), 0);
            if (strstr(out, "\"NodeNames\":[\"n0\"]") == NULL)
                fail_msg("deep pod: %s", out);
            free(out);
        }
        free(body);
    }

    /* A NUL byte inside a name, and a name longer than the reader decodes. */
    static const char nul[] = "{\"Pod\":{},\"NodeNames\":[\"a\0b\"]}";
    check_refused(s, nul, sizeof nul - 1, -EBADMSG, "malformed JSON");
    {
        size_t n = SCHED_ARGS_NAME_MAX + 10, cap = n + 512;
        char *body = malloc(cap);
        assert_non_null(body);
        size_t len = (size_t)snprintf(body, cap, "{\"Pod\":%s,\"NodeNames\":[\"", POD_A);
        memset(body + len, 'x', n);
        len += n;
        len += (size_t)snprintf(body + len, cap - len, "\"]}");
        struct names c;
        struct sched_args_view v;
        memset(&c, 0, sizeof c);
        assert_int_equal(sched_args_scan(body, len, &v, collect, &c), SCHED_ARGS_DECLINE);
        char *out = NULL;
        struct vg_err err = {0};
        assert_int_equal(sched_filter(s, body, len, (struct sched_now){0, 0}, &out, &err), 0);
        assert_non_null(strstr(out, "node unknown to the scheduler"));
        free(out);
        free(body);
    }

    /* Oversized: refused before anything is read. */
    {
        size_t len = SCHED_MAX_BODY_BYTES + 1;
        char *body = malloc(len);
        assert_non_null(body);
        memset(body, ' ', len);
        static const char prefix[] = "{\"Pod\":" POD_A ",\"NodeNames\":[]";
        memcpy(body, prefix, sizeof prefix - 1);
        body[len - 1] = '}';
        char *out = NULL;
        struct vg_err err = {0};
        assert_int_equal(sched_filter(s, body, len, (struct sched_now){0, 0}, &out, &err),
                         -EMSGSIZE);
        assert_non_null(strstr(err.msg, "over the"));
        free(body);
    }
    /* No GPU was promised by any of it. */
    struct sched_stats st;
    sched_state_stats(s, &st);
    assert_int_equal(st.filter_fits, 0);
    sched_state_free(s);
}

/* ---- the writer ------------------------------------------------------------------------ */

static void test_writer_escapes(void **unused)
{
    (void)unused;
    struct sched_jbuf b = {0};
    static const char in[] = "a\"b\\c\n\t\x01\x1f\x7f/\xc3\xa9\xf0\x9f\x98\x80|\xc0\x80|\xe2\x82";
    sched_jbuf_lit(&b, "[");
    sched_jbuf_str(&b, in, sizeof in - 1);
    sched_jbuf_lit(&b, ",");
    sched_jbuf_str(&b, "", 0);
    sched_jbuf_lit(&b, "]");
    char *text = sched_jbuf_take(&b);
    json_error_t jerr;
    json_t *v = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (v == NULL)
        fail_msg("writer output %s is not JSON: %s", text, jerr.text);
    assert_string_equal(json_string_value(json_array_get(v, 0)),
                        "a\"b\\c\n\t\x01\x1f\x7f/\xc3\xa9\xf0\x9f\x98\x80|"
                        "\xef\xbf\xbd\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd");
    assert_string_equal(json_string_value(json_array_get(v, 1)), "");
    json_decref(v);
    free(text);
    text = sched_jbuf_take(&b); /* empty again */
    assert_string_equal(text, "");
    free(text);
}

/* ---- differential: fast filter vs jansson filter ------------------------------------------ */

static uint64_t rnd_state = 0x9e3779b97f4a7c15u;
static uint32_t rnd(uint32_t n)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return (uint32_t)(rnd_state % n);
}

static void put(char **p, size_t *len, size_t *cap, const char *s)
{
    size_t n = strlen(s);
    if (*len + n + 1 > *cap) {
        *cap = (*len + n + 1) * 2;
        *p = realloc(*p, *cap);
        assert_non_null(*p);
    }
    memcpy(*p + *len, s, n + 1);
    *len += n;
}

static const char *ws(void)
{
    static const char *const w[] = {"", "", "", " ", "\n", "\t ", "\r\n  "};
    return w[rnd(7)];
}

/* A node name as it may be spelled on the wire: known, unknown, or escaped forms. */
static void put_name(char **p, size_t *len, size_t *cap)
{
    char buf[64];
    int n = (int)rnd(24); /* 20 known nodes, some unknown */
    switch (rnd(8)) {
    case 0:
        snprintf(buf, sizeof buf, "\"n\\u00%02x%d\"", 0x30 + (n % 10), n / 10); /* digits */
        break;
    case 1:
        snprintf(buf, sizeof buf, "\"\\u006e%d\"", n);
        break;
    case 2:
        snprintf(buf, sizeof buf, "\"n%d\\u00e9\\ud83d\\ude00\\\"\\\\\\n\"", n);
        break;
    case 3:
        snprintf(buf, sizeof buf, "\"\xc3\xa9n%d\"", n);
        break;
    default:
        snprintf(buf, sizeof buf, "\"n%d\"", n);
        break;
    }
    put(p, len, cap, buf);
}

static const char *const pods[] = {
    /* one GPU, memory varies */
    "{\"metadata\":{\"name\":\"p%u\",\"namespace\":\"ns\",\"resourceVersion\":\"%u\"},\"spec\":"
    "{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\","
    "\"nvidia.com/gpumem\":\"%u\"}}}]}}",
    /* no GPU */
    "{\"metadata\":{\"name\":\"p%u\",\"namespace\":\"ns\",\"resourceVersion\":\"%u\"},\"spec\":"
    "{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"cpu\":\"%u\"}}}]}}",
    /* cannot be served: cores over 100 */
    "{\"metadata\":{\"name\":\"p%u\",\"namespace\":\"ns\",\"resourceVersion\":\"%u\"},\"spec\":"
    "{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\","
    "\"nvidia.com/gpucores\":\"1%u\"}}}]}}",
    /* two containers, spread policy, escaped annotation value */
    "{\"metadata\":{\"name\":\"p%u\",\"namespace\":\"ns\",\"resourceVersion\":\"%u\","
    "\"annotations\":{\"hami.io/node-scheduler-policy\":\"spr\\u0065ad\"}},\"spec\":"
    "{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\","
    "\"nvidia.com/gpumem\":\"%u\"}}},{\"name\":\"d\",\"resources\":{\"limits\":{"
    "\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpumem\":\"500\"}}}]}}",
    /* a policy nobody knows, with a quote and UTF-8 in it */
    "{\"metadata\":{\"name\":\"p%u\",\"namespace\":\"ns\",\"resourceVersion\":\"%u\","
    "\"annotations\":{\"vgpu.io/policy\":\"b\\\"\xc3\xa9%u\"}},\"spec\":"
    "{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}}",
};

static char *random_body(void)
{
    char *p = NULL;
    size_t len = 0, cap = 0;
    char pod[1024];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral" /* pods[] above, three %u each */
    snprintf(pod, sizeof pod, pods[rnd(5)], rnd(30), rnd(1000), 200 + 100 * rnd(30));
#pragma GCC diagnostic pop
    char names_part[64];
    bool nodes_first = rnd(2) == 0, with_nodes = rnd(2) == 0;
    put(&p, &len, &cap, ws());
    put(&p, &len, &cap, "{");
    bool need_comma = false;
    for (int part = 0; part < 3; part++) {
        int which = nodes_first ? (part + 2) % 3 : part; /* Pod, NodeNames, Nodes */
        if (which == 2 && !with_nodes)
            continue;
        if (need_comma)
            put(&p, &len, &cap, ",");
        need_comma = true;
        put(&p, &len, &cap, ws());
        if (which == 0) {
            put(&p, &len, &cap, rnd(4) == 0 ? "\"P\\u006fd\"" : "\"Pod\"");
            put(&p, &len, &cap, ws());
            put(&p, &len, &cap, ":");
            put(&p, &len, &cap, ws());
            put(&p, &len, &cap, pod);
        } else if (which == 1) {
            snprintf(names_part, sizeof names_part, "\"NodeNames\"%s:%s[%s", ws(), ws(), ws());
            put(&p, &len, &cap, names_part);
            unsigned n = rnd(30);
            for (unsigned i = 0; i < n; i++) {
                if (i > 0) {
                    put(&p, &len, &cap, ws());
                    put(&p, &len, &cap, ",");
                    put(&p, &len, &cap, ws());
                }
                put_name(&p, &len, &cap);
            }
            put(&p, &len, &cap, ws());
            put(&p, &len, &cap, "]");
        } else {
            put(&p, &len, &cap, "\"Nodes\":");
            put(&p, &len, &cap, ws());
            put(&p, &len, &cap, "null");
        }
        put(&p, &len, &cap, ws());
    }
    put(&p, &len, &cap, "}");
    put(&p, &len, &cap, ws());
    return p;
}

static void test_differential(void **unused)
{
    (void)unused;
    struct sched_state *fast = new_state(20), *tree = new_state(20);
    size_t fast_lane = 0;
    for (unsigned iter = 0; iter < 3000; iter++) {
        char *body = random_body();
        size_t len = strlen(body);
        struct sched_now now = {iter * 10u, 100};
        struct vg_err e1 = {0}, e2 = {0};
        char *o1 = NULL, *o2 = NULL;
        struct names c;
        struct sched_args_view v;
        memset(&c, 0, sizeof c);
        if (sched_args_scan(body, len, &v, collect, &c) == 0)
            fast_lane++;
        int r1 = sched_filter(fast, body, len, now, &o1, &e1);
        int r2 = sched_filter_tree(tree, body, len, now, &o2, &e2);
        assert_int_equal(r1, r2);
        if (r1 < 0) {
            assert_string_equal(e1.msg, e2.msg);
        } else {
            json_error_t jerr;
            json_t *j1 = json_loads(o1, JSON_REJECT_DUPLICATES, &jerr);
            if (j1 == NULL)
                fail_msg("fast answer %s is not JSON: %s", o1, jerr.text);
            json_t *j2 = json_loads(o2, JSON_REJECT_DUPLICATES, NULL);
            assert_non_null(j2);
            if (!json_equal(j1, j2))
                fail_msg("body %s\nfast %s\ntree %s", body, o1, o2);
            json_decref(j1);
            json_decref(j2);
        }
        free(o1);
        free(o2);
        /* Now and then bind or expire on both, so retries meet bound pods. */
        if (rnd(4) == 0) {
            char bind[256];
            unsigned pn = rnd(30), nn = rnd(20);
            snprintf(bind, sizeof bind,
                     "{\"PodName\":\"p%u\",\"PodNamespace\":\"ns\",\"PodUID\":\"\","
                     "\"Node\":\"n%u\"}",
                     pn, nn);
            struct sched_state *both[2] = {fast, tree};
            int rcs[2];
            for (int k = 0; k < 2; k++) {
                struct sched_bind b;
                struct vg_err err = {0};
                rcs[k] = sched_bind_prepare(both[k], bind, strlen(bind), now, &b, &err);
                if (rcs[k] == 0) {
                    sched_bind_finish(both[k], &b, SCHED_BIND_OK, now);
                    sched_bind_release(&b);
                }
            }
            assert_int_equal(rcs[0], rcs[1]);
        }
        if (rnd(50) == 0) {
            assert_int_equal(sched_expire(fast, (struct sched_now){now.mono_ms + 60000, 100}),
                             sched_expire(tree, (struct sched_now){now.mono_ms + 60000, 100}));
        }
        char *d1 = sched_dump(fast, false), *d2 = sched_dump(tree, false);
        assert_string_equal(d1, d2);
        free(d1);
        free(d2);
        struct vg_err err = {0};
        assert_int_equal(sched_check_invariants(fast, &err), 0);
        free(body);
    }
    /* The generator's bodies are all in the fast shape. */
    assert_int_equal(fast_lane, 3000);
    sched_state_free(fast);
    sched_state_free(tree);
}

int main(void)
{
    vg_log_max_level = -1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reader_decodes),     cmocka_unit_test(test_reader_refuses),
        cmocka_unit_test(test_reader_block_edges), cmocka_unit_test(test_reader_batches),
        cmocka_unit_test(test_writer_escapes),     cmocka_unit_test(test_differential),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
