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

/* The one loop behind vg_flags_parse and vg_flags_take. With kept non-NULL (take), what is
 * not this table's (other flags, positionals, everything from "--" on) is moved down in
 * argv in order and counted in *kept; otherwise positionals go to positional[]. */
static int parse(const struct vg_flag *flags, size_t n, int argc, char **argv,
                 const char **positional, size_t max_positional, size_t *n_positional, int *kept,
                 struct vg_err *err)
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
        const char *name = strcmp(arg, "-h") == 0 ? "help" : arg + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);
        const struct vg_flag *f = NULL;
        if (!flags_done && (strncmp(arg, "--", 2) == 0 || strcmp(arg, "-h") == 0))
            f = find(flags, n, name, len);
        if (f == NULL && kept != NULL) {
            flags_done = flags_done || strcmp(arg, "--") == 0;
            argv[(*kept)++] = arg;
            continue;
        }
        if (flags_done || arg[0] != '-' || strcmp(arg, "-") == 0) {
            if (*n_positional == max_positional)
                return vg_err_set(err, -EINVAL, "unexpected argument '%s'", arg);
            positional[(*n_positional)++] = arg;
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            flags_done = true;
            continue;
        }
        if (f == NULL)
            return vg_err_set(err, -EINVAL, "unknown option '%.*s' (see --help)",
                              (int)(eq != NULL ? (size_t)(eq - arg) : strlen(arg)), arg);
        const char *shown = f->name;
        f = resolve(flags, n, f);
        const char *value = eq != NULL ? eq + 1 : NULL;
        if (takes_value(f) && value == NULL) {
            if (i + 1 >= argc)
                return vg_err_set(err, -EINVAL, "--%s needs a value", shown);
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
    return parse(flags, n, argc, argv, positional, max_positional, n_positional, NULL, err);
}

int vg_flags_take(const struct vg_flag *flags, size_t n, int *argc, char **argv, struct vg_err *err)
{
    size_t none;
    int kept = 1;
    int rc = parse(flags, n, *argc, argv, NULL, 0, &none, &kept, err);
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
        int w = fprintf(f, "  --%s", fl->name);
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
