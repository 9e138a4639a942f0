# fakegpu's MPS client variables (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
# CUDA_MPS_PINNED_DEVICE_MEM_LIMIT): a pure function in cuda_mps.c.
if(TARGET fakegpu_cuda)
  vgpu_fuzz_target(fakegpu_mps
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_fakegpu_mps.c
            ${PROJECT_SOURCE_DIR}/src/fakegpu/cuda_mps.c
    LIBS vgpu_base)
endif()
