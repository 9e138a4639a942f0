# Pod resource values read as Kubernetes quantities, through the scheduler's pod decoding.
vgpu_unit_test(test_quantity
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_quantity.c
  LIBS vgpu_scheduler)
