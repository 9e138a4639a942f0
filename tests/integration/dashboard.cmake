# vgpu-scheduler's allocation metrics (checked with promtool), its dashboard page (loaded
# in headless Chromium; the DOM and a screenshot are kept in the build tree) and its
# explain route, against the test API server (tests/integration/dashboard_test.py).
if(TARGET vgpu-scheduler)
  foreach(cls MetricsTest PageTest ExplainTest BadInputTest)
    add_test(NAME integration.dashboard.${cls}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/dashboard_test.py
                     $<TARGET_FILE:vgpu-scheduler> ${CMAKE_BINARY_DIR}/tests/dashboard ${cls})
    set_tests_properties(integration.dashboard.${cls} PROPERTIES
                         LABELS "integration;scheduler;dashboard" TIMEOUT 300
                         SKIP_RETURN_CODE 77)
  endforeach()
endif()
