/* Runs a libFuzzer target over a corpus without libFuzzer, so every corpus is also an
 * ordinary CTest test under any compiler and sanitizer. Arguments are files or folders;
 * a folder is read one level deep. Fails when a folder is empty, so a corpus that went
 * missing is noticed, and when an input named ok-* is refused or one named near-* is
 * accepted (verdict.h), so a corpus keeps inputs that get past the first check. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MAX_INPUT (1 << 20)

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    uint8_t *buf = malloc(REPLAY_MAX_INPUT);
    size_t n = buf ? fread(buf, 1, REPLAY_MAX_INPUT, f) : 0;
    fclose(f);
    if (buf == NULL)
        return -1;
    /* An exact-size copy lets ASan catch reads one past the input. */
    uint8_t *exact = malloc(n ? n : 1);
    if (exact == NULL) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    vg_fuzz_verdict = -1;
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    const char *name = strrchr(path, '/');
    name = name != NULL ? name + 1 : path;
    bool want_ok = strncmp(name, "ok-", 3) == 0, want_near = strncmp(name, "near-", 5) == 0;
    /* Targets that report no verdict (vg_fuzz_verdict stays -1) are not held to it. */
    if (want_ok && vg_fuzz_verdict != 1) {
        fprintf(stderr, "%s: a valid input (ok-*) was refused\n", path);
        return -1;
    }
    if (want_near && vg_fuzz_verdict != 0) {
        fprintf(stderr, "%s: a near miss (near-*) was accepted\n", path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]) != 0)
                return 1;
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (d == NULL) {
            perror(argv[i]);
            return 1;
        }
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            if (snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name) >= (int)sizeof path)
                continue;
            if (run_file(path) != 0) {
                closedir(d);
                return 1;
            }
            files++;
        }
        closedir(d);
    }
    printf("replayed %d inputs\n", files);
    return files > 0 ? 0 : 1;
}
