/* Makes the device plugin's compute-board files for one container, with the plugin's own
 * code (dp_board_create), so tests run libvgpu on the board as a node would have it:
 *   board_layout BOARD UUID POD_UID CONTAINER PERCENT [PRIORITY]
 * (PRIORITY: the pod's nvidia.com/priority, 0 or 1; PERCENT 100: a priority without a
 * share) prints the slot file's path;
 *   board_layout --share BOARD UUID POD_UID CONTAINER PERCENT
 * sets the container's share on the board as a live resize does (dp_board_share_set). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/parse.h"
#include "base/str.h"
#include "deviceplugin/deviceplugin.h"

static int share(char **argv)
{
    uint64_t pct;
    char dir[1024];
    struct vg_err err = {0};
    if (vg_parse_u64(argv[5], 1, 100, &pct, NULL) != 0) {
        fprintf(stderr, "usage: board_layout --share BOARD UUID POD_UID CONTAINER PERCENT\n");
        return 2;
    }
    if (dp_container_dir_path("/nonexistent", argv[3], argv[4], dir, sizeof dir, &err) < 0 ||
        dp_board_share_set(argv[1], argv[2], strrchr(dir, '/') + 1, (unsigned)pct, &err) < 0) {
        fprintf(stderr, "board_layout: %s\n", err.msg);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t pct, prio = 1;
    if (argc == 7 && strcmp(argv[1], "--share") == 0)
        return share(argv + 1);
    if ((argc != 6 && argc != 7) || vg_parse_u64(argv[5], 1, 100, &pct, NULL) != 0 ||
        (argc == 7 && vg_parse_u64(argv[6], 0, 1, &prio, NULL) != 0) || (pct == 100 && argc == 6)) {
        fprintf(stderr, "usage: board_layout BOARD UUID POD_UID CONTAINER PERCENT [PRIORITY]\n");
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
    m.container.gpus[0].cores = pct < 100 ? (unsigned)pct : 0;
    m.priority_given = argc == 7;
    m.priority = (int)prio;
    char dir[1024], turn[1024], slot[1024];
    struct vg_err err = {0};
    int rc = dp_container_dir_path("/nonexistent", argv[3], argv[4], dir, sizeof dir, &err);
    if (rc == 0)
        rc = dp_board_create(&cfg, &m, dir, &err);
    if (rc == 0)
        rc = dp_board_paths(argv[1], argv[2], strrchr(dir, '/') + 1, (unsigned)pct,
                            m.priority_given && prio == 0, turn, slot, sizeof turn, &err);
    cfg.vgpu.compute_board_dir = own_dir;
    dpconfig_free(&cfg);
    if (rc < 0) {
        fprintf(stderr, "board_layout: %s\n", err.msg);
        return 1;
    }
    printf("%s\n", slot);
    return 0;
}
