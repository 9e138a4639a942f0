# vgpu-scheduler against the test API server (tests/kube_api_server.py), driven like
# kube-scheduler by tests/integration/scheduler_test.py (Debian's python3, stdlib only).
if(TARGET vgpu-scheduler)
  foreach(cls SchedulerTest WebhookTest FaultTest)
    add_test(NAME integration.scheduler.${cls}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/scheduler_test.py
                     $<TARGET_FILE:vgpu-scheduler> ${cls})
    set_tests_properties(integration.scheduler.${cls} PROPERTIES LABELS "integration;scheduler"
                         TIMEOUT 300)
  endforeach()
endif()
