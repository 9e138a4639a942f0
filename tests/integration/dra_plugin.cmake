# vgpu-dra-plugin against a kubelet stand-in (python3-grpcio, Debian's /usr/bin/python3)
# speaking the registration and DRA services, with claims from tests/dra/claims_api.py
# and GPUs from fakegpu. Exit 77: grpc missing.
if(TARGET vgpu-dra-plugin)
  foreach(case Registration Startup Prepare Restart Concurrent BadInput Slices Shutdown Mig
               Taints Health Partitions)
    add_test(NAME integration.dra_plugin.${case}
             COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/dra/dra_kubelet.py
                     ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${VGPU_DRA_DESCRIPTOR} ${case})
    set_tests_properties(integration.dra_plugin.${case} PROPERTIES
                         LABELS "integration;dra" TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
endif()
