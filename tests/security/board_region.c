/* Prints what the monitor reads of a container's compute budget on device 0:
 *   board_region REGION_FILE
 * "closed_n=<launches charged their wall time> closed_why=<reason bits> busy_ns=<n>". */
#include <stdio.h>

#include "region/region.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: board_region REGION_FILE\n");
        return 2;
    }
    struct region *r;
    struct vg_err err = {0};
    if (region_open(argv[1], &r, &err) < 0) {
        fprintf(stderr, "board_region: %s\n", err.msg);
        return 1;
    }
    struct region_compute *b = region_compute(r, 0);
    if (b == NULL) {
        fprintf(stderr, "board_region: no device 0\n");
        return 1;
    }
    printf("closed_n=%lld closed_why=%lld busy_ns=%lld\n", (long long)atomic_load(&b->closed_n),
           (long long)atomic_load(&b->closed_why), (long long)atomic_load(&b->busy_ns));
    region_close(r);
    return 0;
}
