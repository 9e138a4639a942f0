add_test(NAME lint.banned COMMAND ${CMAKE_CURRENT_LIST_DIR}/banned.sh)
add_test(NAME lint.format COMMAND ${CMAKE_CURRENT_LIST_DIR}/format.sh)
add_test(NAME lint.errstyle COMMAND ${CMAKE_CURRENT_LIST_DIR}/errstyle.sh)
add_test(NAME lint.references COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/references.py)
add_test(NAME lint.references_selftest COMMAND ${CMAKE_CURRENT_LIST_DIR}/references_selftest.sh)
# Run after the build: it reads the compilers' dependency files. The CUDA toolkit is
# optional (tests/unit/abi_cuda.cmake uses it only when installed).
add_test(NAME lint.debian_deps
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/debian_deps.py ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}
                 "$ENV{CUDA_HOME}" /usr/local/cuda)
# The check itself, attacked: without libssl-dev in the list it must fail.
add_test(NAME lint.debian_deps_catches_missing
         COMMAND ${PROJECT_SOURCE_DIR}/tests/lib/expect_fail.sh
                 "libssl-dev, which DEBIAN_PACKAGES neither lists"
                 ${CMAKE_COMMAND} -E env DEBIAN_DEPS_DROP=libssl-dev
                 ${CMAKE_CURRENT_LIST_DIR}/debian_deps.py ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}
                 "$ENV{CUDA_HOME}" /usr/local/cuda)
set_tests_properties(lint.banned lint.format lint.references lint.references_selftest
                     lint.debian_deps lint.debian_deps_catches_missing lint.errstyle
                     PROPERTIES LABELS "lint;nosan" TIMEOUT 120)
set_tests_properties(lint.format lint.debian_deps PROPERTIES SKIP_RETURN_CODE 77)
# Skips go through tests/lib/vg_skip.* and fail under CI (tests/lib/README.md).
add_test(NAME lint.skips COMMAND ${CMAKE_CURRENT_LIST_DIR}/skips.sh $<TARGET_FILE:test_sim>)
set_tests_properties(lint.skips PROPERTIES LABELS "lint;nosan" TIMEOUT 120)
add_test(NAME lint.ptx COMMAND ${CMAKE_CURRENT_LIST_DIR}/ptx.sh)
# The check must catch the byte that made the real JIT refuse compute_spin.ptx.
add_test(NAME lint.ptx_catches_non_ascii
         COMMAND sh -c "printf '// 20 \\302\\265s\\n.version 7.0\\n' > ptx_lint_bad.ptx && ${PROJECT_SOURCE_DIR}/tests/lib/expect_fail.sh 'non-ASCII bytes in PTX.*ptx_lint_bad.ptx:1:' ${CMAKE_CURRENT_LIST_DIR}/ptx.sh $PWD/ptx_lint_bad.ptx")
# `make` with no target builds (the README's first command after clone).
add_test(NAME lint.make_default COMMAND ${CMAKE_CURRENT_LIST_DIR}/make_default.sh)
set_tests_properties(lint.make_default PROPERTIES LABELS "lint;nosan" TIMEOUT 60)
# One usage and one meaning per flag in every program's --help.
add_test(NAME lint.help_flags COMMAND ${CMAKE_CURRENT_LIST_DIR}/help_flags.sh ${CMAKE_BINARY_DIR}/bin)
set_tests_properties(lint.help_flags PROPERTIES LABELS "lint;nosan" TIMEOUT 60)
# Every module and program is on docs/architecture.md.
add_test(NAME lint.architecture COMMAND ${CMAKE_CURRENT_LIST_DIR}/architecture.sh)
set_tests_properties(lint.architecture PROPERTIES LABELS "lint;nosan" TIMEOUT 60)
