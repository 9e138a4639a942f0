/* Command-line flags from one table (flags.h). */
#include "base/flags.h"

#include <errno.h>
#include <string.h>

#include "base/parse.h"
#include "base/str.h"

/* The most flags one table may hold: bounds the per-call "seen" set kept on the stack. */
#define VG_FLAGS_MAX 96

/* Help layout: the flag column, the doc column, and the line width docs wrap at. */
#define HELP_DOC_COL 30
#define HELP_WIDTH   92

static const struct vg_flag *find(const struct vg_flag *flags, size_t n, const char *name,
                                  size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(flags[i].name) == len && strncmp(flags[i].name, name, len) == 0)
            return &flags[i];
    return NULL;
}

static const struct vg_flag *find_short(const struct vg_flag *flags, size_t n, char c)
{
    for (size_t i = 0; i < n; i++)
        if (flags[i].short_name != '\0' && flags[i].short_name == c)
            return &flags[i];
    return NULL;
}

/* The entry an alias stands for (itself when it is no alias). */
static const struct vg_flag *resolve(const struct vg_flag *flags, size_t n, const struct vg_flag *f)
{
    if (f->alias_of == NULL)
        return f;
    const struct vg_flag *to = find(flags, n, f->alias_of, strlen(f->alias_of));
    return to != NULL ? to : f;
}

static int parse_bool(const char *value, bool *out)
{
    if (value == NULL || strcmp(value, "true") == 0)
        *out = true;
    else if (strcmp(value, "false") == 0)
        *out = false;
    else
        return -EINVAL;
    return 0;
}

/* "'x' is not a, b or c": the choices of an enum, for its error message. */
static int enum_error(const char *value, const char *const *choices, struct vg_err *err)
{
    char list[256] = "";
    size_t used = 0;
    for (size_t i = 0; choices[i] != NULL; i++) {
        const char *sep = i == 0 ? "" : choices[i + 1] == NULL ? " or " : ", ";
        if (vg_snprintf(list + used, sizeof list - used, "%s%s", sep, choices[i]) < 0)
            break;
        used += strlen(list + used);
    }
    return vg_err_set(err, -EINVAL, "'%s' is not %s", value, list);
}

/* Stores value (NULL: a bool given bare) into f's target; the message names the flag as the
 * user wrote it (shown). */
static int store(const struct vg_flag *f, const char *shown, const char *value, struct vg_err *err)
{
    int rc = 0;
    switch (f->type) {
    case VG_FLAG_STRING:
        if ((f->opts & VG_FLAG_NONEMPTY) && value[0] == '\0')
            return vg_err_set(err, -EINVAL, "--%s is empty", shown);
        *(const char **)f->target = value;
        return 0;
    case VG_FLAG_BOOL:
    case VG_FLAG_HELP:
        if (parse_bool(value, f->target) < 0)
            return vg_err_set(err, -EINVAL, "--%s takes true or false, not '%s'", shown, value);
        return 0;
    case VG_FLAG_U64:
        rc = vg_parse_u64(value, f->min, f->max, f->target, err);
        break;
    case VG_FLAG_ENUM:
        rc = -EINVAL;
        for (int i = 0; f->choices[i] != NULL && rc < 0; i++)
            if (strcmp(f->choices[i], value) == 0) {
                *(int *)f->target = i;
                rc = 0;
            }
        if (rc < 0)
            enum_error(value, f->choices, err);
        break;
    case VG_FLAG_FUNC:
        rc = f->fn(value, f->target, err);
        break;
    }
    return rc < 0 ? vg_err_wrap(err, "--%s", shown) : 0;
}

static bool takes_value(const struct vg_flag *f)
{
    return f->type != VG_FLAG_BOOL && f->type != VG_FLAG_HELP;
}

/* A long flag ("--name", "--name=value"), a short one ("-n", "-nVALUE", "-n=VALUE"), or
 * NULL; *value is what the argument itself carries, NULL when nothing. */
static const struct vg_flag *lookup(const struct vg_flag *flags, size_t n, const char *arg,
                                    const char **value)
{
    *value = NULL;
    if (strncmp(arg, "--", 2) == 0) {
        const char *eq = strchr(arg + 2, '=');
        size_t len = eq != NULL ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        *value = eq != NULL ? eq + 1 : NULL;
        return find(flags, n, arg + 2, len);
    }
    if (arg[0] != '-' || arg[1] == '\0')
        return NULL;
    const struct vg_flag *f = find_short(flags, n, arg[1]);
    if (f == NULL && strcmp(arg, "-h") == 0)
        f = find(flags, n, "help", 4);
    if (f != NULL && arg[2] != '\0')
        *value = arg[2] == '=' ? arg + 3 : arg + 2;
    return f;
}

/* The one loop behind vg_flags_parse, vg_flags_parse_kubectl and vg_flags_take. With kept
 * non-NULL (take), what is not this table's (other flags, positionals, everything from "--"
 * on) is moved down in argv in order and counted in *kept; otherwise positionals go to
 * positional[]. kubectl: kubectl's wording for unknown flags, missing values and extra
 * arguments. */
static int parse(const struct vg_flag *flags, size_t n, int argc, char **argv,
                 const char **positional, size_t max_positional, size_t *n_positional, int *kept,
                 bool kubectl, struct vg_err *err)
{
    bool seen[VG_FLAGS_MAX] = {false};
    if (n > VG_FLAGS_MAX)
        return vg_err_set(err, -E2BIG, "more than %d flags in one table", VG_FLAGS_MAX);
    *n_positional = 0;
    if (kept != NULL)
        *kept = 1;
    bool flags_done = false;
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i];
        const char *value = NULL;
        const struct vg_flag *f = flags_done ? NULL : lookup(flags, n, arg, &value);
        if (f == NULL && kept != NULL) {
            flags_done = flags_done || strcmp(arg, "--") == 0;
            argv[(*kept)++] = arg;
            continue;
        }
        if (f == NULL && !flags_done && strcmp(arg, "--") == 0) {
            flags_done = true;
            continue;
        }
        if (f == NULL && (flags_done || arg[0] != '-' || strcmp(arg, "-") == 0)) {
            if (*n_positional == max_positional)
                return vg_err_set(
                    err, -EINVAL,
                    kubectl ? "unexpected argument \"%s\"" : "unexpected argument '%s'", arg);
            positional[(*n_positional)++] = arg;
            continue;
        }
        if (f == NULL) {
            int len = (int)strcspn(arg, "=");
            return vg_err_set(err, -EINVAL,
                              kubectl ? "unknown flag: %.*s" : "unknown option '%.*s' (see --help)",
                              len, arg);
        }
        const char *shown = f->name;
        f = resolve(flags, n, f);
        if (takes_value(f) && value == NULL) {
            if (i + 1 >= argc)
                return vg_err_set(err, -EINVAL,
                                  kubectl ? "flag needs an argument: --%s" : "--%s needs a value",
                                  shown);
            value = argv[++i];
        }
        size_t k = (size_t)(f - flags);
        if ((f->opts & VG_FLAG_ONCE) && seen[k])
            return vg_err_set(err, -EINVAL, "--%s given twice", shown);
        seen[k] = true;
        if (store(f, shown, value, err) < 0)
            return err->code;
        if (f->given != NULL)
            *f->given = true;
        if (f->type == VG_FLAG_HELP)
            return 1;
    }
    return 0;
}

int vg_flags_parse(const struct vg_flag *flags, size_t n, int argc, char **argv,
                   const char **positional, size_t max_positional, size_t *n_positional,
                   struct vg_err *err)
{
    return parse(flags, n, argc, argv, positional, max_positional, n_positional, NULL, false, err);
}

int vg_flags_parse_kubectl(const struct vg_flag *flags, size_t n, int argc, char **argv,
                           const char **positional, size_t max_positional, size_t *n_positional,
                           struct vg_err *err)
{
    return parse(flags, n, argc, argv, positional, max_positional, n_positional, NULL, true, err);
}

int vg_flags_take(const struct vg_flag *flags, size_t n, int *argc, char **argv, struct vg_err *err)
{
    size_t none;
    int kept = 1;
    int rc = parse(flags, n, *argc, argv, NULL, 0, &none, &kept, false, err);
    if (rc == 0)
        *argc = kept;
    return rc;
}

/* Writes text from column col, wrapping at HELP_WIDTH, continuation lines at HELP_DOC_COL. */
static void write_wrapped(FILE *f, size_t col, const char *text)
{
    const char *p = text;
    while (*p != '\0') {
        while (*p == ' ')
            p++;
        size_t word = strcspn(p, " ");
        if (word == 0)
            break;
        if (col > HELP_DOC_COL && col + 1 + word > HELP_WIDTH) {
            fprintf(f, "\n%*s", HELP_DOC_COL, "");
            col = HELP_DOC_COL;
        } else if (col > HELP_DOC_COL) {
            fputc(' ', f);
            col++;
        }
        fwrite(p, 1, word, f);
        col += word;
        p += word;
    }
}

void vg_flags_help(FILE *f, const char *usage, const struct vg_flag *flags, size_t n)
{
    if (usage != NULL)
        fprintf(f, "%s\n", usage);
    for (size_t i = 0; i < n; i++) {
        const struct vg_flag *fl = &flags[i];
        const struct vg_flag *to = resolve(flags, n, fl);
        int w = fl->short_name != '\0' ? fprintf(f, "  -%c, --%s", fl->short_name, fl->name)
                                       : fprintf(f, "  --%s", fl->name);
        if (takes_value(to) && to->value != NULL)
            w += fprintf(f, " %s", to->value);
        size_t col = w > 0 ? (size_t)w : 0;
        if (col + 1 >= HELP_DOC_COL)
            fprintf(f, "\n%*s", HELP_DOC_COL, "");
        else
            fprintf(f, "%*s", (int)(HELP_DOC_COL - col), "");
        col = HELP_DOC_COL;
        char line[512];
        if (fl->alias_of != NULL)
            (void)vg_snprintf(line, sizeof line, "alias of --%s", fl->alias_of);
        else if (fl->def != NULL)
            (void)vg_snprintf(line, sizeof line, "%s (default: %s)", fl->doc != NULL ? fl->doc : "",
                              fl->def);
        else
            (void)vg_snprintf(line, sizeof line, "%s", fl->doc != NULL ? fl->doc : "");
        write_wrapped(f, col, line);
        fputc('\n', f);
    }
}
