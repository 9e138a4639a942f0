# Attacks from inside a container that podman runs with a claim's CDI spec
# (tests/dra/e2e_podman.py, Attacks; docs/dra.md "End to end"): a root tenant writing at
# every file the spec mounts (the limits, /etc/ld.so.preload, libvgpu.so, the compute
# board) changes none of them on the host, and its environment cannot raise the claim's
# memory. About 6 s. Skips where podman cannot run (fails under CI).
if(TARGET vgpu-dra-plugin AND TARGET vgpu_libvgpu AND TARGET fakegpu_cuda AND
   TARGET fakegpu_nvml AND TARGET libvgpu_probe AND TARGET compute_tenant AND
   TARGET libvgpu_compute_truth)
  add_test(NAME security.dra_container
           COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/dra/e2e_podman.py
                   ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${VGPU_DRA_DESCRIPTOR} Attacks)
  set_tests_properties(security.dra_container PROPERTIES LABELS "security;dra;nosan"
                       TIMEOUT 180 SKIP_RETURN_CODE 77)
endif()
