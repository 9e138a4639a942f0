vgpu_unit_test(test_libvgpu_compute
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_libvgpu_compute.c
  LIBS vgpu_libvgpu_core vgpu_base)
