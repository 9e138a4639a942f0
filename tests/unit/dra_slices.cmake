# The DRA driver's ResourceSlices: devices, attributes, capacities, API limits, decoding.
if(TARGET vgpu_dra_slices)
  vgpu_unit_test(test_dra_slices
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_dra_slices.c
    LIBS vgpu_dra_slices)
endif()
