/* File-system helpers shared by the daemons. */
#include "base/fs.h"

#include <errno.h>
#include <sys/stat.h>

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
