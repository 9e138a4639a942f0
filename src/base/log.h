/* Logging: one line per event, `level ts file:line msg key=value ...`, or a JSON object
 * per line when vg_log_json is set (docs/style.md §7).
 *
 *   vg_log(VG_LOG_INFO, "listening", "addr=%s port=%d", addr, port);
 *
 * A level above vg_log_max_level costs one comparison: the arguments are not evaluated.
 * Values with spaces are written quoted (key="a b"). Each line reaches the output with one
 * write(2), so lines from threads and processes do not interleave. The settings are
 * process-wide and meant to be set once at start-up by main(). */
#ifndef VGPU_BASE_LOG_H
#define VGPU_BASE_LOG_H

#include <stdbool.h>

enum vg_log_level {
    VG_LOG_ERROR = 0,
    VG_LOG_WARN = 1,
    VG_LOG_INFO = 2,
    VG_LOG_DEBUG = 3,
};

extern int vg_log_max_level; /* default VG_LOG_INFO */
extern bool vg_log_json;     /* default false */
extern int vg_log_fd;        /* default 2 */

#define vg_log(level, ...)                                                                         \
    do {                                                                                           \
        if ((int)(level) <= vg_log_max_level)                                                      \
            vg_log_emit((level), __FILE__, __LINE__, __VA_ARGS__);                                 \
    } while (0)

void vg_log_emit(enum vg_log_level level, const char *file, int line, const char *msg,
                 const char *kv_fmt, ...) __attribute__((format(printf, 5, 6)));

/* "error", "warn", "info", "debug" -> level; -1 for anything else. */
int vg_log_level_from_name(const char *name);

/* Formats one line into buf (no trailing NUL guarantee beyond the return value); returns
 * its length, ending in '\n'. Exposed for tests. ts_ms is milliseconds since the epoch. */
int vg_log_format(char *buf, int size, bool json, enum vg_log_level level, long long ts_ms,
                  const char *file, int line, const char *msg, const char *kv);

#endif
