# vgpu's DRA driver end to end on fakegpu (tests/dra/e2e_podman.py): a claim for 10 GiB and
# 30 % of a GPU prepared by vgpu-dra-plugin, its CDI spec applied by podman
# (`--device vgpu.io/gpu=...`), the CUDA programs inside seeing a 10 GiB GPU and getting
# 30 % of it by fakegpu's timeline; two claims (30 % and 70 %) sharing one GPU. About
# 20 s. Timing-sensitive (compute shares, with the bounds of the compute tests):
# RUN_SERIAL. nosan: the container holds the programs and libvgpu.so of the build, whose
# sanitizer runtimes would need the test's ASAN_OPTIONS inside; the plugin runs under the
# sanitizers in integration.dra_plugin.*. Skips where podman cannot run (not root, no
# podman/runc, no mount namespace), fails there under CI.
if(TARGET vgpu-dra-plugin AND TARGET vgpu_libvgpu AND TARGET fakegpu_cuda AND
   TARGET fakegpu_nvml AND TARGET libvgpu_probe AND TARGET compute_tenant AND
   TARGET libvgpu_compute_truth)
  add_test(NAME e2e.dra_podman
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/e2e_podman.py ${CMAKE_BINARY_DIR}
                   ${PROJECT_SOURCE_DIR} ${VGPU_DRA_DESCRIPTOR} EndToEnd)
  set_tests_properties(e2e.dra_podman PROPERTIES LABELS "e2e;dra;nosan" TIMEOUT 180
                       RUN_SERIAL ON SKIP_RETURN_CODE 77)
endif()
