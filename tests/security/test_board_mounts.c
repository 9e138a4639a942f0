/* A container's mounts give it write access to its own compute-board slot and the turn
 * file of its GPU, nothing else of the board (docs/security.md, "Compute slots a
 * neighbour cannot forge"). First the device plugin's Allocate response is checked; then
 * (as root, in a mount namespace of its own) the response's board mounts are made for
 * real and a process of another uid tries to write its neighbour's slot, or to make,
 * remove or rename a share link (docs/compute.md "A resized share"). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/str.h"
#include "deviceplugin/deviceplugin.h"
#include "lib/vg_skip.h"

#define UUID "GPU-11111111-2222-3333-4444-555555555555"

struct setup {
    char tmp[64], board[128], regions[128];
    struct dpconfig cfg;
    struct dp_match a, b;
};

static void match(struct dp_match *m, const char *uid, unsigned cores)
{
    memset(m, 0, sizeof *m);
    vg_strlcpy(m->pod_uid, uid, sizeof m->pod_uid);
    vg_strlcpy(m->pod_namespace, "default", sizeof m->pod_namespace);
    vg_strlcpy(m->pod_name, uid, sizeof m->pod_name);
    vg_strlcpy(m->container.name, "main", sizeof m->container.name);
    m->container.gpu_count = 1;
    vg_strlcpy(m->container.gpus[0].uuid, UUID, sizeof m->container.gpus[0].uuid);
    m->container.gpus[0].memory_mib = 1024;
    m->container.gpus[0].cores = cores;
}

static int setup(void **state)
{
    struct setup *s = calloc(1, sizeof *s);
    vg_strlcpy(s->tmp, "/tmp/vgpu-board-mounts-XXXXXX", sizeof s->tmp);
    assert_non_null(mkdtemp(s->tmp));
    assert_int_equal(chmod(s->tmp, 0755), 0); /* the other uid may look inside */
    snprintf(s->board, sizeof s->board, "%s/board", s->tmp);
    snprintf(s->regions, sizeof s->regions, "%s/containers", s->tmp);
    assert_int_equal(mkdir(s->board, 0755), 0);
    dpconfig_defaults(&s->cfg);
    free(s->cfg.vgpu.compute_board_dir);
    free(s->cfg.vgpu.region_dir);
    s->cfg.vgpu.compute_board_dir = strdup(s->board);
    s->cfg.vgpu.region_dir = strdup(s->regions);
    match(&s->a, "uid-a", 30);
    match(&s->b, "uid-b", 70);
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    struct setup *s = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", s->tmp);
    dpconfig_free(&s->cfg);
    free(s);
    return 0;
}

static void dir_of(struct setup *s, const struct dp_match *m, char *dir, size_t size)
{
    struct vg_err err = {0};
    assert_int_equal(
        dp_container_dir_path(s->regions, m->pod_uid, m->container.name, dir, size, &err), 0);
}

static bool under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* The response: the board read-only; writable under it only A's slot and the turn. */
static void test_response(void **state)
{
    struct setup *s = *state;
    struct dp_gpu g;
    memset(&g, 0, sizeof g);
    vg_strlcpy(g.uuid, UUID, sizeof g.uuid);
    g.healthy = true;
    char dir_a[1024], dir_b[1024], turn[1024], slot_a[1024], slot_b[1024];
    dir_of(s, &s->a, dir_a, sizeof dir_a);
    dir_of(s, &s->b, dir_b, sizeof dir_b);
    struct vg_err err = {0};
    assert_int_equal(
        dp_board_paths(s->board, UUID, "uid-a_main", 30, false, turn, slot_a, 1024, &err), 0);
    assert_int_equal(
        dp_board_paths(s->board, UUID, "uid-b_main", 70, false, turn, slot_b, 1024, &err), 0);
    struct dp_response *r = calloc(1, sizeof *r);
    assert_int_equal(dp_allocate_vgpu(&s->cfg, &g, 1, &s->a, dir_a, r, &err), 0);
    unsigned board_ro = 0, own = 0, turns = 0;
    for (size_t i = 0; i < r->mount_count; i++) {
        const struct dp_mount *m = &r->mounts[i];
        if (!under(m->container_path, s->board))
            continue;
        assert_string_equal(m->container_path, m->host_path);
        if (strcmp(m->container_path, s->board) == 0) {
            assert_true(m->read_only);
            board_ro++;
        } else if (!m->read_only) {
            /* Writable under the board: only the own slot and the GPU's turn. */
            if (strcmp(m->container_path, slot_a) == 0)
                own++;
            else if (strcmp(m->container_path, turn) == 0)
                turns++;
            else
                fail_msg("writable board mount %s", m->container_path);
        }
        assert_true(strcmp(m->container_path, slot_b) != 0);
    }
    assert_int_equal(board_ro, 1);
    assert_int_equal(own, 1);
    assert_int_equal(turns, 1);
    free(r);
}

/* For real: A's mounts in a mount namespace, a process of uid 65534 in it. */
static void test_real_mounts(void **state)
{
    struct setup *s = *state;
    if (geteuid() != 0)
        vg_test_skip("root (to make the mounts in a mount namespace)");
    struct dp_gpu g;
    memset(&g, 0, sizeof g);
    vg_strlcpy(g.uuid, UUID, sizeof g.uuid);
    char dir_a[1024], dir_b[1024], turn[1024], slot_a[1024], slot_b[1024];
    dir_of(s, &s->a, dir_a, sizeof dir_a);
    dir_of(s, &s->b, dir_b, sizeof dir_b);
    struct vg_err err = {0};
    assert_int_equal(dp_board_create(&s->cfg, &s->a, dir_a, &err), 0);
    assert_int_equal(dp_board_create(&s->cfg, &s->b, dir_b, &err), 0);
    assert_int_equal(
        dp_board_paths(s->board, UUID, "uid-a_main", 30, false, turn, slot_a, 1024, &err), 0);
    assert_int_equal(
        dp_board_paths(s->board, UUID, "uid-b_main", 70, false, turn, slot_b, 1024, &err), 0);
    /* A live resize set a's share on the board (the plugin's link beside its slot). */
    assert_int_equal(dp_board_share_set(s->board, UUID, "uid-a_main", 30, &err), 0);
    char link_a[1100], link_tmp[1100];
    snprintf(link_a, sizeof link_a, "%s/%s/uid-a_main.share", s->board, UUID);
    snprintf(link_tmp, sizeof link_tmp, "%s/%s/uid-a_main.share.tmp", s->board, UUID);
    /* The slot files are 0666: only the mounts keep a neighbour out. */
    struct stat st;
    assert_int_equal(stat(slot_b, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0666);
    struct dp_response *r = calloc(1, sizeof *r);
    assert_int_equal(dp_allocate_vgpu(&s->cfg, &g, 1, &s->a, dir_a, r, &err), 0);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pipefd[0]);
        char msg[1100] = "";
        int code = 0;
        if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
            snprintf(msg, sizeof msg, "unshare/mount: %s", strerror(errno));
            code = 77;
        }
        /* In the response's order, as the runtime mounts them (parents first). */
        for (size_t i = 0; code == 0 && i < r->mount_count; i++) {
            const struct dp_mount *m = &r->mounts[i];
            if (!under(m->container_path, s->board))
                continue;
            /* Here host and container paths are one: a file under the board, already
             * read-only, is bound from there, so its mount is made writable explicitly,
             * as the runtime's bind from the host's writable path is. */
            unsigned long ro = m->read_only ? MS_RDONLY : 0;
            if (mount(m->host_path, m->container_path, NULL, MS_BIND, NULL) != 0 ||
                mount(NULL, m->container_path, NULL, MS_BIND | MS_REMOUNT | ro, NULL) != 0) {
                snprintf(msg, sizeof msg, "mount %s: %s", m->container_path, strerror(errno));
                code = 77;
            }
        }
        if (code == 0 && setresuid(65534, 65534, 65534) != 0) {
            snprintf(msg, sizeof msg, "setresuid: %s", strerror(errno));
            code = 77;
        }
        char extra[1100];
        snprintf(extra, sizeof extra, "%s/%s/uid-c_main.99.slot", s->board, UUID);
        int fd;
        if (code == 0 && (fd = open(slot_b, O_RDWR)) >= 0) {
            snprintf(msg, sizeof msg, "the neighbour's slot file is writable");
            code = 1;
        } else if (code == 0 && errno != EROFS) {
            snprintf(msg, sizeof msg, "neighbour's slot: %s, not EROFS", strerror(errno));
            code = 1;
        } else if (code == 0 && truncate(slot_b, 0) == 0) {
            snprintf(msg, sizeof msg, "neighbour's slot truncated");
            code = 1;
        } else if (code == 0 && open(extra, O_RDWR | O_CREAT, 0666) >= 0) {
            snprintf(msg, sizeof msg, "a new slot file could be made");
            code = 1;
        } else if (code == 0 && (symlink("100", link_tmp) == 0 || errno != EROFS)) {
            snprintf(msg, sizeof msg, "a share link could be made (or not EROFS: %s)",
                     strerror(errno));
            code = 1;
        } else if (code == 0 && (unlink(link_a) == 0 || rename(link_a, link_tmp) == 0)) {
            snprintf(msg, sizeof msg, "its own share link could be removed or renamed");
            code = 1;
        } else if (code == 0 && (fd = open(slot_a, O_RDWR)) < 0) {
            snprintf(msg, sizeof msg, "own slot: %s", strerror(errno));
            code = 1;
        } else if (code == 0 && (close(fd), fd = open(turn, O_RDWR)) < 0) {
            snprintf(msg, sizeof msg, "turn file: %s", strerror(errno));
            code = 1;
        }
        if (write(pipefd[1], msg, strlen(msg)) < 0)
            code = 2;
        _exit(code);
    }
    close(pipefd[1]);
    char msg[1101] = "";
    ssize_t n = read(pipefd[0], msg, sizeof msg - 1);
    msg[n > 0 ? n : 0] = '\0';
    close(pipefd[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    free(r);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77)
        vg_test_skip("mount namespaces (%s)", msg);
    if (WEXITSTATUS(status) != 0)
        fail_msg("%s", msg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_response, setup, teardown),
        cmocka_unit_test_setup_teardown(test_real_mounts, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
