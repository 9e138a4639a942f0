# vgpu-device-plugin in Volcano mode (docs/volcano.md) against a fake kubelet, fakegpu's
# NVML and the test API server: resources and node annotations, Allocate of Volcano's
# decisions (a non-GPU container first, two GPU containers), each bad decision refused with
# bind-phase failed and nothing left behind. Exit 77: grpc missing.
if(TARGET vgpu-device-plugin)
  add_test(NAME integration.deviceplugin_volcano
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/deviceplugin_volcano.py
                   ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  set_tests_properties(integration.deviceplugin_volcano PROPERTIES
                       LABELS "integration;deviceplugin" TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
