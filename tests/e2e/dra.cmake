# The DRA driver's end-to-end test lives with the other DRA tests.
include(${PROJECT_SOURCE_DIR}/tests/dra/e2e.cmake)
