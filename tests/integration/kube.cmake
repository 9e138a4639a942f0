# The kube client against the Python test API server (tests/kube_api_server.py).
add_executable(test_kube_client ${CMAKE_CURRENT_LIST_DIR}/kube_client.c
               ${PROJECT_SOURCE_DIR}/tests/lib/kube_test_server.c)
set_target_properties(test_kube_client PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_include_directories(test_kube_client PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(test_kube_client PRIVATE ${VGPU_SAN_FULL})
target_link_options(test_kube_client PRIVATE ${VGPU_SAN_FULL})
target_link_libraries(test_kube_client PRIVATE vgpu_kube PkgConfig::CMOCKA)
add_test(NAME integration.kube_client
         COMMAND test_kube_client ${PROJECT_SOURCE_DIR}/tests/kube_api_server.py)
set_tests_properties(integration.kube_client PROPERTIES LABELS integration TIMEOUT 300)
