vgpu_unit_test(test_libvgpu_config
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_libvgpu_config.c
  LIBS vgpu_libvgpu_core vgpu_base)
vgpu_fuzz_target(libvgpu_limits
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_libvgpu_limits.c
  LIBS vgpu_libvgpu_core vgpu_base)
