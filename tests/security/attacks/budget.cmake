# A process of the container forges the compute budget in its region (docs/security.md,
# "Compute budget and the region's fields"): replays against fakegpu's per-process GPU
# time, timing-sensitive like the compute tests (RUN_SERIAL, labels compute and serial).
if(TARGET fakegpu_cuda AND TARGET vgpu_libvgpu AND TARGET compute_tenant
   AND TARGET libvgpu_compute_truth AND TARGET board_layout)
  vgpu_program(budget_forger ${CMAKE_CURRENT_LIST_DIR}/budget_forger.c)
  target_link_libraries(budget_forger PRIVATE vgpu_region vgpu_base)
  foreach(case alone pair burst)
    add_test(NAME security.attacks.budget.${case}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/budget_test.sh ${CMAKE_BINARY_DIR} ${case})
    set_tests_properties(security.attacks.budget.${case} PROPERTIES
                         LABELS "security;attacks;compute;serial" TIMEOUT 240 RUN_SERIAL ON
                         SKIP_RETURN_CODE 77)
  endforeach()
endif()

# Whatever bytes the region's compute budget holds, at every moment, the GPU time the
# limiter admits over a window stays within the share the limits give.
if(TARGET vgpu_libvgpu_core)
  vgpu_fuzz_target(region_compute
    SOURCES ${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz_region_compute.c
    LIBS vgpu_libvgpu_core vgpu_base)
  set_tests_properties(fuzz.region_compute PROPERTIES LABELS "fuzz;security")
endif()
