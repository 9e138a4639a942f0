# gRPC interop: vgpu's C gRPC against python3-grpcio (Debian's, /usr/bin/python3), both
# directions. Each unittest class is its own CTest test; exit 77 means grpc is missing.
vgpu_program(grpc_peer ${CMAKE_CURRENT_LIST_DIR}/grpc_peer.c)
set_target_properties(grpc_peer PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_link_libraries(grpc_peer PRIVATE vgpu_grpc vgpu_kubelet_api)
add_dependencies(grpc_peer vgpu_kubelet_api_gen)
# protobuf-c's *__INIT macros cast away const from its empty string; clang sees that in
# our code (gcc does not, the macro comes from a system header).
target_compile_options(grpc_peer PRIVATE -Wno-cast-qual)
foreach(case CServerPythonClient PythonServerCClient PythonServerVanishes)
  add_test(NAME integration.grpc_interop.${case}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/grpc_interop.py
                   $<TARGET_FILE:grpc_peer> ${VGPU_KUBELET_DESCRIPTOR} ${case})
  set_tests_properties(integration.grpc_interop.${case} PROPERTIES
                       LABELS "integration;grpc" TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
