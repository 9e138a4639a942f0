# The openb trace lives next to the repository (../shared/data/openb); VGPU_OPENB_DIR
# overrides it at run time, and the tests that need it skip when it is absent.
vgpu_unit_test(test_sim
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sim.c
  LIBS vgpu_sim)
target_compile_definitions(test_sim PRIVATE
  VGPU_OPENB_DEFAULT_DIR="${PROJECT_SOURCE_DIR}/../shared/data/openb")
