# Limits a tenant cannot lift: a hostile process inside a vgpu container attacks its own
# GPU-memory limit (docs/security.md). Root and a private mount namespace put the limits
# file at libvgpu's fixed path, /etc/vgpu/limits, without touching the host.
if(TARGET fakegpu_cuda AND TARGET vgpu_libvgpu AND TARGET libvgpu_probe)
  foreach(case unset_env env_precedence region_forged file_unusable)
    add_test(NAME security.limits_${case}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/limits_test.sh ${CMAKE_BINARY_DIR} ${case})
    set_tests_properties(security.limits_${case} PROPERTIES LABELS security TIMEOUT 120
                         SKIP_RETURN_CODE 77)
  endforeach()
endif()
