if(TARGET vgpu_dra_slices)
  vgpu_fuzz_target(dra_pool
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_dra_pool.c
    LIBS vgpu_dra_slices)
endif()
