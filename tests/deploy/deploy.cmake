# The manifests under deploy/ against the binaries they run (tests/deploy/deploy_test.py,
# Debian's /usr/bin/python3 with python3-kubernetes, kubectl for `kubectl kustomize`):
# deploy.Manifests renders every overlay once and checks API types, --check-config dry
# runs, mounts and the flags' canonical names; deploy.Scheduler the extender's routes and
# the webhook; deploy.Rbac the daemons under the rendered roles, enforced by the test API
# server; deploy.NoGpu a node without a GPU; deploy.Volcano the Volcano overlay's objects
# and least-privilege roles. Label deploy. Exit 77: kubectl or python3-kubernetes missing (a
# failure under CI).
if(TARGET vgpu-scheduler AND TARGET vgpu-device-plugin AND TARGET vgpu-monitor)
  set(deploy_cases "Manifests=Render Flags Mounts Names" "Scheduler=Scheduler" "Rbac=Rbac"
                   "NoGpu=NoGpu" "Volcano=Volcano")
  foreach(case ${deploy_cases})
    string(REPLACE "=" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 classes)
    separate_arguments(classes)
    add_test(NAME deploy.${name}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/deploy_test.py
                     ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${classes})
    set_tests_properties(deploy.${name} PROPERTIES LABELS "deploy" TIMEOUT 300
                         SKIP_RETURN_CODE 77)
  endforeach()
endif()
