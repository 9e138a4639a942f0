# NVML as another program sees it: real processes, libnvidia-ml.so.1 found by SONAME
# through LD_LIBRARY_PATH, a fresh FAKEGPU_STATE_DIR per case (tests/integration/nvml_*).
if(TARGET fakegpu_nvml AND TARGET fakegpu_state)
  vgpu_program(nvml_probe ${CMAKE_CURRENT_LIST_DIR}/nvml_probe.c)
  target_link_libraries(nvml_probe PRIVATE vgpu_base ${CMAKE_DL_LIBS})
  vgpu_program(nvml_gpu_proc ${CMAKE_CURRENT_LIST_DIR}/nvml_gpu_proc.c)
  target_link_libraries(nvml_gpu_proc PRIVATE fakegpu_state)
  set_target_properties(nvml_probe nvml_gpu_proc PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_dependencies(nvml_probe fakegpu_nvml)
  foreach(case before-init discovery processes utilization bad-devices mig dynamic bad-mig xid)
    add_test(NAME integration.nvml.${case}
             COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/nvml_run.sh ${CMAKE_BINARY_DIR} ${case})
    set_tests_properties(integration.nvml.${case} PROPERTIES LABELS integration TIMEOUT 60)
  endforeach()
endif()
