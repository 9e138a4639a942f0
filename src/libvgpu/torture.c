/* Only in libvgpu_torture.so, the test build of libvgpu (the `torture` case of
 * tests/integration/libvgpu_test.sh): VGPU_TORTURE_FAIL_NTH=n makes libvgpu's n-th
 * fallible allocation (its allocation table, the region) fail, and the process says at
 * exit whether that happened, so the test can walk n = 1, 2, ... until nothing failed. */
#include <stdlib.h>
#include <unistd.h>

#include "base/mem.h"

__attribute__((constructor)) static void torture_arm(void)
{
    const char *n = getenv("VGPU_TORTURE_FAIL_NTH");
    if (n != NULL)
        vg_mem_fail_nth(strtoul(n, NULL, 10));
}

__attribute__((destructor)) static void torture_report(void)
{
    static const char line[] = "vgpu-torture: an allocation failed\n";
    if (vg_mem_fail_fired())
        (void)!write(2, line, sizeof line - 1);
}
