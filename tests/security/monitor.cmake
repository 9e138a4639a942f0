# vgpu-monitor, the watchdog for processes that bypass libvgpu (docs/monitor.md): real
# processes in real cgroups (v1 and v2, both drivers' layouts) on fakegpu, under both
# policies. The timing targets (detection and kill within 1 s each) are checked, so the
# cases run serially.
if(TARGET vgpu-monitor AND TARGET fakegpu_nvml)
  foreach(case truth v1-warn v2-kill v1-kill v2-warn nocgroup)
    add_test(NAME security.monitor.${case}
             COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/monitor_test.sh ${CMAKE_BINARY_DIR} ${case})
    set_tests_properties(security.monitor.${case} PROPERTIES LABELS security TIMEOUT 120
                         SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
  endforeach()
endif()
