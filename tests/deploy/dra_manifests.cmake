# vgpu's DRA DeviceClasses and example claim templates (deploy/dra/), checked against the
# resource.k8s.io/v1 fields by hand (Debian's python3-kubernetes has no v1 DRA models) and
# their CEL selectors evaluated against the driver's devices. Exit 77: python3-yaml missing.
add_test(NAME deploy.DraManifests
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/dra_manifests_test.py
                 ${PROJECT_SOURCE_DIR})
set_tests_properties(deploy.DraManifests PROPERTIES LABELS "deploy;dra" TIMEOUT 60
                     SKIP_RETURN_CODE 77)
# Installing the DRA driver (deploy/overlays/dra, deploy/dra/plugin, the components
# dra-node-policy and dra-webhook; tests/deploy/dra_deploy_test.py, Debian's
# /usr/bin/python3 with python3-kubernetes and python3-grpcio, kubectl for
# `kubectl kustomize`): deploy.DraDeploy.Render the rendered objects' types and fields,
# Flags the plugin's command line, Mounts every path it reads or writes under a mount
# (host paths at the same path), Run the rendered plugin registering with the kubelet
# stand-in and preparing a claim, Rbac the plugin's role enforced by the test API server
# (publication through dra_publish, the publisher run under a token, and a prepare),
# each rule removed failing the run, NoGpu a node without the driver. Exit 77: a tool
# missing (a failure under CI).
if(TARGET vgpu-dra-plugin AND TARGET vgpu_dra_slices AND TARGET vgpu-monitor AND
   TARGET vgpu-device-plugin)
  add_executable(dra_publish ${CMAKE_CURRENT_LIST_DIR}/dra_publish.c)
  set_target_properties(dra_publish PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_include_directories(dra_publish PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(dra_publish PRIVATE ${VGPU_SAN_FULL})
  target_link_options(dra_publish PRIVATE ${VGPU_SAN_FULL})
  target_link_libraries(dra_publish PRIVATE vgpu_dra_slices vgpu_dpconfig)
  foreach(case Render Flags Mounts Run Rbac NoGpu)
    add_test(NAME deploy.DraDeploy.${case}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/dra_deploy_test.py
                     ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${VGPU_DRA_DESCRIPTOR} ${case})
    set_tests_properties(deploy.DraDeploy.${case} PROPERTIES LABELS "deploy;dra" TIMEOUT 300
                         SKIP_RETURN_CODE 77)
  endforeach()
endif()
