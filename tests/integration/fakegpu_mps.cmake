# fakegpu's MPS client side (src/fakegpu/cuda_mps.c) through the real ABI: fakegpu_mps
# links libcuda.so.1 by SONAME; each case runs under cuda_run.sh with its own
# FAKEGPU_STATE_DIR and sets the MPS variables itself, per child process.
if(TARGET fakegpu_cuda)
  vgpu_program(fakegpu_mps ${CMAKE_CURRENT_LIST_DIR}/fakegpu_mps.c)
  set_target_properties(fakegpu_mps PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_link_libraries(fakegpu_mps PRIVATE fakegpu_cuda vgpu_base)

  set(mps_cases
      "memory|FAKEGPU_DEVICES=Test GPU:2GiB:8|FAKEGPU_CONTEXT_MIB=256"
      "devices|FAKEGPU_DEVICES=Test GPU A:1GiB:8,Test GPU B:2GiB:8|FAKEGPU_CONTEXT_MIB=256"
      "share|FAKEGPU_DEVICES=NVIDIA H100 80GB HBM3:81559MiB:132"
      "bad|FAKEGPU_DEVICES=Test GPU:1GiB:8")
  foreach(entry ${mps_cases})
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 case_name)
    list(SUBLIST parts 1 -1 case_env)
    add_test(NAME integration.fakegpu_mps_${case_name}
             COMMAND ${CMAKE_COMMAND} -E env --unset=CUDA_VISIBLE_DEVICES
                     --unset=CUDA_MPS_PIPE_DIRECTORY --unset=CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
                     --unset=CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
                     ${CMAKE_CURRENT_LIST_DIR}/cuda_run.sh ${VGPU_FAKEGPU_DIR}
                     $<TARGET_FILE:fakegpu_mps> ${case_name} ${case_env})
    set_tests_properties(integration.fakegpu_mps_${case_name} PROPERTIES
                         LABELS "integration;fakegpu" TIMEOUT 120)
  endforeach()
endif()
