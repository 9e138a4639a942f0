vgpu_unit_test(test_placement
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_placement.c
  LIBS vgpu_placement)
