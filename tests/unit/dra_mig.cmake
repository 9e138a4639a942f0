# MIG on demand in the DRA driver (src/dra/mig.c): partition names, the instance record,
# and the partitionable slices (counter sets, consumesCounters, the API's limits).
if(TARGET vgpu_dra_slices)
  vgpu_unit_test(test_dra_mig
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_dra_mig.c
    LIBS vgpu_dra_slices)
endif()
