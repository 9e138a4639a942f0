if(TARGET vgpu_dra_slices)
  vgpu_fuzz_target(dra_pool
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_dra_pool.c
    LIBS vgpu_dra_slices)
endif()
vgpu_fuzz_target(dra_claim
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_dra_claim.c
  LIBS vgpu_dra)
vgpu_fuzz_target(dra_checkpoint
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_dra_checkpoint.c
  LIBS vgpu_dra)
if(TARGET vgpu_dra_slices)
  vgpu_fuzz_target(dra_mig_instances
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_dra_mig_instances.c
    LIBS vgpu_dra_slices)
endif()
