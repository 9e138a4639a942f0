# Decisions only the scheduler can write (docs/security.md): a pod author forging
# vgpu.io/decision, against the webhook, vgpu-scheduler and vgpu-device-plugin.
if(TARGET vgpu-scheduler)
  foreach(cls ForgedDecisionTest WebhookForgeryTest)
    add_test(NAME security.decisions.${cls}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/decisions_scheduler.py
                     $<TARGET_FILE:vgpu-scheduler> ${cls})
    set_tests_properties(security.decisions.${cls} PROPERTIES LABELS "security;scheduler"
                         TIMEOUT 300)
  endforeach()
endif()
if(TARGET vgpu-device-plugin)
  add_test(NAME security.decisions.ForgedAllocateTest
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/decisions_deviceplugin.py
                   ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR} ForgedAllocateTest)
  set_tests_properties(security.decisions.ForgedAllocateTest PROPERTIES
                       LABELS "security;deviceplugin" TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
