# Helpers every module uses, so flags and sanitizers are set in one place.

# A static library of ordinary (non-preloaded) code.
function(vgpu_library name)
  add_library(${name} STATIC ${ARGN})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${VGPU_SAN_FULL})
endfunction()

# A static library that may be linked into preloaded/driver libraries (libc only,
# UBSan only in the sanitizer build).
function(vgpu_preload_static name)
  add_library(${name} STATIC ${ARGN})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${VGPU_SAN_PRELOAD} -fvisibility=hidden)
endfunction()

# A shared library loaded into other programs (libvgpu, fakegpu): hidden visibility,
# an explicit export list, no undefined symbols.
function(vgpu_preload_library name version_script output_dir output_name)
  add_library(${name} SHARED ${ARGN})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${VGPU_SAN_PRELOAD} -fvisibility=hidden)
  target_link_options(${name} PRIVATE ${VGPU_SAN_PRELOAD} -Wl,-z,defs
                      -Wl,--version-script=${version_script})
  set_target_properties(${name} PROPERTIES
    LIBRARY_OUTPUT_DIRECTORY ${output_dir}
    OUTPUT_NAME ${output_name} PREFIX "" SUFFIX ""
    LINK_DEPENDS ${version_script})
endfunction()

# A program (daemon, CLI, test helper).
function(vgpu_program name)
  add_executable(${name} ${ARGN})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${VGPU_SAN_FULL})
  target_link_options(${name} PRIVATE ${VGPU_SAN_FULL})
endfunction()

# A cmocka unit test: one executable per module, registered with CTest.
function(vgpu_unit_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_compile_options(${name} PRIVATE ${VGPU_SAN_FULL})
  target_link_options(${name} PRIVATE ${VGPU_SAN_FULL})
  target_link_libraries(${name} PRIVATE ${T_LIBS} PkgConfig::CMOCKA)
  add_test(NAME unit.${name} COMMAND ${name})
  # A skip (tests/lib/vg_skip.h, VG_TEST_RUN) exits 77 and reads as a skip.
  set_tests_properties(unit.${name} PROPERTIES LABELS unit TIMEOUT 120 SKIP_RETURN_CODE 77)
endfunction()

# A fuzz target: LLVMFuzzerTestOneInput in SOURCE. Always built as a corpus replayer
# (tests/fuzz/replay.c) that CTest runs over tests/fuzz/corpus/<name>/; `make fuzz`
# builds the libFuzzer binary with clang.
function(vgpu_fuzz_target name)
  cmake_parse_arguments(F "" "" "SOURCES;LIBS" ${ARGN})
  if(VGPU_LIBFUZZER)
    add_executable(fuzz_${name} ${F_SOURCES})
    target_compile_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
    target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
  else()
    add_executable(fuzz_${name} ${F_SOURCES} ${PROJECT_SOURCE_DIR}/tests/fuzz/replay.c)
  endif()
  set_target_properties(fuzz_${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_include_directories(fuzz_${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(fuzz_${name} PRIVATE ${VGPU_SAN_FULL})
  target_link_options(fuzz_${name} PRIVATE ${VGPU_SAN_FULL})
  target_link_libraries(fuzz_${name} PRIVATE ${F_LIBS})
  add_test(NAME fuzz.${name}
           COMMAND fuzz_${name} ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${name})
  set_tests_properties(fuzz.${name} PROPERTIES LABELS fuzz TIMEOUT 300)
endfunction()
