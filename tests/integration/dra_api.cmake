# The test API server's resource.k8s.io/v1 side (ResourceSlices, DeviceClasses,
# ResourceClaims) that vgpu's DRA driver is tested against; Debian's python3, stdlib only.
foreach(cls ResourceSliceTest WatchTest ResourceClaimTest AuthzTest Api136Test)
  add_test(NAME integration.dra_api.${cls}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/dra_api_test.py ${cls})
  set_tests_properties(integration.dra_api.${cls} PROPERTIES LABELS "integration;dra" TIMEOUT 120)
endforeach()
