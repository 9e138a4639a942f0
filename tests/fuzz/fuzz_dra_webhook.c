/* Fuzz target for the webhook's DRA mode (webhook_dra.c): an AdmissionReview body into
 * sched_admit_with with webhook_dra on. Whatever arrives: no crash, a refusal has a
 * message, and every ResourceClaimTemplate handed out has a DNS-subdomain name, a
 * namespace that is a DNS label, and CEL selectors whose string literals hold only the
 * characters GPU model names and UUIDs use (no pod text can leave a literal). The answer
 * is an AdmissionReview response for the request's uid; an allowed answer's patch is a
 * JSON Patch array (base64), and a refused one says why. Verdict: allowed or not, so the
 * corpus's ok-* pods must be admitted and its near-* pods (one field wrong) refused. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "verdict.h"
#include "base/log.h"
#include "scheduler/sched.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct sched_state *state;

static bool name_ok(const char *s, bool dots)
{
    if (s == NULL || s[0] == '\0' || strlen(s) > 253)
        return false;
    for (const char *p = s; *p != '\0'; p++)
        if (!(islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '-' ||
              (dots && *p == '.')))
            return false;
    return true;
}

/* Inside '...' only [A-Za-z0-9 ._-]; quotes balanced. */
static bool cel_ok(const char *e)
{
    bool in = false;
    for (const char *p = e; *p != '\0'; p++) {
        if (*p == '\'') {
            in = !in;
            continue;
        }
        if (*p == '\\' || *p == '"')
            return false;
        if (in && !(isalnum((unsigned char)*p) || *p == ' ' || *p == '.' || *p == '_' || *p == '-'))
            return false;
    }
    return !in;
}

static void check_template(json_t *t)
{
    json_t *meta = json_object_get(t, "metadata");
    if (!name_ok(json_string_value(json_object_get(meta, "name")), true) ||
        !name_ok(json_string_value(json_object_get(meta, "namespace")), false))
        abort();
    json_t *req = json_array_get(
        json_object_get(
            json_object_get(json_object_get(json_object_get(t, "spec"), "spec"), "devices"),
            "requests"),
        0);
    json_t *sels = json_object_get(json_object_get(req, "exactly"), "selectors");
    size_t i;
    json_t *s;
    json_array_foreach(sels, i, s)
    {
        const char *e = json_string_value(json_object_get(json_object_get(s, "cel"), "expression"));
        if (e == NULL || !cel_ok(e))
            abort();
    }
}

/* The answer to a request sched_admit_with took: an AdmissionReview response naming the
 * request's uid; allowed with a JSON Patch array or nothing, or refused with a message.
 * Whether it was allowed. */
static bool check_answer(const char *body, size_t size, const char *out)
{
    json_t *req = json_loadb(body, size, 0, NULL);
    json_t *ans = json_loads(out, 0, NULL);
    json_t *resp = json_object_get(ans, "response");
    if (!json_is_object(resp))
        abort();
    const char *want = json_string_value(json_object_get(json_object_get(req, "request"), "uid"));
    const char *uid = json_string_value(json_object_get(resp, "uid"));
    if (want != NULL && (uid == NULL || strcmp(uid, want) != 0))
        abort();
    json_t *a = json_object_get(resp, "allowed");
    if (!json_is_boolean(a))
        abort();
    bool allowed = json_is_true(a);
    if (allowed) {
        json_t *patch = json_object_get(resp, "patch");
        const char *type = json_string_value(json_object_get(resp, "patchType"));
        if (patch != NULL &&
            (!json_is_string(patch) || type == NULL || strcmp(type, "JSONPatch") != 0))
            abort();
    } else {
        const char *msg =
            json_string_value(json_object_get(json_object_get(resp, "status"), "message"));
        if (msg == NULL || msg[0] == '\0')
            abort(); /* a refusal says why */
    }
    json_decref(req);
    json_decref(ans);
    return allowed;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (state == NULL) {
        vg_log_max_level = -1;
        struct sched_options o;
        sched_options_default(&o);
        o.webhook_dra = true;
        struct vg_err err = {0};
        if (sched_state_new(&o, &state, &err) < 0)
            abort();
    }
    struct vg_err err = {0};
    char *out = NULL;
    json_t *templates = NULL;
    int rc = sched_admit_with(state, (const char *)data, size, &out, &templates, &err);
    if (rc < 0 && err.msg[0] == '\0')
        abort();
    if (rc == 0 && out == NULL)
        abort();
    size_t i;
    json_t *t;
    json_array_foreach(templates, i, t)
    {
        check_template(t);
    }
    bool allowed = rc == 0 && check_answer((const char *)data, size, out);
    if (!allowed && templates != NULL && json_array_size(templates) > 0)
        abort(); /* nothing is created for a refused pod */
    vg_fuzz_report(allowed);
    json_decref(templates);
    free(out);
    return 0;
}
