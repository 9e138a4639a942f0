# CUDA_VISIBLE_DEVICES parsing in fakegpu's libcuda (a pure function, cuda_visible.c).
if(TARGET fakegpu_cuda)
  vgpu_fuzz_target(cuda_visible
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_cuda_visible.c
            ${PROJECT_SOURCE_DIR}/src/fakegpu/cuda_visible.c
    LIBS vgpu_base)
endif()
