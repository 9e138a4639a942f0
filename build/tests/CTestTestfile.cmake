# CMake generated Testfile for 
# Source directory: /work/main/tests
# Build directory: /work/main/build/tests
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
add_test([=[unit.test_base]=] "/work/main/build/tests/test_base")
set_tests_properties([=[unit.test_base]=] PROPERTIES  LABELS "unit" TIMEOUT "120" _BACKTRACE_TRIPLES "/work/main/cmake/targets.cmake;49;add_test;/work/main/tests/unit/base.cmake;1;vgpu_unit_test;/work/main/tests/unit/base.cmake;0;;/work/main/tests/CMakeLists.txt;7;include;/work/main/tests/CMakeLists.txt;0;")
add_test([=[fuzz.parse_quantity]=] "/work/main/build/tests/fuzz_parse_quantity" "/work/main/tests/fuzz/corpus/parse_quantity")
set_tests_properties([=[fuzz.parse_quantity]=] PROPERTIES  LABELS "fuzz" TIMEOUT "300" _BACKTRACE_TRIPLES "/work/main/cmake/targets.cmake;64;add_test;/work/main/tests/unit/base.cmake;4;vgpu_fuzz_target;/work/main/tests/unit/base.cmake;0;;/work/main/tests/CMakeLists.txt;7;include;/work/main/tests/CMakeLists.txt;0;")
