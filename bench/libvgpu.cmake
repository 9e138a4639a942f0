# libvgpu's overhead benchmark program (bench/libvgpu.sh).
if(TARGET fakegpu_cuda)
  vgpu_program(libvgpu_bench ${CMAKE_CURRENT_LIST_DIR}/libvgpu_bench.c)
  target_link_libraries(libvgpu_bench PRIVATE fakegpu_cuda vgpu_base)
  set_target_properties(libvgpu_bench PROPERTIES SKIP_BUILD_RPATH ON)
endif()
