# vgpu-scheduler's webhook in DRA mode (--webhook-dra, docs/dra.md "HAMi pod specs under
# DRA") against the test API server, by tests/integration/dra_webhook_test.py (Debian's
# python3, stdlib only).
if(TARGET vgpu-scheduler)
  foreach(cls ConvertTest FlagOffTest KeepAliveTest CliTest)
    add_test(NAME integration.dra_webhook.${cls}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/dra_webhook_test.py
                     $<TARGET_FILE:vgpu-scheduler> ${cls})
    set_tests_properties(integration.dra_webhook.${cls} PROPERTIES
                         LABELS "integration;scheduler" TIMEOUT 300)
  endforeach()
endif()
