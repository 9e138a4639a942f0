/* File-system helpers shared by the daemons. */
#define _GNU_SOURCE
#include "base/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/auto.h"

#include "base/str.h"

int vg_mkdir_parents(const char *path, mode_t mode, struct vg_err *err)
{
    char buf[4096];
    if (path == NULL || path[0] == '\0')
        return vg_err_set(err, -EINVAL, "no directory named");
    if (vg_strlcpy(buf, path, sizeof buf) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "path too long: %s", path);
    for (char *s = buf + 1; *s != '\0'; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(buf, mode) != 0 && errno != EEXIST)
            return vg_err_errno(err, errno, "creating %s", buf);
        *s = '/';
    }
    if (mkdir(buf, mode) != 0 && errno != EEXIST)
        return vg_err_errno(err, errno, "creating %s", buf);
    if (chmod(buf, mode) != 0)
        return vg_err_errno(err, errno, "setting the mode of %s", buf);
    return 0;
}

static int unlink_and_fail(const char *tmp, struct vg_err *err, const char *what, const char *path)
{
    int e = errno;
    unlink(tmp);
    return vg_err_errno(err, e, "%s %s", what, path);
}

int vg_write_file_atomic(const char *path, const void *data, size_t len, mode_t mode,
                         unsigned flags, struct vg_err *err)
{
    char tmp[4096];
    if (vg_snprintf(tmp, sizeof tmp, "%s.tmp", path) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "path too long: %s", path);
    VG_AUTO_CLOSE int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return vg_err_errno(err, errno, "creating %s", tmp);
    const char *p = data;
    for (size_t done = 0; done < len;) {
        ssize_t n = write(fd, p + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO;
            return unlink_and_fail(tmp, err, "writing", tmp);
        }
        done += (size_t)n;
    }
    /* The mode asked for, whatever the umask or an earlier PATH.tmp left. */
    if (fchmod(fd, mode) != 0)
        return unlink_and_fail(tmp, err, "writing", tmp);
    if ((flags & VG_WRITE_SYNC) && fsync(fd) != 0)
        return unlink_and_fail(tmp, err, "writing", path);
    if ((flags & VG_WRITE_SWAP) && renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_EXCHANGE) == 0)
        return 0;
    if (rename(tmp, path) != 0)
        return unlink_and_fail(tmp, err, "writing", path);
    return 0;
}
