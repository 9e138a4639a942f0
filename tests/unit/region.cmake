vgpu_unit_test(test_region
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_region.c
  LIBS vgpu_region)
vgpu_fuzz_target(region_validate
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_region_validate.c
  LIBS vgpu_region)
# The region fuzz corpus holds region_corpus's output (and may hold more: inputs that
# fuzzing found); this test keeps the generated part current.
vgpu_program(region_corpus ${CMAKE_CURRENT_LIST_DIR}/../fuzz/region_corpus.c)
target_link_libraries(region_corpus PRIVATE vgpu_region)
add_test(NAME fuzz.region_corpus
         COMMAND bash -c "d=$(mktemp -d) && \"$1\" \"$d\" && for f in \"$d\"/*; do cmp \"$f\" \"$2/\${f##*/}\" || rc=1; done; [ -z \"\${rc:-}\" ] || echo \"stale corpus: run region_corpus tests/fuzz/corpus/region_validate\"; rm -rf \"$d\"; exit \${rc:-0}"
                 region_corpus $<TARGET_FILE:region_corpus>
                 ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/region_validate)
set_tests_properties(fuzz.region_corpus PROPERTIES LABELS fuzz TIMEOUT 60)
