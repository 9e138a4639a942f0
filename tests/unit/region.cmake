vgpu_unit_test(test_region
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_region.c
  LIBS vgpu_region)
vgpu_fuzz_target(region_validate
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_region_validate.c
  LIBS vgpu_region)
