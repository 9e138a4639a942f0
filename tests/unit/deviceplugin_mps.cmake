# MPS mode of the device plugin: resources, Allocate goldens, config validation, and the
# control daemons' life cycle against the fake nvidia-cuda-mps-control.
vgpu_unit_test(test_deviceplugin_mps SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_deviceplugin_mps.c
               LIBS vgpu_deviceplugin)
target_compile_definitions(test_deviceplugin_mps PRIVATE
  DP_GOLDEN_DIR="${PROJECT_SOURCE_DIR}/tests/data/deviceplugin")
set_tests_properties(unit.test_deviceplugin_mps PROPERTIES
  ENVIRONMENT "FAKE_MPS_CONTROL=$<TARGET_FILE:fake_mps_control>" LABELS "unit;deviceplugin")
vgpu_fuzz_target(mps_percentage
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_mps_percentage.c
  LIBS vgpu_deviceplugin)
