# Cooperating processes of one container (docs/security.md, "Cooperating processes"): four
# CUDA processes of a 30 % container, their shared budget forged, beside a 70 % neighbour
# in real cgroups on fakegpu; vgpu-monitor bounds the container's total from NVML's
# per-process utilization (forged), and leaves an honest container of four alone (honest).
if(TARGET vgpu-monitor AND TARGET fakegpu_nvml AND TARGET fakegpu_cuda AND TARGET vgpu_libvgpu
   AND TARGET compute_tenant AND TARGET libvgpu_compute_truth AND TARGET budget_forger
   AND TARGET board_layout)
  foreach(case forged honest)
    add_test(NAME security.attacks.coop.${case}
             COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/coop_test.sh ${CMAKE_BINARY_DIR} ${case})
    set_tests_properties(security.attacks.coop.${case} PROPERTIES
                         LABELS "security;attacks;compute;serial" TIMEOUT 120
                         SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
  endforeach()
endif()
