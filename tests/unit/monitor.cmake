if(TARGET vgpu_monitor)
  vgpu_unit_test(test_monitor
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_monitor.c
    LIBS vgpu_monitor)
  vgpu_fuzz_target(monitor_cgroup
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_monitor_cgroup.c
    LIBS vgpu_monitor)
endif()
