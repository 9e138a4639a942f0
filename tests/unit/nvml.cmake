# The NVML loader (src/nvml/loader.h) against fakegpu's libnvidia-ml.so.1, a library that
# is not NVML, and one that does not exist.
if(TARGET vgpu_nvml AND TARGET fakegpu_nvml)
  vgpu_unit_test(test_nvml_loader
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nvml_loader.c
    LIBS vgpu_nvml)
  target_compile_definitions(test_nvml_loader PRIVATE
                             FAKEGPU_NVML="$<TARGET_FILE:fakegpu_nvml>")
  add_dependencies(test_nvml_loader fakegpu_nvml)
endif()
