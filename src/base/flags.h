/* Command-line flags from one table: the only way a vgpu program reads its options, so
 * every program accepts the same forms and prints --help the same way (docs/style.md §4).
 *
 * A program declares a const array of struct vg_flag, each naming its target; vg_flags_parse
 * walks argv once, stores each value into its target as it is read (so when a flag is given
 * twice the last one wins, unless it is marked VG_FLAG_ONCE), and hands back the
 * positional arguments in order. Accepted forms: --name VALUE, --name=VALUE, and for a bool
 * --name, --name=true, --name=false; with a short name also -n VALUE, -nVALUE, -n=VALUE;
 * -h is --help's. Names are matched whole (no prefixes). "--" ends the flags; "-" alone is
 * positional.
 * Nothing is allocated; a failure is a vg_err whose message starts with the flag
 * ("--jobs: ..."), or "unknown option '--x' (see --help)". vg_flags_help prints the usage
 * line the program gives, then one line per flag (wrapped when long). */
#ifndef VGPU_BASE_FLAGS_H
#define VGPU_BASE_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

enum vg_flag_type {
    VG_FLAG_STRING, /* target: const char *, pointing into argv */
    VG_FLAG_BOOL,   /* target: bool; --x sets true, --x=true|false sets either */
    VG_FLAG_U64,    /* target: uint64_t, decimal within [min, max] */
    VG_FLAG_ENUM,   /* target: int, the index of the value in choices */
    VG_FLAG_FUNC,   /* target: whatever fn stores; fn checks the value */
    VG_FLAG_HELP,   /* target: bool set true; vg_flags_parse stops and returns 1 */
};

/* VG_FLAG_ONCE: giving the flag twice is an error ("--x given twice").
 * VG_FLAG_NONEMPTY: a string flag's value may not be empty ("--x is empty"). */
#define VG_FLAG_ONCE     0x1u
#define VG_FLAG_NONEMPTY 0x2u

struct vg_flag {
    const char *name;     /* without the leading dashes: "listen" */
    char short_name;      /* '\0', or 'n' for -n VALUE, -nVALUE, -n=VALUE (and -A for a bool) */
    const char *alias_of; /* non-NULL: this name is an alias; help says "alias of --x" */
    const char *value;    /* the value's name in help ("ADDR:PORT"); ignored for bools */
    enum vg_flag_type type;
    void *target;
    const char *doc;            /* one line; wrapped in help when long */
    const char *def;            /* the default shown in help as "(default: def)"; NULL: none */
    uint64_t min, max;          /* VG_FLAG_U64 */
    const char *const *choices; /* VG_FLAG_ENUM: NULL-terminated names */
    int (*fn)(const char *value, void *target, struct vg_err *err); /* VG_FLAG_FUNC */
    bool *given;   /* optional: set true when the flag is read */
    unsigned opts; /* VG_FLAG_ONCE */
};

/* Parses argv[1..argc-1] against flags[0..n-1]. Positional arguments are stored in
 * positional[0..*n_positional-1] (at most max_positional; more is an error "unexpected
 * argument 'x'"); positional may be NULL with max_positional 0. Returns 0, 1 when a
 * VG_FLAG_HELP flag was read (parsing stops there), or a negative code with err set (the
 * positionals read until then are in positional[0..*n_positional-1]). */
int vg_flags_parse(const struct vg_flag *flags, size_t n, int argc, char **argv,
                   const char **positional, size_t max_positional, size_t *n_positional,
                   struct vg_err *err);

/* The same, in kubectl's words (vgpu's CLI is a kubectl plugin): "unknown flag: --x",
 * "flag needs an argument: --x", "unexpected argument \"x\"". */
int vg_flags_parse_kubectl(const struct vg_flag *flags, size_t n, int argc, char **argv,
                           const char **positional, size_t max_positional, size_t *n_positional,
                           struct vg_err *err);

/* For a program whose other flags another parser reads (vgpu-dra-plugin: dpconfig's):
 * takes this table's flags out of argv and leaves the rest in order in argv[1..*argc-1]
 * (flags it does not know, positionals, and everything from "--" on), for the other parser
 * to refuse what neither knows. Returns as vg_flags_parse; *argc is updated on 0. */
int vg_flags_take(const struct vg_flag *flags, size_t n, int *argc, char **argv,
                  struct vg_err *err);

/* Writes usage (one line, a trailing newline added; NULL: none, for a second table under
 * another's usage), then one line per flag: the flag and
 * its value name, the doc, and the default. Aliases read "alias of --x". */
void vg_flags_help(FILE *f, const char *usage, const struct vg_flag *flags, size_t n);

#define VG_FLAGS_COUNT(a) (sizeof(a) / sizeof((a)[0]))

#endif
