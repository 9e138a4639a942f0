# libvgpu's compute-share limiter against fakegpu: tenant processes under LD_PRELOAD,
# shares read from fakegpu's timeline. Timing-sensitive: RUN_SERIAL (label compute), with
# the bounds of libvgpu_compute_test.sh (2 points; burst >= 90 %; hand-back <= 150 ms).
# The sanitizer build's instrumented launchers and limiter cost more CPU, which the
# largest tenant of a full card pays at the turns' hand-overs: there the bound is 3 points
# (the documented 2 is the release build's, which `make test` checks).
set(libvgpu_compute_env "")
if(VGPU_SANITIZE STREQUAL "address")
  set(libvgpu_compute_env "VGPU_COMPUTE_TOL=3")
endif()
if(TARGET fakegpu_cuda AND TARGET vgpu_libvgpu)
  vgpu_program(compute_tenant ${PROJECT_SOURCE_DIR}/tests/gpu/compute_tenant.c)
  target_link_libraries(compute_tenant PRIVATE fakegpu_cuda vgpu_base m)
  set_target_properties(compute_tenant PROPERTIES SKIP_BUILD_RPATH ON)
  vgpu_program(libvgpu_compute_truth ${CMAKE_CURRENT_LIST_DIR}/libvgpu_compute_truth.c)
  target_link_libraries(libvgpu_compute_truth PRIVATE fakegpu_state vgpu_base)
  # Every scenario of the benchmark; bench/libvgpu_compute.sh reports the real errors.
  set(libvgpu_compute_cases alone burst paths procs config split four graph long bursty handback
                            killed)
  foreach(case ${libvgpu_compute_cases})
    add_test(NAME integration.libvgpu_compute_${case}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/libvgpu_compute_test.sh ${CMAKE_BINARY_DIR} ${case})
    set_tests_properties(integration.libvgpu_compute_${case} PROPERTIES
                         LABELS "integration;compute" TIMEOUT 180 RUN_SERIAL ON
                         ENVIRONMENT "${libvgpu_compute_env}")
  endforeach()
  # Kernel shapes of the benchmark that hold within the bounds on fakegpu (the graph case
  # above is graphs of four 1 ms kernels): graphs of 16 kernels; kernels whose length
  # varies under one key (uniform 1-5 ms, log-uniform 20 us-20 ms), which were charged
  # about their fastest run before turns (30 % tenant at 23.5, and 22.6-27.1); and four
  # tenants with uniform 1-5 ms kernels or graphs of four kernels (20 % tenant at 16.9,
  # 40 % tenant at 36.3); four tenants with log-uniform lengths or 20 ms kernels, whose
  # credit earned while waiting for a turn was cut after the turn's first launch and whose
  # PI trim followed the noise of a few long kernels per tick (10 % tenant at 7.8, 30 % at
  # 26.1, 40 % at 35.5-37.9).
  # docs/benchmarks.md lists every shape's figures.
  set(libvgpu_compute_shapes graph-16|30,70 uniform-1-5ms|30,70 loguniform-20us-20ms|30,70
                             uniform-1-5ms|10,20,30,40 graph-4|10,20,30,40
                             loguniform-20us-20ms|10,20,30,40 fixed-20000000|10,20,30,40)
  foreach(entry ${libvgpu_compute_shapes})
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 shape)
    list(GET parts 1 split)
    string(REPLACE "," "_" split_name "${split}")
    add_test(NAME integration.libvgpu_compute_shape_${shape}_${split_name}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/libvgpu_compute_test.sh ${CMAKE_BINARY_DIR}
                     shape ${shape} ${split})
    set_tests_properties(integration.libvgpu_compute_shape_${shape}_${split_name} PROPERTIES
                         LABELS "integration;compute" TIMEOUT 180 RUN_SERIAL ON
                         ENVIRONMENT "${libvgpu_compute_env}")
  endforeach()
endif()

# A live resize of a running tenant's compute share (docs/libvgpu.md "Live resize"): 30 %,
# then 70 %, each within 5 points (tests/integration/libvgpu_resize.py, case compute).
if(TARGET compute_tenant AND TARGET libvgpu_compute_truth AND TARGET libvgpu_resize_watch)
  add_test(NAME integration.libvgpu_resize.compute
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/libvgpu_resize_test.sh ${CMAKE_BINARY_DIR} compute)
  set_tests_properties(integration.libvgpu_resize.compute PROPERTIES
                       LABELS "integration;compute" TIMEOUT 120 RUN_SERIAL ON
                       SKIP_RETURN_CODE 77)
endif()

# A live resize on the compute board (docs/compute.md "A resized share"): two containers at
# 30 % and 70 %, each in its own mount namespace with its limits at /etc/vgpu and its slot
# made by the device plugin's code, resized to 50/50 while both saturate the GPU (each
# within 6 points of 50 %), and the 30 % one alone raised to 60 % (the GPU not oversold).
# board_layout (tests/security/board.cmake, included after this layer) is built under the
# same conditions.
if(TARGET fakegpu_cuda AND TARGET vgpu_libvgpu AND TARGET compute_tenant AND
   TARGET libvgpu_compute_truth AND TARGET libvgpu_resize_watch)
  foreach(case board_pair board_over board_burst)
    add_test(NAME integration.libvgpu_resize.${case}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/libvgpu_resize_test.sh ${CMAKE_BINARY_DIR} ${case})
    set_tests_properties(integration.libvgpu_resize.${case} PROPERTIES
                         LABELS "integration;compute;serial" TIMEOUT 120 RUN_SERIAL ON
                         SKIP_RETURN_CODE 77)
  endforeach()
endif()
