# Attacks on vgpu-dra-plugin through what a tenant names (docs/dra.md): path-like request,
# pool, device and share names from a claim's allocation, and one claim's unprepare aimed
# at another claim's files. Exit 77: grpc missing (fails under CI).
if(TARGET vgpu-dra-plugin)
  add_test(NAME security.dra_plugin
           COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/dra/dra_kubelet.py
                   ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${VGPU_DRA_DESCRIPTOR} Attacks)
  set_tests_properties(security.dra_plugin PROPERTIES
                       LABELS "security;dra" TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
