/* Unit tests for src/region: the container's shared region. Processes are real (fork),
 * deaths are real (SIGKILL), and every check is against what a user would notice: the
 * container's total never passes its limit, and a dead process's memory comes back. */
#define _GNU_SOURCE /* F_OFD_SETLK */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/mem.h"
#include "base/prng.h"
#include "region/region.h"

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

struct fixture {
    char dir[64];
    char path[128];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/vgpu-region-XXXXXX");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    snprintf(f->path, sizeof f->path, "%s/region", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    unlink(f->path);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* The limits the processes of the test take: process-private, whatever the file records. */
static uint64_t test_limit[2];

static struct region_config two_devices(uint64_t limit0, uint64_t limit1)
{
    struct region_config c = {.device_count = 2};
    snprintf(c.devices[0].uuid, sizeof c.devices[0].uuid, "GPU-aaaa");
    snprintf(c.devices[1].uuid, sizeof c.devices[1].uuid, "GPU-bbbb");
    c.devices[0].memory_limit = limit0;
    c.devices[1].memory_limit = limit1;
    c.devices[0].sm_limit_percent = 30;
    test_limit[0] = limit0;
    test_limit[1] = limit1;
    return c;
}

static struct region *open_attached(const char *path)
{
    struct region *r = NULL;
    struct vg_err err;
    if (region_open(path, &r, &err) != 0)
        fail_msg("open: %s", err.msg);
    region_set_limit(r, 0, test_limit[0], 30);
    region_set_limit(r, 1, test_limit[1], 0);
    if (region_attach(r, &err) != 0)
        fail_msg("attach: %s", err.msg);
    return r;
}

static uint64_t usage(struct region *r, unsigned dev)
{
    uint64_t used = 0;
    assert_int_equal(region_usage(r, dev, &used, NULL), 0);
    return used;
}

static void test_create_open_and_devices(void **state)
{
    struct fixture *f = *state;
    struct region_config c = two_devices(4 * GiB, 0);
    struct vg_err err;
    assert_int_equal(region_create(f->path, &c, &err), 0);
    assert_int_equal(region_create(f->path, &c, &err), 1); /* already there: kept */
    struct region *r = NULL;
    assert_int_equal(region_open(f->path, &r, &err), 0);
    assert_int_equal(region_device_count(r), 2);
    assert_string_equal(region_device(r, 1)->uuid, "GPU-bbbb");
    assert_true(region_device(r, 0)->memory_limit == 4 * GiB); /* the creator's record */
    assert_int_equal(region_device(r, 0)->sm_limit_percent, 30);
    uint64_t limit = 1;
    assert_int_equal(region_usage(r, 0, NULL, &limit), 0);
    assert_true(limit == 0); /* enforced: none until the process gives one */
    assert_int_equal(region_share(r, 0), 0);
    region_set_limit(r, 0, 4 * GiB, 30);
    assert_int_equal(region_usage(r, 0, NULL, &limit), 0);
    assert_true(limit == 4 * GiB);
    assert_int_equal(region_share(r, 0), 30);
    assert_null(region_device(r, 2));
    assert_int_equal(region_find_device(r, "GPU-bbbb"), 1);
    assert_int_equal(region_find_device(r, "GPU-cccc"), -ENOENT);
    struct stat st;
    assert_int_equal(stat(f->path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0666); /* every user in the container can open it */
    region_close(r);
}

static void test_bad_config_refused(void **state)
{
    struct fixture *f = *state;
    struct region_config c = two_devices(GiB, GiB);
    struct vg_err err;
    c.device_count = 0;
    assert_int_equal(region_create(f->path, &c, &err), -EINVAL);
    c.device_count = REGION_MAX_DEVICES + 1;
    assert_int_equal(region_create(f->path, &c, &err), -EINVAL);
    c.device_count = 1;
    c.devices[0].sm_limit_percent = 101;
    assert_int_equal(region_create(f->path, &c, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "101"));
    assert_int_equal(access(f->path, F_OK), -1); /* nothing half-made left behind */
}

/* Writes a region, then damages one thing and checks open refuses it with a message. */
static void expect_refused(const char *path, size_t offset, const void *bytes, size_t n,
                           off_t new_size, const char *needle)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    if (n > 0)
        assert_int_equal(pwrite(fd, bytes, n, (off_t)offset), (ssize_t)n);
    if (new_size >= 0)
        assert_int_equal(ftruncate(fd, new_size), 0);
    close(fd);
    struct region *r = NULL;
    struct vg_err err = {0};
    assert_int_equal(region_open(path, &r, &err), -EPROTO);
    assert_null(r);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void test_corrupt_region_refused(void **state)
{
    struct fixture *f = *state;
    struct region_config c = two_devices(GiB, GiB);
    struct vg_err err;
    uint32_t v1 = 1, devices = 99;
    uint64_t junk = 0x1234;
    struct {
        size_t offset;
        const void *bytes;
        size_t n;
        off_t size;
        const char *needle;
    } cases[] = {
        {0, &junk, sizeof junk, -1, "bad magic"},
        {8, &v1, sizeof v1, -1, "version 1"}, /* its readers trusted the file's limits */
        {12, &devices, sizeof devices, -1, "99 devices"},
        {0, NULL, 0, 100, "100 bytes"},
        {0, NULL, 0, 0, "0 bytes"},
        {0, NULL, 0, 1 << 20, "expected"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unlink(f->path);
        assert_int_equal(region_create(f->path, &c, &err), 0);
        expect_refused(f->path, cases[i].offset, cases[i].bytes, cases[i].n, cases[i].size,
                       cases[i].needle);
    }
    struct region *r = NULL;
    assert_int_equal(region_open("/nonexistent/region", &r, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "/nonexistent/region"));
}

static void test_reserve_exactly_to_limit(void **state)
{
    struct fixture *f = *state;
    struct region_config c = two_devices(4 * GiB, 0);
    struct vg_err err;
    assert_int_equal(region_create(f->path, &c, &err), 0);
    struct region *r = NULL;
    assert_int_equal(region_open(f->path, &r, &err), 0);
    region_set_limit(r, 0, 4 * GiB, 0);
    assert_int_equal(region_reserve(r, 0, MiB), -EINVAL); /* not attached */
    assert_int_equal(region_attach(r, &err), 0);
    assert_int_equal(region_reserve(r, 0, 3 * GiB), 0);
    assert_int_equal(region_reserve(r, 0, GiB - 1), 0);
    assert_int_equal(region_reserve(r, 0, 2), -ENOMEM);
    assert_int_equal(region_reserve(r, 0, 1), 0);
    assert_true(usage(r, 0) == 4 * GiB);
    assert_int_equal(region_reserve(r, 0, 1), -ENOMEM);
    assert_int_equal(region_reserve(r, 0, UINT64_MAX), -ENOMEM);
    /* Every refusal is counted for the monitor (vgpu_container_allocations_refused_total). */
    struct region_counters rc;
    region_counters(r, &rc);
    assert_int_equal(rc.refused, 3);
    region_release(r, 0, GiB);
    assert_true(usage(r, 0) == 3 * GiB);
    assert_int_equal(region_reserve(r, 0, GiB), 0);
    /* Device 1 has no limit; device 2 does not exist. */
    assert_int_equal(region_reserve(r, 1, 1000 * GiB), 0);
    assert_int_equal(region_reserve(r, 2, 1), -EINVAL);
    region_detach(r);
    assert_int_equal(usage(r, 0), 0);
    assert_int_equal(usage(r, 1), 0);
    region_close(r);
}

/* Children allocate and free random sizes while the parent watches the total. */
static void test_concurrent_processes_never_pass_limit(void **state)
{
    struct fixture *f = *state;
    const uint64_t limit = 8 * GiB;
    struct region_config c = two_devices(limit, 0);
    struct vg_err err;
    assert_int_equal(region_create(f->path, &c, &err), 0);
    enum { CHILDREN = 8, ROUNDS = 20000 };
    pid_t pids[CHILDREN];
    int start[2]; /* closed by the parent once all children exist: they start together */
    assert_int_equal(pipe(start), 0);
    for (int i = 0; i < CHILDREN; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(start[1]);
            char go;
            if (read(start[0], &go, 1) != 0)
                _exit(4);
            struct region *r = open_attached(f->path);
            struct vg_prng rng;
            vg_prng_seed(&rng, (uint64_t)i);
            uint64_t held[16] = {0};
            int refused = 0;
            for (int k = 0; k < ROUNDS; k++) {
                unsigned j = (unsigned)vg_prng_below(&rng, 16);
                if (held[j] != 0) {
                    region_release(r, 0, held[j]);
                    held[j] = 0;
                } else {
                    uint64_t size = (1 + vg_prng_below(&rng, 1024)) * MiB;
                    if (region_reserve(r, 0, size) == 0)
                        held[j] = size;
                    else
                        refused = 1;
                    uint64_t used;
                    region_usage(r, 0, &used, NULL);
                    if (used > limit)
                        _exit(3);
                }
            }
            region_close(r);
            _exit(refused);
        }
    }
    close(start[0]);
    close(start[1]);
    struct region *watcher = NULL;
    assert_int_equal(region_open(f->path, &watcher, &err), 0);
    int running = CHILDREN, refused = 0;
    while (running > 0) {
        assert_true(usage(watcher, 0) <= limit);
        int status;
        pid_t done = waitpid(-1, &status, WNOHANG);
        if (done > 0) {
            assert_true(WIFEXITED(status) && WEXITSTATUS(status) <= 1);
            refused += WEXITSTATUS(status);
            running--;
        }
    }
    assert_true(refused > 0); /* the children really competed for the limit */
    assert_int_equal(usage(watcher, 0), 0);
    region_close(watcher);
}

static pid_t spawn_holder(const char *path, uint64_t bytes)
{
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pipefd[0]);
        struct region *r = open_attached(path);
        int ok = region_reserve(r, 0, bytes) == 0;
        assert_int_equal(write(pipefd[1], &ok, sizeof ok), (ssize_t)sizeof ok);
        for (;;)
            pause();
    }
    close(pipefd[1]);
    int ok = 0;
    assert_int_equal(read(pipefd[0], &ok, sizeof ok), (ssize_t)sizeof ok);
    close(pipefd[0]);
    assert_true(ok);
    return pid;
}

static void kill_and_reap(pid_t pid)
{
    kill(pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
}

static void test_sigkill_releases_memory(void **state)
{
    struct fixture *f = *state;
    struct region_config c = two_devices(4 * GiB, 0);
    struct vg_err err;
    assert_int_equal(region_create(f->path, &c, &err), 0);
    pid_t holder = spawn_holder(f->path, 3 * GiB);
    struct region *r = open_attached(f->path);
    assert_true(usage(r, 0) == 3 * GiB);
    struct region_proc_info procs[4];
    assert_int_equal(region_list_procs(r, procs, 4), 2);
    assert_int_equal(region_reserve(r, 0, 2 * GiB), -ENOMEM); /* holder is alive */
    kill_and_reap(holder);
    /* The next allocation that needs the memory takes it back. */
    assert_int_equal(region_reserve(r, 0, 4 * GiB), 0);
    assert_int_equal(region_list_procs(r, procs, 4), 1);
    assert_int_equal(procs[0].pid, getpid());
    region_close(r);
}

static void test_reclaim_without_allocation(void **state)
{
    struct fixture *f = *state;
    struct region_config c = two_devices(4 * GiB, 0);
    struct vg_err err;
    assert_int_equal(region_create(f->path, &c, &err), 0);
    pid_t a = spawn_holder(f->path, GiB);
    pid_t b = spawn_holder(f->path, GiB);
    struct region *monitor = NULL; /* a reader that never attaches, like vgpu-monitor */
    assert_int_equal(region_open(f->path, &monitor, &err), 0);
    unsigned n = 99;
    assert_int_equal(region_reclaim(monitor, &n), 0);
    assert_int_equal(n, 0);
    assert_true(usage(monitor, 0) == 2 * GiB);
    kill_and_reap(a);
    assert_int_equal(region_reclaim(monitor, &n), 0);
    assert_int_equal(n, 1);
    assert_true(usage(monitor, 0) == GiB);
    kill_and_reap(b);
    assert_int_equal(region_reclaim(monitor, &n), 0);
    assert_int_equal(usage(monitor, 0), 0);
    region_close(monitor);
}

/* Hundreds of kills at random moments, some inside the region lock or between a
 * counter update and a slot update; afterwards the whole limit is available again. */
static void test_sigkill_storm(void **state)
{
    struct fixture *f = *state;
    const uint64_t limit = 2 * GiB;
    struct region_config c = two_devices(limit, 0);
    struct vg_err err;
    assert_int_equal(region_create(f->path, &c, &err), 0);
    struct vg_prng rng;
    vg_prng_seed(&rng, 7);
    enum { WORKERS = 6, KILLS = 300 };
    pid_t pids[WORKERS];
    for (int k = 0; k < KILLS + WORKERS; k++) {
        int i = k % WORKERS;
        if (k >= WORKERS)
            kill_and_reap(pids[i]);
        if (k >= KILLS)
            continue;
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            struct region *r = open_attached(f->path);
            struct vg_prng mine;
            vg_prng_seed(&mine, (uint64_t)k);
            for (;;) {
                uint64_t size = (1 + vg_prng_below(&mine, 256)) * MiB;
                if (region_reserve(r, 0, size) == 0)
                    region_release(r, 0, size);
                if (vg_prng_below(&mine, 64) == 0) {
                    unsigned n;
                    region_reclaim(r, &n);
                }
            }
        }
        struct timespec pause = {0, (long)(vg_prng_below(&rng, 3000) * 1000)};
        nanosleep(&pause, NULL);
    }
    struct region *r = open_attached(f->path);
    assert_int_equal(region_reserve(r, 0, limit), 0);
    assert_true(usage(r, 0) == limit);
    region_close(r);
}

static void test_lock_holder_killed(void **state)
{
    struct fixture *f = *state;
    struct region_config c = two_devices(GiB, 0);
    struct vg_err err;
    assert_int_equal(region_create(f->path, &c, &err), 0);
    pid_t holder = spawn_holder(f->path, GiB / 2);
    /* A process that dies holding the region lock (byte 0) and a frozen counter, as a
     * reclaimer killed in the middle of a recount leaves them. */
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t locker = fork();
    if (locker == 0) {
        int fd = open(f->path, O_RDWR);
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
        int ok = fcntl(fd, F_OFD_SETLK, &fl) == 0;
        uint64_t *used =
            (uint64_t *)((char *)mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) + 64 +
                         80); /* devices[0].used */
        __atomic_fetch_or(used, UINT64_C(1) << 63, __ATOMIC_SEQ_CST);
        assert_int_equal(write(pipefd[1], &ok, sizeof ok), (ssize_t)sizeof ok);
        for (;;)
            pause();
    }
    int ok = 0;
    assert_int_equal(read(pipefd[0], &ok, sizeof ok), (ssize_t)sizeof ok);
    assert_true(ok);
    kill_and_reap(locker);
    kill_and_reap(holder);
    struct region *r = open_attached(f->path);
    assert_int_equal(region_reserve(r, 0, GiB), 0); /* unfrozen, holder reclaimed */
    assert_true(usage(r, 0) == GiB);
    region_close(r);
}

static void test_fork_child_gets_own_slot(void **state)
{
    struct fixture *f = *state;
    struct region_config c = two_devices(4 * GiB, 0);
    struct vg_err err;
    assert_int_equal(region_create(f->path, &c, &err), 0);
    struct region *r = open_attached(f->path);
    assert_int_equal(region_reserve(r, 0, GiB), 0);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t child = fork();
    if (child == 0) {
        region_after_fork(r); /* keeps the process's limits */
        int ok = region_attach(r, NULL) == 0 && region_reserve(r, 0, 2 * GiB) == 0;
        struct region_proc_info procs[4];
        ok = ok && region_list_procs(r, procs, 4) == 2;
        region_close(r);
        _exit(ok ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(pipefd[0]);
    close(pipefd[1]);
    /* The child's clean exit returned its 2 GiB; the parent's slot is untouched. */
    assert_true(usage(r, 0) == GiB);
    unsigned n;
    assert_int_equal(region_reclaim(r, &n), 0);
    assert_int_equal(n, 0);
    assert_true(usage(r, 0) == GiB);
    region_close(r);
}

/* Any process of the container can write the region file. One that raises the device
 * count after others opened it must not make them index past the device table. */
static void test_scribbled_device_count_ignored(void **state)
{
    struct fixture *f = *state;
    struct region_config c = two_devices(GiB, GiB);
    struct vg_err err;
    assert_int_equal(region_create(f->path, &c, &err), 0);
    struct region *r = open_attached(f->path);
    int fd = open(f->path, O_RDWR);
    assert_true(fd >= 0);
    uint32_t devices = 1000;
    assert_int_equal(pwrite(fd, &devices, sizeof devices, 12), (ssize_t)sizeof devices);
    char unterminated[REGION_UUID_MAX];
    memset(unterminated, 'A', sizeof unterminated);
    assert_int_equal(pwrite(fd, unterminated, sizeof unterminated, 64),
                     (ssize_t)sizeof unterminated);
    close(fd);
    assert_int_equal(region_device_count(r), 2);
    assert_int_equal(region_reserve(r, 500, MiB), -EINVAL);
    assert_int_equal(region_reserve(r, 2, MiB), -EINVAL);
    assert_null(region_device(r, 500));
    assert_null(region_compute(r, 500));
    uint64_t used;
    assert_int_equal(region_usage(r, 500, &used, NULL), -EINVAL);
    assert_int_equal(region_find_device(r, "GPU-bbbb"), 1);
    assert_int_equal(region_find_device(r, "GPU-cccc"), -ENOENT);
    /* The two real devices still work. */
    assert_int_equal(region_reserve(r, 1, MiB), 0);
    assert_true(usage(r, 1) == MiB);
    unsigned n;
    assert_int_equal(region_reclaim(r, &n), 0);
    assert_true(usage(r, 1) == MiB);
    region_close(r);
}

static int open_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        if (fcntl(fd, F_GETFD) >= 0)
            n++;
    return n;
}

/* Allocation-failure ("torture") test: the n-th allocation of each operation fails, for
 * n = 1, 2, ... until the operation completes without hitting the failure. Every failure
 * must come back as -ENOMEM with a message, leave no descriptor or memory behind (the
 * sanitizer build checks memory), and leave the file usable. */
static void test_allocation_failures(void **state)
{
    struct fixture *f = *state;
    struct region_config c = two_devices(GiB, 0);
    struct vg_err err;
    int fds = open_fds();
    unsigned failures = 0;
    for (unsigned long n = 1;; n++) { /* create: writes the file's head from a buffer */
        unlink(f->path);
        vg_mem_fail_nth(n);
        err.msg[0] = '\0';
        int rc = region_create(f->path, &c, &err);
        if (!vg_mem_fail_fired()) {
            assert_int_equal(rc, 0);
            break;
        }
        failures++;
        assert_int_equal(rc, -ENOMEM);
        assert_non_null(strstr(err.msg, "out of memory"));
        assert_int_equal(access(f->path, F_OK), -1); /* nothing half-made is published */
        assert_int_equal(open_fds(), fds);
    }
    for (unsigned long n = 1;; n++) { /* open */
        struct region *r = NULL;
        vg_mem_fail_nth(n);
        err.msg[0] = '\0';
        int rc = region_open(f->path, &r, &err);
        if (!vg_mem_fail_fired()) {
            assert_int_equal(rc, 0);
            assert_int_equal(region_attach(r, &err), 0);
            assert_int_equal(region_reserve(r, 0, MiB), 0);
            assert_true(usage(r, 0) == MiB);
            region_close(r);
            break;
        }
        failures++;
        assert_int_equal(rc, -ENOMEM);
        assert_null(r);
        assert_non_null(strstr(err.msg, "out of memory"));
        assert_int_equal(open_fds(), fds);
    }
    assert_true(failures >= 2); /* both operations allocate */
    assert_int_equal(open_fds(), fds);
}

/* Writes an 8-byte value at offset of the region file, as any process of the container
 * can. Offsets: docs/protocol.md. */
static void forge(const char *path, off_t offset, uint64_t value)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, &value, sizeof value, offset), (ssize_t)sizeof value);
    close(fd);
}

enum { DEV0 = 64, DEV_LIMIT = 64, DEV_USED = 80, SLOT0 = 3136, SLOT_USED = 16 };

/* The file's limits and counters are forged; no process gets past its own limit, and a
 * process that starts after the forgery sees the container's real usage. */
static void test_forged_region_changes_nothing(void **state)
{
    struct fixture *f = *state;
    struct region_config c = two_devices(4 * GiB, 0);
    struct vg_err err;
    assert_int_equal(region_create(f->path, &c, &err), 0);
    struct region *a = open_attached(f->path);
    assert_int_equal(region_reserve(a, 0, 3 * GiB), 0);
    /* The limit recorded in the file lifted, the usage counter zeroed. */
    forge(f->path, DEV0 + DEV_LIMIT, 0);
    forge(f->path, DEV0 + DEV_USED, 0);
    struct region *b = open_attached(f->path); /* recounts as it attaches */
    assert_true(usage(b, 0) == 3 * GiB);
    assert_int_equal(region_reserve(b, 0, GiB + 1), -ENOMEM);
    assert_int_equal(region_reserve(b, 0, GiB), 0);
    struct region_counters ctr;
    region_counters(b, &ctr);
    assert_true(ctr.repaired >= 1);
    region_release(b, 0, GiB);
    /* Garbage in the counter (not frozen): read as full, then recounted before the
     * refusal stands (at most every 100 ms; b's last refusal was just now). */
    usleep(150 * 1000);
    forge(f->path, DEV0 + DEV_USED, UINT64_C(0x7eadbeefdeadbeef));
    assert_int_equal(region_reserve(b, 0, GiB), 0);
    assert_true(usage(b, 0) == 4 * GiB);
    region_release(b, 0, GiB);
    /* Garbage with bit 63 (a frozen counter): the recount it asks for repairs it. */
    forge(f->path, DEV0 + DEV_USED, UINT64_MAX);
    assert_int_equal(region_reserve(b, 0, MiB), 0);
    assert_true(usage(b, 0) == 3 * GiB + MiB);
    region_release(b, 0, MiB);
    /* A counter forged low while a process runs: that process still never holds more
     * than its own limit. */
    forge(f->path, DEV0 + DEV_USED, 0);
    assert_int_equal(region_reserve(a, 0, GiB + 1), -ENOMEM); /* a holds 3 of its 4 GiB */
    assert_int_equal(region_reserve(a, 0, GiB), 0);
    region_release(a, 0, GiB);
    /* Slots that add up past any GPU: the device is full for everyone, not unlimited. */
    forge(f->path, SLOT0 + SLOT_USED, UINT64_MAX - 1);
    unsigned repaired = 0, insane = 0;
    assert_int_equal(region_recount(b, &repaired, &insane), 0);
    assert_int_equal(insane, 1);
    assert_int_equal(region_reserve(b, 0, MiB), -ENOMEM);
    region_close(b);
    region_close(a);
}

/* A closed limit refuses everything; no limit is no limit. */
static void test_closed_limit(void **state)
{
    struct fixture *f = *state;
    struct region_config c = two_devices(4 * GiB, 0);
    struct vg_err err;
    assert_int_equal(region_create(f->path, &c, &err), 0);
    struct region *r = NULL;
    assert_int_equal(region_open(f->path, &r, &err), 0);
    region_set_limit(r, 0, REGION_LIMIT_CLOSED, 0);
    assert_int_equal(region_attach(r, &err), 0);
    assert_int_equal(region_reserve(r, 0, 1), -ENOMEM);
    assert_int_equal(region_reserve(r, 1, 64 * GiB), 0);
    region_note_closed(r);
    struct region_counters ctr;
    region_counters(r, &ctr);
    assert_true(ctr.closed == 1);
    region_close(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_open_and_devices, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_config_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_region_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserve_exactly_to_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_processes_never_pass_limit, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_sigkill_releases_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reclaim_without_allocation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigkill_storm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lock_holder_killed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fork_child_gets_own_slot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scribbled_device_count_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_allocation_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forged_region_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_closed_limit, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
