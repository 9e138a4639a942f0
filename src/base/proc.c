/* /proc/<pid>/stat: the state and start time of a process (see proc.h). */
#include "base/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "base/auto.h"
#include "base/str.h"

/* The line has 52 fields on current kernels, each a number of at most 20 digits, plus a
 * command of at most 64 bytes: 2 KiB holds it whole; only the first 22 fields are read. */
#define PROC_STAT_MAX 2048

/* The number at p, which must end at a space: a number the text stops in may have been
 * cut by a short read. The position after the space, or NULL. */
static const char *number(const char *p, const char *end, uint64_t *out)
{
    uint64_t v = 0;
    const char *digits = p;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return NULL;
        v = v * 10 + d;
    }
    if (p == digits || p == end || *p != ' ')
        return NULL;
    *out = v;
    return p + 1;
}

int vg_proc_stat_parse(const char *text, size_t len, struct vg_proc_stat *out, struct vg_err *err)
{
    const char *close = NULL;
    for (size_t i = len; i > 0; i--) {
        if (text[i - 1] == ')') {
            close = text + i - 1;
            break;
        }
    }
    if (close == NULL)
        return vg_err_set(err, -EINVAL, "stat line: no ')' after the command");
    const char *p = close + 1, *end = text + len;
    /* Field 3, the state: one character between single spaces. */
    if (end - p < 3 || p[0] != ' ' || p[1] == ' ' || p[2] != ' ')
        return vg_err_set(err, -EINVAL, "stat line: no state after the command");
    struct vg_proc_stat st = {.state = p[1]};
    p += 3;
    for (int field = 4; field <= 22; field++) {
        uint64_t *want = field == 14   ? &st.utime
                         : field == 15 ? &st.stime
                         : field == 22 ? &st.start_time
                                       : NULL;
        const char *next;
        if (want != NULL) {
            next = number(p, end, want);
        } else { /* skipped: it ends at a space */
            const char *space = memchr(p, ' ', (size_t)(end - p));
            next = space != NULL && space != p ? space + 1 : NULL;
        }
        if (next == NULL)
            return vg_err_set(err, -EINVAL, "stat line: field %d missing, cut or not a number",
                              field);
        p = next;
    }
    *out = st;
    return 0;
}

int vg_proc_stat_read(const char *proc_root, pid_t pid, struct vg_proc_stat *out,
                      struct vg_err *err)
{
    if (pid <= 0)
        return vg_err_set(err, -ESRCH, "pid %d: no such process", (int)pid);
    const char *root = proc_root ? proc_root : "/proc";
    char path[4096];
    if (vg_snprintf(path, sizeof path, "%s/%d/stat", root, (int)pid) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "%.64s.../%d/stat: path too long", root, (int)pid);
    VG_AUTO_CLOSE int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return vg_err_errno(err, errno, "%s: cannot open", path);
    /* A stack buffer, not vg_read_file: fakegpu calls this under its shared lock, inside
     * other programs, where an allocation per check is unwelcome. */
    char buf[PROC_STAT_MAX];
    size_t len = 0;
    while (len < sizeof buf) {
        ssize_t n = read(fd, buf + len, sizeof buf - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return vg_err_errno(err, errno, "%s: cannot read", path);
        if (n == 0)
            break;
        len += (size_t)n;
    }
    int rc = vg_proc_stat_parse(buf, len, out, err);
    if (rc < 0)
        (void)vg_err_wrap(err, "%s", path); /* the code stays -EINVAL, err or no err */
    return rc;
}

int vg_proc_start_time(const char *proc_root, pid_t pid, uint64_t *start, struct vg_err *err)
{
    struct vg_proc_stat st;
    int rc = vg_proc_stat_read(proc_root, pid, &st, err);
    if (rc == 0)
        *start = st.start_time;
    return rc;
}
