/* For vgpu top's test of a region truncated between its check and its read: preloaded,
 * this stat() truncates the file named by $TOP_SHIM_TRUNCATE to 0 bytes on the third
 * call for it, after reporting the size it had. The read that follows touches a page past
 * the end of the file: SIGBUS, which vgpu top must survive. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int stat(const char *path, struct stat *st)
{
    static int (*real)(const char *, struct stat *);
    static int calls;
    if (real == NULL)
        real = (int (*)(const char *, struct stat *))dlsym(RTLD_NEXT, "stat");
    int rc = real(path, st);
    const char *victim = getenv("TOP_SHIM_TRUNCATE");
    if (rc == 0 && victim != NULL && strcmp(path, victim) == 0 && ++calls == 3)
        if (truncate(path, 0) != 0)
            abort();
    return rc;
}
