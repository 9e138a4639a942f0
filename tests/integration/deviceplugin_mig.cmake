# vgpu-device-plugin's MIG mode, XID health and the health section of its config (tests/integration/deviceplugin_mig.py, on
# the fake kubelet of deviceplugin_kubelet.py and fakegpu with FAKEGPU_MIG). Exit 77: grpc
# missing.
if(TARGET vgpu-device-plugin)
  foreach(case Mig Xid HealthConfig)
    add_test(NAME integration.deviceplugin.${case}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/deviceplugin_mig.py
                     ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${case})
    set_tests_properties(integration.deviceplugin.${case} PROPERTIES
                         LABELS "integration;deviceplugin" TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
endif()

# Dynamic MIG (tests/integration/deviceplugin_mig_dynamic.py): instances made at Allocate
# for the pods' decisions, destroyed with their pods, refusals, a kill -9 half-way.
if(TARGET vgpu-device-plugin)
  foreach(case Instances Refusals Hami Crash)
    add_test(NAME integration.deviceplugin.MigDynamic${case}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/deviceplugin_mig_dynamic.py
                     ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${case})
    set_tests_properties(integration.deviceplugin.MigDynamic${case} PROPERTIES
                         LABELS "integration;deviceplugin" TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
  set_tests_properties(integration.deviceplugin.MigDynamicInstances PROPERTIES RUN_SERIAL ON)
endif()
