# fakegpu benchmarks (bench/fakegpu.sh): launch cost under callgrind and spin fidelity.
if(TARGET fakegpu_cuda)
  vgpu_program(fakegpu_launch ${CMAKE_CURRENT_LIST_DIR}/fakegpu_launch.c)
  set_target_properties(fakegpu_launch PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
  target_link_libraries(fakegpu_launch PRIVATE fakegpu_cuda vgpu_base)
endif()
