vgpu_unit_test(test_deviceplugin_mig SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_deviceplugin_mig.c
               LIBS vgpu_deviceplugin)
target_compile_definitions(test_deviceplugin_mig PRIVATE
  DP_GOLDEN_DIR="${PROJECT_SOURCE_DIR}/tests/data/deviceplugin")
vgpu_fuzz_target(mig_minors
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_mig_minors.c
  LIBS vgpu_deviceplugin)
