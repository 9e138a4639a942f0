# The device plugin's decision cache (src/deviceplugin/podcache.c): watch event sequences.
vgpu_unit_test(test_deviceplugin_podcache
               SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_deviceplugin_podcache.c
               LIBS vgpu_deviceplugin)
# Random watch event sequences against a cache rebuilt from scratch (tests/fuzz).
vgpu_fuzz_target(podcache
  SOURCES ${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz_podcache.c
  LIBS vgpu_deviceplugin)
