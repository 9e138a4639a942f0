# libvgpu against fakegpu: real processes, LD_PRELOAD, a fresh state and region per test.
if(TARGET fakegpu_cuda AND TARGET vgpu_libvgpu)
  vgpu_program(libvgpu_probe ${CMAKE_CURRENT_LIST_DIR}/libvgpu_probe.c)
  target_link_libraries(libvgpu_probe PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
  vgpu_program(libvgpu_probe_link ${CMAKE_CURRENT_LIST_DIR}/libvgpu_probe.c)
  target_compile_definitions(libvgpu_probe_link PRIVATE PROBE_LINKED)
  target_link_libraries(libvgpu_probe_link PRIVATE fakegpu_cuda ${CMAKE_DL_LIBS} Threads::Threads)
  # No build rpath: the tests (and a real GPU node) choose libcuda.so.1 themselves.
  set_target_properties(libvgpu_probe_link PROPERTIES SKIP_BUILD_RPATH ON)
  vgpu_program(libvgpu_truth ${CMAKE_CURRENT_LIST_DIR}/libvgpu_truth.c)
  target_link_libraries(libvgpu_truth PRIVATE fakegpu_state vgpu_base)
  if(TARGET fakegpu_nvml)
    vgpu_program(libvgpu_nvml ${CMAKE_CURRENT_LIST_DIR}/libvgpu_nvml.c)
    target_link_libraries(libvgpu_nvml PRIVATE ${CMAKE_DL_LIBS})
    vgpu_program(libvgpu_nvml_link ${CMAKE_CURRENT_LIST_DIR}/libvgpu_nvml.c)
    target_compile_definitions(libvgpu_nvml_link PRIVATE PROBE_LINKED)
    target_link_libraries(libvgpu_nvml_link PRIVATE fakegpu_nvml ${CMAKE_DL_LIBS})
    set_target_properties(libvgpu_nvml_link PROPERTIES SKIP_BUILD_RPATH ON)
    add_test(NAME integration.libvgpu_nvml
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/libvgpu_test.sh ${CMAKE_BINARY_DIR} nvml)
    set_tests_properties(integration.libvgpu_nvml PROPERTIES LABELS integration TIMEOUT 180)
  endif()
  set(libvgpu_cases paths_link paths_dlsym paths_procaddr view passthrough config region
      stress kill two_containers fork multidevice noncuda visible threads torture)
  foreach(case ${libvgpu_cases})
    add_test(NAME integration.libvgpu_${case}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/libvgpu_test.sh ${CMAKE_BINARY_DIR} ${case})
    set_tests_properties(integration.libvgpu_${case} PROPERTIES LABELS integration TIMEOUT 180)
  endforeach()
endif()

# Live resize (docs/libvgpu.md, "Live resize"): running processes in a private mount
# namespace with /etc/vgpu bound to a container's limits directory, whose limits file is
# replaced and generation raised under them.
if(TARGET fakegpu_cuda AND TARGET vgpu_libvgpu)
  vgpu_program(libvgpu_resize_watch ${CMAKE_CURRENT_LIST_DIR}/libvgpu_resize_watch.c)
  target_link_libraries(libvgpu_resize_watch PRIVATE fakegpu_cuda)
  set_target_properties(libvgpu_resize_watch PROPERTIES SKIP_BUILD_RPATH ON)
  foreach(case grow lower_holds every_process unusable env_cannot_raise)
    add_test(NAME integration.libvgpu_resize.${case}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/libvgpu_resize_test.sh ${CMAKE_BINARY_DIR} ${case})
    set_tests_properties(integration.libvgpu_resize.${case} PROPERTIES LABELS integration
                         TIMEOUT 120 SKIP_RETURN_CODE 77)
  endforeach()
endif()
