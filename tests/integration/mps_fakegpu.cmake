# (Named to sort after libvgpu.cmake and fakegpu_mps.cmake, whose targets it needs.)
# MPS mode end to end on fakegpu: the env of the plugin's Allocate applied to CUDA
# processes (libvgpu_probe, fakegpu_mps spin) holds them to memory / replicas and
# 100 / replicas percent (deviceplugin_mps_fakegpu.py). Exit 77: grpc missing.
if(TARGET vgpu-device-plugin AND TARGET libvgpu_probe AND TARGET fakegpu_mps
   AND TARGET fake_mps_control)
  add_test(NAME integration.deviceplugin.MpsFakegpu
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/deviceplugin_mps_fakegpu.py
                   ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR} $<TARGET_FILE:fake_mps_control>)
  set_tests_properties(integration.deviceplugin.MpsFakegpu PROPERTIES
                       LABELS "integration;deviceplugin" TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
