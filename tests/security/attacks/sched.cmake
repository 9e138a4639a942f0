# Round 2's attacks on vgpu-scheduler (docs/security.md, "Decisions, environment and the
# DRA webhook"): a pod author stripping the decision from a bound pod (with and without a
# restart, and through the webhook), NVIDIA_VISIBLE_DEVICES=all, and made-up reviews on the
# DRA webhook's port. sched_attacks.py says what each replays.
if(TARGET vgpu-scheduler)
  foreach(case DecisionRemoval DecisionRestart WebhookRemoval EnvAll EnvOff DraForgedReviews
               DraBounds DraSweep)
    add_test(NAME security.attacks.sched.${case}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/sched_attacks.py
                     $<TARGET_FILE:vgpu-scheduler> ${case})
    set_tests_properties(security.attacks.sched.${case} PROPERTIES
                         LABELS "security;attacks;scheduler" TIMEOUT 300)
  endforeach()
endif()
