vgpu_unit_test(test_base
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_base.c
  LIBS vgpu_base PkgConfig::KUBE_JANSSON)
vgpu_fuzz_target(parse_quantity
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_parse_quantity.c
  LIBS vgpu_base)
vgpu_fuzz_target(prom_label
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_prom_label.c
  LIBS vgpu_base)
