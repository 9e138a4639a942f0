# Live resize through the API (docs/scheduler.md "Live resize"): `vgpu resize` against the
# test API server and vgpu-scheduler; the kill test stops the scheduler with SIGKILL at each
# step of a resize.
if(TARGET vgpu AND TARGET vgpu-scheduler)
  foreach(cls ResizeTest QuotaTest KillTest)
    add_test(NAME integration.resize.${cls}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/resize_test.py ${CMAKE_BINARY_DIR}
                     ${cls})
    set_tests_properties(integration.resize.${cls} PROPERTIES LABELS "integration;scheduler"
                         TIMEOUT 300)
  endforeach()
endif()
