# vgpu-sim end to end on the openb trace (skipped when the trace is absent).
add_test(NAME integration.sim_cli
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/sim_cli.sh $<TARGET_FILE:vgpu-sim>
                 ${PROJECT_SOURCE_DIR}/../shared/data/openb)
set_tests_properties(integration.sim_cli PROPERTIES LABELS integration TIMEOUT 300
                     SKIP_RETURN_CODE 77)
# The placement claim on the openb trace, seeds 42-44: `default` below `fgd`, the paper's
# six policies inside the paper's ranges (about 15 s of CPU, label `placement`; numbers,
# not memory safety, so not in the sanitizer run).
add_test(NAME integration.sim_placement
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/sim_placement.sh $<TARGET_FILE:vgpu-sim>
                 ${PROJECT_SOURCE_DIR}/../shared/data/openb)
set_tests_properties(integration.sim_placement PROPERTIES LABELS "integration;placement;nosan"
                     TIMEOUT 600 SKIP_RETURN_CODE 77 PROCESSORS 2)
# kube-scheduler's DRA allocator modelled (dra-firstfit, dra-default) against default on
# a sample of the openb trace (seconds; skipped when the trace is absent).
add_test(NAME integration.sim_dra
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/sim_dra.sh $<TARGET_FILE:vgpu-sim>
                 ${PROJECT_SOURCE_DIR}/../shared/data/openb)
set_tests_properties(integration.sim_dra PROPERTIES LABELS "integration;placement"
                     TIMEOUT 300 SKIP_RETURN_CODE 77)
# MIG on demand: HAMi v2.10's rule against vgpu's on a sample of the openb trace
# (vgpu-sim --mig; a second; skipped when the trace is absent).
add_test(NAME integration.sim_mig
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/sim_mig.sh $<TARGET_FILE:vgpu-sim>
                 ${PROJECT_SOURCE_DIR}/../shared/data/openb)
set_tests_properties(integration.sim_mig PROPERTIES LABELS "integration;placement"
                     TIMEOUT 300 SKIP_RETURN_CODE 77)
