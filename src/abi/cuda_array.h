/* Bytes per element of a CUDA array format: shared by fakegpu (which allocates arrays)
 * and libvgpu (which charges them), so both size an array the same way. */
#ifndef VGPU_ABI_CUDA_ARRAY_H
#define VGPU_ABI_CUDA_ARRAY_H

#include "abi/cuda.h"

/* 1, 2 or 4 for the integer, half and float formats; 0 for any other value. */
static inline unsigned cu_array_format_bytes(CUarray_format format)
{
    switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4;
    default:
        return 0;
    }
}

#endif
