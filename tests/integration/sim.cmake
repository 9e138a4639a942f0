# vgpu-sim end to end on the openb trace (skipped when the trace is absent).
add_test(NAME integration.sim_cli
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/sim_cli.sh $<TARGET_FILE:vgpu-sim>
                 ${PROJECT_SOURCE_DIR}/../shared/data/openb)
set_tests_properties(integration.sim_cli PROPERTIES LABELS integration TIMEOUT 300
                     SKIP_RETURN_CODE 77)
