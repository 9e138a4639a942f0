/* Fuzz target for the device plugin's config loader. Verdict: the loader's.
 *
 * A config it loads is one the plugin can use and say back: it validates again; its dump
 * (the canonical form, one "key = value" line per setting of the key table, which
 * --check-config prints and the golden tests compare) has a line for every setting; and
 * the dump written back as a file loads to the same dump and the same numbers, so no
 * setting is lost, altered or made up on the way.
 *
 * A refusal says where: the file and the line ("fuzz.yaml:3: ..."), or, for a rule
 * across keys, the file and the key or section it is about. */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "dpconfig/dpconfig.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Settings that the file cannot hold (command line only) or that validation derives. */
static bool not_in_file(const char *path)
{
    static const char *const skip[] = {"nodeName", "kubeletDir",    "kubeconfig",
                                       "config",   "volcanoConfig", "sharingStrategy"};
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        if (strcmp(path, skip[i]) == 0)
            return true;
    return false;
}

/* Not inlined: GCC 12 then takes the result for a pointer to the local it was written
 * through (-Wdangling-pointer). */
__attribute__((noinline)) static char *dump_text(const struct dpconfig *cfg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        abort();
    dpconfig_dump(cfg, f);
    fclose(f);
    return text;
}

/* Places leaf (a YAML value, as text) at path in tree: dots are mappings, "[i]" list
 * items in order. False when the dump's paths do not nest. */
static bool place(json_t *tree, char *path, const char *leaf)
{
    json_t *at = tree;
    for (char *seg = path; seg != NULL;) {
        char *dot = strchr(seg, '.'), *next = dot ? dot + 1 : NULL;
        if (dot)
            *dot = '\0';
        char *bracket = strchr(seg, '[');
        long index = -1;
        if (bracket) {
            *bracket = '\0';
            index = strtol(bracket + 1, NULL, 10);
        }
        if (!json_is_object(at))
            return false;
        json_t *child = json_object_get(at, seg);
        if (bracket) {
            if (child == NULL)
                json_object_set_new(at, seg, child = json_array());
            if (!json_is_array(child))
                return false;
            if ((size_t)index == json_array_size(child))
                json_array_append_new(child, json_object());
            child = json_array_get(child, (size_t)index);
            if (child == NULL)
                return false;
        } else if (next == NULL) {
            if (child != NULL)
                return false; /* a setting dumped twice */
            json_object_set_new(at, seg, json_string(leaf));
            return true;
        } else if (child == NULL) {
            json_object_set_new(at, seg, child = json_object());
        }
        at = child;
        seg = next;
    }
    return false;
}

static void emit(FILE *out, json_t *node)
{
    if (json_is_string(node)) {
        fputs(json_string_value(node), out);
    } else if (json_is_array(node)) {
        fputc('[', out);
        size_t i;
        json_t *item;
        json_array_foreach(node, i, item)
        {
            fputs(i ? ", " : "", out);
            emit(out, item);
        }
        fputc(']', out);
    } else {
        fputc('{', out);
        const char *key;
        json_t *value;
        bool first = true;
        json_object_foreach(node, key, value)
        {
            fprintf(out, "%s%s: ", first ? "" : ", ", key);
            emit(out, value);
            first = false;
        }
        fputc('}', out);
    }
}

/* The dump as a config file (YAML flow style); NULL when a line is not "key = value" or
 * the keys do not nest. Every value of the dump is YAML already: numbers, booleans,
 * null, enum words, flow lists, durations ("60000000000ns"), and strings between double
 * quotes with YAML's escapes. */
static char *dump_to_yaml(const char *dump)
{
    json_t *tree = json_object();
    char *copy = strdup(dump);
    bool ok = copy != NULL;
    for (char *line = copy, *nl; ok && line != NULL && *line != '\0'; line = nl) {
        nl = strchr(line, '\n');
        if (nl != NULL)
            *nl++ = '\0';
        char *eq = strstr(line, " = ");
        if (eq == NULL) {
            ok = false;
            break;
        }
        *eq = '\0';
        const char *value = eq + 3;
        size_t plen = strlen(line);
        if (not_in_file(line))
            continue;
        if (plen > 6 && strcmp(line + plen - 6, ".count") == 0) {
            /* A list's length: an empty list is written as one, items make the others. */
            line[plen - 6] = '\0';
            if (strcmp(value, "0") == 0)
                ok = place(tree, line, "[]");
            continue;
        }
        ok = place(tree, line, value);
    }
    char *yaml = NULL;
    if (ok) {
        size_t len = 0;
        FILE *f = open_memstream(&yaml, &len);
        if (f == NULL)
            abort();
        emit(f, tree);
        fputc('\n', f);
        fclose(f);
    }
    free(copy);
    json_decref(tree);
    return yaml;
}

/* Every setting of the key table (as docs/config.md lists it: "| `flags.migStrategy` |
 * enum | ...") has its line in the dump, so a setting the dump left out cannot hide
 * behind a round trip that leaves it out both ways. A list of mappings has its count, and
 * each of its items a line per field. */
static void check_complete(const char *dump)
{
    char *doc = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&doc, &len);
    if (f == NULL)
        abort();
    dpconfig_print_doc(f);
    fclose(f);
    for (const char *line = doc; line != NULL;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, "| `", 3) != 0 || line[3] == '-')
            continue;
        const char *key = line + 3, *end = strchr(key, '`');
        if (end == NULL || strncmp(end, "` | section |", 13) == 0)
            continue;
        char list[200], field[200];
        const char *brackets = memmem(key, (size_t)(end - key), "[].", 3);
        if (brackets == NULL) {
            bool is_list = strncmp(end, "` | list of mappings |", 22) == 0;
            snprintf(list, sizeof list, "\n%.*s%s = ", (int)(end - key), key,
                     is_list ? ".count" : "");
            if (strncmp(dump, list + 1, strlen(list + 1)) != 0 && strstr(dump, list) == NULL) {
                fprintf(stderr, "the dump leaves out %.*s\n", (int)(end - key), key);
                abort();
            }
            continue;
        }
        snprintf(list, sizeof list, "\n%.*s.count = ", (int)(brackets - key), key);
        const char *count = strstr(dump, list);
        unsigned long n = count != NULL ? strtoul(count + strlen(list), NULL, 10) : 0;
        for (unsigned long i = 0; i < n; i++) {
            snprintf(field, sizeof field, "\n%.*s[%lu].%.*s = ", (int)(brackets - key), key, i,
                     (int)(end - brackets - 3), brackets + 3);
            if (strstr(dump, field) == NULL) {
                fprintf(stderr, "the dump leaves out%s\n", field);
                abort();
            }
        }
    }
    free(doc);
}

/* A refusal says where: the file and the line ("fuzz.yaml:3: ..."), or, for a rule
 * across keys, the file and a key of the table or a section ("fuzz.yaml: key
 * 'vgpu.defaultMemory': ..."; a mapping with an empty key is named as its section, or
 * "(top level)"). defaults is the dump of the built-in defaults, which names every key. */
static void check_refusal(const char *msg, const char *defaults)
{
    const char *p = msg + 10;
    bool where = false;
    if (strncmp(msg, "fuzz.yaml:", 10) == 0) {
        if (*p >= '1' && *p <= '9') {
            while (*p >= '0' && *p <= '9')
                p++;
            where = *p == ':';
        } else if (strncmp(p, " key '", 6) == 0) {
            /* The key without its list indices ("resources.gpus[1]" is an item of the
             * list resources.gpus, which the defaults hold empty). */
            char key[256];
            size_t n = 0;
            for (const char *k = p + 6; *k != '\0' && *k != '\'' && n + 1 < sizeof key; k++) {
                if (*k == '[')
                    k += strspn(k + 1, "0123456789") + 1;
                else
                    key[n++] = *k;
            }
            key[n] = '\0';
            if (strcmp(key, "(top level)") == 0)
                where = true;
            for (const char *line = defaults; n > 0 && !where && line != NULL;
                 line = strchr(line, '\n'), line = line ? line + 1 : NULL)
                where = strncmp(line, key, n) == 0 && strchr(" .[", line[n]) != NULL;
        }
    }
    if (!where) {
        fprintf(stderr, "a refusal that does not say where: %s\n", msg);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dpconfig cfg;
    struct vg_err err = {0};
    dpconfig_defaults(&cfg);
    bool loaded = dpconfig_load_buffer("fuzz.yaml", (const char *)data, size, &cfg, &err) == 0;
    vg_fuzz_report(loaded);
    if (!loaded) {
        if (err.msg[0] == '\0')
            abort(); /* a refusal always says why */
        struct dpconfig defaults;
        dpconfig_defaults(&defaults);
        char *dump = dump_text(&defaults);
        check_refusal(err.msg, dump);
        free(dump);
        dpconfig_free(&defaults);
        dpconfig_free(&cfg);
        return 0;
    }
    if (dpconfig_validate(&cfg, &err) != 0)
        abort(); /* a loaded config stays valid */
    char *dump = dump_text(&cfg);
    check_complete(dump);
    char *yaml = dump_to_yaml(dump);
    if (yaml == NULL) {
        fprintf(stderr, "the dump is not one \"key = value\" per line:\n%s", dump);
        abort();
    }
    struct dpconfig again;
    dpconfig_defaults(&again);
    if (dpconfig_load_buffer("dump.yaml", yaml, strlen(yaml), &again, &err) != 0) {
        fprintf(stderr, "the dump does not load back: %s\n%s\n", err.msg, yaml);
        abort();
    }
    char *dump2 = dump_text(&again);
    /* The same dump could still hide a number it rounded: the scalings are the only
     * settings not kept as integers or text. */
    if (strcmp(dump, dump2) != 0 ||
        cfg.vgpu.device_memory_scaling != again.vgpu.device_memory_scaling ||
        cfg.vgpu.device_core_scaling != again.vgpu.device_core_scaling) {
        fprintf(stderr, "the dump loads back as another config:\n%s---\n%s", dump, dump2);
        abort();
    }
    free(dump2);
    dpconfig_free(&again);
    free(yaml);
    free(dump);
    dpconfig_free(&cfg);
    return 0;
}
