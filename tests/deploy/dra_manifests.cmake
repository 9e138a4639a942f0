# vgpu's DRA DeviceClasses and example claim templates (deploy/dra/), checked against the
# resource.k8s.io/v1 fields by hand (Debian's python3-kubernetes has no v1 DRA models) and
# their CEL selectors evaluated against the driver's devices. Exit 77: python3-yaml missing.
add_test(NAME deploy.DraManifests
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/dra_manifests_test.py
                 ${PROJECT_SOURCE_DIR})
set_tests_properties(deploy.DraManifests PROPERTIES LABELS "deploy;dra" TIMEOUT 60
                     SKIP_RETURN_CODE 77)
