vgpu_fuzz_target(sim_csv
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_sim_csv.c
  LIBS vgpu_sim)
