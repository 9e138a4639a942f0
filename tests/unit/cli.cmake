# src/cli: the vgpu command's parsers and tables (cmocka), and fuzz targets for the
# parsers whose corpora replay under `make test`.
vgpu_unit_test(test_cli
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cli.c
  LIBS vgpu_cli)
vgpu_fuzz_target(cli_quantity
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_cli_quantity.c
  LIBS vgpu_cli)
vgpu_fuzz_target(cli_sched_message
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_cli_sched_message.c
  LIBS vgpu_cli)
vgpu_fuzz_target(cli_limits_owner
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_cli_limits_owner.c
  LIBS vgpu_cli)
# `vgpu pods`' reader of Volcano's decision (cli_volcano_decision).
vgpu_fuzz_target(cli_volcano_decision
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_cli_volcano_decision.c
  LIBS vgpu_cli_verbs)
# The verbs (src/cli/verbs.h) against the API answers of tests/data/cli.
vgpu_unit_test(test_cli_verbs
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cli_verbs.c
  LIBS vgpu_cli_verbs)
target_compile_definitions(test_cli_verbs PRIVATE
  CLI_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data/cli")
