# Attacks on `vgpu top` (docs/cli.md, "Reading tenants' files safely"): a tenant's region
# corrupted, truncated, forged while watched, truncated between the size check and the
# read (a short read; the fstat shim is preloaded, and ASan must come first in a process,
# so not under make sanitize). tests/integration/cli_test.py, class TopHostileTest.
if(TARGET vgpu AND TARGET top_fixture AND TARGET top_truncate_shim)
  add_test(NAME security.cli_top_regions
           COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/integration/cli_test.py
                   ${CMAKE_BINARY_DIR} TopHostileTest)
  set_tests_properties(security.cli_top_regions PROPERTIES LABELS "security;cli;nosan"
                       TIMEOUT 180)
endif()
