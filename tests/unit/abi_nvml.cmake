# Checks the dynamic MIG part of src/abi/nvml.h against NVIDIA's nvml.h when one is
# installed ($CUDA_HOME/include, /usr/local/cuda/include or /usr/include, or
# -DVGPU_NVML_HEADER_DIR=DIR). Our header is copied with every nvml/NVML identifier
# prefixed vg_, so both live in one translation unit; test_abi_nvml.c compares enum
# values, macros, type sizes and field offsets. The test is a build: a mismatch fails
# compilation of test_abi_nvml.
set(vgpu_nvml_header_dir "${VGPU_NVML_HEADER_DIR}")
if(NOT vgpu_nvml_header_dir)
  foreach(dir $ENV{CUDA_HOME}/include /usr/local/cuda/include /usr/include)
    if(EXISTS ${dir}/nvml.h AND NOT vgpu_nvml_header_dir)
      set(vgpu_nvml_header_dir ${dir})
    endif()
  endforeach()
endif()

if(NOT vgpu_nvml_header_dir)
  # Registered all the same, so the summary says the check did not run (tests/lib/README.md).
  message(STATUS "abi: no nvml.h found; unit.test_abi_nvml will skip")
  add_test(NAME unit.test_abi_nvml
           COMMAND bash -c ". ${PROJECT_SOURCE_DIR}/tests/lib/vg_skip.sh && vg_skip_outside_debian \"NVIDIA's nvml.h (CUDA_HOME, /usr/local/cuda or /usr/include)\"")
  set_tests_properties(unit.test_abi_nvml PROPERTIES LABELS unit TIMEOUT 60 SKIP_RETURN_CODE 77)
else()
  message(STATUS "abi: checking src/abi/nvml.h against ${vgpu_nvml_header_dir}/nvml.h")
  set(abi_out ${CMAKE_BINARY_DIR}/tests/abi_nvml)
  set(abi_src ${PROJECT_SOURCE_DIR}/src/abi/nvml.h)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${abi_src})
  file(READ ${abi_src} abi_text)
  string(REGEX REPLACE "([^A-Za-z0-9_])(nvml|NVML)" "\\1vg_\\2" abi_prefixed "${abi_text}")
  string(REPLACE "VGPU_ABI_NVML_H" "VGPU_ABI_NVML_PREFIXED_H" abi_prefixed "${abi_prefixed}")
  file(WRITE ${abi_out}/vg_prefixed_nvml.h "${abi_prefixed}")
  add_executable(test_abi_nvml ${CMAKE_CURRENT_LIST_DIR}/test_abi_nvml.c)
  set_target_properties(test_abi_nvml PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_include_directories(test_abi_nvml PRIVATE ${abi_out})
  target_include_directories(test_abi_nvml SYSTEM PRIVATE ${vgpu_nvml_header_dir})
  add_test(NAME unit.test_abi_nvml COMMAND test_abi_nvml)
  set_tests_properties(unit.test_abi_nvml PROPERTIES LABELS unit TIMEOUT 60)
endif()
