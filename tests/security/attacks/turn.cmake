# The GPU turn forged (docs/security.md, "The GPU turn"): a tenant that rewrites the turn
# file its container may write, beside honest 30/70 tenants, with fakegpu's per-process
# device time as the truth. Timing-sensitive like the compute tests: RUN_SERIAL.
if(TARGET fakegpu_cuda AND TARGET vgpu_libvgpu AND TARGET compute_tenant AND TARGET board_layout)
  vgpu_program(turn_forger ${CMAKE_CURRENT_LIST_DIR}/turn_forger.c)
  target_link_libraries(turn_forger PRIVATE vgpu_base)
  foreach(case rotate confirmed honest)
    add_test(NAME security.attacks.turn.${case}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/turn_test.sh ${CMAKE_BINARY_DIR} ${case})
    set_tests_properties(security.attacks.turn.${case} PROPERTIES
                         LABELS "security;attacks;compute;serial" TIMEOUT 120 RUN_SERIAL ON)
  endforeach()
endif()
