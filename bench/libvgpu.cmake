# libvgpu's overhead benchmark program (bench/libvgpu.sh).
if(TARGET fakegpu_cuda)
  vgpu_program(libvgpu_bench ${CMAKE_CURRENT_LIST_DIR}/libvgpu_bench.c)
  target_link_libraries(libvgpu_bench PRIVATE fakegpu_cuda vgpu_base)
  set_target_properties(libvgpu_bench PROPERTIES SKIP_BUILD_RPATH ON)
endif()
# The allocation overhead target (docs/benchmarks.md) as a test; instruction counts are
# only meaningful for an optimised build without sanitizers.
if(TARGET libvgpu_bench AND TARGET vgpu_libvgpu AND CMAKE_BUILD_TYPE MATCHES "^(RelWithDebInfo|Release)$"
   AND VGPU_SANITIZE STREQUAL "none")
  add_test(NAME bench.libvgpu_alloc
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/libvgpu.sh ${CMAKE_BINARY_DIR} check)
  set_tests_properties(bench.libvgpu_alloc PROPERTIES LABELS "bench;nosan" TIMEOUT 300)
endif()
