# /ui/explain's query reader (src/scheduler/view.c): its corpus replayed.
vgpu_fuzz_target(sched_explain_query
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_sched_explain_query.c
  LIBS vgpu_scheduler)
