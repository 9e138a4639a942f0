# The DRA driver's ResourceSlice publisher against the test API server
# (tests/kube_api_server.py validates slices as kube-apiserver does).
if(TARGET vgpu_dra_slices)
  add_executable(test_dra_slices_publish ${CMAKE_CURRENT_LIST_DIR}/dra_slices.c
                 ${PROJECT_SOURCE_DIR}/tests/lib/kube_test_server.c)
  set_target_properties(test_dra_slices_publish PROPERTIES
                        RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_include_directories(test_dra_slices_publish PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(test_dra_slices_publish PRIVATE ${VGPU_SAN_FULL})
  target_link_options(test_dra_slices_publish PRIVATE ${VGPU_SAN_FULL})
  target_link_libraries(test_dra_slices_publish PRIVATE vgpu_dra_slices PkgConfig::CMOCKA)
  add_test(NAME integration.dra_slices
           COMMAND test_dra_slices_publish ${PROJECT_SOURCE_DIR}/tests/kube_api_server.py)
  set_tests_properties(integration.dra_slices PROPERTIES LABELS "integration;dra" TIMEOUT 120)
endif()
