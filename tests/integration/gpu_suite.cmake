# The real-GPU suite is run rarely (only where a GPU is lent), so CI dry-runs it on
# fakegpu to keep the script and its programs working, twice: with libvgpu it passes, and
# with an enforcer that does nothing it must fail (its checks can fail).
if(TARGET fakegpu_cuda AND TARGET fakegpu_nvml)
  add_library(gpu_suite_noop_enforcer SHARED ${PROJECT_SOURCE_DIR}/tests/gpu/noop_enforcer.c)
  set_target_properties(gpu_suite_noop_enforcer PROPERTIES
                        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME integration.gpu_suite_dry_run
           COMMAND env OUT=${CMAKE_BINARY_DIR}/gpu-dry-run VGPU_GPU_SUITE_LIBVGPU=1
                   VGPU_DRIVER_DIR=${VGPU_FAKEGPU_DIR} ${PROJECT_SOURCE_DIR}/tests/gpu/run.sh)
  add_test(NAME integration.gpu_suite_noop_enforcer
           COMMAND ${PROJECT_SOURCE_DIR}/tests/lib/expect_fail.sh
                   "- nvmlDeviceGetMemoryInfo \\(link\\) total is the 4 GiB limit: FAILED.*split: 30 % tenant \\(steady\\) \\| 30 \\| [0-9.]+ \\| [-+0-9.]+ FAILED"
                   env OUT=${CMAKE_BINARY_DIR}/gpu-dry-run-noop VGPU_GPU_SUITE_LIBVGPU=1
                   VGPU_DRIVER_DIR=${VGPU_FAKEGPU_DIR}
                   VGPU_ENFORCER=$<TARGET_FILE:gpu_suite_noop_enforcer>
                   ${PROJECT_SOURCE_DIR}/tests/gpu/run.sh)
  set_tests_properties(integration.gpu_suite_dry_run integration.gpu_suite_noop_enforcer
                       PROPERTIES LABELS "integration;nosan;compute" TIMEOUT 300 RUN_SERIAL TRUE)
endif()
