# Memory the driver holds (docs/security.md): one replay per allocation path and call order,
# each a tenant under a 1 GiB limit that tries to end holding more, checked against
# fakegpu's per-process truth (memory_attack.c, memory_test.sh).
if(TARGET fakegpu_cuda AND TARGET fakegpu_state AND TARGET vgpu_libvgpu)
  vgpu_program(memory_attack ${CMAKE_CURRENT_LIST_DIR}/memory_attack.c)
  target_link_libraries(memory_attack PRIVATE fakegpu_cuda fakegpu_state vgpu_base)
  # No build rpath: the script chooses libcuda.so.1 (fakegpu's) itself.
  set_target_properties(memory_attack PROPERTIES SKIP_BUILD_RPATH ON)
  foreach(case vmm_release_mapped vmm_unmap_held vmm_retain vmm_import vmm_import_unmapped
               pool_table pool_cache
               pool_current async_default managed arrays mipmaps graph_nodes graph_capture
               graph_pool ipc pool_import)
    add_test(NAME security.attacks.memory.${case}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/memory_test.sh ${CMAKE_BINARY_DIR} ${case})
    set_tests_properties(security.attacks.memory.${case} PROPERTIES LABELS "security;attacks"
                         TIMEOUT 120)
  endforeach()
endif()
