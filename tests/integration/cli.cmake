# The vgpu command (docs/cli.md): nodes, gpus, pods, explain and sim against the test API
# server (tests/kube_api_server.py); top against a containers directory laid out by
# top_fixture on fakegpu, once and live in tmux (Debian's tmux). Debian's python3.
if(TARGET vgpu AND TARGET fakegpu_nvml)
  vgpu_program(top_fixture ${CMAKE_CURRENT_LIST_DIR}/top_fixture.c)
  target_link_libraries(top_fixture PRIVATE vgpu_region vgpu_base)
  set_target_properties(top_fixture PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_library(top_truncate_shim SHARED ${CMAKE_CURRENT_LIST_DIR}/top_truncate_shim.c)
  set_target_properties(top_truncate_shim PROPERTIES LIBRARY_OUTPUT_DIRECTORY
                        ${CMAKE_BINARY_DIR}/tests PREFIX "")
  target_link_libraries(top_truncate_shim PRIVATE ${CMAKE_DL_LIBS})
  foreach(cls ClusterTest TopTest TopLiveTest SimProgressTest MigTest)
    add_test(NAME integration.cli.${cls}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/cli_test.py ${CMAKE_BINARY_DIR}
                     ${cls})
    set_tests_properties(integration.cli.${cls} PROPERTIES LABELS "integration;cli" TIMEOUT 300
                         SKIP_RETURN_CODE 77)
  endforeach()
endif()
