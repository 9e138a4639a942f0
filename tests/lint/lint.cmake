add_test(NAME lint.banned COMMAND ${CMAKE_CURRENT_LIST_DIR}/banned.sh)
add_test(NAME lint.format COMMAND ${CMAKE_CURRENT_LIST_DIR}/format.sh)
add_test(NAME lint.references COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/references.py)
add_test(NAME lint.references_selftest COMMAND ${CMAKE_CURRENT_LIST_DIR}/references_selftest.sh)
set_tests_properties(lint.banned lint.format lint.references lint.references_selftest
                     PROPERTIES LABELS "lint;nosan" TIMEOUT 120)
set_tests_properties(lint.format PROPERTIES SKIP_RETURN_CODE 77)
