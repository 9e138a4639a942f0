/* The few NVML declarations libvgpu needs (types with the library's layouts, and the
 * prototypes it intercepts or calls). Kept local so libvgpu builds without the NVIDIA
 * headers; the names and layouts follow the public nvml.h. */
#ifndef VGPU_LIBVGPU_NVML_ABI_H
#define VGPU_LIBVGPU_NVML_ABI_H

#include <stdint.h>

typedef int vg_nvmlReturn_t;
#define VG_NVML_SUCCESS                 0
#define VG_NVML_ERROR_UNINITIALIZED     1
#define VG_NVML_ERROR_INVALID_ARGUMENT  2
#define VG_NVML_ERROR_INSUFFICIENT_SIZE 7
#define VG_NVML_ERROR_UNKNOWN           999

typedef struct vg_nvmlDevice_st *vg_nvmlDevice_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} vg_nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} vg_nvmlMemory_v2_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} vg_nvmlProcessInfo_v1_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} vg_nvmlProcessInfo_t; /* v2 and v3 share this layout */

#define VG_NVML_DEVICE_UUID_V2_BUFFER_SIZE 96

vg_nvmlReturn_t nvmlInit(void);
vg_nvmlReturn_t nvmlInit_v2(void);
vg_nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
vg_nvmlReturn_t nvmlDeviceGetUUID(vg_nvmlDevice_t device, char *uuid, unsigned int length);
vg_nvmlReturn_t nvmlDeviceGetMemoryInfo(vg_nvmlDevice_t device, vg_nvmlMemory_t *memory);
vg_nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(vg_nvmlDevice_t device, vg_nvmlMemory_v2_t *memory);
vg_nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(vg_nvmlDevice_t device,
                                                     unsigned int *infoCount,
                                                     vg_nvmlProcessInfo_v1_t *infos);
vg_nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(vg_nvmlDevice_t device,
                                                        unsigned int *infoCount,
                                                        vg_nvmlProcessInfo_t *infos);
vg_nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(vg_nvmlDevice_t device,
                                                        unsigned int *infoCount,
                                                        vg_nvmlProcessInfo_t *infos);

#endif
