# The DRA driver's GPU health as device taints (src/dra/health.c) and the taints in the
# ResourceSlices it builds (src/dra/slices.c).
if(TARGET vgpu_dra_slices)
  vgpu_unit_test(test_dra_health
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_dra_health.c
    LIBS vgpu_dra_slices)
endif()
