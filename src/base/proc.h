/* Reading a process's identity from /proc/<pid>/stat.
 *
 * A pid is reused once its process is gone; the start time (field 22, clock ticks since
 * boot) tells the process that holds it now from the one that held it before. The
 * command name (field 2) is chosen by the process itself and may hold spaces and
 * parentheses, so the fields are counted from the last ')' of the line, never from the
 * start. One parser for every module: libvgpu and fakegpu (libc only) link it too. */
#ifndef VGPU_BASE_PROC_H
#define VGPU_BASE_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"

struct vg_proc_stat {
    char state;          /* field 3: R, S, D, Z (zombie), X (dead), ... */
    uint64_t utime;      /* field 14: clock ticks run in user mode */
    uint64_t stime;      /* field 15: clock ticks run in kernel mode */
    uint64_t start_time; /* field 22: clock ticks after boot */
};

/* Parses LEN bytes of a /proc/<pid>/stat line (no NUL needed). -EINVAL ("stat line:
 * ...", naming the field) when the command has no closing ')', a field is missing, one
 * read is not a number, or the line stops inside or right after the start time (a
 * truncated read). */
int vg_proc_stat_parse(const char *text, size_t len, struct vg_proc_stat *out, struct vg_err *err);

/* Reads and parses <proc_root>/<pid>/stat (proc_root NULL: "/proc"). -ENOENT or -ESRCH
 * when the process does not exist (ESRCH too for pid <= 0), another negative errno when
 * the file cannot be read, -EINVAL when its content does not parse; the file is named. */
int vg_proc_stat_read(const char *proc_root, pid_t pid, struct vg_proc_stat *out,
                      struct vg_err *err);

/* The start time alone; errors as vg_proc_stat_read. */
int vg_proc_start_time(const char *proc_root, pid_t pid, uint64_t *start, struct vg_err *err);

/* Whether a process in this state has exited and only waits to be reaped (or is gone). */
static inline bool vg_proc_state_exited(char state)
{
    return state == 'Z' || state == 'X';
}

#endif
