# Attacks on the compute limiter and its board (docs/security.md, "Compute slots a
# neighbour cannot forge"). The share cases are timing-sensitive like the compute tests:
# RUN_SERIAL, label compute too.
if(TARGET fakegpu_cuda AND TARGET vgpu_libvgpu AND TARGET compute_tenant)
  vgpu_program(board_region ${CMAKE_CURRENT_LIST_DIR}/board_region.c)
  target_link_libraries(board_region PRIVATE vgpu_region vgpu_base)
  vgpu_program(board_hostile ${CMAKE_CURRENT_LIST_DIR}/board_hostile.c)
  target_link_libraries(board_hostile PRIVATE vgpu_base)
  vgpu_program(board_layout ${CMAKE_CURRENT_LIST_DIR}/board_layout.c)
  target_link_libraries(board_layout PRIVATE vgpu_deviceplugin)
  foreach(case events slots turn truncate)
    add_test(NAME security.board_${case}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/board_test.sh ${CMAKE_BINARY_DIR} ${case})
    # The build type decides the events case's lower bound (wall time costs more under
    # the sanitizers).
    set_tests_properties(security.board_${case} PROPERTIES
                         LABELS "security;compute" TIMEOUT 180 RUN_SERIAL ON
                         ENVIRONMENT "VGPU_SANITIZE=${VGPU_SANITIZE}")
  endforeach()
endif()

# What readers take from a neighbour's slot file (name and contents), fuzzed.
if(TARGET vgpu_libvgpu_core)
  vgpu_fuzz_target(board_slot
    SOURCES ${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz_board_slot.c
    LIBS vgpu_libvgpu_core vgpu_base)
  set_tests_properties(fuzz.board_slot PROPERTIES LABELS "fuzz;security")
endif()

# A container's mounts give it write access to its own slot only (the device plugin's
# Allocate response, then those mounts made for real in a mount namespace).
if(TARGET vgpu_deviceplugin)
  add_executable(test_board_mounts ${CMAKE_CURRENT_LIST_DIR}/test_board_mounts.c)
  set_target_properties(test_board_mounts PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                                                     ${CMAKE_BINARY_DIR}/tests)
  target_include_directories(test_board_mounts PRIVATE ${PROJECT_SOURCE_DIR}/src
                                                       ${PROJECT_SOURCE_DIR}/tests)
  target_compile_options(test_board_mounts PRIVATE ${VGPU_SAN_FULL})
  target_link_options(test_board_mounts PRIVATE ${VGPU_SAN_FULL})
  target_link_libraries(test_board_mounts PRIVATE vgpu_deviceplugin PkgConfig::CMOCKA)
  add_test(NAME security.board_mounts COMMAND test_board_mounts)
  set_tests_properties(security.board_mounts PROPERTIES LABELS security TIMEOUT 60)
endif()
