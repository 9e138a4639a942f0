/* For vgpu top's test of a region truncated between its check and its read: preloaded,
 * this fstat() truncates the file named by $TOP_SHIM_TRUNCATE to 0 bytes on the third
 * call for it, after reporting the size it had. The pread that follows gets nothing of
 * the region's head: vgpu top must report the container's region as bad and carry on (a
 * reader that mapped the file would die of SIGBUS here). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fstat(int fd, struct stat *st)
{
    static int (*real)(int, struct stat *);
    static int calls;
    if (real == NULL)
        real = (int (*)(int, struct stat *))dlsym(RTLD_NEXT, "fstat");
    int rc = real(fd, st);
    const char *victim = getenv("TOP_SHIM_TRUNCATE");
    char link[64], target[4096];
    if (rc != 0 || victim == NULL || snprintf(link, sizeof link, "/proc/self/fd/%d", fd) < 0)
        return rc;
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0)
        return rc;
    target[n] = '\0';
    if (strcmp(target, victim) == 0 && ++calls == 3)
        if (truncate(victim, 0) != 0)
            abort();
    return rc;
}
