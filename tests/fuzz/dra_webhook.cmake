# The webhook's DRA mode (src/scheduler/webhook_dra.c): AdmissionReviews with HAMi pods,
# their corpus replayed under `make test`.
vgpu_fuzz_target(dra_webhook
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_dra_webhook.c
  LIBS vgpu_scheduler)
