# vgpu-scheduler's throughput benchmark (bench/scheduler.sh): a C stand-in for the API
# server and a C client that plays kube-scheduler.
if(TARGET vgpu-scheduler)
  pkg_check_modules(BENCH_EVENT REQUIRED IMPORTED_TARGET libevent_core libevent_extra jansson)
  vgpu_program(kube_stub ${CMAKE_CURRENT_LIST_DIR}/kube_stub.c)
  target_link_libraries(kube_stub PRIVATE vgpu_scheduler vgpu_base PkgConfig::BENCH_EVENT)
  vgpu_program(sched_load ${CMAKE_CURRENT_LIST_DIR}/sched_load.c)
  target_link_libraries(sched_load PRIVATE vgpu_annot vgpu_base PkgConfig::BENCH_EVENT
                        Threads::Threads)
endif()
