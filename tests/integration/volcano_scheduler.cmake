# The Volcano scheduler stand-in (tests/volcano_scheduler.py) against cases computed from
# Volcano's source, and on the wire against the test API server. Python 3 standard
# library only.
add_test(NAME integration.volcano_scheduler
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/volcano_scheduler_test.py)
set_tests_properties(integration.volcano_scheduler PROPERTIES LABELS "integration;volcano"
                     TIMEOUT 120)
