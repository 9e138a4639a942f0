add_test(NAME lint.banned COMMAND ${CMAKE_CURRENT_LIST_DIR}/banned.sh)
add_test(NAME lint.format COMMAND ${CMAKE_CURRENT_LIST_DIR}/format.sh)
set_tests_properties(lint.banned lint.format PROPERTIES LABELS "lint;nosan" TIMEOUT 120)
set_tests_properties(lint.format PROPERTIES SKIP_RETURN_CODE 77)
