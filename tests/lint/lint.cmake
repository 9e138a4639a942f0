add_test(NAME lint.banned COMMAND ${CMAKE_CURRENT_LIST_DIR}/banned.sh)
add_test(NAME lint.format COMMAND ${CMAKE_CURRENT_LIST_DIR}/format.sh)
set_tests_properties(lint.banned lint.format PROPERTIES LABELS "lint;nosan" TIMEOUT 120)
set_tests_properties(lint.format PROPERTIES SKIP_RETURN_CODE 77)
# Skips go through tests/lib/vg_skip.* and fail under CI (tests/lib/README.md).
add_test(NAME lint.skips COMMAND ${CMAKE_CURRENT_LIST_DIR}/skips.sh $<TARGET_FILE:test_sim>)
set_tests_properties(lint.skips PROPERTIES LABELS "lint;nosan" TIMEOUT 120)
