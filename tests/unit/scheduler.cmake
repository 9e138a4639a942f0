# src/scheduler: cmocka tests of the state and extender verbs, and the fuzz target for the
# extender, webhook and pod decoders whose corpus replays under `make test`.
vgpu_unit_test(test_scheduler
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler.c
  LIBS vgpu_scheduler)
vgpu_fuzz_target(scheduler_extender
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_scheduler_extender.c
  LIBS vgpu_scheduler)
vgpu_unit_test(test_scheduler_args
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler_args.c
  LIBS vgpu_scheduler)
vgpu_fuzz_target(sched_args
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_sched_args.c
  LIBS vgpu_scheduler)
# The daemon (HTTP serving, the bind flow, metrics) in one process against the test API
# server, which the test starts with Debian's python3.
vgpu_unit_test(test_scheduler_daemon
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler_daemon.c
          ${PROJECT_SOURCE_DIR}/tests/lib/kube_test_server.c
  LIBS vgpu_scheduler_daemon)
target_compile_definitions(test_scheduler_daemon PRIVATE
  KUBE_API_SERVER="${PROJECT_SOURCE_DIR}/tests/kube_api_server.py")
vgpu_unit_test(test_scheduler_options
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler_options.c
  LIBS vgpu_scheduler)
# Live resize: the decision a request makes, the quota check, the ledger's recharge.
vgpu_unit_test(test_scheduler_resize
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler_resize.c
  LIBS vgpu_scheduler_daemon)
