# vgpu-monitor's metrics endpoint and region reader, attacked (docs/security.md,
# "vgpu-monitor metrics"): garbage, oversized heads, other methods and paths on the port;
# a tenant that locks, freezes or rewrites its region, or puts a FIFO, symlink, directory,
# truncated or corrupted file in its place. Each must leave the monitor serving, the
# other containers' values intact, and the error counted.
if(TARGET vgpu-monitor AND TARGET fakegpu_nvml)
  add_test(NAME security.metrics
           COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/integration/monitor_metrics_test.py
                   ${CMAKE_BINARY_DIR}
                   Metrics.test_garbage_on_the_port_is_refused_and_counted
                   Metrics.test_only_metrics_and_healthz_are_served
                   Metrics.test_a_tenant_cannot_block_or_crash_the_reader
                   Metrics.test_missing_and_hostile_region_files
                   Metrics.test_corrupt_region Metrics.test_truncated_region)
  set_tests_properties(security.metrics PROPERTIES LABELS security TIMEOUT 120)
endif()
