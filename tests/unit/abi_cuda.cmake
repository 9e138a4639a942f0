# Checks src/abi/cuda.h against the CUDA toolkit's cuda.h when one is installed
# ($CUDA_HOME/include or /usr/local/cuda/include). Two translation units, both compiled
# with the toolkit header as a system header:
#  - prototypes: our header with VG_CU(name) -> vg_name over the toolkit's own types, and
#    __builtin_types_compatible_p on every pair (the name list is taken from our header);
#  - types: a copy of our header with every CU*/cu* identifier prefixed vg_, then every
#    enumerator value, numeric #define and typedef size compared.
# The test is a build: a mismatch fails compilation of test_abi_cuda.
set(vgpu_cuda_toolkit_include "")
foreach(dir $ENV{CUDA_HOME}/include /usr/local/cuda/include)
  if(EXISTS ${dir}/cuda.h AND NOT vgpu_cuda_toolkit_include)
    set(vgpu_cuda_toolkit_include ${dir})
  endif()
endforeach()

if(NOT vgpu_cuda_toolkit_include)
  # Registered all the same, so the summary says the check did not run (tests/lib/README.md).
  message(STATUS "abi: no CUDA toolkit cuda.h found; unit.test_abi_cuda will skip")
  add_test(NAME unit.test_abi_cuda
           COMMAND bash -c ". ${PROJECT_SOURCE_DIR}/tests/lib/vg_skip.sh && vg_skip_outside_debian \"the CUDA toolkit's cuda.h (CUDA_HOME or /usr/local/cuda)\"")
  set_tests_properties(unit.test_abi_cuda PROPERTIES LABELS unit TIMEOUT 60 SKIP_RETURN_CODE 77)
else()
  message(STATUS "abi: checking src/abi/cuda.h against ${vgpu_cuda_toolkit_include}/cuda.h")
  set(abi_out ${CMAKE_BINARY_DIR}/tests/abi)
  set(abi_src ${PROJECT_SOURCE_DIR}/src/abi/cuda.h)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${abi_src})
  file(READ ${abi_src} abi_text)

  # Prefixed copy for the type checks.
  string(REGEX REPLACE "([^A-Za-z0-9_])(CU|cu)" "\\1vg_\\2" abi_prefixed "${abi_text}")
  file(WRITE ${abi_out}/vg_prefixed_cuda.h "${abi_prefixed}")

  # Function names.
  string(REGEX MATCHALL "VG_CU\\(cu[A-Za-z0-9_]+\\)" abi_fns "${abi_text}")
  set(abi_fn_checks "")
  foreach(m ${abi_fns})
    string(REGEX REPLACE "VG_CU\\((.*)\\)" "\\1" fn "${m}")
    string(APPEND abi_fn_checks "VG_CHECK_FN(${fn})\n")
  endforeach()
  file(WRITE ${abi_out}/vg_check_fns.inc "${abi_fn_checks}")

  # Enumerators, numeric macros and typedef sizes.
  string(REGEX MATCHALL "\n    (CU[A-Za-z0-9_]+) = " abi_enums "${abi_text}")
  string(REGEX MATCHALL "\n#define (CU[A-Z0-9_]+) +(0x[0-9a-fA-F]+|[0-9]+)\n" abi_defs
         "${abi_text}")
  string(REGEX MATCHALL "\n} (CU[A-Za-z0-9_]+)" abi_types "${abi_text}")
  set(abi_type_checks "")
  foreach(m ${abi_enums} ${abi_defs})
    string(REGEX REPLACE "^\n(    |#define )(CU[A-Za-z0-9_]+).*" "\\2" name "${m}")
    string(APPEND abi_type_checks "VG_CHECK_VALUE(${name})\n")
  endforeach()
  foreach(m ${abi_types})
    string(REGEX REPLACE "^\n} " "" name "${m}")
    string(APPEND abi_type_checks "VG_CHECK_SIZE(${name})\n")
  endforeach()
  file(WRITE ${abi_out}/vg_check_types.inc "${abi_type_checks}")

  add_executable(test_abi_cuda ${CMAKE_CURRENT_LIST_DIR}/test_abi_cuda.c
                               ${CMAKE_CURRENT_LIST_DIR}/test_abi_cuda_types.c)
  set_target_properties(test_abi_cuda PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_include_directories(test_abi_cuda PRIVATE ${PROJECT_SOURCE_DIR}/src ${abi_out})
  target_include_directories(test_abi_cuda SYSTEM PRIVATE ${vgpu_cuda_toolkit_include})
  target_compile_options(test_abi_cuda PRIVATE ${VGPU_SAN_FULL})
  target_link_options(test_abi_cuda PRIVATE ${VGPU_SAN_FULL})
  add_test(NAME unit.test_abi_cuda COMMAND test_abi_cuda)
  set_tests_properties(unit.test_abi_cuda PROPERTIES LABELS unit TIMEOUT 60)
endif()
