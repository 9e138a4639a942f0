/* Fuzz target for HAMi's MIG configuration readers (src/dpconfig/hami.h): the
 * device-config.yaml lists (verdict: hami_mig_parse's) and the node configuration
 * (config.json, which is also fed the same bytes). No crash, no read past the input; an
 * accepted list has, in every entry, 1..HAMI_MAX_MODELS non-empty models and
 * 1..HAMI_MAX_PROFILES distinct profile names of the form <g>g.<mem>gb[+me]; the rule
 * found for a model is one whose model is a substring of it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dpconfig/hami.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_rule(const struct hami_mig_rule *r)
{
    if (r->model_count == 0 || r->model_count > HAMI_MAX_MODELS || r->profile_count == 0 ||
        r->profile_count > HAMI_MAX_PROFILES)
        abort();
    for (size_t k = 0; k < r->model_count; k++)
        if (r->models[k][0] == '\0' || strnlen(r->models[k], HAMI_MODEL_MAX) == HAMI_MODEL_MAX)
            abort();
    for (size_t k = 0; k < r->profile_count; k++) {
        const char *p = r->profiles[k];
        if (p[0] < '1' || p[0] > '8' || p[1] != 'g' || p[2] != '.' || strstr(p, "gb") == NULL)
            abort();
        for (size_t j = 0; j < k; j++)
            if (strcmp(r->profiles[j], p) == 0)
                abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    static struct hami_mig m;
    struct vg_err err = {0};
    int rc = hami_mig_parse(text, size, &m, &err);
    vg_fuzz_report(rc == 0);
    if (rc == 0) {
        if (m.rule_count > HAMI_MAX_RULES || (m.rule_count > 0 && m.key == NULL))
            abort();
        for (size_t i = 0; i < m.rule_count; i++) {
            check_rule(&m.rules[i]);
            const struct hami_mig_rule *r = hami_mig_rule_for(&m, m.rules[i].models[0]);
            if (r == NULL || r > &m.rules[i])
                abort(); /* this rule or an earlier one matches its own first model */
        }
    } else if (err.msg[0] == '\0') {
        abort();
    }
    bool mig = false;
    struct vg_err nerr = {0};
    if (hami_node_mig(text, size, "node-1", &mig, &nerr) != 0 && nerr.msg[0] == '\0')
        abort();
    free(text);
    return 0;
}
