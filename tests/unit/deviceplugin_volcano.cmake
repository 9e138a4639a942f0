# Volcano mode of the device plugin (src/deviceplugin/volcano.h, src/dpconfig/volcano.c):
# Volcano's annotation strings, the per-GPU ledger, the pending pod, device-config.yaml.
vgpu_unit_test(test_deviceplugin_volcano
               SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_deviceplugin_volcano.c
               LIBS vgpu_deviceplugin)
# Volcano's annotation strings against an independent reading of the grammar (tests/fuzz).
vgpu_fuzz_target(volcano_annot
  SOURCES ${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz_volcano_annot.c
  LIBS vgpu_deviceplugin)
