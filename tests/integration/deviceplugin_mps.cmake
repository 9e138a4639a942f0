# MPS mode end to end: vgpu-device-plugin starting one fake nvidia-cuda-mps-control per
# fakegpu GPU, driven by the fake kubelet (deviceplugin_mps.py). Exit 77: grpc missing.
vgpu_program(fake_mps_control ${CMAKE_CURRENT_LIST_DIR}/fake_mps_control.c)
if(TARGET vgpu-device-plugin)
  add_test(NAME integration.deviceplugin.Mps
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/deviceplugin_mps.py
                   ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR} $<TARGET_FILE:fake_mps_control>)
  set_tests_properties(integration.deviceplugin.Mps PROPERTIES
                       LABELS "integration;deviceplugin" TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
