# libvgpu's compute-share limiter against fakegpu: tenant processes under LD_PRELOAD,
# shares read from fakegpu's timeline. Timing-sensitive: RUN_SERIAL, loose tolerances
# (bench/libvgpu_compute.sh has the tight figures).
if(TARGET fakegpu_cuda AND TARGET vgpu_libvgpu)
  vgpu_program(compute_tenant ${PROJECT_SOURCE_DIR}/tests/gpu/compute_tenant.c)
  target_link_libraries(compute_tenant PRIVATE fakegpu_cuda vgpu_base)
  set_target_properties(compute_tenant PROPERTIES SKIP_BUILD_RPATH ON)
  vgpu_program(libvgpu_compute_truth ${CMAKE_CURRENT_LIST_DIR}/libvgpu_compute_truth.c)
  target_link_libraries(libvgpu_compute_truth PRIVATE fakegpu_state vgpu_base)
  # Every scenario of the benchmark, with tolerances (±8 points, hand-back within 500 ms)
  # that hold on a loaded 2-core machine; bench/libvgpu_compute.sh reports the real errors.
  set(libvgpu_compute_cases alone burst paths procs config split four graph long bursty handback)
  foreach(case ${libvgpu_compute_cases})
    add_test(NAME integration.libvgpu_compute_${case}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/libvgpu_compute_test.sh ${CMAKE_BINARY_DIR} ${case})
    set_tests_properties(integration.libvgpu_compute_${case} PROPERTIES
                         LABELS "integration;compute" TIMEOUT 180 RUN_SERIAL ON)
  endforeach()
endif()
