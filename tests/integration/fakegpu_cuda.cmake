# fakegpu's libcuda.so.1 through the real ABI: cuda_api links it by SONAME; every case
# runs under cuda_run.sh with its own FAKEGPU_STATE_DIR, and with CUDA_VISIBLE_DEVICES
# unset (the visible case sets it itself) so that the caller's value changes nothing.
if(TARGET fakegpu_cuda)
  vgpu_program(cuda_api ${CMAKE_CURRENT_LIST_DIR}/cuda_api.c)
  set_target_properties(cuda_api PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_link_libraries(cuda_api PRIVATE fakegpu_cuda ${CMAKE_DL_LIBS})

  set(one_gib "FAKEGPU_DEVICES=Test GPU:1GiB:8|FAKEGPU_CONTEXT_MIB=256")
  # An H100 in MIG mode: two 1g.10gb (16 SMs each) and a 3g.40gb (60) of its 132 SMs.
  set(h100_mig "FAKEGPU_DEVICES=NVIDIA H100 80GB HBM3:81559MiB:132|FAKEGPU_MIG=0:1g.10gb,1g.10gb,3g.40gb")
  set(cuda_cases
      "devices|FAKEGPU_DEVICES=Test GPU A:4GiB:40,Test GPU B:8GiB:80"
      "capacity|${one_gib}"
      "memcpy|${one_gib}"
      "spin|FAKEGPU_KERNEL_NS=5000000"
      "graph|FAKEGPU_KERNEL_NS=10000"
      "bad_use|${one_gib}"
      "proc_address|${one_gib}"
      "share2|${one_gib}"
      "share4|${one_gib}"
      "sigkill|FAKEGPU_DEVICES=Test GPU:2GiB:8|FAKEGPU_CONTEXT_MIB=256"
      "visible|FAKEGPU_DEVICES=Test GPU A:1GiB:10,Test GPU B:2GiB:20,Test GPU C:3GiB:30|FAKEGPU_CONTEXT_MIB=256"
      "mig_stretch|${h100_mig}|FAKEGPU_KERNEL_NS=1000000"
      "mig_isolated|${h100_mig}"
      "mig_shared|${h100_mig}")
  foreach(entry ${cuda_cases})
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 case_name)
    list(SUBLIST parts 1 -1 case_env)
    add_test(NAME integration.fakegpu_cuda_${case_name}
             COMMAND ${CMAKE_COMMAND} -E env --unset=CUDA_VISIBLE_DEVICES
                     ${CMAKE_CURRENT_LIST_DIR}/cuda_run.sh ${VGPU_FAKEGPU_DIR}
                     $<TARGET_FILE:cuda_api> ${case_name} ${case_env})
    set_tests_properties(integration.fakegpu_cuda_${case_name} PROPERTIES
                         LABELS "integration;fakegpu" TIMEOUT 120)
  endforeach()
  # The sharing cases measure the device's time split; they need the CPU to themselves.
  set_tests_properties(integration.fakegpu_cuda_share2 integration.fakegpu_cuda_share4
                       integration.fakegpu_cuda_mig_isolated integration.fakegpu_cuda_mig_shared
                       PROPERTIES RUN_SERIAL TRUE)
endif()
