/* Checks every prototype in src/abi/cuda.h against the CUDA toolkit's cuda.h (see
 * abi_cuda.cmake). The toolkit header is included as the driver itself sees it
 * (__CUDA_API_VERSION_INTERNAL), so every exported name -- the old unversioned entry
 * points, the _v2/_v3 ones and the _ptsz/_ptds ones -- is declared under its own name.
 * Our prototypes are declared as vg_<name> over the toolkit's types; each pair must have
 * compatible function types, or this file does not compile. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <stdio.h>

#define VG_CUDA_TOOLKIT_TYPES 1
#define VG_CU(name)           vg_##name
#include "abi/cuda.h"

#define VG_CHECK_FN(name)                                                                          \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&name), __typeof__(&vg_##name)),        \
                   "prototype differs from the toolkit's: " #name);                                \
    static const char *const checked_##name = #name;

#include "vg_check_fns.inc"

int vg_abi_types_checked(void);

int main(void)
{
    /* Counting the names keeps the checks visible in the test log. */
    static const char *const *const all[] = {
#undef VG_CHECK_FN
#define VG_CHECK_FN(name) &checked_##name,
#include "vg_check_fns.inc"
    };
    printf("abi: %zu driver prototypes match the toolkit's cuda.h (CUDA_VERSION %d)\n",
           sizeof all / sizeof all[0], CUDA_VERSION);
    printf("abi: %d enumerator values, macros and type sizes match\n", vg_abi_types_checked());
    return 0;
}
