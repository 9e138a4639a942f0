# libvgpu against fakegpu: real processes, LD_PRELOAD, a fresh state and region per test.
if(TARGET fakegpu_cuda AND TARGET vgpu_libvgpu)
  vgpu_program(libvgpu_probe ${CMAKE_CURRENT_LIST_DIR}/libvgpu_probe.c)
  target_link_libraries(libvgpu_probe PRIVATE ${CMAKE_DL_LIBS})
  vgpu_program(libvgpu_probe_link ${CMAKE_CURRENT_LIST_DIR}/libvgpu_probe.c)
  target_compile_definitions(libvgpu_probe_link PRIVATE PROBE_LINKED)
  target_link_libraries(libvgpu_probe_link PRIVATE fakegpu_cuda ${CMAKE_DL_LIBS})
  # No build rpath: the tests (and a real GPU node) choose libcuda.so.1 themselves.
  set_target_properties(libvgpu_probe_link PROPERTIES SKIP_BUILD_RPATH ON)
  vgpu_program(libvgpu_truth ${CMAKE_CURRENT_LIST_DIR}/libvgpu_truth.c)
  target_link_libraries(libvgpu_truth PRIVATE fakegpu_state vgpu_base)
  set(libvgpu_cases paths_link paths_dlsym paths_procaddr view passthrough config region
      stress kill two_containers fork multidevice)
  foreach(case ${libvgpu_cases})
    add_test(NAME integration.libvgpu_${case}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/libvgpu_test.sh ${CMAKE_BINARY_DIR} ${case})
    set_tests_properties(integration.libvgpu_${case} PROPERTIES LABELS integration TIMEOUT 180)
  endforeach()
endif()
