/* vgpu's own declarations of the CUDA driver API (libcuda.so.1) that libvgpu and fakegpu
 * use: types with the driver's values and layouts, and prototypes under the exported
 * names, versioned ones included (_v2, _v3, ..., and the per-thread default stream
 * variants _ptsz / _ptds). The toolkit's cuda.h is not needed to build vgpu; when one is
 * installed, tests/unit/test_abi_cuda.c checks every prototype, enumerator value and
 * struct size here against it.
 *
 * Prototypes name functions through VG_CU(name) so that the check can declare them under
 * a prefix next to the toolkit's; VG_CUDA_TOOLKIT_TYPES skips the type half when the
 * toolkit's cuda.h already supplied the types. Names are the exported ones: a program
 * built with the toolkit header calls cuMemAlloc_v2 where its source says cuMemAlloc,
 * and the plain name is the old 32-bit entry point. */
#ifndef VGPU_ABI_CUDA_H
#define VGPU_ABI_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifndef VG_CU
#define VG_CU(name) name
#endif

#ifndef VG_CUDA_TOOLKIT_TYPES

typedef uint32_t cuuint32_t;
typedef uint64_t cuuint64_t;

typedef unsigned long long CUdeviceptr;
typedef unsigned int CUdeviceptr_v1; /* the pre-3.2 32-bit entry points */
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUarray_st *CUarray;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef unsigned long long CUmemGenericAllocationHandle;

typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;

typedef enum cudaError_enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_PROFILER_DISABLED = 5,
    CUDA_ERROR_STUB_LIBRARY = 34,
    CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER = 36,
    CUDA_ERROR_DEVICE_UNAVAILABLE = 46,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_DEVICE_NOT_LICENSED = 102,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_CONTEXT_ALREADY_CURRENT = 202,
    CUDA_ERROR_MAP_FAILED = 205,
    CUDA_ERROR_UNMAP_FAILED = 206,
    CUDA_ERROR_ARRAY_IS_MAPPED = 207,
    CUDA_ERROR_ALREADY_MAPPED = 208,
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    CUDA_ERROR_ALREADY_ACQUIRED = 210,
    CUDA_ERROR_NOT_MAPPED = 211,
    CUDA_ERROR_UNSUPPORTED_LIMIT = 215,
    CUDA_ERROR_CONTEXT_ALREADY_IN_USE = 216,
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_INVALID_SOURCE = 300,
    CUDA_ERROR_FILE_NOT_FOUND = 301,
    CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND = 302,
    CUDA_ERROR_SHARED_OBJECT_INIT_FAILED = 303,
    CUDA_ERROR_OPERATING_SYSTEM = 304,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_ILLEGAL_STATE = 401,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
    CUDA_ERROR_LAUNCH_TIMEOUT = 702,
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
    CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705,
    CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE = 708,
    CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
    CUDA_ERROR_ASSERT = 710,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720,
    CUDA_ERROR_NOT_PERMITTED = 800,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_SYSTEM_NOT_READY = 802,
    CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
    CUDA_ERROR_STREAM_CAPTURE_MERGE = 902,
    CUDA_ERROR_STREAM_CAPTURE_UNMATCHED = 903,
    CUDA_ERROR_STREAM_CAPTURE_UNJOINED = 904,
    CUDA_ERROR_STREAM_CAPTURE_ISOLATION = 905,
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
    CUDA_ERROR_CAPTURED_EVENT = 907,
    CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908,
    CUDA_ERROR_TIMEOUT = 909,
    CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910,
    CUDA_ERROR_UNKNOWN = 999
} CUresult;

/* Only the attributes fakegpu answers with a non-zero value are named; any value below
 * CU_DEVICE_ATTRIBUTE_MAX is a valid query. */
typedef enum CUdevice_attribute_enum {
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y = 3,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z = 4,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
    CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY = 9,
    CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
    CU_DEVICE_ATTRIBUTE_MAX_PITCH = 11,
    CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK = 12,
    CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
    CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT = 14,
    CU_DEVICE_ATTRIBUTE_GPU_OVERLAP = 15,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_INTEGRATED = 18,
    CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19,
    CU_DEVICE_ATTRIBUTE_COMPUTE_MODE = 20,
    CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS = 31,
    CU_DEVICE_ATTRIBUTE_ECC_ENABLED = 32,
    CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
    CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
    CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36,
    CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37,
    CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39,
    CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT = 40,
    CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
    CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED = 78,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
    CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR = 82,
    CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY = 83,
    CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 89,
    CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH = 95,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
    CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED = 99,
    CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
    CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR = 106,
    CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,
    CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES = 119,
    CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH = 120,
    CU_DEVICE_ATTRIBUTE_MAX = 148
} CUdevice_attribute;

typedef enum CUfunction_attribute_enum {
    CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
    CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
    CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES = 2,
    CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
    CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
    CU_FUNC_ATTRIBUTE_PTX_VERSION = 5,
    CU_FUNC_ATTRIBUTE_BINARY_VERSION = 6
} CUfunction_attribute;

typedef enum CUjit_option_enum {
    CU_JIT_MAX_REGISTERS = 0,
    CU_JIT_THREADS_PER_BLOCK = 1,
    CU_JIT_WALL_TIME = 2,
    CU_JIT_INFO_LOG_BUFFER = 3,
    CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
    CU_JIT_ERROR_LOG_BUFFER = 5,
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
} CUjit_option;

typedef enum CUmemorytype_enum {
    CU_MEMORYTYPE_HOST = 0x01,
    CU_MEMORYTYPE_DEVICE = 0x02,
    CU_MEMORYTYPE_ARRAY = 0x03,
    CU_MEMORYTYPE_UNIFIED = 0x04
} CUmemorytype;

typedef enum CUarray_format_enum {
    CU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
    CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
    CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
    CU_AD_FORMAT_SIGNED_INT8 = 0x08,
    CU_AD_FORMAT_SIGNED_INT16 = 0x09,
    CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
    CU_AD_FORMAT_HALF = 0x10,
    CU_AD_FORMAT_FLOAT = 0x20,
    CU_AD_FORMAT_MAX = 0x7FFFFFFF
} CUarray_format;

typedef enum CUstream_flags_enum {
    CU_STREAM_DEFAULT = 0x0,
    CU_STREAM_NON_BLOCKING = 0x1
} CUstream_flags;

/* Special stream handles: the legacy default stream and the per-thread default stream. */
#define CU_STREAM_LEGACY     ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

typedef enum CUevent_flags_enum {
    CU_EVENT_DEFAULT = 0x0,
    CU_EVENT_BLOCKING_SYNC = 0x1,
    CU_EVENT_DISABLE_TIMING = 0x2,
    CU_EVENT_INTERPROCESS = 0x4
} CUevent_flags;

typedef enum CUevent_record_flags_enum {
    CU_EVENT_RECORD_DEFAULT = 0x0,
    CU_EVENT_RECORD_EXTERNAL = 0x1
} CUevent_record_flags;

typedef enum CUmemAttach_flags_enum {
    CU_MEM_ATTACH_GLOBAL = 0x1,
    CU_MEM_ATTACH_HOST = 0x2,
    CU_MEM_ATTACH_SINGLE = 0x4
} CUmemAttach_flags;

#define CU_MEMHOSTALLOC_PORTABLE      0x01
#define CU_MEMHOSTALLOC_DEVICEMAP     0x02
#define CU_MEMHOSTALLOC_WRITECOMBINED 0x04
#define CU_MEMHOSTREGISTER_PORTABLE   0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP  0x02
#define CU_MEMHOSTREGISTER_IOMEMORY   0x04
#define CU_MEMHOSTREGISTER_READ_ONLY  0x08

/* cuLaunchKernel's `extra` array markers. */
#define CU_LAUNCH_PARAM_END_AS_INT            0x00
#define CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT 0x01
#define CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT    0x02
#define CU_LAUNCH_PARAM_END                   ((void *)CU_LAUNCH_PARAM_END_AS_INT)
#define CU_LAUNCH_PARAM_BUFFER_POINTER        ((void *)CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT)
#define CU_LAUNCH_PARAM_BUFFER_SIZE           ((void *)CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT)

typedef enum CUlaunchAttributeID_enum {
    CU_LAUNCH_ATTRIBUTE_IGNORE = 0,
    CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1,
    CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2,
    CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY = 3,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT = 7,
    CU_LAUNCH_ATTRIBUTE_PRIORITY = 8
} CUlaunchAttributeID;

/* The driver's value union is 64 bytes; fakegpu reads only `cooperative`. */
typedef union CUlaunchAttributeValue_union {
    char pad[64];
    int cooperative;
    int priority;
} CUlaunchAttributeValue;

typedef struct CUlaunchAttribute_st {
    CUlaunchAttributeID id;
    char pad[8 - sizeof(CUlaunchAttributeID)];
    CUlaunchAttributeValue value;
} CUlaunchAttribute;

typedef struct CUlaunchConfig_st {
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

typedef enum CUstreamCaptureStatus_enum {
    CU_STREAM_CAPTURE_STATUS_NONE = 0,
    CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
    CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2
} CUstreamCaptureStatus;

typedef enum CUstreamCaptureMode_enum {
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    CU_STREAM_CAPTURE_MODE_RELAXED = 2
} CUstreamCaptureMode;

/* Opaque to fakegpu: only passed through by pointer. */
typedef struct CUgraphEdgeData_st {
    unsigned char from_port;
    unsigned char to_port;
    unsigned char type;
    unsigned char reserved[5];
} CUgraphEdgeData;

typedef enum CUdriverProcAddress_flags_enum {
    CU_GET_PROC_ADDRESS_DEFAULT = 0,
    CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1 << 0,
    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1 << 1
} CUdriverProcAddress_flags;

typedef enum CUdriverProcAddressQueryResult_enum {
    CU_GET_PROC_ADDRESS_SUCCESS = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
} CUdriverProcAddressQueryResult;

typedef enum CUexecAffinityType_enum {
    CU_EXEC_AFFINITY_TYPE_SM_COUNT = 0,
    CU_EXEC_AFFINITY_TYPE_MAX
} CUexecAffinityType;

typedef struct CUexecAffinitySmCount_st {
    unsigned int val;
} CUexecAffinitySmCount;

typedef struct CUexecAffinityParam_st {
    CUexecAffinityType type;
    union {
        CUexecAffinitySmCount smCount;
    } param;
} CUexecAffinityParam;

typedef struct CUctxCigParam_st {
    int sharedDataType;
    void *sharedData;
} CUctxCigParam;

typedef struct CUctxCreateParams_st {
    CUexecAffinityParam *execAffinityParams;
    int numExecAffinityParams;
    CUctxCigParam *cigParams;
} CUctxCreateParams;

typedef struct CUDA_MEMCPY2D_st {
    size_t srcXInBytes;
    size_t srcY;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    size_t srcPitch;
    size_t dstXInBytes;
    size_t dstY;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    size_t dstPitch;
    size_t WidthInBytes;
    size_t Height;
} CUDA_MEMCPY2D;

/* The pre-3.2 layout, taken by the unversioned cuMemcpy2D* entry points. */
typedef struct CUDA_MEMCPY2D_v1_st {
    unsigned int srcXInBytes;
    unsigned int srcY;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr_v1 srcDevice;
    CUarray srcArray;
    unsigned int srcPitch;
    unsigned int dstXInBytes;
    unsigned int dstY;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr_v1 dstDevice;
    CUarray dstArray;
    unsigned int dstPitch;
    unsigned int WidthInBytes;
    unsigned int Height;
} CUDA_MEMCPY2D_v1;

typedef struct CUDA_ARRAY_DESCRIPTOR_st {
    size_t Width;
    size_t Height;
    CUarray_format Format;
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct CUDA_ARRAY_DESCRIPTOR_v1_st {
    unsigned int Width;
    unsigned int Height;
    CUarray_format Format;
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR_v1;

typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {
    size_t Width;
    size_t Height;
    size_t Depth;
    CUarray_format Format;
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

typedef struct CUDA_ARRAY3D_DESCRIPTOR_v1_st {
    unsigned int Width;
    unsigned int Height;
    unsigned int Depth;
    CUarray_format Format;
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR_v1;

typedef enum CUmemAllocationHandleType_enum {
    CU_MEM_HANDLE_TYPE_NONE = 0x0,
    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1,
    CU_MEM_HANDLE_TYPE_WIN32 = 0x2,
    CU_MEM_HANDLE_TYPE_WIN32_KMT = 0x4,
    CU_MEM_HANDLE_TYPE_FABRIC = 0x8,
    CU_MEM_HANDLE_TYPE_MAX = 0x7FFFFFFF
} CUmemAllocationHandleType;

typedef enum CUmemAccess_flags_enum {
    CU_MEM_ACCESS_FLAGS_PROT_NONE = 0x0,
    CU_MEM_ACCESS_FLAGS_PROT_READ = 0x1,
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3,
    CU_MEM_ACCESS_FLAGS_PROT_MAX = 0x7FFFFFFF
} CUmemAccess_flags;

typedef enum CUmemLocationType_enum {
    CU_MEM_LOCATION_TYPE_INVALID = 0x0,
    CU_MEM_LOCATION_TYPE_DEVICE = 0x1,
    CU_MEM_LOCATION_TYPE_HOST = 0x2,
    CU_MEM_LOCATION_TYPE_HOST_NUMA = 0x3,
    CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT = 0x4,
    CU_MEM_LOCATION_TYPE_MAX = 0x7FFFFFFF
} CUmemLocationType;

typedef enum CUmemAllocationType_enum {
    CU_MEM_ALLOCATION_TYPE_INVALID = 0x0,
    CU_MEM_ALLOCATION_TYPE_PINNED = 0x1,
    CU_MEM_ALLOCATION_TYPE_MANAGED = 0x2,
    CU_MEM_ALLOCATION_TYPE_MAX = 0x7FFFFFFF
} CUmemAllocationType;

typedef enum CUmemAllocationGranularity_flags_enum {
    CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0,
    CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1
} CUmemAllocationGranularity_flags;

typedef struct CUmemLocation_st {
    CUmemLocationType type;
    int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
    CUmemAllocationType type;
    CUmemAllocationHandleType requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
    CUmemLocation location;
    CUmemAccess_flags flags;
} CUmemAccessDesc;

typedef enum CUmemPool_attribute_enum {
    CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC = 2,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3,
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
    CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,
    CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,
    CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,
    CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8
} CUmemPool_attribute;

typedef struct CUmemPoolProps_st {
    CUmemAllocationType allocType;
    CUmemAllocationHandleType handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;

/* A graph's memory allocation node: the pool it comes from, its size, its address (out). */
typedef struct CUDA_MEM_ALLOC_NODE_PARAMS_v1_st {
    CUmemPoolProps poolProps;
    const CUmemAccessDesc *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS;

/* Legacy IPC: an opaque handle to a cuMemAlloc allocation, opened by another process. */
#define CU_IPC_HANDLE_SIZE 64
typedef struct CUipcMemHandle_st {
    char reserved[CU_IPC_HANDLE_SIZE];
} CUipcMemHandle;
/* A pool allocation exported to another process (cuMemPoolExportPointer). */
typedef struct CUmemPoolPtrExportData_st {
    unsigned char reserved[64];
} CUmemPoolPtrExportData;

/* The graph memory pool's figures (cuDeviceGetGraphMemAttribute). */
typedef enum CUgraphMem_attribute_enum {
    CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT = 0,
    CU_GRAPH_MEM_ATTR_USED_MEM_HIGH = 1,
    CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT = 2,
    CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH = 3
} CUgraphMem_attribute;

typedef enum CUipcMem_flags_enum { CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1 } CUipcMem_flags;

#endif /* VG_CUDA_TOOLKIT_TYPES */

/* ---- initialisation, version, errors, entry points ---- */
CUresult VG_CU(cuInit)(unsigned int Flags);
CUresult VG_CU(cuDriverGetVersion)(int *driverVersion);
CUresult VG_CU(cuGetErrorString)(CUresult error, const char **pStr);
CUresult VG_CU(cuGetErrorName)(CUresult error, const char **pStr);
CUresult VG_CU(cuGetProcAddress)(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult VG_CU(cuGetProcAddress_v2)(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus);

/* ---- devices ---- */
CUresult VG_CU(cuDeviceGet)(CUdevice *device, int ordinal);
CUresult VG_CU(cuDeviceGetCount)(int *count);
CUresult VG_CU(cuDeviceGetName)(char *name, int len, CUdevice dev);
CUresult VG_CU(cuDeviceGetUuid)(CUuuid *uuid, CUdevice dev);
CUresult VG_CU(cuDeviceGetUuid_v2)(CUuuid *uuid, CUdevice dev);
CUresult VG_CU(cuDeviceTotalMem)(unsigned int *bytes, CUdevice dev);
CUresult VG_CU(cuDeviceTotalMem_v2)(size_t *bytes, CUdevice dev);
CUresult VG_CU(cuDeviceGetAttribute)(int *pi, CUdevice_attribute attrib, CUdevice dev);
CUresult VG_CU(cuDeviceGetPCIBusId)(char *pciBusId, int len, CUdevice dev);
CUresult VG_CU(cuDeviceGetByPCIBusId)(CUdevice *dev, const char *pciBusId);
CUresult VG_CU(cuDeviceGetDefaultMemPool)(CUmemoryPool *pool_out, CUdevice dev);
CUresult VG_CU(cuDeviceGetMemPool)(CUmemoryPool *pool, CUdevice dev);
CUresult VG_CU(cuDeviceSetMemPool)(CUdevice dev, CUmemoryPool pool);

/* ---- primary and regular contexts ---- */
CUresult VG_CU(cuDevicePrimaryCtxRetain)(CUcontext *pctx, CUdevice dev);
CUresult VG_CU(cuDevicePrimaryCtxRelease)(CUdevice dev);
CUresult VG_CU(cuDevicePrimaryCtxRelease_v2)(CUdevice dev);
CUresult VG_CU(cuDevicePrimaryCtxSetFlags)(CUdevice dev, unsigned int flags);
CUresult VG_CU(cuDevicePrimaryCtxSetFlags_v2)(CUdevice dev, unsigned int flags);
CUresult VG_CU(cuDevicePrimaryCtxGetState)(CUdevice dev, unsigned int *flags, int *active);
CUresult VG_CU(cuDevicePrimaryCtxReset)(CUdevice dev);
CUresult VG_CU(cuDevicePrimaryCtxReset_v2)(CUdevice dev);
CUresult VG_CU(cuCtxCreate)(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult VG_CU(cuCtxCreate_v2)(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult VG_CU(cuCtxCreate_v3)(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                               unsigned int flags, CUdevice dev);
CUresult VG_CU(cuCtxCreate_v4)(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                               unsigned int flags, CUdevice dev);
CUresult VG_CU(cuCtxDestroy)(CUcontext ctx);
CUresult VG_CU(cuCtxDestroy_v2)(CUcontext ctx);
CUresult VG_CU(cuCtxPushCurrent)(CUcontext ctx);
CUresult VG_CU(cuCtxPushCurrent_v2)(CUcontext ctx);
CUresult VG_CU(cuCtxPopCurrent)(CUcontext *pctx);
CUresult VG_CU(cuCtxPopCurrent_v2)(CUcontext *pctx);
CUresult VG_CU(cuCtxSetCurrent)(CUcontext ctx);
CUresult VG_CU(cuCtxGetCurrent)(CUcontext *pctx);
CUresult VG_CU(cuCtxGetDevice)(CUdevice *device);
CUresult VG_CU(cuCtxGetFlags)(unsigned int *flags);
CUresult VG_CU(cuCtxGetApiVersion)(CUcontext ctx, unsigned int *version);
CUresult VG_CU(cuCtxGetStreamPriorityRange)(int *leastPriority, int *greatestPriority);
CUresult VG_CU(cuCtxSynchronize)(void);

/* ---- streams ---- */
CUresult VG_CU(cuStreamCreate)(CUstream *phStream, unsigned int Flags);
CUresult VG_CU(cuStreamCreateWithPriority)(CUstream *phStream, unsigned int flags, int priority);
CUresult VG_CU(cuStreamDestroy)(CUstream hStream);
CUresult VG_CU(cuStreamDestroy_v2)(CUstream hStream);
CUresult VG_CU(cuStreamSynchronize)(CUstream hStream);
CUresult VG_CU(cuStreamSynchronize_ptsz)(CUstream hStream);
CUresult VG_CU(cuStreamQuery)(CUstream hStream);
CUresult VG_CU(cuStreamQuery_ptsz)(CUstream hStream);
CUresult VG_CU(cuStreamWaitEvent)(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult VG_CU(cuStreamWaitEvent_ptsz)(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult VG_CU(cuStreamGetCtx)(CUstream hStream, CUcontext *pctx);
CUresult VG_CU(cuStreamGetCtx_ptsz)(CUstream hStream, CUcontext *pctx);

/* ---- events ---- */
CUresult VG_CU(cuEventCreate)(CUevent *phEvent, unsigned int Flags);
CUresult VG_CU(cuEventRecord)(CUevent hEvent, CUstream hStream);
CUresult VG_CU(cuEventRecord_ptsz)(CUevent hEvent, CUstream hStream);
CUresult VG_CU(cuEventRecordWithFlags)(CUevent hEvent, CUstream hStream, unsigned int flags);
CUresult VG_CU(cuEventRecordWithFlags_ptsz)(CUevent hEvent, CUstream hStream, unsigned int flags);
CUresult VG_CU(cuEventQuery)(CUevent hEvent);
CUresult VG_CU(cuEventSynchronize)(CUevent hEvent);
CUresult VG_CU(cuEventElapsedTime)(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult VG_CU(cuEventElapsedTime_v2)(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult VG_CU(cuEventDestroy)(CUevent hEvent);
CUresult VG_CU(cuEventDestroy_v2)(CUevent hEvent);

/* ---- modules and launches ---- */
CUresult VG_CU(cuModuleLoad)(CUmodule *module, const char *fname);
CUresult VG_CU(cuModuleLoadData)(CUmodule *module, const void *image);
CUresult VG_CU(cuModuleLoadDataEx)(CUmodule *module, const void *image, unsigned int numOptions,
                                   CUjit_option *options, void **optionValues);
CUresult VG_CU(cuModuleLoadFatBinary)(CUmodule *module, const void *fatCubin);
CUresult VG_CU(cuModuleUnload)(CUmodule hmod);
CUresult VG_CU(cuModuleGetFunction)(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult VG_CU(cuFuncGetAttribute)(int *pi, CUfunction_attribute attrib, CUfunction hfunc);
CUresult VG_CU(cuLaunchKernel)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                               unsigned int gridDimZ, unsigned int blockDimX,
                               unsigned int blockDimY, unsigned int blockDimZ,
                               unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
                               void **extra);
CUresult VG_CU(cuLaunchKernel_ptsz)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                    unsigned int gridDimZ, unsigned int blockDimX,
                                    unsigned int blockDimY, unsigned int blockDimZ,
                                    unsigned int sharedMemBytes, CUstream hStream,
                                    void **kernelParams, void **extra);
CUresult VG_CU(cuLaunchKernelEx)(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                 void **extra);
CUresult VG_CU(cuLaunchKernelEx_ptsz)(const CUlaunchConfig *config, CUfunction f,
                                      void **kernelParams, void **extra);
CUresult VG_CU(cuLaunchCooperativeKernel)(CUfunction f, unsigned int gridDimX,
                                          unsigned int gridDimY, unsigned int gridDimZ,
                                          unsigned int blockDimX, unsigned int blockDimY,
                                          unsigned int blockDimZ, unsigned int sharedMemBytes,
                                          CUstream hStream, void **kernelParams);
CUresult VG_CU(cuLaunchCooperativeKernel_ptsz)(CUfunction f, unsigned int gridDimX,
                                               unsigned int gridDimY, unsigned int gridDimZ,
                                               unsigned int blockDimX, unsigned int blockDimY,
                                               unsigned int blockDimZ, unsigned int sharedMemBytes,
                                               CUstream hStream, void **kernelParams);

/* ---- stream capture and graphs ---- */
CUresult VG_CU(cuStreamBeginCapture)(CUstream hStream);
CUresult VG_CU(cuStreamBeginCapture_ptsz)(CUstream hStream);
CUresult VG_CU(cuStreamBeginCapture_v2)(CUstream hStream, CUstreamCaptureMode mode);
CUresult VG_CU(cuStreamBeginCapture_v2_ptsz)(CUstream hStream, CUstreamCaptureMode mode);
CUresult VG_CU(cuStreamEndCapture)(CUstream hStream, CUgraph *phGraph);
CUresult VG_CU(cuStreamEndCapture_ptsz)(CUstream hStream, CUgraph *phGraph);
CUresult VG_CU(cuStreamIsCapturing)(CUstream hStream, CUstreamCaptureStatus *captureStatus);
CUresult VG_CU(cuStreamIsCapturing_ptsz)(CUstream hStream, CUstreamCaptureStatus *captureStatus);
CUresult VG_CU(cuStreamGetCaptureInfo)(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                       cuuint64_t *id_out);
CUresult VG_CU(cuStreamGetCaptureInfo_ptsz)(CUstream hStream,
                                            CUstreamCaptureStatus *captureStatus_out,
                                            cuuint64_t *id_out);
CUresult VG_CU(cuStreamGetCaptureInfo_v2)(CUstream hStream,
                                          CUstreamCaptureStatus *captureStatus_out,
                                          cuuint64_t *id_out, CUgraph *graph_out,
                                          const CUgraphNode **dependencies_out,
                                          size_t *numDependencies_out);
CUresult VG_CU(cuStreamGetCaptureInfo_v2_ptsz)(CUstream hStream,
                                               CUstreamCaptureStatus *captureStatus_out,
                                               cuuint64_t *id_out, CUgraph *graph_out,
                                               const CUgraphNode **dependencies_out,
                                               size_t *numDependencies_out);
CUresult VG_CU(cuStreamGetCaptureInfo_v3)(CUstream hStream,
                                          CUstreamCaptureStatus *captureStatus_out,
                                          cuuint64_t *id_out, CUgraph *graph_out,
                                          const CUgraphNode **dependencies_out,
                                          const CUgraphEdgeData **edgeData_out,
                                          size_t *numDependencies_out);
CUresult VG_CU(cuStreamGetCaptureInfo_v3_ptsz)(CUstream hStream,
                                               CUstreamCaptureStatus *captureStatus_out,
                                               cuuint64_t *id_out, CUgraph *graph_out,
                                               const CUgraphNode **dependencies_out,
                                               const CUgraphEdgeData **edgeData_out,
                                               size_t *numDependencies_out);
CUresult VG_CU(cuThreadExchangeStreamCaptureMode)(CUstreamCaptureMode *mode);
CUresult VG_CU(cuGraphCreate)(CUgraph *phGraph, unsigned int flags);
CUresult VG_CU(cuGraphDestroy)(CUgraph hGraph);
CUresult VG_CU(cuGraphAddMemAllocNode)(CUgraphNode *phGraphNode, CUgraph hGraph,
                                       const CUgraphNode *dependencies, size_t numDependencies,
                                       CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams);
/* The device's graph memory pool: what graphs' allocations hold, kept after their frees
 * until trimmed. */
CUresult VG_CU(cuDeviceGraphMemTrim)(CUdevice device);
CUresult VG_CU(cuDeviceGetGraphMemAttribute)(CUdevice device, CUgraphMem_attribute attr,
                                             void *value);
CUresult VG_CU(cuGraphInstantiate)(CUgraphExec *phGraphExec, CUgraph hGraph,
                                   CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize);
CUresult VG_CU(cuGraphInstantiate_v2)(CUgraphExec *phGraphExec, CUgraph hGraph,
                                      CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize);
CUresult VG_CU(cuGraphInstantiateWithFlags)(CUgraphExec *phGraphExec, CUgraph hGraph,
                                            unsigned long long flags);
CUresult VG_CU(cuGraphLaunch)(CUgraphExec hGraphExec, CUstream hStream);
CUresult VG_CU(cuGraphLaunch_ptsz)(CUgraphExec hGraphExec, CUstream hStream);
CUresult VG_CU(cuGraphExecDestroy)(CUgraphExec hGraphExec);

/* ---- device memory ---- */
CUresult VG_CU(cuMemGetInfo)(unsigned int *free, unsigned int *total);
CUresult VG_CU(cuMemGetInfo_v2)(size_t *free, size_t *total);
CUresult VG_CU(cuMemAlloc)(CUdeviceptr_v1 *dptr, unsigned int bytesize);
CUresult VG_CU(cuMemAlloc_v2)(CUdeviceptr *dptr, size_t bytesize);
CUresult VG_CU(cuMemAllocPitch)(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                unsigned int WidthInBytes, unsigned int Height,
                                unsigned int ElementSizeBytes);
CUresult VG_CU(cuMemAllocPitch_v2)(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                   size_t Height, unsigned int ElementSizeBytes);
CUresult VG_CU(cuMemAllocManaged)(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
CUresult VG_CU(cuMemFree)(CUdeviceptr_v1 dptr);
CUresult VG_CU(cuMemFree_v2)(CUdeviceptr dptr);
CUresult VG_CU(cuMemGetAddressRange)(CUdeviceptr_v1 *pbase, unsigned int *psize,
                                     CUdeviceptr_v1 dptr);
CUresult VG_CU(cuMemGetAddressRange_v2)(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr);
CUresult VG_CU(cuMemAllocAsync)(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult VG_CU(cuMemAllocAsync_ptsz)(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult VG_CU(cuMemAllocFromPoolAsync)(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                        CUstream hStream);
CUresult VG_CU(cuMemAllocFromPoolAsync_ptsz)(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream);
CUresult VG_CU(cuMemFreeAsync)(CUdeviceptr dptr, CUstream hStream);
CUresult VG_CU(cuMemFreeAsync_ptsz)(CUdeviceptr dptr, CUstream hStream);
/* Pools shared between processes: the pool by a shareable handle, each allocation by its
 * export data. */
CUresult VG_CU(cuMemPoolExportToShareableHandle)(void *handle_out, CUmemoryPool pool,
                                                 CUmemAllocationHandleType handleType,
                                                 unsigned long long flags);
CUresult VG_CU(cuMemPoolImportFromShareableHandle)(CUmemoryPool *pool_out, void *handle,
                                                   CUmemAllocationHandleType handleType,
                                                   unsigned long long flags);
CUresult VG_CU(cuMemPoolExportPointer)(CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr);
CUresult VG_CU(cuMemPoolImportPointer)(CUdeviceptr *ptr_out, CUmemoryPool pool,
                                       CUmemPoolPtrExportData *shareData);
CUresult VG_CU(cuMemPoolCreate)(CUmemoryPool *pool, const CUmemPoolProps *poolProps);
CUresult VG_CU(cuMemPoolDestroy)(CUmemoryPool pool);
CUresult VG_CU(cuMemPoolTrimTo)(CUmemoryPool pool, size_t minBytesToKeep);
CUresult VG_CU(cuMemPoolSetAttribute)(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult VG_CU(cuMemPoolGetAttribute)(CUmemoryPool pool, CUmemPool_attribute attr, void *value);

/* ---- arrays ---- */
CUresult VG_CU(cuArrayCreate)(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *pAllocateArray);
CUresult VG_CU(cuArrayCreate_v2)(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray);
CUresult VG_CU(cuArray3DCreate)(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *pAllocateArray);
CUresult VG_CU(cuArray3DCreate_v2)(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray);
CUresult VG_CU(cuArrayDestroy)(CUarray hArray);
CUresult VG_CU(cuMipmappedArrayCreate)(CUmipmappedArray *pHandle,
                                       const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                       unsigned int numMipmapLevels);
CUresult VG_CU(cuMipmappedArrayDestroy)(CUmipmappedArray hMipmappedArray);

/* ---- virtual memory management ---- */
CUresult VG_CU(cuMemCreate)(CUmemGenericAllocationHandle *handle, size_t size,
                            const CUmemAllocationProp *prop, unsigned long long flags);
CUresult VG_CU(cuMemRelease)(CUmemGenericAllocationHandle handle);
CUresult VG_CU(cuMemAddressReserve)(CUdeviceptr *ptr, size_t size, size_t alignment,
                                    CUdeviceptr addr, unsigned long long flags);
CUresult VG_CU(cuMemAddressFree)(CUdeviceptr ptr, size_t size);
CUresult VG_CU(cuMemMap)(CUdeviceptr ptr, size_t size, size_t offset,
                         CUmemGenericAllocationHandle handle, unsigned long long flags);
CUresult VG_CU(cuMemUnmap)(CUdeviceptr ptr, size_t size);
CUresult VG_CU(cuMemGetAllocationPropertiesFromHandle)(CUmemAllocationProp *prop,
                                                       CUmemGenericAllocationHandle handle);
CUresult VG_CU(cuMemRetainAllocationHandle)(CUmemGenericAllocationHandle *handle, void *addr);
CUresult VG_CU(cuMemExportToShareableHandle)(void *shareableHandle,
                                             CUmemGenericAllocationHandle handle,
                                             CUmemAllocationHandleType handleType,
                                             unsigned long long flags);
CUresult VG_CU(cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle *handle, void *osHandle,
                                               CUmemAllocationHandleType shHandleType);
/* ---- legacy IPC ---- */
CUresult VG_CU(cuIpcGetMemHandle)(CUipcMemHandle *pHandle, CUdeviceptr dptr);
/* The toolkit's cuda.h calls cuIpcOpenMemHandle_v2 where the source says
 * cuIpcOpenMemHandle; both are exported, with one signature. */
CUresult VG_CU(cuIpcOpenMemHandle)(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
CUresult VG_CU(cuIpcOpenMemHandle_v2)(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                      unsigned int Flags);
CUresult VG_CU(cuIpcCloseMemHandle)(CUdeviceptr dptr);

CUresult VG_CU(cuMemSetAccess)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                               size_t count);
CUresult VG_CU(cuMemGetAllocationGranularity)(size_t *granularity, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option);

/* ---- host memory ---- */
CUresult VG_CU(cuMemAllocHost)(void **pp, unsigned int bytesize);
CUresult VG_CU(cuMemAllocHost_v2)(void **pp, size_t bytesize);
CUresult VG_CU(cuMemHostAlloc)(void **pp, size_t bytesize, unsigned int Flags);
CUresult VG_CU(cuMemFreeHost)(void *p);
CUresult VG_CU(cuMemHostRegister)(void *p, size_t bytesize, unsigned int Flags);
CUresult VG_CU(cuMemHostRegister_v2)(void *p, size_t bytesize, unsigned int Flags);
CUresult VG_CU(cuMemHostUnregister)(void *p);
CUresult VG_CU(cuMemHostGetDevicePointer)(CUdeviceptr_v1 *pdptr, void *p, unsigned int Flags);
CUresult VG_CU(cuMemHostGetDevicePointer_v2)(CUdeviceptr *pdptr, void *p, unsigned int Flags);

/* ---- memset ---- */
CUresult VG_CU(cuMemsetD8)(CUdeviceptr_v1 dstDevice, unsigned char uc, unsigned int N);
CUresult VG_CU(cuMemsetD8_v2)(CUdeviceptr dstDevice, unsigned char uc, size_t N);
CUresult VG_CU(cuMemsetD8_v2_ptds)(CUdeviceptr dstDevice, unsigned char uc, size_t N);
CUresult VG_CU(cuMemsetD16)(CUdeviceptr_v1 dstDevice, unsigned short us, unsigned int N);
CUresult VG_CU(cuMemsetD16_v2)(CUdeviceptr dstDevice, unsigned short us, size_t N);
CUresult VG_CU(cuMemsetD16_v2_ptds)(CUdeviceptr dstDevice, unsigned short us, size_t N);
CUresult VG_CU(cuMemsetD32)(CUdeviceptr_v1 dstDevice, unsigned int ui, unsigned int N);
CUresult VG_CU(cuMemsetD32_v2)(CUdeviceptr dstDevice, unsigned int ui, size_t N);
CUresult VG_CU(cuMemsetD32_v2_ptds)(CUdeviceptr dstDevice, unsigned int ui, size_t N);
CUresult VG_CU(cuMemsetD8Async)(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                CUstream hStream);
CUresult VG_CU(cuMemsetD8Async_ptsz)(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                     CUstream hStream);
CUresult VG_CU(cuMemsetD16Async)(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                 CUstream hStream);
CUresult VG_CU(cuMemsetD16Async_ptsz)(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                      CUstream hStream);
CUresult VG_CU(cuMemsetD32Async)(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                 CUstream hStream);
CUresult VG_CU(cuMemsetD32Async_ptsz)(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                      CUstream hStream);

/* ---- memcpy ---- */
CUresult VG_CU(cuMemcpyHtoD)(CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount);
CUresult VG_CU(cuMemcpyHtoD_v2)(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult VG_CU(cuMemcpyHtoD_v2_ptds)(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult VG_CU(cuMemcpyDtoH)(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount);
CUresult VG_CU(cuMemcpyDtoH_v2)(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult VG_CU(cuMemcpyDtoH_v2_ptds)(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult VG_CU(cuMemcpyDtoD)(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                             unsigned int ByteCount);
CUresult VG_CU(cuMemcpyDtoD_v2)(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);
CUresult VG_CU(cuMemcpyDtoD_v2_ptds)(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                     size_t ByteCount);
CUresult VG_CU(cuMemcpyHtoDAsync)(CUdeviceptr_v1 dstDevice, const void *srcHost,
                                  unsigned int ByteCount, CUstream hStream);
CUresult VG_CU(cuMemcpyHtoDAsync_v2)(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                     CUstream hStream);
CUresult VG_CU(cuMemcpyHtoDAsync_v2_ptsz)(CUdeviceptr dstDevice, const void *srcHost,
                                          size_t ByteCount, CUstream hStream);
CUresult VG_CU(cuMemcpyDtoHAsync)(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount,
                                  CUstream hStream);
CUresult VG_CU(cuMemcpyDtoHAsync_v2)(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                     CUstream hStream);
CUresult VG_CU(cuMemcpyDtoHAsync_v2_ptsz)(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                          CUstream hStream);
CUresult VG_CU(cuMemcpyDtoDAsync)(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                                  unsigned int ByteCount, CUstream hStream);
CUresult VG_CU(cuMemcpyDtoDAsync_v2)(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                     CUstream hStream);
CUresult VG_CU(cuMemcpyDtoDAsync_v2_ptsz)(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                          size_t ByteCount, CUstream hStream);
CUresult VG_CU(cuMemcpy)(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
CUresult VG_CU(cuMemcpy_ptds)(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
CUresult VG_CU(cuMemcpyAsync)(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream);
CUresult VG_CU(cuMemcpyAsync_ptsz)(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                   CUstream hStream);
CUresult VG_CU(cuMemcpy2D)(const CUDA_MEMCPY2D_v1 *pCopy);
CUresult VG_CU(cuMemcpy2D_v2)(const CUDA_MEMCPY2D *pCopy);
CUresult VG_CU(cuMemcpy2D_v2_ptds)(const CUDA_MEMCPY2D *pCopy);
CUresult VG_CU(cuMemcpy2DUnaligned)(const CUDA_MEMCPY2D_v1 *pCopy);
CUresult VG_CU(cuMemcpy2DUnaligned_v2)(const CUDA_MEMCPY2D *pCopy);
CUresult VG_CU(cuMemcpy2DUnaligned_v2_ptds)(const CUDA_MEMCPY2D *pCopy);
CUresult VG_CU(cuMemcpy2DAsync)(const CUDA_MEMCPY2D_v1 *pCopy, CUstream hStream);
CUresult VG_CU(cuMemcpy2DAsync_v2)(const CUDA_MEMCPY2D *pCopy, CUstream hStream);
CUresult VG_CU(cuMemcpy2DAsync_v2_ptsz)(const CUDA_MEMCPY2D *pCopy, CUstream hStream);

#endif
