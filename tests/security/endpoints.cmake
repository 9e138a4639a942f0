# vgpu-scheduler's control-plane endpoints attacked by a network peer and a pod author
# (docs/security.md, "Closed control-plane endpoints"): the extender's listen address,
# TLS with client certificates or a bearer token, the debug and webhook paths, and
# /filter's assumptions. Real sockets, real TLS (openssl), the test API server.
if(TARGET vgpu-scheduler)
  foreach(cls Listen ClientCert BearerToken Paths Assumptions)
    add_test(NAME security.endpoints.${cls}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/endpoints_test.py
                     $<TARGET_FILE:vgpu-scheduler> ${cls})
    # A case whose prerequisite is missing skips (77, tests/lib/vg_skip.py).
    set_tests_properties(security.endpoints.${cls} PROPERTIES LABELS "security;scheduler"
                         TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
  # The default address is a fixed port (8888): one test at a time may hold it.
  set_tests_properties(security.endpoints.Listen PROPERTIES RESOURCE_LOCK vgpu_scheduler_8888)
endif()

# The bearer-token helpers: the Authorization header reader, the comparison and the token
# file loader (src/scheduler/auth.c); the reader's fuzz target replays its corpus.
vgpu_unit_test(endpoints_auth_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/endpoints_auth_test.c
  LIBS vgpu_scheduler)
set_tests_properties(unit.endpoints_auth_test PROPERTIES LABELS "unit;security")
vgpu_fuzz_target(sched_auth
  SOURCES ${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz_sched_auth.c
  LIBS vgpu_scheduler)

# /filter's promises without a network: only pending pods, the per-namespace bound.
vgpu_unit_test(endpoints_filter_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/endpoints_filter_test.c
  LIBS vgpu_scheduler)
set_tests_properties(unit.endpoints_filter_test PROPERTIES LABELS "unit;security")
