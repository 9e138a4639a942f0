vgpu_unit_test(test_deviceplugin_mig SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_deviceplugin_mig.c
               LIBS vgpu_deviceplugin)
target_compile_definitions(test_deviceplugin_mig PRIVATE
  DP_GOLDEN_DIR="${PROJECT_SOURCE_DIR}/tests/data/deviceplugin")
