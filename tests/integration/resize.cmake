# Live resize through the API (docs/scheduler.md "Live resize"): `vgpu resize` against the
# test API server and vgpu-scheduler; the kill test stops the scheduler with SIGKILL at each
# step of a resize.
if(TARGET vgpu AND TARGET vgpu-scheduler)
  foreach(cls ResizeTest QuotaTest KillTest)
    add_test(NAME integration.resize.${cls}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/resize_test.py ${CMAKE_BINARY_DIR}
                     ${cls})
    set_tests_properties(integration.resize.${cls} PROPERTIES LABELS "integration;scheduler"
                         TIMEOUT 300)
  endforeach()
endif()

# The latency target (docs/libvgpu.md "Live resize"): every process of a running container
# has the new limit within 1 s of `vgpu resize` returning, p99; bench/resize.sh with 20
# rounds, the device plugin and CUDA processes on fakegpu included.
if(TARGET vgpu AND TARGET vgpu-scheduler AND TARGET vgpu-device-plugin AND
   TARGET libvgpu_resize_watch)
  add_test(NAME integration.resize_latency
           COMMAND ${PROJECT_SOURCE_DIR}/bench/resize.sh ${CMAKE_BINARY_DIR} 20)
  set_tests_properties(integration.resize_latency PROPERTIES LABELS "integration;serial"
                       ENVIRONMENT VGPU_RESIZE_AS_TEST=1 TIMEOUT 300 RUN_SERIAL ON
                       SKIP_RETURN_CODE 77)
endif()
