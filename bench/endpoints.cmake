# What /filter's promise rules (the pending-pod check, the per-namespace bound) cost per
# filter, in instructions: bench/endpoints_filter_cost.sh runs it under callgrind.
vgpu_program(endpoints_filter_cost ${CMAKE_CURRENT_LIST_DIR}/endpoints_filter_cost.c)
target_link_libraries(endpoints_filter_cost PRIVATE vgpu_scheduler vgpu_base)
