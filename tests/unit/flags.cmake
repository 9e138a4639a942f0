vgpu_unit_test(test_flags
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_flags.c
  LIBS vgpu_base)
