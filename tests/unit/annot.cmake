vgpu_unit_test(test_annot
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_annot.c
  LIBS vgpu_annot)
vgpu_fuzz_target(annot
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_annot.c
  LIBS vgpu_annot)
