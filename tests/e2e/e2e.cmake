# The cluster in a box (tests/e2e/e2e.py, also `make e2e`): the rendered vgpu overlay on
# the test API server with its RBAC, vgpu-scheduler and its webhook, two fakegpu nodes
# with device plugin, monitor and a kubelet stand-in; HAMi's example pods placed,
# allocated and run under libvgpu; a node and the scheduler restarted. Label e2e.
if(TARGET vgpu-scheduler AND TARGET vgpu-device-plugin AND TARGET vgpu-monitor AND
   TARGET libvgpu_probe)
  add_test(NAME e2e.cluster
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/e2e.py ${CMAKE_BINARY_DIR}
                   ${PROJECT_SOURCE_DIR})
  set_tests_properties(e2e.cluster PROPERTIES LABELS "e2e" TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
# The Volcano node in a box (tests/e2e/volcano.py): the rendered Volcano overlay, Volcano's
# example pods placed by the scheduler stand-in (tests/volcano_scheduler.py), allocated by
# the device plugin in Volcano mode and run under libvgpu; a gang whose compute shares are
# measured on fakegpu's timeline (serial: a loaded machine skews them).
if(TARGET vgpu-device-plugin AND TARGET vgpu-monitor AND TARGET libvgpu_probe AND
   TARGET compute_tenant AND TARGET libvgpu_compute_truth)
  add_test(NAME e2e.volcano
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/volcano.py ${CMAKE_BINARY_DIR}
                   ${PROJECT_SOURCE_DIR})
  set_tests_properties(e2e.volcano PROPERTIES LABELS "e2e;volcano" TIMEOUT 300
                       SKIP_RETURN_CODE 77 RUN_SERIAL ON)
endif()
# Dynamic MIG in the cluster in a box (tests/e2e/mig.py): vgpu-scheduler places HAMi's pods
# of 9,000 and 18,000 MiB on MIG profiles, the device plugin in dynamic MIG mode makes the
# instances, libvgpu runs inside them, a deleted pod's instance goes.
if(TARGET vgpu-scheduler AND TARGET vgpu-device-plugin AND TARGET vgpu-monitor AND
   TARGET libvgpu_probe)
  add_test(NAME e2e.mig
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/mig.py ${CMAKE_BINARY_DIR}
                   ${PROJECT_SOURCE_DIR})
  set_tests_properties(e2e.mig PROPERTIES LABELS "e2e" TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
