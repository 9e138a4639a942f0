# Connection floods against every listening endpoint (issue 22 items 6 and 12; docs/security.md,
# "Endpoints under connection floods"): half-open TLS on the webhook's port, with the
# scheduler's file limit as inherited and at 256; slowloris on the monitor's metrics port;
# the metrics port's 431 and 405; idle connections on the device plugin's and the DRA
# plugin's gRPC sockets. The flood comes from 127.0.0.2, the well-behaved client from
# 127.0.0.1. Timing cases run serially. Exit 77: grpc missing (fails under CI).
if(TARGET vgpu-scheduler AND TARGET vgpu-monitor AND TARGET vgpu-device-plugin
   AND TARGET vgpu-dra-plugin)
  foreach(case WebhookHalfOpen WebhookHalfOpenLowLimit MetricsSlowloris MetricsStatus
          GrpcDevicePlugin GrpcDra)
    add_test(NAME security.attacks.endpoints.${case}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/endpoints_floods.py
                     ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${VGPU_DRA_DESCRIPTOR} ${case})
    set_tests_properties(security.attacks.endpoints.${case} PROPERTIES
                         LABELS "security;attacks" TIMEOUT 180 SKIP_RETURN_CODE 77)
  endforeach()
  foreach(case WebhookHalfOpen WebhookHalfOpenLowLimit MetricsSlowloris GrpcDevicePlugin GrpcDra)
    set_tests_properties(security.attacks.endpoints.${case} PROPERTIES
                         LABELS "security;attacks;serial" RUN_SERIAL ON)
  endforeach()
endif()
