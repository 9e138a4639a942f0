# The real-GPU suite is run rarely (only where a GPU is lent), so CI dry-runs it on
# fakegpu to keep the script and its programs working.
if(TARGET fakegpu_cuda AND TARGET fakegpu_nvml)
  add_test(NAME integration.gpu_suite_dry_run
           COMMAND env OUT=${CMAKE_BINARY_DIR}/gpu-dry-run VGPU_GPU_SUITE_LIBVGPU=1
                   VGPU_DRIVER_DIR=${VGPU_FAKEGPU_DIR} ${PROJECT_SOURCE_DIR}/tests/gpu/run.sh)
  set_tests_properties(integration.gpu_suite_dry_run PROPERTIES
                       LABELS "integration;nosan" TIMEOUT 300 RUN_SERIAL TRUE)
endif()
