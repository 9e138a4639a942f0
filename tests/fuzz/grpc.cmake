vgpu_fuzz_target(grpc_reader
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_grpc_reader.c
  LIBS vgpu_grpc)
