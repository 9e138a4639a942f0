# vgpu's DRA driver end to end on fakegpu (tests/dra/e2e_podman.py, class EndToEnd):
# e2e.dra_podman: a claim for 10 GiB and 30 % of a GPU prepared by vgpu-dra-plugin, its CDI
# spec applied by podman (`--device vgpu.io/gpu=...`), the CUDA programs inside seeing a
# 10 GiB GPU, refused past it, and getting 30 % of the GPU by fakegpu's timeline; unprepare
# removing it all. About 15 s. e2e.dra_podman_shared: two claims (10 GiB + 30 %, 20 GiB +
# 70 %) sharing one GPU from two containers, about 8 s; with the compute tests' label, as
# their 30/70 split: at load 5 and more on 2 cores the 70 % tenant can fall 3-10 points
# short (the GPU idle during turn hand-overs and while a CPU-starved launcher refills
# its queue, docs/compute.md). Both timing-sensitive (RUN_SERIAL). nosan: the container
# holds the programs and libvgpu.so of the build, whose sanitizer runtimes would need the
# test's ASAN_OPTIONS inside; the plugin runs under the sanitizers in
# integration.dra_plugin.*. Skip where podman cannot run (not root, no podman/runc, no
# mount namespace), fail there under CI.
if(TARGET vgpu-dra-plugin AND TARGET vgpu_libvgpu AND TARGET fakegpu_cuda AND
   TARGET fakegpu_nvml AND TARGET libvgpu_probe AND TARGET compute_tenant AND
   TARGET libvgpu_compute_truth)
  set(dra_e2e /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/e2e_podman.py ${CMAKE_BINARY_DIR}
              ${PROJECT_SOURCE_DIR} ${VGPU_DRA_DESCRIPTOR})
  add_test(NAME e2e.dra_podman COMMAND ${dra_e2e} EndToEnd.test_claim_in_a_container)
  add_test(NAME e2e.dra_podman_shared COMMAND ${dra_e2e} EndToEnd.test_two_claims_share_a_gpu)
  # e2e.dra_mig: MIG on demand (MigOnDemand): partitions' instances made for claims and seen
  # in containers, one destroyed by unprepare, an XID's taint until the GPU's reset.
  add_test(NAME e2e.dra_mig COMMAND ${dra_e2e} MigOnDemand.test_partition_in_a_container)
  set_tests_properties(e2e.dra_mig PROPERTIES TIMEOUT 180 RUN_SERIAL ON SKIP_RETURN_CODE 77
                       LABELS "e2e;dra;nosan")
  set_tests_properties(e2e.dra_podman e2e.dra_podman_shared PROPERTIES TIMEOUT 180
                       RUN_SERIAL ON SKIP_RETURN_CODE 77)
  set_tests_properties(e2e.dra_podman PROPERTIES LABELS "e2e;dra;nosan")
  set_tests_properties(e2e.dra_podman_shared PROPERTIES LABELS "e2e;dra;compute;nosan")
endif()
