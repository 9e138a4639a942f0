# vgpu-monitor's metrics endpoint on fakegpu (tests/integration/monitor_metrics_test.py):
# values against the regions, every bad input, Debian's prometheus scraping it, the alert
# rules (promtool) and the Grafana dashboard against what a running monitor exports.
if(TARGET vgpu-monitor AND TARGET fakegpu_nvml)
  find_program(VGPU_PROMTOOL promtool)
  find_program(VGPU_PROMETHEUS prometheus)
  foreach(cls Metrics Prometheus Grafana)
    add_test(NAME integration.monitor_metrics.${cls}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/monitor_metrics_test.py
                     ${CMAKE_BINARY_DIR} ${cls})
    set_tests_properties(integration.monitor_metrics.${cls} PROPERTIES
                         LABELS "integration;monitor" TIMEOUT 120)
  endforeach()
endif()
add_test(NAME integration.monitoring.alerts_check
         COMMAND promtool check rules ${PROJECT_SOURCE_DIR}/deploy/components/monitoring/vgpu-alerts.yaml)
add_test(NAME integration.monitoring.alerts_test
         COMMAND promtool test rules vgpu-alerts.test.yaml
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/tests/monitoring)
set_tests_properties(integration.monitoring.alerts_check integration.monitoring.alerts_test
                     PROPERTIES LABELS "integration;monitor;nosan" TIMEOUT 60)
