# The webhook's DRA mode (docs/security.md): a pod author putting CEL into the
# ResourceClaimTemplate through the GPU selection annotations, pointing vgpu at another
# namespace, or squatting a template name.
if(TARGET vgpu-scheduler)
  add_test(NAME security.dra_webhook.AttackTest
           COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/integration/dra_webhook_test.py
                   $<TARGET_FILE:vgpu-scheduler> AttackTest)
  set_tests_properties(security.dra_webhook.AttackTest PROPERTIES
                       LABELS "security;scheduler" TIMEOUT 300)
endif()
