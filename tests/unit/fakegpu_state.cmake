if(TARGET fakegpu_state)
  vgpu_unit_test(test_fakegpu_state
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fakegpu_state.c
    LIBS fakegpu_state)
  vgpu_fuzz_target(fakegpu_devices
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_fakegpu_devices.c
    LIBS fakegpu_state)
  vgpu_fuzz_target(fakegpu_mig
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_fakegpu_mig.c
    LIBS fakegpu_state)
endif()
