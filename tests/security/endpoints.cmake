# vgpu-scheduler's control-plane endpoints attacked by a network peer and a pod author
# (docs/security.md, "Closed control-plane endpoints"): the extender's listen address,
# TLS with client certificates or a bearer token, the debug and webhook paths, and
# /filter's assumptions. Real sockets, real TLS (openssl), the test API server.
if(TARGET vgpu-scheduler)
  foreach(cls Listen ClientCert BearerToken Paths Assumptions)
    add_test(NAME security.endpoints.${cls}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/endpoints_test.py
                     $<TARGET_FILE:vgpu-scheduler> ${cls})
    set_tests_properties(security.endpoints.${cls} PROPERTIES LABELS "security;scheduler"
                         TIMEOUT 300)
  endforeach()
  # The default address is a fixed port (8888): one test at a time may hold it.
  set_tests_properties(security.endpoints.Listen PROPERTIES RESOURCE_LOCK vgpu_scheduler_8888)
endif()
