# vgpu-scheduler's dashboard and metrics attacked (docs/security.md, "The dashboard and its
# JSON"): unparsable request URIs, the routes without authentication, markup in the data
# the page shows (headless Chromium).
if(TARGET vgpu-scheduler)
  foreach(cls UriCrash UiAuth Markup)
    add_test(NAME security.dashboard.${cls}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/dashboard_test.py
                     $<TARGET_FILE:vgpu-scheduler> ${cls})
    set_tests_properties(security.dashboard.${cls} PROPERTIES LABELS "security;scheduler"
                         TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
endif()
