vgpu_unit_test(test_grpc
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_grpc.c
  LIBS vgpu_grpc)
vgpu_unit_test(test_grpc_loop
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_grpc_loop.c
  LIBS vgpu_grpc PkgConfig::GRPC_NGHTTP2) # a raw HTTP/2 client for malformed requests
set_tests_properties(unit.test_grpc unit.test_grpc_loop PROPERTIES LABELS "unit;grpc")
