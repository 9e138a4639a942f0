/* Makes the device plugin's compute-board files for one container, with the plugin's own
 * code (dp_board_create), so tests run libvgpu on the board as a node would have it:
 *   board_layout BOARD UUID POD_UID CONTAINER PERCENT
 * prints the slot file's path. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/parse.h"
#include "base/str.h"
#include "deviceplugin/deviceplugin.h"

int main(int argc, char **argv)
{
    uint64_t pct;
    if (argc != 6 || vg_parse_u64(argv[5], 1, 99, &pct, NULL) != 0) {
        fprintf(stderr, "usage: board_layout BOARD UUID POD_UID CONTAINER PERCENT\n");
        return 2;
    }
    (void)mkdir(argv[1], 0755); /* the plugin makes it at start */
    struct dpconfig cfg;
    dpconfig_defaults(&cfg);
    char *own_dir = cfg.vgpu.compute_board_dir;
    cfg.vgpu.compute_board_dir = argv[1];
    struct dp_match m;
    memset(&m, 0, sizeof m);
    vg_strlcpy(m.pod_uid, argv[3], sizeof m.pod_uid);
    vg_strlcpy(m.container.name, argv[4], sizeof m.container.name);
    m.container.gpu_count = 1;
    vg_strlcpy(m.container.gpus[0].uuid, argv[2], sizeof m.container.gpus[0].uuid);
    m.container.gpus[0].cores = (unsigned)pct;
    char dir[1024], turn[1024], slot[1024];
    struct vg_err err = {0};
    int rc = dp_container_dir_path("/nonexistent", argv[3], argv[4], dir, sizeof dir, &err);
    if (rc == 0)
        rc = dp_board_create(&cfg, &m, dir, &err);
    if (rc == 0)
        rc = dp_board_paths(argv[1], argv[2], strrchr(dir, '/') + 1, (unsigned)pct, turn, slot,
                            sizeof turn, &err);
    cfg.vgpu.compute_board_dir = own_dir;
    dpconfig_free(&cfg);
    if (rc < 0) {
        fprintf(stderr, "board_layout: %s\n", err.msg);
        return 1;
    }
    printf("%s\n", slot);
    return 0;
}
