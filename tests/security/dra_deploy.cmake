# The DRA overlay's role against someone holding vgpu-dra-plugin's token
# (tests/deploy/dra_deploy_test.py Attacks; the test API server enforces the rendered
# role). Exit 77: a tool missing (a failure under CI).
if(TARGET vgpu-dra-plugin AND TARGET vgpu_dra_slices AND TARGET vgpu-monitor AND
   TARGET vgpu-device-plugin)
  add_test(NAME security.dra_deploy
           COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/deploy/dra_deploy_test.py
                   ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${VGPU_DRA_DESCRIPTOR} Attacks)
  set_tests_properties(security.dra_deploy PROPERTIES LABELS "security;deploy;dra" TIMEOUT 120
                       SKIP_RETURN_CODE 77)
endif()
