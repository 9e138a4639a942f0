# connguard (src/connguard): the caps derived from RLIMIT_NOFILE, per-peer shares and
# eviction, the head and idle deadlines, and accept's back-off when descriptors run out,
# over real sockets (tests/unit/test_connguard.c).
vgpu_unit_test(test_connguard
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_connguard.c
  LIBS vgpu_connguard)
