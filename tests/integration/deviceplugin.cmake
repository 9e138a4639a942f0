# vgpu-device-plugin against a fake kubelet (python3-grpcio, Debian's /usr/bin/python3),
# fakegpu's NVML and the test API server; the vgpu case ends with libvgpu holding a
# process started with the returned env to its limit; Health flips a GPU's health with
# fakegpu-ctl; DriverRoot loads NVML from containerDriverRoot and checks device specs under
# nvidiaDevRoot and the IMEX channel. Exit 77: grpc missing.
if(TARGET vgpu-device-plugin)
  foreach(case TimeSlicing BadInput Vgpu Health DriverRoot)
    add_test(NAME integration.deviceplugin.${case}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/deviceplugin_kubelet.py
                     ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${case})
    set_tests_properties(integration.deviceplugin.${case} PROPERTIES
                         LABELS "integration;deviceplugin" TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
endif()
