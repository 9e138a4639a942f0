vgpu_unit_test(test_dra SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_dra.c
               LIBS vgpu_dra vgpu_libvgpu_core)
