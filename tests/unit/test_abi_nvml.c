/* Checks the dynamic MIG declarations of src/abi/nvml.h against NVIDIA's nvml.h (see
 * abi_nvml.cmake): the profile enums, the structs fakegpu fills and the device plugin
 * reads (sizes and every field's offset). A mismatch does not compile. */
#include <nvml.h>

#include <stddef.h>
#include <stdio.h>

#include "vg_prefixed_nvml.h"

#define SAME_VALUE(name) _Static_assert((long long)vg_##name == (long long)name, "value: " #name)
#define SAME_SIZE(type)  _Static_assert(sizeof(vg_##type) == sizeof(type), "size: " #type)
#define SAME_OFFSET(type, field)                                                                   \
    _Static_assert(offsetof(vg_##type, field) == offsetof(type, field), "offset: " #type "." #field)

SAME_VALUE(NVML_ERROR_IN_USE);
SAME_VALUE(NVML_ERROR_INSUFFICIENT_RESOURCES);
SAME_VALUE(NVML_GPU_INSTANCE_PROFILE_1_SLICE);
SAME_VALUE(NVML_GPU_INSTANCE_PROFILE_2_SLICE);
SAME_VALUE(NVML_GPU_INSTANCE_PROFILE_3_SLICE);
SAME_VALUE(NVML_GPU_INSTANCE_PROFILE_4_SLICE);
SAME_VALUE(NVML_GPU_INSTANCE_PROFILE_7_SLICE);
SAME_VALUE(NVML_GPU_INSTANCE_PROFILE_8_SLICE);
SAME_VALUE(NVML_GPU_INSTANCE_PROFILE_6_SLICE);
SAME_VALUE(NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1);
SAME_VALUE(NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1);
SAME_VALUE(NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2);
SAME_VALUE(NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE);
SAME_VALUE(NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE);
SAME_VALUE(NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE);
SAME_VALUE(NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE);
SAME_VALUE(NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE);
SAME_VALUE(NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE);
SAME_VALUE(NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE);
SAME_VALUE(NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1);
SAME_VALUE(NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED);

SAME_SIZE(nvmlGpuInstancePlacement_t);
SAME_OFFSET(nvmlGpuInstancePlacement_t, start);
SAME_OFFSET(nvmlGpuInstancePlacement_t, size);
SAME_SIZE(nvmlGpuInstanceProfileInfo_t);
SAME_OFFSET(nvmlGpuInstanceProfileInfo_t, id);
SAME_OFFSET(nvmlGpuInstanceProfileInfo_t, isP2pSupported);
SAME_OFFSET(nvmlGpuInstanceProfileInfo_t, sliceCount);
SAME_OFFSET(nvmlGpuInstanceProfileInfo_t, instanceCount);
SAME_OFFSET(nvmlGpuInstanceProfileInfo_t, multiprocessorCount);
SAME_OFFSET(nvmlGpuInstanceProfileInfo_t, copyEngineCount);
SAME_OFFSET(nvmlGpuInstanceProfileInfo_t, decoderCount);
SAME_OFFSET(nvmlGpuInstanceProfileInfo_t, encoderCount);
SAME_OFFSET(nvmlGpuInstanceProfileInfo_t, jpegCount);
SAME_OFFSET(nvmlGpuInstanceProfileInfo_t, ofaCount);
SAME_OFFSET(nvmlGpuInstanceProfileInfo_t, memorySizeMB);
SAME_SIZE(nvmlGpuInstanceInfo_t);
SAME_OFFSET(nvmlGpuInstanceInfo_t, device);
SAME_OFFSET(nvmlGpuInstanceInfo_t, id);
SAME_OFFSET(nvmlGpuInstanceInfo_t, profileId);
SAME_OFFSET(nvmlGpuInstanceInfo_t, placement);
SAME_SIZE(nvmlComputeInstancePlacement_t);
SAME_SIZE(nvmlComputeInstanceProfileInfo_t);
SAME_OFFSET(nvmlComputeInstanceProfileInfo_t, id);
SAME_OFFSET(nvmlComputeInstanceProfileInfo_t, sliceCount);
SAME_OFFSET(nvmlComputeInstanceProfileInfo_t, instanceCount);
SAME_OFFSET(nvmlComputeInstanceProfileInfo_t, multiprocessorCount);
SAME_OFFSET(nvmlComputeInstanceProfileInfo_t, sharedCopyEngineCount);
SAME_OFFSET(nvmlComputeInstanceProfileInfo_t, sharedOfaCount);
SAME_SIZE(nvmlComputeInstanceInfo_t);
SAME_OFFSET(nvmlComputeInstanceInfo_t, device);
SAME_OFFSET(nvmlComputeInstanceInfo_t, gpuInstance);
SAME_OFFSET(nvmlComputeInstanceInfo_t, id);
SAME_OFFSET(nvmlComputeInstanceInfo_t, profileId);
SAME_OFFSET(nvmlComputeInstanceInfo_t, placement);

/* The entry points fakegpu exports and the device plugin calls are declared by both (their
 * argument types are the structs checked above). */
#define SAME_FN(name) _Static_assert(sizeof(&name) == sizeof(&vg_##name), "entry point: " #name)
SAME_FN(nvmlDeviceGetGpuInstanceProfileInfo);
SAME_FN(nvmlDeviceGetGpuInstancePossiblePlacements_v2);
SAME_FN(nvmlDeviceCreateGpuInstanceWithPlacement);
SAME_FN(nvmlGpuInstanceCreateComputeInstance);
SAME_FN(nvmlComputeInstanceDestroy);
SAME_FN(nvmlGpuInstanceDestroy);

int main(void)
{
    printf("src/abi/nvml.h's dynamic MIG declarations match nvml.h\n");
    return 0;
}
