# vgpu-monitor's metrics: region snapshots, the HTTP request parser, the exposition and
# the containers scan (tests/unit/test_monitor_metrics.c), and fuzz targets for the two
# parsers of untrusted bytes (the region head, the request head).
if(TARGET vgpu_monitor)
  vgpu_unit_test(test_monitor_metrics
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_monitor_metrics.c
    LIBS vgpu_monitor vgpu_region)
  vgpu_fuzz_target(monitor_region
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_monitor_region.c
    LIBS vgpu_monitor vgpu_region)
  vgpu_fuzz_target(monitor_http
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/../fuzz/fuzz_monitor_http.c
    LIBS vgpu_monitor)
endif()
