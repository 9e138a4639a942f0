# The manifests under deploy/ against the binaries they run (tests/deploy/deploy_test.py,
# Debian's /usr/bin/python3 with python3-kubernetes, kubectl for `kubectl kustomize`):
# rendering and API types, --check-config dry runs and mounts, the extender's routes and
# the webhook, RBAC enforced by the test API server, a node without a GPU. Label deploy.
# Exit 77: kubectl or python3-kubernetes missing (a failure under CI).
if(TARGET vgpu-scheduler AND TARGET vgpu-device-plugin AND TARGET vgpu-monitor)
  foreach(case Render Flags Mounts Scheduler Rbac NoGpu)
    add_test(NAME deploy.${case}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/deploy_test.py
                     ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${case})
    set_tests_properties(deploy.${case} PROPERTIES LABELS "deploy" TIMEOUT 300
                         SKIP_RETURN_CODE 77)
  endforeach()
endif()
