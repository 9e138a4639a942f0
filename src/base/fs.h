/* File-system helpers shared by the daemons. */
#ifndef VGPU_BASE_FS_H
#define VGPU_BASE_FS_H

#include <sys/types.h>

#include "base/err.h"

/* Makes PATH and every missing parent with MODE (existing ones are left as they are),
 * like `mkdir -p`; then sets PATH's own mode to MODE whatever the umask or an earlier
 * owner left. 0, or a negative errno naming the directory that could not be made. */
int vg_mkdir_parents(const char *path, mode_t mode, struct vg_err *err);

#endif
