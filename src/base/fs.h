/* File-system helpers shared by the daemons. */
#ifndef VGPU_BASE_FS_H
#define VGPU_BASE_FS_H

#include <sys/types.h>

#include "base/err.h"

/* Makes PATH and every missing parent with MODE (existing ones are left as they are),
 * like `mkdir -p`; then sets PATH's own mode to MODE whatever the umask or an earlier
 * owner left. 0, or a negative errno naming the directory that could not be made. */
int vg_mkdir_parents(const char *path, mode_t mode, struct vg_err *err);

/* Flags of vg_write_file_atomic. */
enum {
    VG_WRITE_SYNC = 1, /* fsync the new file before it takes the old one's place */
    /* Swap the new file with the old one (renameat2 RENAME_EXCHANGE), leaving the old
     * inode as PATH.tmp for the next write: no inode freed per write (a rename that frees
     * one per write makes ext4's inode allocation slower with every write). Falls back to
     * a rename the first time or where the file system cannot exchange. */
    VG_WRITE_SWAP = 2,
};

/* Replaces PATH's content with LEN bytes of DATA, atomically for readers: written whole
 * to PATH.tmp (mode MODE, never through a symbolic link), then renamed over PATH. A short
 * or failed write leaves PATH as it was and removes PATH.tmp. 0, or a negative errno with
 * the file named. */
int vg_write_file_atomic(const char *path, const void *data, size_t len, mode_t mode,
                         unsigned flags, struct vg_err *err);

#endif
