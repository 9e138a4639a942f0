# The watchdog's round-2 attacks (docs/security.md, "The watchdog acts on the container"):
# processes that bypass libvgpu in real cgroups on fakegpu, vgpu-monitor under kill:
#   small   an unregistered process holding little memory: killed at first sight
#   burst   a process that fills the card in 1 ms bursts every 300 ms: killed at first
#           sight, the neighbour's 512 MiB allocations meanwhile
#   forge   a process that writes its own live slot into the container's region: still
#           not registered (no libvgpu), killed at first sight
#   relay   a parent that uses no GPU forks children that each fill the card: the
#           container is quarantined (parent killed), an Event and a pod condition reach
#           the API server, the neighbour's allocation failures stay bounded
# Timing bounds are checked, so each runs alone.
if(TARGET vgpu-monitor AND TARGET fakegpu_nvml AND TARGET fakegpu_cuda AND TARGET vgpu_libvgpu)
  vgpu_program(watchdog_attack ${CMAKE_CURRENT_LIST_DIR}/watchdog_attack.c)
  target_link_libraries(watchdog_attack PRIVATE fakegpu_cuda)
  set_target_properties(watchdog_attack PROPERTIES SKIP_BUILD_RPATH ON)
  foreach(case small burst forge relay)
    add_test(NAME security.attacks.watchdog.${case}
             COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/watchdog_test.sh ${CMAKE_BINARY_DIR} ${case})
    set_tests_properties(security.attacks.watchdog.${case} PROPERTIES
                         LABELS "security;attacks;serial" TIMEOUT 120 SKIP_RETURN_CODE 77
                         RUN_SERIAL TRUE)
  endforeach()
endif()
