# src/kube: parsers and helpers (cmocka), and fuzz targets for the watch stream decoder
# and the kubeconfig loader whose corpora replay under `make test`.
vgpu_unit_test(test_kube
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kube.c
  LIBS vgpu_kube)
vgpu_fuzz_target(kube_watch
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_kube_watch.c
  LIBS vgpu_kube)
vgpu_fuzz_target(kube_config
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_kube_config.c
  LIBS vgpu_kube)
