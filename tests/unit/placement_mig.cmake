vgpu_unit_test(test_placement_mig
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_placement_mig.c
  LIBS vgpu_placement)
