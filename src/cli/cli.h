/* The `vgpu` command's pure helpers (docs/cli.md): no I/O, no clock, so each is unit-tested
 * and the parsers fuzzed (tests/fuzz/fuzz_cli_*.c).
 *
 *  - Kubernetes quantities of any resource (cpu, memory) in milli-units, for the CSV that
 *    `vgpu sim` exports (GPU quantities keep their own parser, base/parse.h);
 *  - kube-scheduler's FailedScheduling message ("0/3 nodes are available: 2 ..., 1 ...")
 *    split into its reasons, for `vgpu explain`;
 *  - the device plugin's container directories (`<pod uid>_<container>`) and the owner line
 *    of their limits file, for `vgpu top`;
 *  - sizes and ages in kubectl's style, and aligned tables.
 *
 * Errors: 0 or a negative errno with a message in struct vg_err. */
#ifndef VGPU_CLI_CLI_H
#define VGPU_CLI_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

/* ---- quantities ------------------------------------------------------------------ */

/* A Kubernetes resource.Quantity ("64", "500m", "1.5", "256Gi", "263953408Ki", "1e3", "2k")
 * as milli-units of what it counts, rounded up: "64" -> 64000, "500m" -> 500, "1Ki" ->
 * 1024000. Refused with a message: empty, negative, whitespace, unknown suffixes, garbage,
 * and values past UINT64_MAX milli-units. */
int cli_quantity_milli(const char *s, uint64_t *out, struct vg_err *err);

/* ---- kube-scheduler's FailedScheduling message ----------------------------------- */

#define CLI_REASONS_MAX     32
#define CLI_REASON_TEXT_MAX 512

struct cli_reason {
    uint64_t nodes;                 /* how many nodes gave it */
    char text[CLI_REASON_TEXT_MAX]; /* the reason as the scheduler wrote it */
};

struct cli_sched_message {
    uint64_t available, total; /* "A/T nodes are available" */
    size_t count;              /* reasons */
    struct cli_reason reasons[CLI_REASONS_MAX];
    char tail[CLI_REASON_TEXT_MAX]; /* what follows the reasons ("preemption: ..."), or "" */
};

/* Splits "0/3 nodes are available: 2 vgpu: no GPU with enough free memory, compute and
 * slots, 1 node(s) had untolerated taint {x: y}. preemption: ..." into its counted reasons.
 * Reasons are separated by ", " followed by a count; the list ends at ". " or the end.
 * -EINVAL for a message of another form (the caller shows it as it is). */
int cli_sched_message_parse(const char *msg, size_t len, struct cli_sched_message *out,
                            struct vg_err *err);

/* ---- the device plugin's container directories ----------------------------------- */

#define CLI_NAME_MAX 254

/* "<pod uid>_<container>": the uid (an RFC 1123 label, so no '_') and the container name
 * (a label). -EINVAL for any other name (not a container directory). */
int cli_container_dir_parse(const char *name, char uid[CLI_NAME_MAX], char container[CLI_NAME_MAX],
                            struct vg_err *err);

/* The first line of a limits file: "# written by vgpu-device-plugin for pod NS/NAME,
 * container C". -ENOENT when the text does not start with it; -EINVAL when the names in it
 * are not Kubernetes names. */
int cli_limits_owner_parse(const char *text, size_t len, char ns[CLI_NAME_MAX],
                           char pod[CLI_NAME_MAX], char container[CLI_NAME_MAX],
                           struct vg_err *err);

/* ---- formatting ------------------------------------------------------------------ */

/* Decimal digits of v at p (no NUL); returns the end. p needs 20 bytes. */
char *cli_put_u64(char *p, uint64_t v);
/* tenths as "I.F" at p (no NUL); returns the end. */
char *cli_put_tenths(char *p, uint64_t tenths);

/* Bytes the way kubectl prints memory: "0", "512Mi", "4Gi", "79.6Gi", "1.5Ti". */
void cli_format_bytes(uint64_t bytes, char *buf, size_t size);
/* An age the way kubectl prints one: "45s", "12m", "3h", "2d", "<unknown>" for < 0. */
void cli_format_age(int64_t seconds, char *buf, size_t size);

/* ---- tables ---------------------------------------------------------------------- */

/* Rows of cells printed in columns three spaces apart, kubectl's layout. A cell is at
 * most CLI_CELL_MAX bytes (longer ones are cut with "..."); control characters in a cell
 * become '?', so names from the API cannot move the cursor. */
#define CLI_CELL_MAX 256
#define CLI_COLS_MAX 16

struct cli_table {
    size_t cols, rows, cap;
    char *cells; /* rows x cols x CLI_CELL_MAX */
    size_t width[CLI_COLS_MAX];
};

void cli_table_init(struct cli_table *t, size_t cols);
/* Adds a row of t->cols cells (NULL: empty). */
void cli_table_add(struct cli_table *t, const char *const *cells);
/* Adds a row given as one string with '\t' between its cells. */
void cli_table_add_tabbed(struct cli_table *t, const char *tabbed);
/* Prints with every column padded to its widest cell (the last one unpadded); lines are
 * cut at max_width bytes when max_width > 0. */
void cli_table_print(const struct cli_table *t, FILE *f, size_t max_width);
void cli_table_free(struct cli_table *t);
/* Makes room for rows more rows at once. */
void cli_table_reserve(struct cli_table *t, size_t rows);

/* Copies s into dst[size] with control characters replaced by '?' and "..." when cut. */
void cli_sanitize(char *dst, size_t size, const char *s);

#endif
