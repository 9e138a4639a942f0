# Device plugin configuration: golden fixtures, malformed files, precedence, the fuzz
# corpus, and docs/config.md kept equal to the key table.
vgpu_unit_test(test_dpconfig
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_dpconfig.c
  LIBS vgpu_dpconfig)
set_tests_properties(unit.test_dpconfig PROPERTIES
  ENVIRONMENT "DPCONFIG_DATA=${PROJECT_SOURCE_DIR}/tests/data/dpconfig")
vgpu_fuzz_target(dpconfig
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_dpconfig.c
  LIBS vgpu_dpconfig PkgConfig::KUBE_JANSSON)
vgpu_fuzz_target(dpconfig_hami
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_dpconfig_hami.c
  LIBS vgpu_dpconfig)
add_test(NAME unit.dpconfig_doc
  COMMAND sh -c "\"$1\" | diff -u \"$2\" - && echo 'docs/config.md matches the key table'"
          sh $<TARGET_FILE:dpconfig_doc> ${PROJECT_SOURCE_DIR}/docs/config.md)
set_tests_properties(unit.dpconfig_doc PROPERTIES LABELS unit TIMEOUT 60)
