/* The entry points the dispatch attack takes from its library (dispatch_lib.c), each found
 * the way the test names, never through the program's own links. */
#ifndef VGPU_TESTS_DISPATCH_ATTACK_H
#define VGPU_TESTS_DISPATCH_ATTACK_H

#include "abi/cuda.h"
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include "abi/nvml.h"

#define DISPATCH_API(X)                                                                            \
    X(cuInit)                                                                                      \
    X(cuDeviceGet)                                                                                 \
    X(cuDevicePrimaryCtxRetain)                                                                    \
    X(cuCtxSetCurrent)                                                                             \
    X(cuCtxSynchronize)                                                                            \
    X(cuMemGetInfo_v2)                                                                             \
    X(cuMemAlloc_v2)                                                                               \
    X(cuModuleLoadData)                                                                            \
    X(cuModuleGetFunction)                                                                         \
    X(cuLaunchKernel)

#define DISPATCH_NVML_API(X)                                                                       \
    X(nvmlInit_v2)                                                                                 \
    X(nvmlDeviceGetHandleByIndex_v2)                                                               \
    X(nvmlDeviceGetMemoryInfo)

#define DISPATCH_MEMBER(name) __typeof__(name) *name;
struct dispatch_api {
    DISPATCH_API(DISPATCH_MEMBER)
    DISPATCH_NVML_API(DISPATCH_MEMBER)
};

/* Fills api by WAY (dispatch_lib.c lists them); 0, or -1 with a line on stderr naming
 * what was not found. */
typedef int dispatch_resolve_fn(const char *way, struct dispatch_api *api);
dispatch_resolve_fn dispatch_resolve;

/* dlsym(RTLD_NEXT, "dispatch_marker") and dlvsym(..., "DISPATCH_ANY") from the library:
 * the definition after the library, or NULL (the library defines it last). */
typedef void *dispatch_next_marker_fn(int versioned);
dispatch_next_marker_fn dispatch_next_marker;
void dispatch_marker(void);

#endif
