/* Checks src/abi/cuda.h's enumerator values, numeric macros and type sizes against the
 * toolkit's cuda.h: abi_cuda.cmake writes a copy of our header with every CU/cu identifier
 * prefixed vg_, so both sets of definitions live in one translation unit. Field offsets
 * of the structures fakegpu and libvgpu read are checked by hand below. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <stddef.h>

#include "vg_prefixed_cuda.h"

int vg_abi_types_checked(void);

#define VG_CHECK_VALUE(name)                                                                       \
    _Static_assert((long long)vg_##name == (long long)name, "value differs: " #name);              \
    ++n;
#define VG_CHECK_SIZE(name)                                                                        \
    _Static_assert(sizeof(vg_##name) == sizeof(name), "size differs: " #name);                     \
    ++n;
#define VG_CHECK_OFFSET(type, field)                                                               \
    _Static_assert(offsetof(vg_##type, field) == offsetof(type, field),                            \
                   "offset differs: " #type "." #field);                                           \
    ++n;

int vg_abi_types_checked(void)
{
    int n = 0;
#include "vg_check_types.inc"
    VG_CHECK_OFFSET(CUlaunchConfig, hStream)
    VG_CHECK_OFFSET(CUlaunchConfig, attrs)
    VG_CHECK_OFFSET(CUlaunchConfig, numAttrs)
    VG_CHECK_OFFSET(CUlaunchAttribute, value)
    VG_CHECK_OFFSET(CUDA_MEMCPY2D, srcMemoryType)
    VG_CHECK_OFFSET(CUDA_MEMCPY2D, srcDevice)
    VG_CHECK_OFFSET(CUDA_MEMCPY2D, srcArray)
    VG_CHECK_OFFSET(CUDA_MEMCPY2D, srcPitch)
    VG_CHECK_OFFSET(CUDA_MEMCPY2D, dstMemoryType)
    VG_CHECK_OFFSET(CUDA_MEMCPY2D, dstHost)
    VG_CHECK_OFFSET(CUDA_MEMCPY2D, dstPitch)
    VG_CHECK_OFFSET(CUDA_MEMCPY2D, Height)
    VG_CHECK_OFFSET(CUDA_MEMCPY2D_v1, srcDevice)
    VG_CHECK_OFFSET(CUDA_MEMCPY2D_v1, dstPitch)
    VG_CHECK_OFFSET(CUDA_MEMCPY2D_v1, Height)
    VG_CHECK_OFFSET(CUDA_ARRAY_DESCRIPTOR, Format)
    VG_CHECK_OFFSET(CUDA_ARRAY_DESCRIPTOR, NumChannels)
    VG_CHECK_OFFSET(CUDA_ARRAY3D_DESCRIPTOR, Depth)
    VG_CHECK_OFFSET(CUDA_ARRAY3D_DESCRIPTOR, Flags)
    VG_CHECK_OFFSET(CUmemAllocationProp, location)
    VG_CHECK_OFFSET(CUmemAllocationProp, allocFlags)
    VG_CHECK_OFFSET(CUmemAccessDesc, flags)
    VG_CHECK_OFFSET(CUmemPoolProps, location)
    VG_CHECK_OFFSET(CUmemPoolProps, maxSize)
    VG_CHECK_OFFSET(CUctxCreateParams, cigParams)
    return n;
}
