# Task priority raised by its tenant (docs/security.md, "Task priority"): from the
# environment, and by rewriting the container's own board slot file, against fakegpu's
# per-process device time. Each tenant runs with its limits file at /etc/vgpu/limits in a
# mount namespace of its own. Timing-sensitive like the compute tests: RUN_SERIAL.
if(TARGET fakegpu_cuda AND TARGET vgpu_libvgpu AND TARGET compute_tenant AND
   TARGET libvgpu_compute_truth AND TARGET board_layout)
  foreach(case env board control)
    add_test(NAME security.attacks.priority.${case}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/priority_test.sh ${CMAKE_BINARY_DIR} ${case})
    set_tests_properties(security.attacks.priority.${case} PROPERTIES
                         LABELS "security;attacks;compute;serial" TIMEOUT 120 RUN_SERIAL ON
                         SKIP_RETURN_CODE 77)
  endforeach()
endif()
