vgpu_unit_test(test_deviceplugin SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_deviceplugin.c
               LIBS vgpu_deviceplugin vgpu_libvgpu_core)
target_compile_definitions(test_deviceplugin PRIVATE
  DP_GOLDEN_DIR="${PROJECT_SOURCE_DIR}/tests/data/deviceplugin")
